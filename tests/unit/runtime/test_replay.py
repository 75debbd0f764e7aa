"""Recovery's replay of a stream: run by run, exactly what an event-by-event replay gives."""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from ares.agents.agent import Agent
from ares.agents.registry import AgentRegistry
from ares.events.kafka.snapshots import Snapshot
from ares.events.model import Event, StreamHead
from ares.lifecycle.state import from_events
from ares.lifecycle.verification import Feed, StreamVerifier, VerificationFailure
from ares.runtime_manager import replay as replay_module
from ares.runtime_manager.hosted import HostedAgent
from ares.runtime_manager.replay import AgentReplay
from tests.unit.runtime.streams import Stream

KIND = "test.recorder"


class Recorder(Agent):
    """Keeps the versions it was applied, to see that every replayed event reached it."""

    kind = KIND

    def configure(self, config: Mapping[str, Any]) -> None:
        self.applied: list[int] = []

    def apply(self, event: Event) -> None:
        self.applied.append(event.version)


class Quiet(Agent):
    kind = "test.quiet"


def busy_stream(stream_id: str = "a") -> Stream:
    """Tasks opened and closed (two open at once, a retriable failure, a paused tool call
    resolved), a death and a resurrection, a snapshot marker: every journal rule."""
    s = Stream(stream_id)
    s.add("agent.started", {"kind": KIND, "config_json": "{}", "incarnation": 1,
                            "worker": "w1"})
    at = 1.0
    for n in range(6):
        s.add("task.assigned", {"task_id": f"t{n}", "input_json": "{}"}, at_s=at)
        if n % 2:
            s.add("task.assigned", {"task_id": f"u{n}", "input_json": "{}"}, at_s=at)
        s.add("step.completed", {"step_name": f"s{n}", "result_json": "1"}, at_s=at)
        if n == 2:
            s.add("tool.call.resolved", {"call_id": "c", "as": "done"}, at_s=at)
            s.add("agent.dead", {"cause": "crashed"}, at_s=at)
            s.add("agent.resurrecting", {"incarnation": 2, "parent_incarnation": 1, "attempt": 1},
                  at_s=at)
            s.add("agent.resurrected", {"incarnation": 2, "parent_incarnation": 1, "worker": "w2"},
                  at_s=at)
        if n == 3:
            s.add("task.failed", {"task_id": f"t{n}", "retriable": True}, at_s=at)
        else:
            s.add("task.completed", {"task_id": f"t{n}"}, at_s=at)
        if n % 2:
            s.add("agent.log", {"level": "info", "message": "between"}, at_s=at)
            s.add("task.completed", {"task_id": f"u{n}"}, at_s=at)
        s.add("snapshot.taken", {"snapshot_version": s.head.version, "snapshot_hash": s.head.hash,
                                "events_offset": 0}, at_s=at)
        at += 1
    s.add("task.assigned", {"task_id": "open", "input_json": "{}"}, at_s=at)
    s.add("step.completed", {"step_name": "open", "result_json": "2"}, at_s=at)
    return s


@dataclass
class Reference:
    """The event-by-event replay that ``AgentReplay`` batches (its former ``feed``)."""

    hosted: HostedAgent
    verifier: StreamVerifier
    applied: list[Event] = field(default_factory=list)
    quarantined_after_failure: bool = False

    def feed(self, offset: int, event: Event) -> None:
        verdict = self.verifier.feed(event)
        if verdict is Feed.SKIP:
            journal_from = self.hosted.journal_from_offset
            if journal_from is not None and offset >= journal_from:
                self.hosted.open_events.append(event)
        elif verdict is Feed.APPLY:
            self.hosted.on_event(event, offset, apply=False)
            self.applied.append(event)
        elif event.type == "agent.quarantined":
            self.quarantined_after_failure = True


def snapshot_at(s: Stream, version: int, offsets: Sequence[int]) -> Snapshot:
    """A snapshot after ``version`` whose journal starts at its first open task."""
    covered = s.events[:version]
    hosted = AgentReplay(s.stream_id, 0, None)
    for offset, event in zip(offsets, covered, strict=False):
        hosted.feed(offset, event)
    hosted.finish(None)
    state = {"lifecycle": from_events(covered).to_json(), "agent": {},
             "journal_from": hosted.hosted.journal_from_offset}
    return Snapshot(s.stream_id, version, covered[-1].hash, offsets[version - 1] + 1, KIND,
                    state)


def replay_both(events: Sequence[Event], offsets: Sequence[int], snapshot: Snapshot | None,
                head: StreamHead | None) -> tuple[AgentReplay, Reference,
                                                  VerificationFailure | None,
                                                  VerificationFailure | None]:
    ours = AgentReplay("a", 0, snapshot)
    reference = Reference(AgentReplay("a", 0, snapshot).hosted, StreamVerifier("a", snapshot))
    # As if a task had paused on an in-doubt call: a tool.call.resolved replayed ends it.
    ours.hosted.paused_task = reference.hosted.paused_task = "t2"
    for offset, event in zip(offsets, events, strict=True):
        ours.feed(offset, event)
        reference.feed(offset, event)
    return ours, reference, ours.finish(head), reference.verifier.finish(head)


def state_of(hosted: HostedAgent) -> dict[str, Any]:
    assert hosted.beat is not None
    return {"lifecycle": hosted.lifecycle, "open_events": list(hosted.open_events),
            "journal_from": hosted.journal_from_offset, "last_offset": hosted.last_offset,
            "last_hash": hosted.last_hash, "since_snapshot": hosted.events_since_snapshot,
            "paused_task": hosted.paused_task, "woken": hosted.wakeup.is_set(),
            "beat": (hosted.beat.version, hosted.beat.incarnation, hosted.beat.status)}


def assert_same(ours: AgentReplay, reference: Reference) -> None:
    assert state_of(ours.hosted) == state_of(reference.hosted)
    assert ours.pending == reference.applied
    assert ours.replayed == len(reference.applied)
    assert ours.quarantined_after_failure == reference.quarantined_after_failure


@pytest.fixture(params=[1, 3, 7, 512], ids=lambda n: f"run{n}")
def run_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(replay_module, "REPLAY_RUN", request.param)
    return int(request.param)


def interleaved_offsets(count: int) -> list[int]:
    """Offsets of one stream among others (gaps between its events)."""
    return [100 + 3 * i for i in range(count)]


@pytest.mark.parametrize("snapshot_version", [None, 5, 9, 20, 37])
def test_runs_replay_exactly_as_event_by_event(run_size: int,
                                               snapshot_version: int | None) -> None:
    s = busy_stream()
    offsets = interleaved_offsets(len(s.events))
    snapshot = None if snapshot_version is None else snapshot_at(s, snapshot_version, offsets)
    start = 0 if snapshot is None else next(
        i for i, o in enumerate(offsets) if o >= (replay_module.replay_start(snapshot) or 0))
    ours, reference, failure, expected = replay_both(s.events[start:], offsets[start:],
                                                     snapshot, s.head)
    assert failure is None
    assert expected is None
    assert_same(ours, reference)
    assert ours.hosted.lifecycle == from_events(s.events)
    last = s.events[-1]  # no lifecycle handler: its time is taken when the fold ends
    assert ours.hosted.lifecycle.last_event_time == last.timestamp.timestamp()
    assert ours.hosted.lifecycle.last_event_type == last.type
    assert [e.version for e in ours.hosted.open_events] == [
        e.version for e in s.events if e.version >= s.head.version - 1]


def test_a_tampered_event_stops_the_fold_where_event_by_event_does(run_size: int) -> None:
    s = busy_stream()
    s.add("agent.quarantined", {"reason": "integrity", "deaths": 1}, at_s=99)
    events = list(s.events)
    victim = events[12]
    events[12] = replace(victim, payload={**victim.payload, "result_json": "3"})
    offsets = interleaved_offsets(len(events))
    ours, reference, failure, expected = replay_both(events, offsets, None, s.head)
    assert failure == expected
    assert failure is not None
    assert (failure.version, failure.kind) == (13, "hash_mismatch")
    assert ours.hosted.lifecycle.version == 12
    assert ours.quarantined_after_failure
    assert_same(ours, reference)


def test_a_snapshot_the_log_contradicts_is_reported_as_event_by_event(run_size: int) -> None:
    s = busy_stream()
    offsets = interleaved_offsets(len(s.events))
    good = snapshot_at(s, 9, offsets)
    bad = replace(good, hash="f" * 64)
    ours, reference, failure, expected = replay_both(s.events, offsets, bad, s.head)
    assert failure == expected
    assert failure is not None
    assert failure.discard_snapshot
    assert_same(ours, reference)


def test_the_agent_is_applied_every_replayed_event() -> None:
    s = busy_stream()
    offsets = interleaved_offsets(len(s.events))
    registry = AgentRegistry([Recorder, Quiet])
    replay = AgentReplay("a", 0, snapshot_at(s, 20, offsets))
    for offset, event in zip(offsets[20:], s.events[20:], strict=True):
        replay.feed(offset, event)
    assert replay.finish(s.head) is None
    replay.build_agent(registry)
    agent = replay.hosted.agent
    assert isinstance(agent, Recorder)
    assert agent.applied == list(range(21, s.head.version + 1))
    assert replay.pending == []
    assert replay.hosted.events_since_snapshot == replay.replayed == s.head.version - 20


def test_an_agent_with_the_default_apply_is_built_all_the_same() -> None:
    s = Stream("q")
    s.add("agent.started", {"kind": "test.quiet", "incarnation": 1})
    s.add("task.assigned", {"task_id": "t", "input_json": "{}"})
    replay = AgentReplay("q", 0, None)
    for offset, event in enumerate(s.events):
        replay.feed(offset, event)
    assert replay.finish(s.head) is None
    replay.build_agent(AgentRegistry([Recorder, Quiet]))
    assert isinstance(replay.hosted.agent, Quiet)
    assert replay.hosted.lifecycle.current_task is not None
    assert replay.hosted.journal_from_offset == 1


def fed(stream: Stream, registry: AgentRegistry | None, snapshot: Snapshot | None = None,
        first: int = 0) -> AgentReplay:
    replay = AgentReplay(stream.stream_id, 0, snapshot, registry=registry)
    for offset, event in enumerate(stream.events[first:], start=first):
        replay.feed(offset, event)
    assert replay.finish(stream.head) is None
    return replay


def test_with_a_registry_events_are_let_go_when_the_kind_ignores_them(run_size: int) -> None:
    s = Stream("q")
    s.add("agent.started", {"kind": "test.quiet", "incarnation": 1})
    for n in range(9):
        s.add("step.completed", {"step_name": f"s{n}"})
    registry = AgentRegistry([Recorder, Quiet])
    replay = fed(s, registry)
    assert replay.pending == []
    assert replay.let_go
    assert replay.build_agent(registry)
    assert isinstance(replay.hosted.agent, Quiet)
    assert replay.hosted.lifecycle == fed(s, None).hosted.lifecycle
    assert replay.hosted.events_since_snapshot == replay.replayed == 10


def test_with_a_registry_an_agent_that_applies_events_still_gets_every_one(
        run_size: int) -> None:
    s = busy_stream()
    offsets = interleaved_offsets(len(s.events))
    registry = AgentRegistry([Recorder, Quiet])
    replay = AgentReplay("a", 0, None, registry=registry)
    for offset, event in zip(offsets, s.events, strict=True):
        replay.feed(offset, event)
    assert replay.finish(s.head) is None
    assert not replay.let_go
    assert replay.build_agent(registry)
    assert isinstance(replay.hosted.agent, Recorder)
    assert replay.hosted.agent.applied == list(range(1, s.head.version + 1))


def test_events_let_go_before_the_kind_changed_ask_for_a_second_read() -> None:
    s = Stream("k")
    s.add("agent.started", {"kind": "test.quiet", "incarnation": 1})
    s.add("step.completed", {"step_name": "s"})
    s.add("agent.stopped", {"reason": "requested"})
    s.add("agent.started", {"kind": KIND, "incarnation": 2})
    registry = AgentRegistry([Recorder, Quiet])
    replay = AgentReplay("k", 0, None, registry=registry)
    for offset, event in enumerate(s.events[:2]):
        replay.feed(offset, event)
    replay.finish(None)  # settles: the quiet kind's events are let go
    for offset, event in enumerate(s.events[2:], start=2):
        replay.feed(offset, event)
    assert replay.finish(s.head) is None
    assert replay.let_go
    assert not replay.build_agent(registry)
    assert replay.hosted.agent is None
    again = fed(s, None)  # what the host does then: read the stream again, keep everything
    assert again.build_agent(registry)
    assert isinstance(again.hosted.agent, Recorder)
    assert again.hosted.agent.applied == [1, 2, 3, 4]


def test_an_instance_that_overrides_apply_is_never_short_of_events() -> None:
    seen: list[int] = []

    def build(agent_id: str, config: Mapping[str, Any]) -> Agent:
        agent = Quiet(agent_id, config)
        agent.apply = lambda event: seen.append(event.version)  # type: ignore[method-assign]
        return agent

    registry = AgentRegistry()
    registry.register("test.factory", build)
    s = Stream("f")
    s.add("agent.started", {"kind": "test.factory", "incarnation": 1})
    s.add("step.completed", {"step_name": "s"})
    replay = fed(s, registry)
    assert not replay.let_go  # a factory, not a class: its apply is not known before
    assert replay.build_agent(registry)
    assert seen == [1, 2]


class Sneaky(Quiet):
    """Its class keeps the default apply, its instances do not."""

    kind = "test.sneaky"

    def configure(self, config: Mapping[str, Any]) -> None:
        self.seen: list[int] = []
        self.apply = lambda event: self.seen.append(event.version)  # type: ignore[method-assign]


def test_an_instance_apply_the_class_does_not_show_asks_for_a_second_read() -> None:
    s = Stream("s")
    s.add("agent.started", {"kind": "test.sneaky", "incarnation": 1})
    s.add("step.completed", {"step_name": "s"})
    registry = AgentRegistry([Sneaky])
    replay = fed(s, registry)
    assert replay.let_go
    assert not replay.build_agent(registry)
    again = fed(s, None)
    assert again.build_agent(registry)
    assert isinstance(again.hosted.agent, Sneaky)
    assert again.hosted.agent.seen == [1, 2]


def test_the_old_heap_is_frozen_for_the_outermost_replay_only() -> None:
    assert gc.get_freeze_count() == 0
    with replay_module.old_heap_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with replay_module.old_heap_frozen():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen  # the inner exit does not thaw
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), replay_module.old_heap_frozen():
        raise RuntimeError("a failed replay thaws too")
    assert gc.get_freeze_count() == 0
