"""Death verdicts: stalls and silences are found; stops, hand-offs, rebalances and dead
owners produce none."""

from __future__ import annotations

import pytest

from ares.health_checker.config import HealthConfig
from ares.health_checker.model import GroupState, Phase
from tests.unit.health.support import (
    P,
    World,
    agent_beat,
    alerts,
    verdicts,
)
from tests.unit.runtime.streams import EPOCH0


def busy_agent(world: World, agent: str = "a1", timeout: float = 2.0) -> None:
    world.start(agent, 0.0, config=f'{{"step_timeout_s":{timeout}}}')
    world.event(agent, "task.assigned", 0.1, {"task_id": "t1", "input_json": "null"})


def test_a_busy_agent_without_progress_is_stalled_after_its_step_timeout() -> None:
    world = World()
    busy_agent(world, timeout=5.0)
    world.beats("w1", 0.0, 6.0, [agent_beat("a1", 2, progress="step hang")])
    assert verdicts(world.due(5.0)) == []  # within the timeout (and the grace)
    [verdict] = verdicts(world.due(5.2))
    assert (verdict.cause, verdict.agent_id, verdict.incarnation) == ("stalled", "a1", 1)
    assert verdict.evidence_at == pytest.approx(EPOCH0 + 0.1)  # task.assigned: last progress
    assert verdict.worker == "w1"
    assert verdicts(world.due(5.3)) == []  # one verdict per incarnation


def test_an_agent_that_hangs_at_once_is_stalled_within_the_silence_grace() -> None:
    world = World()
    busy_agent(world, timeout=1.0)
    world.beats("w1", 0.0, 2.0, [agent_beat("a1", 2)])
    [verdict] = verdicts(world.due(1.2))  # the grace (3 s) holds silence verdicts only
    assert verdict.cause == "stalled"


def test_progress_in_the_heartbeats_or_the_stream_postpones_the_stall() -> None:
    world = World()
    busy_agent(world, timeout=3.0)
    for t in range(8):  # a new progress note every second
        world.beat("w1", float(t), [agent_beat("a1", 2, progress=f"step {t}")])
    assert verdicts(world.due(7.5)) == []
    world.event("a1", "step.completed", 8.0, {"step_name": "x"})
    world.beats("w1", 8.0, 11.0, [agent_beat("a1", 3, progress="step 7")])
    assert verdicts(world.due(10.9)) == []
    assert [v.cause for v in verdicts(world.due(11.1))] == ["stalled"]


@pytest.mark.parametrize("scenario", ["idle", "paused", "no_timeout"])
def test_no_stall_when_idle_paused_in_doubt_or_without_a_timeout(scenario: str) -> None:
    world = World()
    if scenario == "no_timeout":
        world.start("a1", 0.0)  # declares nothing; the checker's default is off here
        world.event("a1", "task.assigned", 0.1, {"task_id": "t1"})
    else:
        busy_agent(world, timeout=1.0)
    if scenario == "idle":
        world.event("a1", "task.completed", 0.2, {"task_id": "t1"})
    if scenario == "paused":
        world.event("a1", "tool.in_doubt", 0.2, {"call_id": "c1", "tool": "send",
                                                  "idempotency_key": "k", "reason": "crash"})
    world.beats("w1", 0.0, 30.0, [agent_beat("a1", 3)])
    assert world.due(30.0) == []


def test_a_durable_wait_is_not_a_stall_and_its_end_restarts_the_clock() -> None:
    world = World()
    busy_agent(world, timeout=1.0)
    world.event("a1", "wait.started", 0.2, {"task_id": "t1", "name": "approval",
                                            "kind": "signal", "names": ["approval"]})
    world.beats("w1", 0.0, 30.0, [agent_beat("a1", 3)])
    assert world.due(30.0) == []  # waiting for a day is no stall
    world.event("a1", "wait.completed", 30.0, {"task_id": "t1", "name": "approval",
                                               "outcome": "signal", "signal_id": "s1"})
    world.beats("w1", 30.0, 32.0, [agent_beat("a1", 4)])
    assert [v.cause for v in verdicts(world.due(31.5))] == ["stalled"]  # busy again


def test_the_checker_default_and_kind_timeouts_apply_to_agents_that_declare_none() -> None:
    world = World(HealthConfig(step_timeout_s=100.0, step_timeouts={"test.slow": 4.0}))
    world.start("a1", 0.0, kind="test.slow")
    world.event("a1", "task.assigned", 0.1, {"task_id": "t1"})
    world.beats("w1", 0.0, 5.0, [agent_beat("a1", 2)])
    assert [v.cause for v in verdicts(world.due(4.2))] == ["stalled"]


def test_an_agent_missing_from_its_live_owners_heartbeats_is_declared_dead() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 4.0, [agent_beat("a1", 1)])
    world.beats("w1", 5.0, 7.0)  # the worker beats on, without a1
    assert verdicts(world.due(7.5)) == []  # 3.5 s after the last sighting; beats to 7
    world.beat("w1", 8.0)
    [verdict] = verdicts(world.due(8.1))
    assert verdict.cause == "heartbeat_timeout"
    assert verdict.last_seen == pytest.approx(EPOCH0 + 4.0)


def test_no_agent_verdict_when_the_owner_itself_is_silent() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 4.0, [agent_beat("a1", 1)])
    actions = world.due(30.0)
    assert verdicts(actions) == []  # the worker is lost: its partition's next owner acts
    [lost] = alerts(actions, "worker_lost")
    assert lost.details["agents"] == "a1"
    assert lost.details["worker"] == "w1"


def test_a_graceful_stop_gives_no_verdict() -> None:
    world = World()
    busy_agent(world, timeout=2.0)
    world.beats("w1", 0.0, 1.0, [agent_beat("a1", 2)])
    world.event("a1", "agent.stopped", 1.5, {"reason": "operator"})
    world.beats("w1", 2.0, 30.0)
    assert world.due(30.0) == []
    assert world.state.agents["a1"].phase is Phase.STOPPED


def test_a_handed_off_agent_and_its_worker_leaving_give_no_verdict_nor_alert() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 5.0, [agent_beat("a1", 1)])
    world.event("a1", "agent.handed_off", 5.5, {"worker": "w1", "reason": "shutdown"})
    assert world.due(60.0) == []  # w1 went silent, but it handed its agent over
    world.event("a1", "agent.resurrected", 61.0, {
        "incarnation": 2, "parent_incarnation": 1, "worker": "w2", "snapshot_version": 3,
        "replayed_events": 0, "recovery_ms": 5})
    world.beats("w2", 61.0, 70.0, [agent_beat("a1", 3, incarnation=2)])
    assert world.due(70.0) == []


def test_a_partition_moving_to_a_new_owner_gets_a_grace_period() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 10.0, [agent_beat("a1", 1)])
    # w2 owns the partition from 12 on and resumes a1 only at 14.5 (recovery).
    world.beats("w2", 12.0, 14.0)
    assert verdicts(world.due(14.2)) == []
    world.beats("w2", 14.5, 20.0, [agent_beat("a1", 1)])
    assert world.due(20.0) == []


def test_a_rebalance_pause_of_the_same_owner_gives_no_verdict() -> None:
    world = World()
    busy_agent(world, timeout=4.0)
    world.beats("w1", 0.0, 3.0, [agent_beat("a1", 2)])
    # Revoked and assigned back: w1 is silent on P for 4 s, then re-runs the step.
    world.beats("w1", 7.0, 9.0, [agent_beat("a1", 2)])
    assert verdicts(world.due(9.5)) == []  # the gap restarted the clock at 7 (grace 3)


def test_no_verdict_within_the_grace_after_a_resurrection() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 2.0, [agent_beat("a1", 1)])
    world.dead("a1", 2.5)
    world.resurrect("a1", 3.0, incarnation=2)
    world.beats("w1", 3.0, 5.8)  # the new incarnation not yet in the beats
    assert verdicts(world.due(5.9)) == []
    world.beats("w1", 6.0, 7.0)
    assert [v.cause for v in verdicts(world.due(7.0))] == ["heartbeat_timeout"]


def test_a_failed_delivery_is_judged_again_after_the_retry_delay() -> None:
    world = World(HealthConfig(step_timeout_s=None, retry_s=5.0))
    busy_agent(world, timeout=1.0)
    world.beats("w1", 0.0, 20.0, [agent_beat("a1", 2)])
    [verdict] = verdicts(world.due(4.0))
    world.state.completed(verdict, False, EPOCH0 + 4.0)
    assert verdicts(world.due(8.0)) == []
    assert [v.cause for v in verdicts(world.due(9.5))] == ["stalled"]


def test_a_delivered_verdict_counts_its_latency_once() -> None:
    world = World()
    busy_agent(world, timeout=1.0)
    world.beats("w1", 0.0, 5.0, [agent_beat("a1", 2)])
    world.settle(4.0)
    assert world.observer.verdicts == [("stalled", pytest.approx(3.9))]


def test_nothing_is_decided_before_the_partition_is_rebuilt() -> None:
    world = World(live=False)
    busy_agent(world, timeout=1.0)
    world.beats("w1", 0.0, 20.0, [agent_beat("a1", 2)])
    assert world.due(20.0) == []
    world.state.set_live(P)
    assert [v.cause for v in verdicts(world.due(20.0))] == ["stalled"]


def test_a_rebalancing_runtime_group_defers_the_worker_verdict() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 4.0, [agent_beat("a1", 1)])
    world.state.observe_group(GroupState(False, frozenset({"w1", "w2"}), EPOCH0 + 9.0))
    assert world.due(9.0) == []
    world.state.observe_group(GroupState(True, frozenset({"w1", "w2"}), EPOCH0 + 10.0))
    assert world.due(12.0) == []  # settled only a silence after the group is stable
    world.beat("w1", 12.5, [agent_beat("a1", 1)])  # back: it was a pause, not a loss
    world.state.observe_group(GroupState(True, frozenset({"w1", "w2"}), EPOCH0 + 16.0))
    assert world.due(15.0) == []


def test_a_lost_worker_is_reported_once_and_its_agents_tracked_until_taken_over() -> None:
    world = World(HealthConfig(step_timeout_s=None, resurrection_deadline_s=20.0))
    world.start("a1", 0.0)
    world.start("a2", 0.0)
    world.beats("w1", 0.0, 4.0, [agent_beat("a1", 1), agent_beat("a2", 1)])
    world.state.observe_group(GroupState(True, frozenset({"w1"}), EPOCH0 + 8.0))
    [lost] = alerts(world.settle(8.0))
    assert lost.kind == "worker_lost"
    assert lost.details["agents"] == "a1,a2"
    assert world.due(9.0) == []  # once
    world.beats("w2", 14.0, 30.0, [agent_beat("a1", 4, incarnation=2)])
    world.state.observe_group(GroupState(True, frozenset({"w2"}), EPOCH0 + 30.0))
    late = alerts(world.settle(30.0))
    assert [a.stream_id for a in late] == ["a2"]  # a1 was taken over, a2 never came back
    assert late[0].kind == "resurrection_late"


def test_a_worker_that_said_it_was_stopping_is_not_lost() -> None:
    world = World()
    world.start("a1", 0.0)
    world.beats("w1", 0.0, 4.0, [agent_beat("a1", 1)])
    world.beat("w1", 4.5, [agent_beat("a1", 1, status="stopping")])
    assert world.due(30.0) == []
