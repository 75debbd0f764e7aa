"""Prometheus metrics of the runtime (served on /metrics by every `ares run` service)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ares.events.wire.foreign import FOREIGN_RECORDS

_go_float: Callable[[float], str] = floatToGoString  # the "le" label's text; untyped upstream


class HotPathHistogram:
    """An unlabelled histogram for a once-per-event path, exposed like ``Histogram``.

    ``prometheus_client``'s ``Histogram.observe`` takes two locks and loops over the
    buckets in Python, on every appended event; this one is a bisection and two additions
    (docs/development.md, "The compiled append path: why each trick"). It takes no lock:
    it is fed and scraped from the event loop's thread only (``/metrics`` is served by the loop,
    ``ares.probes``); the count is derived from the buckets, so ``+Inf`` and ``_count``
    always agree. It has no ``_created`` sample.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry | None = REGISTRY) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: buckets must be distinct and increasing")
        self.name = name
        self.documentation = documentation
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self._sum = 0.0
        if registry is not None:
            # A Collector by its methods, not by inheritance: the native build type-checks
            # this module without site-packages, where Collector is Any (not subclassable).
            registry.register(cast(Collector, self))

    def observe(self, amount: float) -> None:
        # bisect_left: the first bound >= amount, i.e. Prometheus's "le" bucket.
        self._counts[bisect_left(self._bounds, amount)] += 1
        self._sum += amount

    def observe_each(self, amounts: Iterable[float]) -> None:
        """``observe`` every amount: one call for a whole transaction's appends, since each
        call from the compiled partition writer into this interpreted module is a generic
        call."""
        bounds, counts, total = self._bounds, self._counts, self._sum
        for amount in amounts:
            counts[bisect_left(bounds, amount)] += 1
            total += amount  # in order, as observe adds them: the same sum to the last bit
        self._sum = total

    def collect(self) -> Iterator[Metric]:
        cumulative: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*self._bounds, float("inf")), self._counts, strict=True):
            total += count
            cumulative.append((_go_float(bound), total))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=cumulative,
                                    sum_value=self._sum)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)

class ForeignFingerprints:
    """``ares_foreign_fingerprint_total{schema,variant}``: records decoded although their
    header carried the fingerprint another Avro library computes (``events.wire.foreign``),
    read from the codec's tally at each scrape; the codec does not depend on Prometheus."""

    name = "ares_foreign_fingerprint"
    documentation = ("Records whose single-object header carried another Avro library's "
                     "fingerprint (accepted; fix the producer), by schema and variant")

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        if registry is not None:
            registry.register(cast(Collector, self))  # see HotPathHistogram

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=["schema", "variant"])
        for (schema, variant), count in sorted(FOREIGN_RECORDS.items()):
            family.add_metric([schema, variant], count)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=["schema", "variant"])


FOREIGN_FINGERPRINTS = ForeignFingerprints()
EVENTS_APPENDED = Counter(
    "ares_events_appended_total", "Events committed to ares.events by this process",
    ["partition"])
TRANSACTIONS = Counter(
    "ares_transactions_total", "Transactions of the partition writers, by outcome",
    ["outcome"])
# Observed once per appended event (ares.events.kafka.partition_writer).
APPEND_LATENCY = HotPathHistogram(
    "ares_append_latency_seconds", "From an append's submission to its commit",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
DEAD_LETTERS = Counter(
    "ares_dead_letters_total", "Records sent to ares.dlq, by reason", ["reason"])
COMMANDS = Counter(
    "ares_commands_total", "Commands handled by the owner, by type and reply status",
    ["type", "status"])
RESURRECTIONS = Counter(
    "ares_resurrections_total", "Agents brought back, by the cause of their death", ["cause"])
QUARANTINES = Counter("ares_quarantines_total", "Agents quarantined, by reason", ["reason"])
RECOVERY_SECONDS = Histogram(
    "ares_recovery_phase_seconds", "Agent recovery, by phase (load, replay, resume)",
    ["phase"], buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
AGENTS = Gauge("ares_agents", "Agents hosted by this process, by status", ["status"])
OWNED_PARTITIONS = Gauge("ares_owned_partitions", "Partitions of ares.events this process owns")
WAITING_PARTITIONS = Gauge(
    "ares_waiting_partitions",
    "Partitions assigned to this process that it could not take over (e.g. a hanging "
    "transaction waiting for an operator's abort): their commands wait")
HANGING_TRANSACTIONS = Counter(
    "ares_hanging_transactions_completed_total",
    "Hanging transactions a takeover completed with the coordinator's own decision",
    ["decision"])
CONSUMER_LAG = Gauge(
    "ares_command_lag", "Commands not yet handled, per partition of ares.commands",
    ["partition"])
SCHEDULE_TICKS = Counter(
    "ares_schedule_ticks_total",
    "Schedule ticks, by outcome: fired (on time), caught_up (one fired for missed ones, "
    "catch-up once), skipped (missed ones, catch-up skip), failed (transaction failed, retried)",
    ["outcome"])
SCHEDULE_TICK_LATENESS = Histogram(
    "ares_schedule_tick_lateness_seconds",
    "From a planned tick's time to the commit of its task.assign (catch-ups not counted)",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
SCHEDULES = Gauge("ares_schedules", "Schedules of the partitions this process owns, by state",
                  ["state"])
