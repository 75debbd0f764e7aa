"""``example.team``: a leader that plans sub-tasks, delegates them to ``example.researcher``
sub-agents, aggregates and sends one e-mail — the seeds' Leader pipeline on the mesh.

Task input::

    {"question": str, "subtasks": N (1-50, default 6), "step_ms": M, "email": true|false,
     "fail": [i, ...], "crash": [i, ...], "to": "addr"}

The stages, each a recorded call (a stop cancels the handler at the next one, and a stop
recorded first refuses any further dispatch): **session** (recover the leader's memory:
earlier answers and distilled notes, folded from its own stream by ``apply``), **parse** and
**plan** (LLM), **dispatch** (``ctx.delegate_many``, ``max_parallel=4``), **aggregate** (LLM
over the results; a sub-task whose child failed contributes its declared fallback, never an
empty result), **remember** (the final response), the e-mail (at most once), and a background
**distillation** delegated to ``example.distiller`` and not awaited: durable (its dispatch is
recorded, it survives the leader's crash), bounded by ``distill_timeout_s``, visible as a
team member (``ares agents tree``), and on the leader's stop it is left to finish
(``distill_on_stop: "wait"``, the default) or stopped (``"cancel"``).

``fail: [i]`` makes sub-task i's researcher fail its task (``TaskFailed``); ``crash: [i]``
makes it crash on every run, so the death-loop rules quarantine it. The leader reports both
as failed sub-tasks with their cause. With ``ARES_EXAMPLE_LEDGER_DIR``, every real LLM call
of every member and every real e-mail leave a line, as for ``example.pipeline``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.delegation import DETACH, STOP, Delegation
from ares.agents.errors import AgentConfigError, ChildFailed, TaskFailed
from ares.agents.tools import Effect, Reconciled
from ares.events.model import Event
from ares.events.wire.canonical import parse_json
from ares.examples import evidence
from ares.examples.pipeline import Witnessed
from ares.lifecycle import events as ev
from ares.llm.offline import OfflineProvider

MAX_PARALLEL = 4
MEMORY = 5  # answers and notes the leader keeps in its session


def _spec(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not isinstance(value.get("question"), str):
        raise TaskFailed(f"example.team: the task input must be an object with a 'question' "
                         f"string, got {value!r}")
    spec = {"question": value["question"], "subtasks": value.get("subtasks", 6),
            "step_ms": value.get("step_ms", 0), "email": value.get("email", False),
            "fail": value.get("fail", []), "crash": value.get("crash", []),
            "to": value.get("to", "ops@example.com")}
    subtasks = spec["subtasks"]
    if not isinstance(subtasks, int) or isinstance(subtasks, bool) or not 1 <= subtasks <= 50:
        raise TaskFailed(f"example.team: 'subtasks' must be an integer from 1 to 50, got "
                         f"{subtasks!r}")
    if not isinstance(spec["step_ms"], int) or spec["step_ms"] < 0:
        raise TaskFailed(f"example.team: 'step_ms' must be an integer >= 0, got "
                         f"{spec['step_ms']!r}")
    if not isinstance(spec["email"], bool):
        raise TaskFailed(f"example.team: 'email' must be true or false, got {spec['email']!r}")
    return spec


class TeamLeader(Agent):
    """Config: ``distill_timeout_s`` (default 120: past it the distillation counts as
    failed) and ``distill_on_stop`` (``wait`` or ``cancel``)."""

    kind = "example.team"

    def configure(self, config: Mapping[str, Any]) -> None:
        unknown = set(config) - {"distill_timeout_s", "distill_on_stop"}
        if unknown:
            raise AgentConfigError(f"unknown setting(s) {sorted(unknown)} (known: "
                                   "distill_timeout_s, distill_on_stop)")
        self.distill_timeout_s = evidence.positive_number(config, "distill_timeout_s", 120)
        on_stop = config.get("distill_on_stop", "wait")
        if on_stop not in ("wait", "cancel"):
            raise AgentConfigError(f"'distill_on_stop' must be 'wait' or 'cancel', got "
                                   f"{on_stop!r}")
        self.distill_policy = DETACH if on_stop == "wait" else STOP
        self.answers: list[str] = []  # the session: final responses, newest last
        self.notes: list[str] = []  # long-term memory: what distillations returned

    def apply(self, event: Event) -> None:
        """The session, folded from the stream: answers of completed tasks, and the notes
        distillations send back (their outcome arrives as a signal after the task ended)."""
        if event.type == ev.TASK_COMPLETED:
            output = parse_json(str(event.payload.get("output_json") or "null"))
            if isinstance(output, dict) and isinstance(output.get("answer"), str):
                self.answers = [*self.answers, output["answer"]][-MEMORY:]
        elif event.type == ev.SIGNAL_RECEIVED:
            outcome = parse_json(str(event.payload.get("payload_json") or "null"))
            if (isinstance(outcome, dict) and outcome.get("status") == "completed"
                    and isinstance(outcome.get("output"), dict)
                    and isinstance(outcome["output"].get("note"), str)):
                self.notes = [*self.notes, outcome["output"]["note"]][-MEMORY:]

    def snapshot(self) -> dict[str, Any]:
        return {"answers": self.answers, "notes": self.notes}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.answers = list(state.get("answers", []))
        self.notes = list(state.get("notes", []))

    async def handle(self, task: Task, ctx: Context) -> Any:
        spec = _spec(task.input)
        llm = self._llm(task, ctx, spec["step_ms"])
        session = await ctx.step("session", lambda: {"answers": self.answers,
                                                     "notes": self.notes})
        question = spec["question"]
        parsed = await ctx.llm("parse", prompt=f"Parse the request: {question}",
                               provider=llm("parse"))
        plan = await ctx.llm("plan", prompt=f"Plan {spec['subtasks']} sub-tasks for: "
                             f"{parsed} (remembering {len(session['notes'])} notes)",
                             provider=llm("plan"))
        subtasks = [{"question": question, "subtask": i, "plan": plan[:64],
                     "step_ms": spec["step_ms"], "fail": i in spec["fail"],
                     "crash": i in spec["crash"]} for i in range(spec["subtasks"])]
        results = await ctx.delegate_many(
            [Delegation(f"research-{i}", Researcher.kind, s) for i, s in enumerate(subtasks)],
            max_parallel=MAX_PARALLEL, return_exceptions=True)
        findings = [self._finding(i, r) for i, r in enumerate(results)]
        failed = sum(1 for f in findings if f["fallback"])
        answer = await ctx.llm("aggregate", prompt="Aggregate: " + " | ".join(
            f["text"] for f in findings), provider=llm("aggregate"))
        digest = hashlib.sha256(answer.encode()).hexdigest()
        await ctx.step("remember", lambda: {"answer": digest})
        sent = None
        if spec["email"]:
            sent = await ctx.tool("send_email", self.send_email, spec["to"],
                                  f"team {task.task_id} done", digest, task.task_id,
                                  ctx.incarnation, effect=Effect.AT_MOST_ONCE,
                                  reconcile=self.reconcile_email, pass_key=True)
        distill = await ctx.delegate(
            "distill", Distiller.kind, {"answer": digest, "findings": len(findings),
                                        "step_ms": spec["step_ms"]},
            on_parent_stop=self.distill_policy, timeout=self.distill_timeout_s)
        return {"answer": digest, "subtasks": len(findings), "failed": failed,
                "failures": [f["cause"] for f in findings if f["fallback"]],
                "email": sent, "distillation": distill.child_id}

    @staticmethod
    def _finding(i: int, result: Any) -> dict[str, Any]:
        if isinstance(result, ChildFailed):  # the declared fallback, never an empty result
            return {"text": f"sub-task {i}: no finding ({result.cause})", "fallback": True,
                    "cause": f"{result.child_id}: {result.cause}"}
        return {"text": str(result.get("finding")), "fallback": False, "cause": None}

    def _llm(self, task: Task, ctx: Context, step_ms: int) -> Any:
        provider = OfflineProvider(latency_ms=step_ms)

        def witnessed(step: str) -> Witnessed:
            return Witnessed(provider, {"agent_id": self.agent_id, "task_id": task.task_id,
                                        "step": step, "incarnation": ctx.incarnation})
        return witnessed

    async def send_email(self, to: str, subject: str, body: str, task_id: str,
                         incarnation: int, *, idempotency_key: str) -> dict[str, Any]:
        return await evidence.send_email(self.agent_id, to, subject, task_id, incarnation,
                                         idempotency_key)

    def reconcile_email(self, idempotency_key: str) -> Reconciled:
        return evidence.email_sent(idempotency_key)


class CrashingResearch(RuntimeError):
    """The crash ``crash: [i]`` asks for: on every run, so the death-loop rules decide."""


class Researcher(Agent):
    """A sub-agent: two LLM steps on its sub-task (the seeds' executor validates the
    result and retries the LLM before giving up)."""

    kind = "example.researcher"

    async def handle(self, task: Task, ctx: Context) -> Any:
        spec = task.input if isinstance(task.input, Mapping) else {}
        if spec.get("crash"):
            raise CrashingResearch(f"{self.agent_id}: injected crash (crash on every run)")
        if spec.get("fail"):
            raise TaskFailed(f"{self.agent_id}: no data for sub-task {spec.get('subtask')}")
        provider = OfflineProvider(latency_ms=int(spec.get("step_ms", 0)))
        line = {"agent_id": self.agent_id, "task_id": task.task_id,
                "incarnation": ctx.incarnation}
        notes = await ctx.llm("search", prompt=f"Research sub-task {spec.get('subtask')} of "
                              f"{spec.get('question')!r}: {spec.get('plan')}",
                              provider=Witnessed(provider, {**line, "step": "search"}))
        finding = await ctx.llm("summarise", prompt=f"Summarise: {notes}",
                                provider=Witnessed(provider, {**line, "step": "summarise"}))
        return {"subtask": spec.get("subtask"), "finding": finding}


class Distiller(Agent):
    """The leader's background distillation: summarises a finished task into a note for
    the leader's long-term memory (its outcome goes back to the leader as any child's)."""

    kind = "example.distiller"

    async def handle(self, task: Task, ctx: Context) -> Any:
        spec = task.input if isinstance(task.input, Mapping) else {}
        ctx.heartbeat("distilling")
        note = await ctx.llm("distill", prompt=f"Distil into one note: answer "
                             f"{spec.get('answer')} from {spec.get('findings')} findings",
                             provider=OfflineProvider(latency_ms=int(spec.get("step_ms", 0))))
        return {"note": note}
