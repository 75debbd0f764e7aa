"""``example.chat``: a conversation whose history must survive every resurrection.

The history is the agent's "cognitive state". It is never stored by the handler: it is
folded from the stream (``apply``: a ``task.assigned`` opens a turn, its ``task.completed``
closes it), so a resurrected agent — rebuilt from a snapshot plus the events after it, or
from the events alone — has exactly the turns that were answered. Each answer comes from
one ``ctx.llm`` call whose prompt holds the whole history (the offline provider by default;
``{"llm": "service"}`` uses the runtime's configured provider).

Task input: ``{"message": "..."}`` (or just the message string). Output:
``{"answer", "turns", "history_sha256"}`` — ``turns`` counts this one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.errors import AgentConfigError, TaskFailed
from ares.events.model import Event
from ares.lifecycle import events as ev
from ares.llm.offline import OfflineProvider


def _message(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("message")
    if not isinstance(value, str) or not value.strip():
        raise TaskFailed(f"example.chat: the task input must be {{\"message\": \"...\"}} or a "
                         f"non-empty string, got {value!r}")
    return value


class ChatAgent(Agent):
    kind = "example.chat"

    def configure(self, config: Mapping[str, Any]) -> None:
        unknown = set(config) - {"system", "max_turns", "llm"}
        if unknown:
            raise AgentConfigError(f"unknown setting(s) {sorted(unknown)} (known: llm, "
                                   "max_turns, system)")
        self.system = config.get("system", "You are a helpful assistant.")
        if not isinstance(self.system, str):
            raise AgentConfigError("'system' must be a string")
        self.max_turns = config.get("max_turns", 50)
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) \
                or self.max_turns < 1:
            raise AgentConfigError(f"'max_turns' must be an integer >= 1, got "
                                   f"{self.max_turns!r}")
        llm = config.get("llm", "offline")
        if llm not in ("offline", "service"):
            raise AgentConfigError(f"'llm' must be 'offline' or 'service', got {llm!r}")
        self.provider = OfflineProvider(model="offline-chat") if llm == "offline" else None
        self.history: list[dict[str, str]] = []
        self.pending: dict[str, str] = {}

    # -- state -----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        p = event.payload
        if event.type == ev.TASK_ASSIGNED:
            # An invalid message fails its task in the handler; it never becomes a turn.
            with contextlib.suppress(TaskFailed, ValueError):
                self.pending[str(p["task_id"])] = _message(json.loads(str(p["input_json"])))
        elif event.type == ev.TASK_COMPLETED:
            question = self.pending.pop(str(p["task_id"]), None)
            if question is not None:
                answer = json.loads(str(p["output_json"])).get("answer", "")
                self.history.append({"user": question, "assistant": str(answer)})
        elif event.type == ev.TASK_FAILED:
            self.pending.pop(str(p["task_id"]), None)

    def snapshot(self) -> dict[str, Any]:
        return {"history": [dict(turn) for turn in self.history],
                "pending": dict(self.pending)}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.history = [{"user": str(t["user"]), "assistant": str(t["assistant"])}
                        for t in state.get("history", [])]
        self.pending = {str(k): str(v) for k, v in dict(state.get("pending", {})).items()}

    def history_sha256(self) -> str:
        text = json.dumps(self.history, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    # -- the handler -----------------------------------------------------------------------

    async def handle(self, task: Task, ctx: Context) -> Any:
        message = _message(task.input)
        turns = self.history[-self.max_turns:]
        lines = [f"system: {self.system}"]
        for turn in turns:
            lines += [f"user: {turn['user']}", f"assistant: {turn['assistant']}"]
        lines += [f"user: {message}", "assistant:"]
        answer = await ctx.llm("answer", prompt="\n".join(lines), provider=self.provider)
        return {"answer": answer, "turns": len(self.history) + 1,
                "history_sha256": self.history_sha256()}
