"""Rebalances charged to worker faults, read from the group coordinator's log lines."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ares.chaos.faults import FaultKind
from ares.chaos.rebalances import (
    SETTLE_CAP_S,
    GroupEvent,
    Strike,
    charge,
    merge,
    parse_group_log,
    per_kind,
    read_group_log,
    storms,
    whole_again,
)

GROUP = "chaos-1.ares-runtime"
PREFIX = "INFO [GroupCoordinator id=1 topic=__consumer_offsets partition=5] "
SUFFIX = " (org.apache.kafka.coordinator.group.GroupMetadataManager)"


def at(second: int) -> float:
    return datetime(2026, 12, 7, 19, 0, second).timestamp()


def line(second: int, text: str) -> str:
    return f"[2026-12-07 19:00:{second:02d},000] {PREFIX}{text}{SUFFIX}\n"


def stabilized(second: int, generation: int, members: int, group: str = GROUP) -> str:
    return line(second, f"Stabilized group {group} generation {generation} with {members} "
                        "members.")


def preparing(second: int, generation: int) -> str:
    return line(second, f"Preparing to rebalance group {GROUP} in state PreparingRebalance "
                        f"with old generation {generation} (reason: removing member x on "
                        "LeaveGroup).")


def joining(second: int, generation: int, instance: str) -> str:
    return line(second, f"Preparing to rebalance group {GROUP} in state PreparingRebalance "
                        f"with old generation {generation} (reason: Adding new member "
                        f"{instance}-6893bfd5-7eda-4c1e-9d2a-0f3b2c1d4e5f with group instance "
                        f"id {instance}; client reason: not provided).")


def test_the_coordinator_lines_of_the_group_are_its_rebalances() -> None:
    lines = [preparing(1, 4), stabilized(2, 5, 2), stabilized(3, 9, 1, group="other"),
             line(4, f"Group {GROUP} with generation 5 is now empty."),
             line(5, f"Assignment received from leader x for group {GROUP} for generation 5."),
             joining(6, 5, "chaos-rm-2")]
    assert parse_group_log(lines, GROUP) == [
        GroupEvent(at(1), None), GroupEvent(at(2), 5, 2), GroupEvent(at(4), None),
        GroupEvent(at(6), None, joining="chaos-rm-2")]


def test_a_generation_two_brokers_logged_counts_once(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(stabilized(2, 5, 3) + stabilized(9, 6, 3))
    (tmp_path / "b.log").write_text(stabilized(7, 6, 3) + stabilized(8, 7, 3))
    assert read_group_log([tmp_path / "a.log", tmp_path / "b.log", tmp_path / "gone.log"],
                          GROUP) == [GroupEvent(at(2), 5, 3), GroupEvent(at(7), 6, 3),
                                     GroupEvent(at(8), 7, 3)]


def test_the_group_is_whole_again_when_stable_with_every_member() -> None:
    events = merge([GroupEvent(at(1), 5, 3), GroupEvent(at(3), None),
                    GroupEvent(at(4), 6, 2), GroupEvent(at(9), None), GroupEvent(at(10), 7, 3)])
    assert whole_again(events, at(2), 3) == at(2)  # nothing moved: whole at the heal
    assert whole_again(events, at(5), 3) == at(10)  # one member short until generation 7
    assert whole_again(events[:3], at(5), 3) == at(5) + SETTLE_CAP_S  # never again: capped


def strike(index: int, kind: FaultKind, target: str, start: int, heal: int) -> Strike:
    return Strike(index, kind, target, at(start), at(heal))


def test_a_paused_worker_fenced_and_back_costs_two_rebalances() -> None:
    events = merge([GroupEvent(at(0), 5, 3), GroupEvent(at(2), None), GroupEvent(at(2), 6, 2),
                    GroupEvent(at(8), None, joining="chaos-rm-2"), GroupEvent(at(9), 7, 3)])
    pause = strike(1, FaultKind.SIGSTOP, "runtime-manager-2", 1, 7)
    other = strike(2, FaultKind.SIGKILL, "health-checker", 1, 3)  # not a worker fault
    [charged] = charge([pause, other], events, members=3,
                       instances={"runtime-manager-2": "chaos-rm-2"})
    assert (charged.strike, charged.rebalances, charged.budget) == (pause, 2, 2)
    assert charged.victim_joins == 1  # fenced, and back once
    assert storms([charged]) == []
    assert per_kind([charged]) == {"sigstop": {"faults": 1, "rebalances": 2, "max": 2,
                                               "max_victim_joins": 1}}


def test_a_worker_removed_and_back_again_and_again_is_a_storm() -> None:
    generations = [GroupEvent(at(s), g, 2 if g % 2 else 3)
                   for g, s in enumerate(range(2, 12, 2), start=6)]
    back = [GroupEvent(at(s), None, joining="chaos-rm-1") for s in (3, 7)]
    slow = strike(3, FaultKind.NET_LATENCY, "runtime-manager-1", 1, 9)
    [charged] = charge([slow], merge([GroupEvent(at(0), 5, 3), *generations, *back]),
                       members=3, instances={"runtime-manager-1": "chaos-rm-1"})
    assert (charged.rebalances, charged.budget, charged.victim_joins) == (5, 2, 2)
    assert storms([charged]) == [
        "rebalance_storm: fault #3 net_latency on runtime-manager-1: 5 rebalances from its "
        "start until the group was whole again, more than the 2 the faults overlapping it "
        "may cost"]


def test_overlapping_faults_share_the_window_and_widen_the_budget() -> None:
    events = merge([GroupEvent(at(0), 5, 3), *(GroupEvent(at(s), g, 3) for g, s in
                                               ((6, 3), (7, 4), (8, 5), (9, 6)))])
    faults = [strike(1, FaultKind.SIGKILL, "runtime-manager-1", 2, 3),
              strike(2, FaultKind.SIGSTOP, "runtime-manager-2", 2, 5),
              strike(3, FaultKind.BROKER_SLOW, "node-1", 4, 6)]
    charges = charge(faults, events, members=3,
                     instances={"runtime-manager-1": "chaos-rm-1"})
    # A slow broker slows every worker: it may fence and readmit each of the three.
    assert [(c.rebalances, c.budget) for c in charges] == [(1, 4), (3, 10), (3, 8)]
    assert [c.victim_joins for c in charges] == [0, None, None]  # rm-2: no id given
    assert storms(charges) == []
    assert per_kind(charges)["broker_slow"] == {"faults": 1, "rebalances": 3, "max": 3,
                                                "max_victim_joins": 0}


def test_back_to_back_faults_on_one_worker_share_its_joins_without_counting_twice() -> None:
    events = merge([GroupEvent(at(0), 5, 3), GroupEvent(at(3), None, joining="chaos-rm-3"),
                    GroupEvent(at(4), 6, 2), GroupEvent(at(7), None, joining="chaos-rm-3"),
                    GroupEvent(at(8), 7, 2), GroupEvent(at(30), 8, 3)])
    pause = strike(1, FaultKind.SIGSTOP, "runtime-manager-3", 1, 5)
    cut = strike(2, FaultKind.NET_PARTITION, "runtime-manager-3", 5, 9)
    charges = charge([pause, cut], events, members=3,
                     instances={"runtime-manager-3": "chaos-rm-3"})
    # The pause's window runs until the group is whole (at 30 s) and takes in the second
    # fault's join; each join counts for the fault on the worker when it came.
    assert [c.victim_joins for c in charges] == [1, 1]
    assert [c.rebalances for c in charges] == [3, 2]
