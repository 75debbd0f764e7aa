"""``ReplaySession``: a stream replayed step by step, like a flight recorder.

A step is one event as the log holds it; step ``n`` is the ``n``-th event of the stream
(version ``n`` when the stream is intact and untrimmed). After each step the session has the
folded state (``ares.replay_reader.fold``) and the chain's verdict so far: every event is
checked as it is folded (``StreamVerifier``: versions, ``prev_hash``, content hash), so a
replay of a broken stream says so at the step where it breaks and never pretends.

Events are read in pages from an ``EventSource`` and kept in a bounded LRU of pages; going
back re-folds from the start (folds are pure and cheap; a re-read only happens for evicted
pages), so memory stays bounded whatever the stream's length.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import takewhile
from typing import Any

from ares.agents import records as r
from ares.agents.ledger import token_ledger
from ares.agents.registry import AgentRegistry
from ares.errors import AresError
from ares.events.model import Event
from ares.events.ports import EventSource, SummaryAnchor, SummarySource
from ares.lifecycle import state as lc
from ares.lifecycle.recovery import SnapshotInfo
from ares.lifecycle.verification import Feed, StreamVerifier, VerificationFailure
from ares.replay_reader.fold import FoldedState, StateFolder
from ares.replay_reader.source import NoSummaries, anchor_for

DEFAULT_PAGE_SIZE = 1000
DEFAULT_CACHED_PAGES = 64
_LEDGER_TYPES = frozenset({r.LLM_CALL, r.TASK_RESUMED})


class NoSuchStreamError(AresError):
    """The stream has no events in the log."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} has no events")
        self.stream_id = stream_id


@dataclass(frozen=True, slots=True)
class ReplayStep:
    step: int  # 1-based position in the stream as the log holds it
    event: Event
    state: FoldedState
    failure: VerificationFailure | None  # the first integrity failure at or before it

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "version": self.event.version, "event": self.event.to_json(),
                "state": self.state.to_json(), "integrity": failure_json(self.failure)}


def failure_json(failure: VerificationFailure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {"stream_id": failure.stream_id, "version": failure.version, "kind": failure.kind,
            "detail": failure.detail}


@dataclass(slots=True)
class ReplaySummary:
    stream_id: str
    total_steps: int = 0
    first_version: int = 0
    last_version: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    agents: set[str] = field(default_factory=set)
    workers: set[str] = field(default_factory=set)
    incarnations: int = 0
    modules: Counter[str] = field(default_factory=Counter)
    types: Counter[str] = field(default_factory=Counter)
    tasks: set[str] = field(default_factory=set)
    tokens: dict[str, Any] = field(default_factory=dict)
    failure: VerificationFailure | None = None
    summarised: SummaryAnchor | None = None  # trimmed history, when the compactor trimmed

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id, "total_steps": self.total_steps,
            "first_version": self.first_version, "last_version": self.last_version,
            "started_at": _iso(self.started_at), "ended_at": _iso(self.ended_at),
            "duration_s": self.duration_s, "agents": sorted(self.agents),
            "workers": sorted(self.workers), "incarnations": self.incarnations,
            "modules": dict(self.modules.most_common()),
            "types": dict(self.types.most_common()), "tasks": len(self.tasks),
            "tokens": self.tokens, "intact": self.failure is None,
            "integrity": failure_json(self.failure),
            "summarised": None if self.summarised is None else self.summarised.to_json(),
        }


class ReplaySession:
    """Step through one stream. ``await ReplaySession.open(source, stream_id)``."""

    def __init__(self, source: EventSource, stream_id: str, *,
                 registry: AgentRegistry | None = None,
                 summaries: SummarySource | None = None,
                 page_size: int = DEFAULT_PAGE_SIZE,
                 cached_pages: int = DEFAULT_CACHED_PAGES) -> None:
        if page_size < 1 or cached_pages < 1:
            raise ValueError("page_size and cached_pages must be >= 1")
        self.source = source
        self.stream_id = stream_id
        self.registry = registry
        self._summaries = summaries or NoSummaries()
        self._page_size = page_size
        self._cached_pages = cached_pages
        self._pages: OrderedDict[int, list[Event]] = OrderedDict()
        self._starts: list[int] = [1]  # from_version of each page, learnt page by page
        self._total: int | None = None  # steps in the stream, once the last page was read
        self.head = 0
        self.anchor: SummaryAnchor | None = None
        self.position = 0
        self._folder = StateFolder(stream_id, registry)
        self._verifier = StreamVerifier(stream_id)
        self._checked = 0  # steps verified so far
        self._failure: VerificationFailure | None = None
        self._failure_step: int | None = None
        self._current: Event | None = None

    @classmethod
    async def open(cls, source: EventSource, stream_id: str, **options: Any) -> ReplaySession:
        session = cls(source, stream_id, **options)
        await session._load()
        return session

    async def _load(self) -> None:
        first = await self.source.read(self.stream_id, 1, 1)
        if not first:
            raise NoSuchStreamError(self.stream_id)
        self._starts = [first[0].version]
        self.head = max(await self.source.head(self.stream_id), first[0].version)
        if first[0].version > 1:
            self.anchor = anchor_for(await self._summaries.summaries(self.stream_id), first[0])
        self._verifier = self._new_verifier()
        self.reset()

    def _new_verifier(self) -> StreamVerifier:
        anchor = self.anchor
        return StreamVerifier(self.stream_id, None if anchor is None else SnapshotInfo(
            self.stream_id, anchor.to_version, anchor.anchor_hash, 0))

    # -- navigation ------------------------------------------------------------------------

    @property
    def total(self) -> int | None:
        """Number of steps, once known (the last page was read); else None."""
        return self._total

    @property
    def expected_total(self) -> int:
        """Steps of an intact stream: its head version minus the trimmed versions."""
        return self.head - (self._starts[0] - 1)

    @property
    def state(self) -> FoldedState:
        return self._folder.state()

    @property
    def failure(self) -> VerificationFailure | None:
        """The first integrity failure at or before the current step."""
        if self._failure_step is not None and self._failure_step <= self.position:
            return self._failure
        return None

    def reset(self) -> None:
        """Back to before the first step (verdicts already reached are kept)."""
        self.position = 0
        self._current = None
        self._folder = StateFolder(self.stream_id, self.registry)

    async def step(self) -> ReplayStep | None:
        """One event forward; None at the end of the stream (the position stays)."""
        if not await self._advance(self.position + 1):
            return None
        return self._step()

    async def step_to(self, n: int) -> ReplayStep | None:
        """To just after step ``n`` (0: before the first); past the end, to the end.
        None when the position ends up before the first step."""
        if n < 0:
            raise ValueError(f"step {n}: steps count from 0 (before the first event)")
        if n < self.position:
            self.reset()
        await self._advance(n)
        return self.current()

    async def to_version(self, version: int) -> ReplayStep | None:
        """To just after the last event whose version is at most ``version`` (the state
        as of that version); None when no event is."""
        if self._current is not None and self._current.version > version:
            self.reset()
        await self._advance(None, max_version=version)
        return self.current()

    async def back(self) -> ReplayStep | None:
        """One step back (a re-fold from the start); None before the first step."""
        return await self.step_to(max(self.position - 1, 0))

    async def steps(self, to: int | None = None) -> AsyncIterator[ReplayStep]:
        """Every step from the current position on, up to ``to`` (default: the end)."""
        while to is None or self.position < to:
            step = await self.step()
            if step is None:
                return
            yield step

    def current(self) -> ReplayStep | None:
        return self._step() if self.position else None

    async def _advance(self, target: int | None, max_version: int | None = None) -> bool:
        """Fold forward, a page's run at a time, up to step ``target`` or the last event
        of version ``max_version`` at most; whether the position moved."""
        moved = False
        while target is None or self.position < target:
            index, offset = divmod(self.position, self._page_size)
            page = await self._page(index)
            run = [] if page is None else page[offset:]
            if target is not None:
                run = run[:target - self.position]
            if max_version is not None:
                run = list(takewhile(lambda e: e.version <= max_version, run))
                stop = len(run) < len(page or ()) - offset
            else:
                stop = False
            if not run:
                return moved
            await self._verify_to(self.position + len(run))
            self._folder.apply_many(run)
            self.position += len(run)
            self._current = run[-1]
            moved = True
            if stop:
                return moved
        return moved

    async def _verify_to(self, step: int) -> None:
        """Verify the chain up to ``step``, a page's run at a time (one ``verify_chain``
        per intact run). Verdicts are per step and kept across resets."""
        while self._checked < step and self._failure is None:
            index, offset = divmod(self._checked, self._page_size)
            page = await self._page(index)
            run = [] if page is None else page[offset:]
            if not run:
                return
            verdicts = self._verifier.feed_many(run)
            if self._verifier.failure is not None:
                self._failure = self._verifier.failure
                self._failure_step = self._checked + verdicts.index(Feed.FAILED) + 1
            self._checked += len(run)

    def _step(self) -> ReplayStep:
        assert self._current is not None
        return ReplayStep(self.position, self._current, self._folder.state(), self.failure)

    # -- summary ---------------------------------------------------------------------------

    async def summary(self) -> ReplaySummary:
        """Totals over the whole stream (a pass of its own: the position does not move)."""
        result = ReplaySummary(self.stream_id, summarised=self.anchor)
        verifier = self._new_verifier()
        ledger_events: list[Event] = []
        index = 0
        while page := await self._page(index):
            verifier.feed_many(page)
            for event in page:
                _count(result, event)
                if event.type in _LEDGER_TYPES:
                    ledger_events.append(event)
            index += 1
        result.failure = verifier.finish()
        result.tokens = token_ledger(ledger_events).to_json()
        return result

    # -- pages -----------------------------------------------------------------------------

    async def _event(self, step: int) -> Event | None:
        if self._total is not None and step > self._total:
            return None
        index, offset = divmod(step - 1, self._page_size)
        page = await self._page(index)
        return page[offset] if page is not None and offset < len(page) else None

    async def _page(self, index: int) -> list[Event] | None:
        cached = self._pages.get(index)
        if cached is not None:
            self._pages.move_to_end(index)
            return cached
        for earlier in range(len(self._starts), index + 1):  # learn the pages' starts
            if await self._page(earlier - 1) is None or len(self._starts) <= earlier:
                return None
        events = await self.source.read(self.stream_id, self._starts[index], self._page_size)
        if len(events) == self._page_size:
            if len(self._starts) == index + 1:
                self._starts.append(events[-1].version + 1)
        else:
            self._total = index * self._page_size + len(events)
        self._pages[index] = events
        while len(self._pages) > self._cached_pages:
            self._pages.popitem(last=False)
        return events


def _count(result: ReplaySummary, event: Event) -> None:
    if result.total_steps == 0 and result.first_version == 0:
        result.first_version = event.version
        result.started_at = event.timestamp
    result.total_steps += 1
    result.last_version = event.version
    result.ended_at = event.timestamp
    result.agents.add(event.stream_id)
    result.modules[event.module] += 1
    result.types[event.type] += 1
    p = event.payload
    if event.type in (lc.AGENT_STARTED, lc.AGENT_RESURRECTED):
        result.incarnations += 1
        worker = p.get("worker")
        if isinstance(worker, str) and worker:
            result.workers.add(worker)
    elif event.type == lc.TASK_ASSIGNED and isinstance(p.get("task_id"), str):
        result.tasks.add(p["task_id"])


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()
