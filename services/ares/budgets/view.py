"""``KafkaBudgetView``: the runtime manager's copy of ``ares.budgets`` and its gate.

It follows the compacted ``ares.budgets`` from the beginning (every partition assigned,
no group: every runtime needs every tenant) into a dict, and answers ``admit`` from it
without a round trip. It judges each state against its own clock (``windows.current``):
a minute window that has ended no longer counts, so waiters are let through at the
boundary without waiting for the keeper's next record.

It also counts what this runtime spent itself (``note``, fed by ``NotingTelemetry``) and
the keeper's state does not hold yet (answered after the state was computed): an agent
whose own call reached the budget sees it at once, not a keeper round trip later.

Under policy ``wait`` a tenant over its minute budget sleeps until the window ends; over
its day's USD budget it waits in slices (logged), re-checking the view each time, so a
raised limit lets it through. Under ``fail`` both raise ``BudgetExceeded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from ares.budgets.limits import apply_state, assign_all, read_to_end
from ares.budgets.model import MINUTE_S, BudgetState, day_start, minute_start, utc_day
from ares.budgets.windows import assess, current
from ares.config import Settings
from ares.errors import AresError
from ares.events.kafka.dlq import DeadLetters
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer
from ares.llm.telemetry import (
    FAIL,
    POLICIES,
    WAIT,
    BudgetExceeded,
    LlmTelemetry,
    StreamId,
    TokenStream,
    UsageRecord,
)
from ares.tasks import cancel_and_wait, stop_client, wait_for
from ares.topics import BUDGETS, TopicPlan

log = logging.getLogger(__name__)
# A waiter re-checks the view at least this often (a raised limit, a cleared budget).
MAX_SLICE_S = 1.0
DAY_WAIT_LOG_EVERY_S = 60.0
# Past the minute boundary by this much before re-checking (clock rounding).
BOUNDARY_SLACK_S = 0.005
# This runtime's own usage is kept this long: by then the keeper's state holds it.
LOCAL_KEEP_S = 120.0


class KafkaBudgetView:
    """A ``BudgetGate`` over ``ares.budgets``: ``await start()``, ``await stop()``."""

    def __init__(self, settings: Settings, plan: TopicPlan, *,
                 clock: Callable[[], float] = time.time,
                 letters: DeadLetters | None = None) -> None:
        self.settings = settings
        # The runtime managers dead-letter ares.budgets (the runtime's copy is its reader).
        self.letters = letters
        self.topic = plan.name(BUDGETS)
        self.clock = clock
        self.states: dict[str, BudgetState] = {}
        self.loaded = False
        self.waits = 0  # admits that waited (tests, logs)
        self.refusals = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._local: dict[str, list[tuple[float, int, float]]] = {}  # (at, tokens, usd)

    async def start(self) -> None:
        """Load the topic up to its end (bounded by ``request_timeout_s``: a runtime is not
        held back by it), then follow it in the background. A missing topic is a warning:
        every call is admitted until it exists."""
        self._consumer = new_consumer(self.settings, fetch_max_wait_ms=200)
        try:
            await self._consumer.start()
        except KafkaError as exc:
            await stop_client(self._consumer)
            self._consumer = None
            raise translate(exc, "starting the budget view") from exc
        self._task = asyncio.create_task(self._follow(), name="budget-view")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task, ignore_errors=True)
            self._task = None
        if self._consumer is not None:
            await stop_client(self._consumer)
            self._consumer = None

    def note(self, record: UsageRecord) -> None:
        """Usage this runtime just paid for (before the keeper has counted it)."""
        now = self.clock()
        kept = [e for e in self._local.get(record.tenant, ()) if e[0] > now - LOCAL_KEEP_S]
        kept.append((record.at, record.tokens, record.cost_usd))
        self._local[record.tenant] = kept

    def state(self, tenant: str) -> BudgetState | None:
        """The tenant's state as it stands now: ended windows count as empty, and this
        runtime's usage answered after the keeper's state was computed is added (a record
        is produced after its ``at``, so none of those is in the state: no double count)."""
        found = self.states.get(tenant)
        if found is None:  # no limits known: nothing to add up
            return None
        state = current(found, self.clock())
        newer = [e for e in self._local.get(tenant, ()) if e[0] > found.updated_at]
        if not newer or state.limits.unlimited:
            return state
        tokens = state.minute_tokens + sum(t for at, t, _ in newer
                                           if minute_start(at) == state.minute_start)
        usd = state.day_usd + sum(c for at, _, c in newer if utc_day(at) == state.day)
        which, reason = assess(state.limits, state.minute_start, tokens, state.day, usd)
        return BudgetState(tenant=tenant, limits=state.limits,
                           minute_start=state.minute_start, minute_tokens=tokens,
                           day=state.day, day_usd=usd, over=which is not None,
                           reason=reason, updated_at=state.updated_at)

    async def admit(self, tenant: str, policy: str) -> float:
        if policy not in POLICIES:
            raise ValueError(f"budget policy must be one of {', '.join(POLICIES)} "
                             f"(got {policy!r})")
        started = time.monotonic()
        slept = False
        last_log = 0.0
        while True:
            state = self.state(tenant)
            if state is None or not state.over:
                if not slept:
                    return 0.0
                self.waits += 1
                return time.monotonic() - started
            if policy == FAIL:
                self.refusals += 1
                raise BudgetExceeded(tenant, state.reason)
            assert policy == WAIT
            now = self.clock()
            minute_over = (state.limits.tokens_per_minute is not None
                           and state.minute_tokens >= state.limits.tokens_per_minute)
            day_over = (state.limits.usd_per_day is not None
                        and state.day_usd >= state.limits.usd_per_day)
            if day_over:
                until = day_start(now) + 86_400
                if time.monotonic() - last_log >= DAY_WAIT_LOG_EVERY_S:
                    last_log = time.monotonic()
                    log.warning("tenant %r waits for its LLM budget: %s", tenant, state.reason)
            elif minute_over:
                until = minute_start(now) + MINUTE_S + BOUNDARY_SLACK_S
            else:  # over for a reason this view does not know: re-check soon
                until = now + MAX_SLICE_S
            slept = True
            await self._sleep(min(max(until - now, 0.001), MAX_SLICE_S))

    async def _sleep(self, seconds: float) -> None:
        """Sleep, woken early by a change of the view (a new state, a raised limit)."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await wait_for(self._changed.wait(), seconds)

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:  # until the topic exists
            try:
                tps = await assign_all(self._consumer, self.topic)
                break
            except AresError as exc:
                log.warning("budget view: %s; every LLM call is admitted meanwhile", exc)
                await asyncio.sleep(5.0)
            except KafkaError as exc:
                log.warning("budget view: reading %s failed: %s", self.topic, exc)
                await asyncio.sleep(1.0)
        try:
            await read_to_end(self._consumer, tps, self._apply,
                              timeout_s=self.settings.request_timeout_s)
        except (TimeoutError, KafkaError) as exc:
            log.warning("budget view: %s not read to its end at start (%s); following it",
                        self.topic, exc)
        self.loaded = True
        log.info("budget view: %d tenant(s) loaded from %s", len(self.states), self.topic)
        await self._flush()
        while True:
            try:
                batch = await self._consumer.getmany(timeout_ms=500)
            except KafkaError as exc:
                log.warning("budget view: reading %s failed: %s", self.topic, exc)
                await asyncio.sleep(1.0)
                continue
            for records in batch.values():
                for record in records:
                    self._apply(record)
            await self._flush()

    def _apply(self, record: ConsumerRecord) -> None:
        reject = None if self.letters is None else self.letters.reject
        if apply_state(self.states, record, reject) is not None:
            self._changed.set()

    async def _flush(self) -> None:
        if self.letters is not None and self.letters.pending:
            await self.letters.flush()  # kept queued on failure: flushed after the next batch


class NotingTelemetry:
    """The runtime's telemetry, telling ``view`` of every usage record on the way (see
    ``KafkaBudgetView.note``)."""

    def __init__(self, inner: LlmTelemetry, view: KafkaBudgetView) -> None:
        self.inner = inner
        self.view = view

    async def usage(self, record: UsageRecord) -> None:
        self.view.note(record)  # paid as soon as the provider answered
        await self.inner.usage(record)

    async def open_stream(self, stream: StreamId, *, incarnation: int,
                          restarted: bool) -> TokenStream:
        return await self.inner.open_stream(stream, incarnation=incarnation,
                                            restarted=restarted)
