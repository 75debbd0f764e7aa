"""The resurrection guard: skips, restart intensity, healthy reset, the stop/crash race."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

import pytest

from ares.lifecycle.backoff import BackoffPolicy
from ares.lifecycle.state import (
    AgentLifecycle,
    Status,
    clear_resurrecting,
    dead_payload,
    fold,
    from_events,
    mark_resurrecting,
    mark_stop_requested,
)
from ares.runtime_manager.guard import (
    Decision,
    Quarantine,
    QuarantineReason,
    RestartPolicy,
    Resurrect,
    ResurrectionGuard,
    Skip,
    SkipReason,
    counted_deaths,
    quarantined_payload,
    resurrecting_payload,
)
from tests.unit.runtime.streams import EPOCH0, Stream


def zero() -> float:
    return 0.0


@dataclass
class Host:
    """The host's use of the guard, without I/O: every decision becomes events."""

    guard: ResurrectionGuard
    kind: str = "K"
    stream: Stream = field(default_factory=lambda: Stream("agent-1"))
    state: AgentLifecycle = field(default_factory=lambda: AgentLifecycle("agent-1"))
    decisions: list[Decision] = field(default_factory=list)

    def emit(self, type_: str, payload: dict[str, object], at_s: float,
             metadata: dict[str, str] | None = None) -> None:
        self.state = fold(self.state, self.stream.add(type_, payload, at_s, metadata))

    def start(self, at_s: float = 0.0) -> Host:
        self.emit("agent.started", {"kind": self.kind, "incarnation": 0, "worker": "w1"}, at_s)
        return self

    def crash(self, at_s: float, cause: str = "crash") -> Decision:
        decision = self.guard.decide(self.state, False, EPOCH0 + at_s)
        self.decisions.append(decision)
        if isinstance(decision, Skip):
            return decision
        self.emit("agent.dead", dead_payload(self.state, cause,
                                             error_type="builtins.RuntimeError"), at_s)
        if isinstance(decision, Quarantine):
            self.emit("agent.quarantined", quarantined_payload(decision), at_s)
            return decision
        resurrecting = resurrecting_payload(self.state, decision)
        self.emit("agent.resurrecting", resurrecting, at_s, decision.metadata())
        self.emit("agent.resurrected", {"incarnation": resurrecting["incarnation"],
                                        "parent_incarnation": resurrecting["parent_incarnation"],
                                        "worker": "w1"}, at_s + decision.delay_s)
        return decision


def guard(max_restarts: int = 5, period_s: float = 60.0, healthy_after_s: float = 60.0,
          rand: Callable[[], float] = zero, **policies: RestartPolicy) -> ResurrectionGuard:
    return ResurrectionGuard(policies, RestartPolicy(max_restarts, period_s, healthy_after_s),
                             rand)


# -- skips ---------------------------------------------------------------------------------


def running() -> AgentLifecycle:
    return Host(guard()).start().state


def test_the_first_death_is_resurrected_at_once() -> None:
    assert guard().decide(running(), False, EPOCH0 + 1) == Resurrect(0.0, 1, 0.0)


def test_no_resurrection_while_the_runtime_stops_whatever_else_holds() -> None:
    state = mark_resurrecting(mark_stop_requested(running()))
    assert guard().decide(state, True, EPOCH0) == Skip(SkipReason.RUNTIME_STOPPING)


def test_a_voluntary_stop_is_never_resurrected() -> None:
    state = mark_stop_requested(running())
    assert guard().decide(state, False, EPOCH0 + 1) == Skip(SkipReason.STOPPED_VOLUNTARILY)
    host = Host(guard()).start()
    host.emit("agent.stopped", {"reason": "requested"}, 1)
    assert guard().decide(host.state, False, EPOCH0 + 2) == Skip(
        SkipReason.STOPPED_VOLUNTARILY)


def test_a_second_notification_of_the_same_death_is_skipped() -> None:
    state = mark_resurrecting(running())
    assert guard().decide(state, False, EPOCH0 + 1) == Skip(SkipReason.ALREADY_RESURRECTING)
    assert isinstance(guard().decide(clear_resurrecting(state), False, EPOCH0 + 1), Resurrect)


def test_a_quarantined_agent_is_not_resurrected() -> None:
    host = Host(guard(max_restarts=0)).start()
    assert host.crash(1) == Quarantine(QuarantineReason.BUDGET_EXHAUSTED, 1)
    assert host.state.status is Status.QUARANTINED
    assert host.guard.decide(host.state, False, EPOCH0 + 2) == Skip(SkipReason.QUARANTINED)


# -- restart intensity ---------------------------------------------------------------------


def test_an_agent_that_crashes_on_every_start_is_quarantined_after_its_budget() -> None:
    host = Host(guard(rand=random.Random(42).random)).start()
    t = 0.0
    for _ in range(6):
        t += 0.1 + (host.decisions[-1].delay_s if host.decisions and isinstance(
            host.decisions[-1], Resurrect) else 0)
        host.crash(t)
    attempts = [d.attempt for d in host.decisions if isinstance(d, Resurrect)]
    assert attempts == [1, 2, 3, 4, 5]
    assert host.decisions[-1] == Quarantine(QuarantineReason.BUDGET_EXHAUSTED, 6)
    assert host.state.status is Status.QUARANTINED
    # The delays are in the events: first immediate, then full jitter under 1, 2, 4, 8 s.
    announced = [e for e in host.stream.events if e.type == "agent.resurrecting"]
    backoff = [e.payload["backoff_ms"] for e in announced]
    nominal = [int(e.metadata["ares.backoff.nominal_ms"]) for e in announced]
    assert nominal == [0, 1000, 2000, 4000, 8000]
    assert backoff[0] == 0
    assert all(0 <= b <= n for b, n in zip(backoff, nominal, strict=True))
    assert backoff == [round(d.delay_s * 1000) for d in host.decisions[:5]]  # type: ignore[union-attr]


def test_deaths_leave_the_sliding_window() -> None:
    host = Host(guard(max_restarts=3, period_s=10, healthy_after_s=1000)).start()
    for t in (0, 1, 2):
        host.crash(t)
    assert [d.attempt for d in host.decisions] == [1, 2, 3]  # type: ignore[union-attr]
    # At 10.5 the death at 0 has left the window (10.5 - 10, 10.5]: still 3 deaths.
    assert host.crash(10.5) == Resurrect(host.decisions[-1].delay_s, 3, 2.0)  # type: ignore[union-attr]
    assert host.crash(11.5) == Resurrect(0.0, 3, 2.0)  # 1 left, 11.5 came in
    assert host.crash(11.8) == Quarantine(QuarantineReason.BUDGET_EXHAUSTED, 4)


def test_a_death_exactly_one_period_ago_is_outside_the_window() -> None:
    host = Host(guard(max_restarts=1, period_s=10, healthy_after_s=1000)).start()
    host.crash(0)
    assert isinstance(host.crash(10), Resurrect)


def test_an_agent_that_stayed_up_starts_again_at_attempt_one() -> None:
    stayed = Host(guard(max_restarts=2, period_s=60, healthy_after_s=30)).start()
    stayed.crash(0)
    stayed.crash(1)  # resurrected at 1
    assert stayed.crash(40) == Resurrect(0.0, 1, 0.0)  # ran 39 s >= 30: healthy
    flapping = Host(guard(max_restarts=2, period_s=60, healthy_after_s=30)).start()
    flapping.crash(0)
    flapping.crash(1)
    assert flapping.crash(20) == Quarantine(QuarantineReason.BUDGET_EXHAUSTED, 3)


def test_forgiven_deaths_stay_forgiven() -> None:
    host = Host(guard(max_restarts=2, period_s=60, healthy_after_s=30)).start()
    host.crash(0)
    host.crash(1)
    host.crash(40)  # healthy: deaths at 0 and 1 forgiven, attempt 1
    assert host.state.restarts == (EPOCH0 + 40,)
    assert host.crash(41) == Resurrect(0.0, 2, 1.0)  # flapping again: 40, 41


def test_a_resurrection_that_fails_before_running_is_never_healthy() -> None:
    host = Host(guard(max_restarts=2, period_s=600, healthy_after_s=30)).start()
    host.crash(100)  # ran 100 s: healthy, attempt 1
    host.emit("agent.dead", {"cause": "crash"}, 200)
    host.emit("agent.resurrecting", {"incarnation": 2, "parent_incarnation": 1, "attempt": 2},
              200)
    # The resurrection task fails to recover 100 s later: no incarnation ran since 200.
    state = clear_resurrecting(host.state)
    assert host.guard.decide(state, False, EPOCH0 + 300) == Quarantine(
        QuarantineReason.BUDGET_EXHAUSTED, 3)


def test_a_recorded_death_is_not_counted_twice() -> None:
    host = Host(guard(max_restarts=1, healthy_after_s=1000)).start()
    host.emit("agent.dead", {"cause": "worker_lost"}, 5)  # the old worker died right after
    rebuilt = from_events(host.stream.events)
    assert rebuilt.status is Status.DEAD
    assert counted_deaths(rebuilt, host.guard.default, EPOCH0 + 6) == (EPOCH0 + 5,)
    assert host.guard.decide(rebuilt, False, EPOCH0 + 6) == Resurrect(0.0, 1, 0.0)


def test_a_rebuilt_state_decides_as_the_live_one_did() -> None:
    live = Host(guard(max_restarts=3, period_s=60, healthy_after_s=30)).start()
    for t in (1, 2, 50, 51):
        live.crash(t)
    rebuilt = from_events(live.stream.events)
    assert rebuilt == live.state
    for now in (52, 70, 200):
        assert live.guard.decide(rebuilt, False, EPOCH0 + now) == live.guard.decide(
            live.state, False, EPOCH0 + now)


def test_policies_per_kind() -> None:
    g = ResurrectionGuard({"fragile": RestartPolicy(max_restarts=0)}, RestartPolicy(), zero)
    assert isinstance(g.decide(Host(g, kind="fragile").start().state, False, EPOCH0), Quarantine)
    assert isinstance(g.decide(Host(g, kind="other").start().state, False, EPOCH0), Resurrect)
    slow = ResurrectionGuard({}, RestartPolicy(backoff=BackoffPolicy(first_immediate=False)),
                             lambda: 1.0)
    assert slow.decide(running(), False, EPOCH0 + 1) == Resurrect(1.0, 1, 1.0)


def test_restarts_in_window_for_status() -> None:
    host = Host(guard(period_s=60, healthy_after_s=30)).start()
    host.crash(1)
    host.crash(2)
    assert host.guard.restarts_in_window(host.state, EPOCH0 + 10) == 2
    assert host.guard.restarts_in_window(host.state, EPOCH0 + 40) == 0  # healthy since 2


@pytest.mark.parametrize(("kwargs", "match"), [({"max_restarts": -1}, "max_restarts"),
                                               ({"period_s": 0}, "period_s"),
                                               ({"healthy_after_s": -1}, "healthy_after_s")])
def test_invalid_restart_policies(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]


# -- the stop/crash race -------------------------------------------------------------------


def test_stop_requested_before_the_crash_is_processed() -> None:
    state = running()
    state = mark_stop_requested(state)  # 1. the flag, 2. cancel; then the task "died"
    assert guard().decide(state, False, EPOCH0 + 1) == Skip(SkipReason.STOPPED_VOLUNTARILY)


def test_a_stop_during_the_backoff_abandons_the_resurrection() -> None:
    g = guard()
    state = running()
    assert isinstance(g.decide(state, False, EPOCH0 + 1), Resurrect)  # crash came first
    state = mark_stop_requested(mark_resurrecting(state))
    assert g.recheck(state, False) == Skip(SkipReason.STOPPED_VOLUNTARILY)
    assert g.recheck(clear_resurrecting(running()), False) is None
    assert g.recheck(running(), True) == Skip(SkipReason.RUNTIME_STOPPING)


class MiniHost:
    """asyncio hosting in miniature: an agent task, a stop, an exit handler, a resurrection.

    ``flag_first``: the stop sets the flag, then cancels (the rule). Otherwise it cancels,
    awaits something (appending an event, say), and only then sets the flag (the bug).
    """

    def __init__(self, flag_first: bool) -> None:
        self.guard = guard()
        self.states = {"a": running()}
        self.log: list[str] = []
        self.flag_first = flag_first
        self.task: asyncio.Task[None] | None = None
        self.background: set[asyncio.Task[None]] = set()

    def launch(self, agent: Callable[[], Coroutine[None, None, None]]) -> None:
        self.task = asyncio.create_task(agent())
        self.task.add_done_callback(self.exited)

    async def stop(self) -> None:
        self.log.append("stop")
        assert self.task is not None
        if self.flag_first:
            self.states["a"] = mark_stop_requested(self.states["a"])
            self.task.cancel()
        else:
            self.task.cancel()
            for _ in range(3):  # e.g. awaiting a produce before recording the stop
                await asyncio.sleep(0)
            self.states["a"] = mark_stop_requested(self.states["a"])

    def exited(self, _: asyncio.Task[None]) -> None:
        state = self.states["a"]  # the state now, never one captured at launch
        decision = self.guard.decide(state, False, EPOCH0 + 1)
        if isinstance(decision, Resurrect):
            self.states["a"] = mark_resurrecting(state)
            task = asyncio.create_task(self.resurrect(decision))
            self.background.add(task)
        else:
            self.log.append(f"skip:{decision.reason if isinstance(decision, Skip) else ''}")

    async def resurrect(self, decision: Resurrect) -> None:
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        skip = self.guard.recheck(self.states["a"], False)
        self.log.append(f"abandoned:{skip.reason}" if skip else "resurrected")


async def run_race(agent_yields: int, stop_yields: int, flag_first: bool) -> list[str]:
    host = MiniHost(flag_first)

    async def agent() -> None:
        for _ in range(agent_yields):
            await asyncio.sleep(0)
        raise RuntimeError("boom")

    host.launch(agent)
    for _ in range(stop_yields):
        await asyncio.sleep(0)
    await host.stop()
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.gather(*host.background)
    return host.log


def resurrected_after_stop(log: list[str]) -> bool:
    return "resurrected" in log and log.index("resurrected") > log.index("stop")


async def test_a_stop_racing_a_crash_is_never_resurrected() -> None:
    for agent_yields in range(5):
        for stop_yields in range(5):
            log = await run_race(agent_yields, stop_yields, flag_first=True)
            assert not resurrected_after_stop(log), (agent_yields, stop_yields, log)
            if "resurrected" not in log:  # the crash was not processed before the stop
                assert "skip:stopped_voluntarily" in log or \
                    "abandoned:stopped_voluntarily" in log, log


async def test_the_race_is_real_when_the_flag_comes_after_the_cancel() -> None:
    """The negative control: the same interleavings with the order reversed."""
    bad = [(a, s) for a in range(5) for s in range(5)
           if resurrected_after_stop(await run_race(a, s, flag_first=False))]
    assert bad  # some interleavings resurrect an agent that was being stopped


# -- payloads --------------------------------------------------------------------------------


def test_payloads_follow_the_schema() -> None:
    host = Host(guard(max_restarts=1)).start()
    host.crash(1, cause="killed")  # Stream.add seals through the codec: payloads validated
    host.crash(2)
    types = [e.type for e in host.stream.events]
    assert types == ["agent.started", "agent.dead", "agent.resurrecting", "agent.resurrected",
                     "agent.dead", "agent.quarantined"]
    resurrecting = host.stream.events[2].payload
    assert (resurrecting["incarnation"], resurrecting["parent_incarnation"],
            resurrecting["cause"]) == (1, 0, "killed")
    dead = host.stream.events[4].payload
    assert (dead["incarnation"], dead["last_version"], dead["last_event_type"]) == (
        1, 4, "agent.resurrected")
    assert host.stream.events[5].payload == {"reason": "budget_exhausted", "deaths": 2}
