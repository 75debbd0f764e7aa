"""``example.pipeline``: N LLM steps, then maybe one e-mail — the crash-test workload.

Task input::

    {"steps": N, "step_ms": M, "email": true|false, "fail_at": K|null, "to": "addr"}

Runs N ``ctx.llm`` steps with the offline provider, each taking about M ms, each prompt
built on the previous output; then, when ``email`` is true, the at-most-once tool
``send_email``. ``fail_at: K`` crashes the handler just before step K, in the FIRST
incarnation only, so the resurrected agent completes the task; ``hang_at: K`` makes step K
hang (no progress) in the first incarnation, for the health checker to find.

With ``ARES_EXAMPLE_LEDGER_DIR`` set, every real LLM execution appends
``{agent_id, task_id, step, incarnation}`` to ``llm_calls.jsonl`` and every real e-mail
``{agent_id, task_id, key, to, incarnation}`` to ``side_effects.jsonl``: evidence outside
Kafka of what ran. ``send_email``'s reconcile hook looks its key up there, so an e-mail sent
just before a crash (intent recorded, outcome not) is reconciled as DONE, never re-sent.
Without the ledger directory it cannot know: the call is reported in doubt.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.errors import AgentConfigError, TaskFailed
from ares.agents.tools import Effect, Reconciled
from ares.examples import evidence
from ares.llm.base import LlmResult
from ares.llm.offline import OfflineProvider


class InjectedCrash(RuntimeError):
    """The crash ``fail_at`` asks for (a bug, as far as the runtime can tell)."""


class Witnessed:
    """Wraps the provider of one step: a completed real execution leaves a ledger line."""

    def __init__(self, inner: OfflineProvider, line: dict[str, Any]) -> None:
        self.inner = inner
        self.line = line

    @property
    def default_model(self) -> str:
        return self.inner.default_model

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult:
        result = await self.inner.complete(prompt, model, **params)
        directory = evidence.ledger_dir()
        if directory is not None:
            await evidence.record(directory / evidence.LLM_CALLS, self.line)
        return result


def _spec(value: Any) -> tuple[int, int, bool, int | None, str]:
    if not isinstance(value, Mapping):
        raise TaskFailed(f"example.pipeline: the task input must be an object, got {value!r}")
    steps, step_ms = value.get("steps", 3), value.get("step_ms", 0)
    email, fail_at = value.get("email", False), value.get("fail_at")
    to = value.get("to", "ops@example.com")
    for key, item in (("steps", steps), ("step_ms", step_ms)):
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise TaskFailed(f"example.pipeline: {key!r} must be an integer >= 0, got {item!r}")
    if not isinstance(email, bool):
        raise TaskFailed(f"example.pipeline: 'email' must be true or false, got {email!r}")
    if fail_at is not None and (not isinstance(fail_at, int) or isinstance(fail_at, bool)):
        raise TaskFailed(f"example.pipeline: 'fail_at' must be an integer or null, "
                         f"got {fail_at!r}")
    if not isinstance(to, str) or "@" not in to:
        raise TaskFailed(f"example.pipeline: 'to' must be an e-mail address, got {to!r}")
    return steps, step_ms, email, fail_at, to


class PipelineAgent(Agent):
    """Config: ``{"reconcile": true}`` (default). With ``false``, ``send_email`` has no
    reconcile hook, so an interrupted e-mail is always reported in doubt (for tests of the
    operator path)."""

    kind = "example.pipeline"

    def configure(self, config: Mapping[str, Any]) -> None:
        unknown = set(config) - {"reconcile", "step_timeout_s"}
        if unknown:
            raise AgentConfigError(f"unknown setting(s) {sorted(unknown)} (known: reconcile, "
                                   "step_timeout_s)")
        # step_timeout_s is read by the health checker (no progress for longer: stalled).
        evidence.positive_number(config, "step_timeout_s", 600)
        self.use_reconcile = config.get("reconcile", True)
        if not isinstance(self.use_reconcile, bool):
            raise AgentConfigError(f"'reconcile' must be true or false, got "
                                   f"{self.use_reconcile!r}")

    async def handle(self, task: Task, ctx: Context) -> Any:
        steps, step_ms, email, fail_at, to = _spec(task.input)
        provider = OfflineProvider(latency_ms=step_ms)
        digest = hashlib.sha256()
        text = f"task {task.task_id}"
        hang_at = task.input.get("hang_at")
        for i in range(steps):
            if fail_at == i and ctx.incarnation == 1:  # the first incarnation
                raise InjectedCrash(f"injected crash before step {i} (fail_at={fail_at})")
            if hang_at == i and ctx.incarnation == 1:
                # A hung call: no progress, no crash. Only a health checker's verdict
                # (stalled) ends it; the next incarnation goes on from the journal.
                await asyncio.Event().wait()
            line = {"agent_id": self.agent_id, "task_id": task.task_id, "step": i,
                    "incarnation": ctx.incarnation}
            text = await ctx.llm(f"step-{i}", prompt=f"Step {i}. Continue from: {text}",
                                 provider=Witnessed(provider, line))
            digest.update(text.encode())
        sent = None
        if email:
            subject = f"pipeline {task.task_id} done"
            sent = await ctx.tool("send_email", self.send_email, to, subject, digest.hexdigest(),
                                  task.task_id, ctx.incarnation, effect=Effect.AT_MOST_ONCE,
                                  reconcile=self.reconcile_email if self.use_reconcile else None,
                                  pass_key=True)
        return {"steps": steps, "digest": digest.hexdigest(), "email": sent}

    async def send_email(self, to: str, subject: str, body: str, task_id: str,
                         incarnation: int, *, idempotency_key: str) -> dict[str, Any]:
        """The side effect (``body`` is what the message would carry)."""
        return await evidence.send_email(self.agent_id, to, subject, task_id, incarnation,
                                         idempotency_key)

    def reconcile_email(self, idempotency_key: str) -> Reconciled:
        """Was the e-mail with this key sent? The ledger file is the mail server's log."""
        return evidence.email_sent(idempotency_key)
