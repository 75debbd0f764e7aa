"""``example.assistant``: a ReAct agent — the model picks the tools, the runtime runs them.

Task input::

    {"question": "...", "order_id": "A-1001", "to": "customer@example.com",
     "step_ms": 0, "stream": false}

The agent offers the model two tools and loops (``ares.agent_loop``) until it answers:

* ``lookup_order`` (IDEMPOTENT): reads an order; safe to run again, so it is recorded once
  it returns and simply re-run if a crash came first;
* ``send_email`` (AT_MOST_ONCE, reconciled from the examples' side-effects ledger): its
  intent is durable before it runs, and a crash between the two is settled by asking the
  "mail server" (the ledger) instead of sending again.

The model is the runtime's provider (offline by default: it calls each offered tool once,
then answers; ``ARES_LLM_PROVIDER=openai|anthropic`` for a real one) unless the config says
``{"llm": "offline"}``. ``step_ms`` is how long each tool takes (room for a SIGKILL in the
tests); ``stream`` streams every turn to ``ares.tokens``. Output:
``{"answer", "turns", "tools": [names in call order], "tokens"}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.chat_call import Tool, agent_loop
from ares.agents.context import Context
from ares.agents.errors import AgentConfigError, TaskFailed
from ares.agents.tools import Effect
from ares.examples import evidence
from ares.llm.chat import system, user
from ares.llm.offline import OfflineProvider

SYSTEM = ("You are a customer-service assistant. Look the order up, e-mail the customer "
          "about it, then answer the question in one or two sentences.")

LOOKUP_SCHEMA = {"type": "object", "properties": {
    "order_id": {"type": "string", "description": "the order's id, e.g. A-1001"}},
    "required": ["order_id"]}
EMAIL_SCHEMA = {"type": "object", "properties": {
    "subject": {"type": "string", "description": "the e-mail's subject line"}},
    "required": ["subject"]}


def _spec(value: Any) -> tuple[str, str, str, float, bool]:
    if not isinstance(value, Mapping):
        raise TaskFailed(f"example.assistant: the task input must be an object, got {value!r}")
    question = value.get("question")
    if not isinstance(question, str) or not question.strip():
        raise TaskFailed("example.assistant: 'question' must be a non-empty string")
    order_id = value.get("order_id", "A-1001")
    to = value.get("to", "customer@example.com")
    if not isinstance(order_id, str) or not isinstance(to, str) or "@" not in to:
        raise TaskFailed("example.assistant: 'order_id' must be a string and 'to' an "
                         "e-mail address")
    step_ms = value.get("step_ms", 0)
    if not isinstance(step_ms, int | float) or isinstance(step_ms, bool) or step_ms < 0:
        raise TaskFailed(f"example.assistant: 'step_ms' must be >= 0, got {step_ms!r}")
    return question, order_id, to, float(step_ms), bool(value.get("stream", False))


class AssistantAgent(Agent):
    kind = "example.assistant"

    def configure(self, config: Mapping[str, Any]) -> None:
        unknown = set(config) - {"llm", "max_turns", "tenant", "budget_policy"}
        if unknown:
            raise AgentConfigError(f"unknown setting(s) {sorted(unknown)} (known: "
                                   "budget_policy, llm, max_turns, tenant)")
        llm = config.get("llm", "service")
        if llm not in ("offline", "service"):
            raise AgentConfigError(f"'llm' must be 'offline' or 'service', got {llm!r}")
        self.provider = OfflineProvider(model="offline-assistant") if llm == "offline" \
            else None
        self.max_turns = config.get("max_turns", 6)
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) \
                or self.max_turns < 1:
            raise AgentConfigError(f"'max_turns' must be an integer >= 1, got "
                                   f"{self.max_turns!r}")

    async def handle(self, task: Task, ctx: Context) -> Any:
        question, order_id, to, step_ms, stream = _spec(task.input)

        async def lookup_order(**arguments: Any) -> dict[str, Any]:
            await asyncio.sleep(step_ms / 1000)
            # The order the task names: a model's made-up id does not change whose it is.
            return {"order_id": order_id, "status": "shipped", "carrier": "DHL",
                    "eta_days": 2, "asked_for": arguments.get("order_id")}

        async def send_email(*, idempotency_key: str, **arguments: Any) -> dict[str, Any]:
            await asyncio.sleep(step_ms / 1000)
            subject = str(arguments.get("subject") or f"Your order {order_id}")
            return await evidence.send_email(self.agent_id, to, subject, task.task_id,
                                             ctx.incarnation, idempotency_key)

        tools = [Tool("lookup_order", lookup_order, "Look an order up by its id.",
                      LOOKUP_SCHEMA, effect=Effect.IDEMPOTENT),
                 Tool("send_email", send_email, "E-mail the customer (sent at most once).",
                      EMAIL_SCHEMA, effect=Effect.AT_MOST_ONCE,
                      reconcile=evidence.email_sent)]
        final, conversation = await agent_loop(
            ctx, "assistant", [system(SYSTEM), user(f"{question} (order {order_id})")],
            tools, max_turns=self.max_turns, provider=self.provider, stream=stream)
        called = [c["name"] for m in conversation if m.get("role") == "assistant"
                  for c in m.get("tool_calls", ())]
        return {"answer": final.text, "turns": sum(1 for m in conversation
                                                   if m.get("role") == "assistant"),
                "tools": called, "tokens": ctx.stats.prompt_tokens
                + ctx.stats.completion_tokens + ctx.stats.reused_prompt_tokens
                + ctx.stats.reused_completion_tokens}
