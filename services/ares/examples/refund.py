"""``example.refund``: a refund that waits for a person's approval, then a cooling-off
period, then e-mails the customer — the durable-wait workload.

Task input::

    {"amount": number, "cooling_off_s": seconds, "to": "addr"}

1. ``refund`` is a tool with ``approval=True``: the request (amount) is recorded, an
   ``approval.requested`` alert goes out, and the task waits — holding no worker — for the
   ``approved`` or ``rejected`` signal (``ares agents signal ID approved``). Rejected: the
   task completes with ``{"refunded": false, ...}`` and nothing is paid.
2. Approved: the refund runs once (keyed: the payment provider dedupes by the key).
3. ``ctx.sleep(cooling_off_s)``: a durable timer; a crash or a move to another worker wakes
   it at the original deadline.
4. ``send_email`` (at most once, reconciled from the ledger like example.pipeline's).

With ``ARES_EXAMPLE_LEDGER_DIR`` each real refund is appended to ``refunds.jsonl`` and each
real e-mail to ``side_effects.jsonl``: evidence outside Kafka of what ran, and how often.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.errors import Rejected, TaskFailed
from ares.agents.tools import Effect
from ares.examples import evidence

REFUNDS = "refunds.jsonl"


def _spec(value: Any) -> tuple[float, float, str]:
    if not isinstance(value, Mapping):
        raise TaskFailed(f"example.refund: the task input must be an object, got {value!r}")
    to = value.get("to", "customer@example.com")
    if not isinstance(to, str) or "@" not in to:
        raise TaskFailed(f"example.refund: 'to' must be an e-mail address, got {to!r}")
    return _number(value, "amount", None), _number(value, "cooling_off_s", 0.0), to


def _number(value: Mapping[str, Any], key: str, default: float | None) -> float:
    item = value.get(key, default)
    if not isinstance(item, int | float) or isinstance(item, bool) or item < 0:
        raise TaskFailed(f"example.refund: {key!r} must be a number >= 0, got {item!r}")
    return float(item)


class RefundAgent(Agent):
    kind = "example.refund"

    async def handle(self, task: Task, ctx: Context) -> Any:
        amount, cooling_off_s, to = _spec(task.input)
        try:
            receipt = await ctx.tool("refund", self.refund, amount, task.task_id,
                                     ctx.incarnation, effect=Effect.KEYED, approval=True)
        except Rejected as rejected:
            return {"refunded": False, "rejected": rejected.payload}
        await ctx.sleep(timedelta(seconds=cooling_off_s), name="cooling-off")
        sent = await ctx.tool("send_email", self.send_email, to, amount, task.task_id,
                              ctx.incarnation, effect=Effect.AT_MOST_ONCE,
                              reconcile=evidence.email_sent, pass_key=True)
        return {"refunded": True, "receipt": receipt, "email": sent}

    async def refund(self, amount: float, task_id: str, incarnation: int, *,
                     idempotency_key: str) -> dict[str, Any]:
        """The payment: a real provider would take the key and refuse to pay twice."""
        directory = evidence.ledger_dir()
        if directory is not None:
            await evidence.record(directory / REFUNDS, {
                "agent_id": self.agent_id, "task_id": task_id, "amount": amount,
                "key": idempotency_key, "incarnation": incarnation})
        return {"refund_id": idempotency_key[:16], "amount": amount}

    async def send_email(self, to: str, amount: float, task_id: str, incarnation: int, *,
                         idempotency_key: str) -> dict[str, Any]:
        return await evidence.send_email(self.agent_id, to, f"your refund of {amount:g}",
                                         task_id, incarnation, idempotency_key)

