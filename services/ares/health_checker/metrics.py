"""The health checker's Prometheus metrics (served on /metrics by ``ares.probes``).

* ``ares_health_agents{state}``: agents of the checker's partitions by state (alive, dead,
  quarantined, stopped, other).
* ``ares_health_detection_latency_seconds{cause}``: from the last sign of life (silence)
  or of progress (stall) to the verdict; it includes the silence or step timeout itself.
* ``ares_health_verdicts_total{cause}``: death verdicts delivered to owners.
* ``ares_health_resurrections_total{outcome}``: confirmed, late, failed, abandoned.
* ``ares_health_resurrection_seconds``: from a death to its confirmed resurrection.
* ``ares_health_alerts_total{kind}``: alerts emitted on ``ares.alerts``.
* ``ares_health_webhook_posts_total{result}``: delivered, failed (given up), rejected.
* ``ares_health_partitions_live``: partitions whose state is rebuilt (decisions allowed).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ares.health_checker.model import Outcome

_LATENCY_BUCKETS = (0.25, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 7.5, 10, 20, 30, 60, 120, 600)
_RECOVERY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class HealthMetrics:
    """Implements ``HealthObserver`` on a Prometheus registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.agents = Gauge("ares_health_agents", "Agents by state", ["state"],
                            registry=registry)
        self.latency = Histogram(
            "ares_health_detection_latency_seconds",
            "Last sign of life or progress to death verdict", ["cause"],
            buckets=_LATENCY_BUCKETS, registry=registry)
        self.verdicts = Counter("ares_health_verdicts", "Death verdicts sent to owners",
                                ["cause"], registry=registry)
        self.resurrections = Counter("ares_health_resurrections",
                                     "Resurrections after deaths, by outcome", ["outcome"],
                                     registry=registry)
        self.recovery = Histogram("ares_health_resurrection_seconds",
                                  "Death to confirmed resurrection",
                                  buckets=_RECOVERY_BUCKETS, registry=registry)
        self.alerts = Counter("ares_health_alerts", "Alerts emitted", ["kind"],
                              registry=registry)
        self.webhook = Counter("ares_health_webhook_posts", "Alert webhook posts",
                               ["result"], registry=registry)
        self.removals = Counter("ares_health_members_removed",
                                "Lost workers removed from the runtime's consumer group",
                                ["result"], registry=registry)
        self.live_partitions = Gauge("ares_health_partitions_live",
                                     "Partitions with a rebuilt state", registry=registry)
        for outcome in Outcome:
            self.resurrections.labels(outcome.value)

    # -- HealthObserver ------------------------------------------------------------------

    def verdict(self, cause: str, latency_s: float) -> None:
        self.verdicts.labels(cause).inc()
        self.latency.labels(cause).observe(latency_s)

    def resurrection(self, outcome: Outcome, seconds: float | None) -> None:
        self.resurrections.labels(outcome.value).inc()
        if seconds is not None:
            self.recovery.observe(seconds)

    def alert(self, kind: str) -> None:
        self.alerts.labels(kind).inc()

    # -- gauges --------------------------------------------------------------------------

    def set_counts(self, counts: Mapping[str, int], live_partitions: int) -> None:
        for state, count in counts.items():
            self.agents.labels(state).set(count)
        self.live_partitions.set(live_partitions)
