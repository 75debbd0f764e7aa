"""Rebuilding hosted agents from the log: snapshot first, then the events after it.

One ``AgentReplay`` per stream is fed the stream's events as a scan meets them (a whole
partition at assignment, one agent's key on a single resurrection). It verifies the chain
from the snapshot's head, folds what comes after the snapshot into the lifecycle and the
agent, and keeps the open tasks' events — from the first open task's assignment on, which
may lie before the snapshot — for their journals, so no completed step runs twice.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ares.agents.agent import Agent
from ares.agents.errors import AgentConfigError, UnknownAgentKindError
from ares.agents.registry import AgentRegistry
from ares.events.kafka.snapshots import Snapshot
from ares.events.model import Event, StreamHead
from ares.lifecycle import events as ev
from ares.lifecycle.recovery import RecoveryRecord, state_hash
from ares.lifecycle.state import AgentLifecycle
from ares.lifecycle.verification import Feed, StreamVerifier, VerificationFailure
from ares.runtime_manager.hosted import HostedAgent


def snapshot_state(hosted: HostedAgent) -> dict[str, Any]:
    """What a snapshot of an agent holds: its lifecycle, its own state, where its open
    tasks' journal starts in the log."""
    return {
        "lifecycle": hosted.lifecycle.to_json(),
        "agent": hosted.agent.snapshot() if hosted.agent is not None else {},
        "journal_from": hosted.journal_from_offset,
    }


def replay_start(snapshot: Snapshot | None) -> int | None:
    """Where a replay of the stream must start: its open journals, else after the snapshot;
    None: the log start."""
    if snapshot is None:
        return None
    journal_from = snapshot.state.get("journal_from")
    return int(journal_from) if journal_from is not None else snapshot.events_offset


class _Freezes:
    """How many partition replays run now (only the outermost one freezes and thaws)."""

    active = 0


@contextmanager
def old_heap_frozen() -> Iterator[None]:
    """While a partition is replayed, full garbage collections skip the objects that
    existed before it (``gc.freeze``), and walk only what the replay allocates.

    A scan keeps short-lived objects alive across collections (fetched records, events
    queued per stream, open journals); promoted, they trigger full collections, and each
    walks the whole heap of a process that hosts many agents (bench/recovery.py measures
    it; docs/development.md has the figure). The frozen objects are collectable again when
    the replay ends (``gc.unfreeze``).
    """
    if _Freezes.active == 0:
        gc.freeze()
    _Freezes.active += 1
    try:
        yield
    finally:
        _Freezes.active -= 1
        if _Freezes.active == 0:
            gc.unfreeze()


# Events of a stream held before they are verified and folded as one run: enough that the
# per-run costs (a lifecycle Folder and its freeze) vanish per event, few enough that the
# events held for all streams stay young for the garbage collector (with 512, the ~51,000
# events held over 100 streams made each full collection of a replay ~3x dearer).
REPLAY_RUN = 64


@dataclass(slots=True)
class AgentReplay:
    stream_id: str
    partition: int
    snapshot: Snapshot | None
    started: float = field(default_factory=time.monotonic)
    load_s: float = 0.0
    verifier: StreamVerifier = field(init=False)
    hosted: HostedAgent = field(init=False)
    # Verified events after the snapshot, for the agent's apply once it is built.
    pending: list[Event] = field(default_factory=list)
    # Given, ``pending`` is kept only while the stream's kind is unknown or its agent class
    # overrides ``apply``: a partition's events are not all held until the agents are built
    # (memory, and the garbage collector's full passes over them).
    registry: AgentRegistry | None = None
    let_go: bool = False  # events were dropped from ``pending``: see ``build_agent``
    replayed: int = 0
    # After a verification failure nothing more is folded, but a quarantine recorded by an
    # earlier recovery still shows the stream was dealt with.
    quarantined_after_failure: bool = False
    # Fed and not yet verified: ``feed`` only queues, ``settle`` verifies and folds.
    _events: list[Event] = field(default_factory=list)
    _offsets: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.verifier = StreamVerifier(self.stream_id, self.snapshot)
        lifecycle = AgentLifecycle(self.stream_id)
        if self.snapshot is not None and "lifecycle" in self.snapshot.state:
            lifecycle = AgentLifecycle.from_json(self.snapshot.state["lifecycle"])
        self.hosted = HostedAgent(self.stream_id, self.partition, lifecycle)
        if self.snapshot is not None:
            self.hosted.last_hash = self.snapshot.hash
            self.hosted.last_offset = self.snapshot.events_offset - 1
            journal_from = self.snapshot.state.get("journal_from")
            self.hosted.journal_from_offset = None if journal_from is None else int(journal_from)

    def feed(self, offset: int, event: Event) -> None:
        """The stream's next event in log order; its verdict comes with the run it is in
        (``settle`` or ``finish`` the last one): ``hosted`` is complete only after them."""
        self._events.append(event)
        self._offsets.append(offset)
        if len(self._events) >= REPLAY_RUN:
            self.settle()

    def settle(self) -> None:
        """Verify the queued run (one ``verify_chain`` for it) and act on each verdict as
        an event-by-event replay would: covered by the snapshot, the event only joins the
        open journals; verified, it is folded; after a failure nothing is."""
        events, offsets = self._events, self._offsets
        if not events:
            return
        self._events, self._offsets = [], []
        verdicts = self.verifier.feed_many(events)
        hosted, count = self.hosted, len(events)
        # Runs of one verdict (SKIP*, APPLY*, FAILED*, in that order); all APPLY mostly.
        i = count if verdicts.count(Feed.APPLY) == count else 0
        if i:
            self._apply(events, offsets)
        while i < count:
            verdict, j = verdicts[i], i + 1
            while j < count and verdicts[j] is verdict:
                j += 1
            run = events[i:j]
            if verdict is Feed.APPLY:
                self._apply(run, offsets[i:j])
            elif verdict is Feed.SKIP:
                # Covered by the snapshot: only the open tasks' journals still need it.
                journal_from = hosted.journal_from_offset
                if journal_from is not None:
                    hosted.open_events.extend(
                        e for e, o in zip(run, offsets[i:j], strict=True) if o >= journal_from)
            elif any(e.type == ev.AGENT_QUARANTINED for e in run):
                self.quarantined_after_failure = True
            i = j

    def _apply(self, events: list[Event], offsets: list[int]) -> None:
        """Fold verified events into the hosted agent, and keep them for its ``apply``."""
        self.hosted.replay(events, offsets)
        if self._keeps_events():
            self.pending.extend(events)
        else:
            self.pending.clear()  # held while the kind was unknown
            self.let_go = True
        self.replayed += len(events)

    def _keeps_events(self) -> bool:
        """Whether the agent to be built may need the events for its ``apply``."""
        kind = self.hosted.lifecycle.kind
        if self.registry is None or kind not in self.registry:
            return True
        factory = self.registry.factory(kind)
        return not (isinstance(factory, type) and issubclass(factory, Agent)
                    and factory.apply is Agent.apply)

    def finish(self, head: StreamHead | None) -> VerificationFailure | None:
        self.settle()
        return self.verifier.finish(head)

    def build_agent(self, registry: AgentRegistry) -> bool:
        """Create the agent instance: restore the snapshot, apply the events after it.

        False (nothing built) when the agent's ``apply`` needs events this replay let go
        (its kind changed after they were dropped, or the instance overrides ``apply``):
        the caller replays the stream again without a ``registry``.
        """
        self.settle()
        lifecycle = self.hosted.lifecycle
        agent = registry.create(lifecycle.kind, self.stream_id, lifecycle.config)
        if self.snapshot is not None and self.snapshot.state.get("agent"):
            agent.restore(self.snapshot.state["agent"])
        apply = agent.apply
        # Skip the calls when apply is the SDK's default, which does nothing.
        if getattr(apply, "__func__", None) is not Agent.apply:
            if self.let_go:
                return False
            for event in self.pending:
                apply(event)
        self.pending.clear()
        self.hosted.agent = agent
        self.hosted.events_since_snapshot = self.replayed
        return True

    def record(self, replay_done: float, discarded: str | None = None) -> RecoveryRecord:
        """The recovery record as of the replay (call after ``finish``): ``verified`` from
        the checks the verifier ran; ``resume_s`` unknown until ``RecoveryRecord.resumed``
        where the agent resumes."""
        self.settle()
        hosted = self.hosted
        try:
            digest: str | None = state_hash(snapshot_state(hosted))
        except ValueError:
            digest = None
        checks = self.verifier.checks
        return RecoveryRecord(
            stream_id=self.stream_id,
            snapshot_version=None if self.snapshot is None else self.snapshot.version,
            snapshot_offset=None if self.snapshot is None else self.snapshot.events_offset,
            events_replayed=self.replayed, load_s=self.load_s,
            replay_s=max(replay_done - self.started - self.load_s, 0.0), resume_s=None,
            verified=RecoveryRecord.checked(checks, self.verifier.failure is not None),
            resulting_version=hosted.lifecycle.version,
            state_hash=digest, snapshot_discarded=discarded, checks=checks,
        )


def state_hash_at(stream_id: str, events: Sequence[tuple[int, Event]], version: int,
                  registry: AgentRegistry) -> tuple[str | None, str]:
    """The state hash a recovery record of ``stream_id`` at ``version`` must hold, rebuilt
    from the stream's events 1..``version`` (with their log offsets) by the fold recovery
    uses, without any snapshot (``ares audit verify --state``); (None, why) when the log
    cannot give it."""
    upto = [(o, e) for o, e in events if e.version <= version]
    if not upto or upto[0][1].version != 1:
        return None, "the stream's first versions are not in the log (trimmed)"
    replay = AgentReplay(stream_id, 0, None)  # the partition plays no part in the state
    for offset, event in upto:
        replay.feed(offset, event)
    failure = replay.finish(None)
    if failure is not None:
        return None, f"versions 1..{version} do not verify: {failure.kind}: {failure.detail}"
    if replay.hosted.lifecycle.version != version:
        return None, (f"the log holds versions up to {replay.hosted.lifecycle.version}, "
                      f"the record says {version}")
    try:
        replay.build_agent(registry)
    except (UnknownAgentKindError, AgentConfigError) as exc:
        return None, f"agent kind not rebuildable here (give --agents): {exc}"
    try:
        return state_hash(snapshot_state(replay.hosted)), ""
    except ValueError as exc:
        return None, f"state not hashable: {exc}"
