"""The closed loop: every death's resurrection is confirmed, late or failed; death loops
give exactly one alert (also after a rebuild) and a quarantine request."""

from __future__ import annotations

from ares.health_checker.config import HealthConfig
from ares.health_checker.detector import HealthState
from ares.health_checker.model import Outcome, Phase
from tests.unit.health.support import (
    P,
    World,
    agent_beat,
    alerts,
    quarantines,
    verdicts,
)
from tests.unit.runtime.streams import EPOCH0

LOOPY = HealthConfig(step_timeout_s=None, loop_deaths=5, loop_window_s=600,
                     healthy_after_s=300, resurrection_deadline_s=60)


def crash_loop(world: World, agent: str = "c1", deaths: int = 5, every: float = 10.0,
               start: float = 0.0) -> None:
    """Started, a task, one step; then dies after that step ``deaths`` times."""
    world.start(agent, start)
    world.event(agent, "task.assigned", start + 0.1, {"task_id": "t1", "input_json": "null"})
    world.event(agent, "step.completed", start + 0.2, {
        "step_name": "before", "occurrence": 0, "result_json": '"ok"', "task_id": "t1"})
    t = start + 0.3
    for n in range(1, deaths + 1):
        world.dead(agent, t, incarnation=n, message=f"boom at attempt {n}")
        world.resurrect(agent, t + 0.5, incarnation=n + 1, attempt=n)
        t += every


def test_a_resurrection_is_confirmed_by_a_heartbeat_of_the_new_incarnation() -> None:
    world = World(LOOPY)
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 5.0, [agent_beat("a1", 1)])
    world.dead("a1", 5.5)
    world.resurrect("a1", 6.0, incarnation=2)
    world.beat("w1", 6.5, [agent_beat("a1", 3, incarnation=1, status="dead")])
    assert world.observer.outcomes == []  # a beat of the old incarnation confirms nothing
    world.beat("w1", 7.0, [agent_beat("a1", 4, incarnation=2)])
    assert world.observer.outcomes == [(Outcome.CONFIRMED, 1.5)]
    world.beats("w1", 8.0, 200.0, [agent_beat("a1", 4, incarnation=2)])
    assert world.due(200.0) == []


def test_a_resurrection_not_confirmed_in_time_is_late_once() -> None:
    world = World(LOOPY)
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 5.0, [agent_beat("a1", 1)])
    world.dead("a1", 5.5)
    world.beats("w1", 6.0, 70.0, [agent_beat("a1", 2, status="dead")])
    [late] = alerts(world.settle(66.0))
    assert (late.kind, late.stream_id, late.details["cause"]) == (
        "resurrection_late", "a1", "exception")
    assert "not announced" in late.message
    assert world.due(67.0) == []
    assert world.observer.outcomes == [(Outcome.LATE, None)]
    assert world.observer.alerts == ["resurrection_late"]


def test_quarantine_fails_and_stop_abandons_an_open_resurrection() -> None:
    world = World(LOOPY)
    for agent, end in (("q1", "agent.quarantined"), ("s1", "agent.stopped")):
        world.start(agent, 0.0)
        world.dead(agent, 1.0)
        payload = {"reason": "budget_exhausted", "deaths": 6} if end.endswith("ed") and \
            agent == "q1" else {"reason": "operator"}
        world.event(agent, end, 2.0, payload)
    assert [o for o, _ in world.observer.outcomes] == [Outcome.FAILED, Outcome.ABANDONED]
    assert world.due(500.0) == []


def test_dying_again_before_confirmation_fails_the_previous_resurrection() -> None:
    world = World(LOOPY)
    world.start("a1", 0.0)
    world.dead("a1", 1.0)
    world.resurrect("a1", 1.5, incarnation=2)
    world.dead("a1", 1.8, incarnation=2)
    assert [o for o, _ in world.observer.outcomes] == [Outcome.FAILED]


def test_a_death_loop_gives_one_alert_naming_the_event_then_a_quarantine() -> None:
    world = World(LOOPY)
    crash_loop(world, deaths=4)
    assert world.due(45.0) == []  # four deaths: not yet a loop
    crash_loop_more(world, at=50.3, incarnation=5)
    [alert] = alerts(world.due(51.0))
    assert alert.kind == "death_loop"
    assert alert.details["same_event"] == "true"
    assert alert.details["last_event_type"] == "step.completed"
    assert alert.details["last_version"] == "3"
    assert alert.details["deaths"] == "5"
    assert alert.details["error_type"] == "RuntimeError"
    assert "dies at the same event every time: step.completed v3" in alert.message
    assert quarantines(world.due(51.1)) == []  # the alert first
    world.state.completed(alert, True, EPOCH0 + 51.2)
    [quarantine] = quarantines(world.due(51.3))
    assert quarantine.deaths == 5
    assert quarantine.reason.startswith("death_loop: dies at the same event every time")
    world.state.completed(quarantine, True, EPOCH0 + 51.4)
    crash_loop_more(world, at=55.0, incarnation=6)  # one more before it takes effect
    assert world.due(56.0) == []
    world.event("c1", "agent.quarantined", 56.5, {"reason": quarantine.reason, "deaths": 5})
    assert world.due(500.0) == []
    assert world.state.agents["c1"].phase is Phase.QUARANTINED


def crash_loop_more(world: World, at: float, incarnation: int) -> None:
    world.dead("c1", at, incarnation=incarnation)
    world.resurrect("c1", at + 0.5, incarnation=incarnation + 1, attempt=incarnation)


def test_deaths_after_a_healthy_incarnation_are_forgiven() -> None:
    world = World(LOOPY)
    crash_loop(world, deaths=4, every=10.0)
    # The fifth incarnation runs for 400 s (> healthy_after) before dying.
    world.dead("c1", 440.0, incarnation=5)
    assert alerts(world.due(441.0)) == []
    assert len(world.state.agents["c1"].deaths) == 1


def test_kills_and_lost_workers_do_not_count_towards_a_loop() -> None:
    world = World(LOOPY)
    world.start("a1", 0.0)
    for n in range(1, 7):
        world.dead("a1", n * 5.0, cause="killed" if n % 2 else "worker_lost",
                   incarnation=n, error_type=None, message=None)
        world.resurrect("a1", n * 5.0 + 1, incarnation=n + 1, attempt=n)
    assert alerts(world.due(40.0), "death_loop") == []


def test_different_events_are_said_to_differ() -> None:
    world = World(LOOPY)
    world.start("d1", 0.0)
    for n in range(1, 6):
        world.event("d1", "step.completed", n * 10.0, {
            "step_name": f"s{n}", "occurrence": 0, "result_json": "1", "task_id": "t"})
        world.dead("d1", n * 10.0 + 1, incarnation=n)
        world.resurrect("d1", n * 10.0 + 2, incarnation=n + 1, attempt=n)
    [alert] = alerts(world.due(60.0))
    assert alert.details["same_event"] == "false"
    assert "dies at different events" in alert.message


def rebuilt(world: World, emitted: set[str]) -> HealthState:
    """A second state fed the same events (a restarted checker), alert ids known."""
    state = HealthState(world.config)
    state.assign([P])
    for partition, event in world.log:
        state.observe_event(partition, event)
    state.emitted |= emitted
    state.set_live(P)
    return state


def test_a_rebuilt_state_derives_the_same_alert_and_never_repeats_an_emitted_one() -> None:
    world = World(LOOPY)
    crash_loop(world, deaths=5)
    [alert] = alerts(world.settle(51.0))
    again = rebuilt(world, emitted=set())
    [same] = alerts(again.due(EPOCH0 + 70.0))
    assert same.id == alert.id  # deterministic: a consumer can deduplicate
    restarted = rebuilt(world, emitted={alert.id})
    actions = restarted.due(EPOCH0 + 70.0)
    assert alerts(actions) == []
    assert [q.agent_id for q in quarantines(actions)] == ["c1"]  # the pending verdict


def test_a_verdict_the_owner_never_acts_on_is_reported() -> None:
    world = World(LOOPY)
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 2.0, [agent_beat("a1", 1)])
    world.beats("w1", 3.0, 80.0)
    [verdict] = verdicts(world.settle(6.5))
    assert verdict.cause == "heartbeat_timeout"
    [late] = alerts(world.settle(70.0))
    assert late.kind == "resurrection_late"
    assert "recorded no death" in late.message
    assert late.details["reply"] == "ok"


def test_the_gauges_count_agents_by_state() -> None:
    world = World(LOOPY)
    world.start("a1", 0.0)
    world.start("a2", 0.0)
    world.start("a3", 0.0)
    world.beat("w1", 1.0, [agent_beat("a1", 1), agent_beat("a2", 1)])
    world.dead("a2", 1.5)
    world.event("a3", "agent.quarantined", 1.6, {"reason": "x", "deaths": 0})
    counts = world.state.counts(EPOCH0 + 2.0)
    assert counts["alive"] == 1
    assert counts["dead"] == 1
    assert counts["quarantined"] == 1
