"""``Context``: the handler's only door to effects, and the journal that makes them durable.

Every call a handler makes (``step``, ``llm``, ``tool``) takes the next *position* and the
next *occurrence* of its name. On a re-run the journal answers for recorded positions: the
recorded result is returned without executing; a different request at a recorded position
is a ``NonDeterminismError``. Positions beyond the journal execute and are recorded.

Appends: each recorded call is one ``sink.append`` (awaited: when it returns, the record
is durable). ``ctx.log`` lines are buffered and ride along with the next append, so logging
costs no round trip; logs emitted while replaying recorded positions are dropped, because
the run that recorded those positions already recorded them.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from ares.agents import delegation
from ares.agents import records as r
from ares.agents.delegation import Child, Delegation
from ares.agents.errors import (
    BudgetExceeded,
    ContextClosedError,
    NonDeterminismError,
    Rejected,
    StepFailed,
    StepResultError,
    TaskPaused,
    WaitTimeout,
)
from ares.agents.journal import RecordedCall, TaskJournal
from ares.agents.llm_spend import Spend, budget_failure, provider_name
from ares.agents.retry import LLM_DEFAULT_RETRY, NO_RETRY, RetryPolicy
from ares.agents.tools import Effect, InDoubtCall, Reconciler
from ares.agents.waits import (
    APPROVAL,
    APPROVED,
    REJECTED,
    SIGNAL,
    TIMER,
    EmptyMailbox,
    Mailbox,
    TaskWaiting,
    Wait,
    signal_value,
    wait,
)
from ares.events.model import NewEvent
from ares.llm.base import LlmProvider, LlmResult, prompt_hash
from ares.llm.chat import ChatProvider, ChatResponse, ToolSpec

if TYPE_CHECKING:
    from ares.agents.agent import Task
    from ares.agents.chat_call import Tool
    from ares.agents.host_api import AgentServices, AgentSink

log = logging.getLogger("ares.agents")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR}


@dataclass(slots=True)
class RunStats:
    """What one run of a task executed and what it took from the journal (steps are
    ``ctx.step`` calls; llm and tool calls are counted apart)."""

    executed_steps: int = 0
    reused_steps: int = 0
    llm_calls: int = 0
    reused_llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reused_prompt_tokens: int = 0
    reused_completion_tokens: int = 0
    tool_calls: int = 0
    reused_tool_calls: int = 0
    appends: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)


class _Exhausted(Exception):  # internal signal, never escapes
    def __init__(self, error: Exception, attempts: int, retriable: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts
        self.retriable = retriable


class Context:
    """Created by ``run_task`` for one run of one task; not reusable after the run."""

    def __init__(self, *, agent_id: str, task: Task, journal: TaskJournal, sink: AgentSink,
                 services: AgentServices, incarnation: int, module: str,
                 mailbox: Mailbox | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self.agent_id = agent_id
        self.config: Mapping[str, Any] = config or {}
        self.task = task
        self.task_id = task.task_id
        self.incarnation = incarnation
        self.module = module
        self.services = services
        self.stats = RunStats()
        self._journal = journal
        self._sink = sink
        self._next_position = 0
        self._occurrences: dict[str, int] = {}
        self._consumed: set[int] = set()
        self._logs: list[NewEvent] = []
        self._resume_pending = not journal.is_empty
        self._paused: tuple[InDoubtCall, ...] = ()
        self._mailbox: Mailbox = mailbox if mailbox is not None else EmptyMailbox()
        self._taken_signals: set[str] = set()
        self._waits: tuple[Wait, ...] = ()
        self._derailed: NonDeterminismError | None = None
        self._closed = False
        self._rng = random.Random()

    # -- public API ----------------------------------------------------------------------

    @property
    def is_rerun(self) -> bool:
        """True when the task ran before (its journal holds records): a resumption."""
        return not self._journal.is_empty

    @property
    def is_replaying(self) -> bool:
        """True while the handler is still re-walking positions the journal recorded."""
        return self._next_position <= self._journal.last_position

    async def step(self, name: str, fn: Callable[..., Any], *args: Any,
                   retry: RetryPolicy | None = None, fallback: Any = MISSING,
                   **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` (sync or async) once and record its result.

        The result must be JSON-able (``StepResultError`` otherwise); the step returns it as
        replay will (through JSON: tuples become lists), so both runs see the same value.
        ``retry``: retry policy for transient errors (default: one attempt). When the step
        fails for good, ``step.failed`` is recorded and ``StepFailed`` raised — or, with
        ``fallback=value``, the fallback is recorded and returned (explicitly, in the event).
        """
        position, occurrence, recorded = self._begin(r.STEP, name)
        if recorded is not None:
            return self._replay_step(recorded)
        try:
            result = await self._attempt(name, retry or NO_RETRY, fn, args, kwargs)
        except _Exhausted as failure:
            return await self._record_failure(r.STEP, name, occurrence, position, failure,
                                              fallback, {})
        value, text = self._json(f"step {name!r}", result)
        await self._append([NewEvent(r.STEP_COMPLETED, self.module, {
            "step_name": name, "occurrence": occurrence, "result_json": text,
            "task_id": self.task_id}, r.position_metadata(position))])
        self.stats.executed_steps += 1
        return value

    async def llm(self, name: str, prompt: str, model: str | None = None, *,
                  provider: LlmProvider | None = None, retry: RetryPolicy | None = None,
                  fallback: Any = MISSING, validate: Callable[[str], Any] | None = None,
                  retries: int = 0, budget_policy: str | None = None, **params: Any) -> Any:
        """Call the LLM once and record prompt hash, model, output and tokens; returns the
        completion text. A re-run returns the recorded text and spends no tokens.

        ``provider`` overrides the service's provider for this call; ``params`` go to the
        provider (``temperature``, ``max_tokens``...). Default retry: 4 attempts with
        exponential backoff on ``LlmUnavailableError`` (rate limits, timeouts, 5xx).
        A changed prompt on replay is a ``NonDeterminismError``. Before each request the
        fleet budget of the agent's tenant (config ``tenant``) is asked: over budget,
        ``budget_policy="wait"`` (default; config ``budget_policy``) waits, ``"fail"``
        records and raises ``BudgetExceeded``. Every answer's usage goes to ``ares.usage``.

        ``validate(text)`` (sync or async) accepts the completion by returning the value
        the call returns (JSON-able; ``None`` returns the text itself) or rejects it by raising
        (any ``Exception``; ``ValidationFailed`` says so). ``retries=N``: up to N more
        attempts after a rejected completion, or after the provider gave up for good on
        a retriable error. Every attempt is recorded (``llm.call`` with its tokens, paid
        even when rejected, and its ``llm.validation`` verdict with the accepted value); a
        re-run replays the recorded attempts, calling neither the provider nor
        ``validate`` again, and returns the recorded value. No attempt passes: the
        ``fallback`` (recorded), or ``StepFailed`` with the last attempt's error. The call
        takes N+1 positions and occurrences of ``name`` (see ``ares.agents.llm_call``).
        ``validate`` must not call ``ctx``.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"ctx.llm({name!r}): prompt must be a str, got "
                            f"{type(prompt).__name__}")
        if validate is not None or retries != 0:
            from ares.agents.llm_call import validated_llm

            return await validated_llm(self, name, prompt, model,
                                       provider=provider or self.services.llm,
                                       policy=retry or LLM_DEFAULT_RETRY, validate=validate,
                                       retries=retries, fallback=fallback, params=params,
                                       budget_policy=budget_policy)
        position, occurrence, recorded = self._begin(r.LLM, name)
        digest = prompt_hash(prompt)
        if recorded is not None:
            return self._replay_llm(recorded, position, digest)
        chosen = provider or self.services.llm
        spend = Spend(self, name, occurrence, provider_name=provider_name(chosen),
                      model=model or chosen.default_model, policy=budget_policy)

        async def once() -> LlmResult:
            return await spend.request(lambda _: chosen.complete(prompt, model, **params),
                                       lambda a: (a.prompt_tokens, a.completion_tokens,
                                                  a.model))

        try:
            result = await self._attempt(name, retry or LLM_DEFAULT_RETRY, once, (), {})
        except _Exhausted as failure:
            extra = {"model": spend.model, "prompt_hash": digest,
                     **budget_failure(failure.error)}
            return await self._record_failure(r.LLM, name, occurrence, position, failure,
                                              fallback, extra)
        if not isinstance(result, LlmResult):
            raise TypeError(f"{type(chosen).__name__}.complete returned "
                            f"{type(result).__name__}, not an LlmResult")
        await self._append([NewEvent(r.LLM_CALL, self.module, {
            "name": name, "model": result.model, "prompt_hash": digest, "output": result.text,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens, "occurrence": occurrence,
            "task_id": self.task_id}, r.position_metadata(position)),
            *spend.wait_events(position)])
        self.stats.llm_calls += 1
        self.stats.prompt_tokens += result.prompt_tokens
        self.stats.completion_tokens += result.completion_tokens
        return result.text

    async def chat(self, name: str, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[Tool | ToolSpec] = (), model: str | None = None,
                   provider: ChatProvider | None = None, retry: RetryPolicy | None = None,
                   fallback: Any = MISSING, stream: bool = False,
                   budget_policy: str | None = None, **params: Any) -> ChatResponse:
        """One assistant turn for ``messages`` (see ``ares.llm.chat`` for their shape),
        offering ``tools`` (``ares.Tool`` or bare ``ToolSpec``): the typed response (text,
        tool calls, usage, stop reason), recorded whole. A re-run returns the recorded turn
        and never calls the provider; a different conversation at a recorded position is a
        ``NonDeterminismError``.

        ``stream=True``: the provider's text deltas go to ``ares.tokens`` as they arrive
        (``GET /agents/{id}/tokens``); the record holds the final turn. Retry, fallback and
        budget as for ``ctx.llm``. Run the tools it asks for with ``ctx.run_tools``.
        """
        from ares.agents.chat_call import chat

        return await chat(self, name, messages, tools=tools, model=model, provider=provider,
                          retry=retry, fallback=fallback, stream=stream,
                          budget_policy=budget_policy, params=params)

    async def run_tools(self, response: ChatResponse,
                        tools: Sequence[Tool]) -> list[dict[str, Any]]:
        """Run the tool calls of ``response`` through ``ctx.tool``, each with its
        ``Tool``'s effect (at-most-once, idempotent, keyed: the same rules as a call the
        handler makes), and return the ``role: tool`` messages with their results."""
        from ares.agents.chat_call import run_tools

        return await run_tools(self, response, tools)

    async def tool(self, name: str, fn: Callable[..., Any], *args: Any,
                   effect: Effect | str = Effect.AT_MOST_ONCE,
                   reconcile: Reconciler | None = None, retry: RetryPolicy | None = None,
                   pass_key: bool | None = None, approval: bool = False,
                   **kwargs: Any) -> Any:
        """Call a tool with the guarantees of its ``effect`` (see ``Effect``).

        ``reconcile(idempotency_key) -> Reconciled`` (at_most_once only; else the service's
        ``ReconcileRegistry`` hook for ``name``) decides an interrupted call: DONE records
        its result, NOT_DONE runs it now, UNKNOWN pauses the task in doubt.
        ``pass_key``: give the tool ``idempotency_key=``; default for keyed tools and for
        at_most_once tools with an inline ``reconcile`` (which can only find the call by a
        key the call carried). ``retry`` applies to idempotent and keyed tools only: an
        at_most_once call is never repeated automatically. A recorded failure raises
        ``ToolCallFailed`` (again, without executing, on replay).

        ``approval=True``: before anything of the call is recorded, the request (tool and
        arguments) is, an ``approval.requested`` alert goes out, and the task waits for the
        ``approved`` or ``rejected`` signal; rejected raises ``Rejected`` and the tool never
        runs. The call's own effect rules apply after the approval.
        """
        from ares.agents.tool_call import ToolCall

        if approval:
            await self._approve(name, args, kwargs)

        effect = Effect(effect)
        if reconcile is not None and effect is not Effect.AT_MOST_ONCE:
            raise ValueError(f"ctx.tool({name!r}): reconcile applies to at_most_once tools; "
                             f"a {effect} call is re-executed instead")
        if retry is not None and retry.attempts > 1 and effect is Effect.AT_MOST_ONCE:
            raise ValueError(f"ctx.tool({name!r}): an at_most_once tool is never retried "
                             "automatically; make it keyed (the remote side dedupes) to retry")
        position, occurrence, recorded = self._begin(r.TOOL, name)
        if pass_key is None:
            pass_key = effect is Effect.KEYED or reconcile is not None
        hook = reconcile if reconcile is not None else self.services.reconcilers.get(name)
        call = ToolCall(self, name, fn, args, kwargs, effect, hook, retry or NO_RETRY,
                        pass_key, position, occurrence)
        return await (call.first() if recorded is None else call.replay(recorded))

    # A durable timeout, recorded and kept across crashes: not asyncio.timeout's job.
    async def wait_for(self, name: str,
                       timeout: timedelta | float | None = None) -> Any:  # noqa: ASYNC109
        """Wait for the signal ``name`` and return its payload; ``WaitTimeout`` after
        ``timeout`` (a ``timedelta`` or seconds; ``None``: for ever).

        A signal that arrived before the wait is kept and consumed by the first wait for its
        name. While the signal has not come the task's run ends and holds no worker: the
        runtime runs the task again when it arrives or the timeout passes, and the re-run
        replays up to here (see ``ares.agents.waits``). Both branches are recorded.
        """
        seconds = _seconds(timeout, "timeout")
        completed = await wait(self, SIGNAL, name, (name,),
                               lambda now: None if seconds is None else now + seconds)
        if completed.get("outcome") == "signal":
            return signal_value(completed)
        raise WaitTimeout(self.task_id, (name,), seconds)

    async def sleep(self, duration: timedelta | float, name: str = "sleep") -> None:
        """Sleep durably for ``duration`` (a ``timedelta`` or seconds): the wake-up time is
        recorded once, so a crash or a move to another worker does not restart the clock.
        Holds no worker while it sleeps."""
        seconds = _seconds(duration, "duration") or 0.0
        await wait(self, TIMER, name, (), lambda now: now + seconds)

    async def sleep_until(self, when: datetime, name: str = "sleep") -> None:
        """Sleep durably until ``when`` (an aware ``datetime``)."""
        if when.tzinfo is None:
            raise ValueError("ctx.sleep_until needs an aware datetime (tzinfo set)")
        deadline = when.timestamp()
        await wait(self, TIMER, name, (), lambda now: deadline)

    async def delegate(self, name: str, kind: str, input: Any = None, *,
                       agent_id: str | None = None, config: Mapping[str, Any] | None = None,
                       on_parent_stop: str = "stop",
                       timeout: timedelta | float | None = None) -> Child:  # noqa: ASYNC109
        """Give a sub-task to another agent: start the child (kind ``kind``, id ``agent_id``
        or one derived from this agent, the call's position and ``name``) and assign it
        ``input``; returns the ``Child`` at once (``await child.result()`` waits for it).

        Recorded: a re-run returns the same child without dispatching again. The start
        and the assignment go out in the transaction that records the dispatch, and none
        after this agent's stop is recorded. ``on_parent_stop``: ``"stop"`` (this agent's
        stop or quarantine stops the child) or ``"detach"``. ``timeout`` (seconds or a
        ``timedelta``, fixed at the dispatch): past it the child's result is a
        ``ChildFailed`` with cause ``timeout`` (the child itself is not stopped).
        """
        return await delegation.delegate(self, name, kind, input, agent_id=agent_id,
                                         config=config, on_parent_stop=on_parent_stop,
                                         timeout=timeout)

    async def gather(self, *children: Child, return_exceptions: bool = False) -> list[Any]:
        """The outputs of ``children``, in their order, once all have an outcome; the first
        ``ChildFailed`` (in that order) is raised, or with ``return_exceptions=True`` put
        in its place. Outcomes are consumed in the order they arrive, and recorded."""
        return await delegation.gather(self, children, return_exceptions=return_exceptions)

    async def delegate_many(self, delegations: Iterable[Delegation], *,
                            max_parallel: int = 4,
                            return_exceptions: bool = False) -> list[Any]:
        """Dispatch every ``Delegation`` with at most ``max_parallel`` children running at a
        time (the next goes out when one finishes) and return their outputs in order, as
        ``gather`` does. Every dispatch and every outcome is recorded."""
        return await delegation.delegate_many(self, delegations, max_parallel=max_parallel,
                                              return_exceptions=return_exceptions)

    async def _approve(self, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        details = {"tool": tool, "args_json": r.to_json_value(r.lenient_json(
            {"args": list(args), "kwargs": kwargs}))[1]}
        completed = await wait(self, APPROVAL, f"approve:{tool}", (APPROVED, REJECTED),
                               lambda now: None, details)
        if completed.get("signal_name") == REJECTED:
            raise Rejected(self.task_id, tool, signal_value(completed))

    def heartbeat(self, progress: str | None = None) -> None:
        """Cheap, non-durable liveness for long steps (the runtime's heartbeat topic)."""
        self._sink.heartbeat(progress)

    def log(self, message: str, level: str = "info", **fields: Any) -> None:
        """Record ``agent.log`` {task_id, level, message, fields} with the next append (and
        to Python logging). Not recorded again while replaying recorded positions."""
        if level not in LOG_LEVELS:
            raise ValueError(f"ctx.log level must be one of {sorted(LOG_LEVELS)}")
        if self.is_replaying or self._closed:
            return
        log.log(LOG_LEVELS[level], "%s [agent %s task %s] %s", self.module, self.agent_id,
                self.task_id, message)
        self._logs.append(NewEvent(r.AGENT_LOG, self.module, {
            "task_id": self.task_id, "level": level, "message": message,
            "fields": r.lenient_json(fields)}))

    # -- internals shared with ToolCall and run_task --------------------------------------

    def _begin(self, kind: str, name: str,
               span: int = 1) -> tuple[int, int, RecordedCall | None]:
        """Take the call's position and occurrence of ``name`` and ask the journal for its
        record. ``span`` > 1 takes as many consecutive ones (the attempts of a validated
        ``ctx.llm``); the later ones are claimed one by one with ``_expect``."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {kind} needs a non-empty name (got {name!r})")
        position = self._next_position
        self._next_position += span
        occurrence = self._occurrences.get(name, 0)
        self._occurrences[name] = occurrence + span
        return position, occurrence, self._expect(kind, name, position, occurrence)

    def _expect(self, kind: str, name: str, position: int,
                occurrence: int) -> RecordedCall | None:
        """The journal's record for a position ``_begin`` took (marked replayed), or None."""
        self._check_open()
        try:
            recorded = self._journal.expect(position, kind, name, occurrence)
        except NonDeterminismError as e:
            self._derail(e)
        if recorded is not None:
            self._consumed.add(position)
        else:
            self._sink.heartbeat(f"{kind} {name}")
        return recorded

    def _check_open(self) -> None:
        if self._closed:
            raise ContextClosedError(
                f"task {self.task_id!r}: a step was requested after the task run ended (a "
                "background task outlived the handler? use asyncio.TaskGroup)")
        if self._paused:
            raise TaskPaused(self._paused)
        if self._waits:
            raise TaskWaiting(self._waits)
        if self._derailed is not None:
            raise self._derailed

    def _derail(self, error: NonDeterminismError) -> NoReturn:
        """Remember the first non-determinism: ``run_task`` re-raises it even if swallowed."""
        if self._derailed is None:
            self._derailed = error
        raise error

    def _pause(self, call: InDoubtCall) -> NoReturn:
        self._paused = (*self._paused, call)
        raise TaskPaused(self._paused)

    def _close(self) -> None:
        self._closed = True

    def _json(self, what: str, value: Any) -> tuple[Any, str]:
        try:
            return r.to_json_value(value)
        except (TypeError, ValueError) as e:
            raise StepResultError(self.task_id, what, value, str(e)) from None

    async def _append(self, events: list[NewEvent],
                      alerts: Sequence[r.AgentAlert] = ()) -> None:
        """One durable append: buffered logs, ``task.resumed`` (first append of a re-run),
        then ``events``; ``alerts`` go out in its transaction."""
        batch = [*self._logs]
        self._logs = []
        if self._resume_pending:
            self._resume_pending = False
            batch.append(self._resumed_event())
        batch.extend(events)
        if batch:
            await (self._sink.append(batch, alerts) if alerts else self._sink.append(batch))
            self.stats.appends += 1

    async def _flush_logs(self) -> None:
        if self._logs:
            await self._append([])

    def _resumed_event(self) -> NewEvent:
        """``task.resumed``: what this re-run took from the journal before its first new
        record (the token ledger's "reused" numbers)."""
        s = self.stats
        return NewEvent(r.TASK_RESUMED, self.module, {
            "task_id": self.task_id, "incarnation": self.incarnation,
            "recorded_calls": len(self._journal.calls),
            "reused_steps": s.reused_steps, "reused_llm_calls": s.reused_llm_calls,
            "reused_prompt_tokens": s.reused_prompt_tokens,
            "reused_completion_tokens": s.reused_completion_tokens,
            "reused_tool_calls": s.reused_tool_calls})

    async def _attempt(self, name: str, policy: RetryPolicy, fn: Callable[..., Any],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``fn`` until it returns, per ``policy``; ``_Exhausted`` when it gives up."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call_maybe_async(fn, *args, **kwargs)
            except Exception as error:
                if isinstance(error, NonDeterminismError | ContextClosedError):
                    raise
                retriable = policy.retries(error)
                if not retriable or attempt >= policy.attempts:
                    raise _Exhausted(error, attempt, retriable) from error
                delay = policy.delay(attempt, self._rng)
                hint = getattr(error, "retry_after_s", None)
                if isinstance(hint, int | float):
                    delay = max(delay, min(float(hint), policy.max_backoff_s))
                log.info("task %s: %s attempt %d failed (%s: %s); retrying in %.2fs",
                         self.task_id, name, attempt, type(error).__name__, error, delay)
                self._sink.heartbeat(f"retrying {name} (attempt {attempt + 1})")
                await self.services.clock.sleep(delay)

    async def _record_failure(self, kind: str, name: str, occurrence: int, position: int,
                              failure: _Exhausted, fallback: Any,
                              extra: dict[str, Any]) -> Any:
        has_fallback = fallback is not MISSING
        value = self._json(f"{kind} {name!r} fallback", fallback)[0] if has_fallback else None
        payload = {"task_id": self.task_id, "kind": kind, "step_name": name,
                   "occurrence": occurrence, "error_type": r.qualified_name(failure.error),
                   "error": str(failure.error), "attempts": failure.attempts,
                   "retriable": failure.retriable, "has_fallback": has_fallback,
                   "fallback": value, **extra}
        await self._append([NewEvent(r.STEP_FAILED, self.module, payload,
                                     r.position_metadata(position))])
        if has_fallback:
            log.warning("task %s: %s %r failed (%s); using its fallback", self.task_id, kind,
                        name, failure.error)
            return value
        raise _step_failed(payload) from failure.error

    def _replay_step(self, recorded: RecordedCall) -> Any:
        if recorded.completed:
            self.stats.reused_steps += 1
            return recorded.result
        return self._replay_failure(recorded)

    def _replay_failure(self, recorded: RecordedCall) -> Any:
        failure = recorded.failure or {}
        if failure.get("has_fallback"):
            return failure.get("fallback")
        raise _step_failed(failure)

    def _replay_llm(self, recorded: RecordedCall, position: int, digest: str) -> Any:
        self._check_prompt(recorded, position, digest)
        if recorded.llm is None:
            return self._replay_failure(recorded)
        self.stats.reused_llm_calls += 1
        self.stats.reused_prompt_tokens += r.int_field(recorded.llm, "prompt_tokens")
        self.stats.reused_completion_tokens += r.int_field(recorded.llm, "completion_tokens")
        return recorded.result

    def _check_prompt(self, recorded: RecordedCall, position: int, digest: str) -> None:
        """A recorded llm call replays only for the prompt it was recorded with."""
        payload = recorded.llm or recorded.validation or recorded.failure or {}
        if payload.get("prompt_hash", digest) != digest:
            self._derail(NonDeterminismError(
                self.task_id, position,
                f"{recorded.describe()} with prompt sha256 {str(payload['prompt_hash'])[:12]}",
                f"requested it with a different prompt (sha256 {digest[:12]})",
                ": the prompt must be built only from the task input and step results"))


def _seconds(value: timedelta | float | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ValueError(f"a wait's {what} must not be negative (got {seconds:g}s)")
    return seconds


def _step_failed(payload: Any) -> StepFailed:
    if isinstance(payload.get("budget_reason"), str):
        return BudgetExceeded(str(payload.get("task_id")), str(payload.get("kind", r.LLM)),
                              str(payload.get("step_name")),
                              r.int_field(payload, "occurrence"), str(payload.get("tenant")),
                              payload["budget_reason"])
    return StepFailed(str(payload.get("task_id")), str(payload.get("kind", r.STEP)),
                      str(payload.get("step_name")), r.int_field(payload, "occurrence"),
                      payload.get("error_type"), str(payload.get("error", "")),
                      r.int_field(payload, "attempts", 1), bool(payload.get("retriable")))


async def call_maybe_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited when it returns an awaitable."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return await _await(result)
    return result


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
