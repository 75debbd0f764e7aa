"""Desired (TopicPlan) against actual (TopicState): differences, and what apply may do. Pure.

Decisions live here, not in the admin adapter, so every refusal is unit-tested:
  * a partition count never decreases (Kafka cannot), and never changes on a co-partitioned
    topic without ``allow_repartition``: it moves agents to other partitions, i.e. to other
    owners, while their history stays where it was;
  * adding partitions to any topic changes key → partition mapping, which is said loudly;
  * the replication factor is never changed (that is a partition reassignment) and never
    exceeds the brokers of the cluster;
  * config overrides that topics.yaml does not set are kept unless ``prune``: the partition
    reassignment tool keeps its replication throttles there.
Any refusal stops the whole apply before the first write, so the co-partitioned topics are
never left half-changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ares.topics.configs import same_value
from ares.topics.spec import TopicPlan, TopicSpec

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TopicState:
    """One topic as the cluster has it."""

    name: str
    partitions: int
    replication_factor: int
    overrides: Mapping[str, str]  # topic-level config overrides (not broker defaults)


@dataclass(frozen=True, slots=True)
class Difference:
    """One way the cluster differs from topics.yaml; None means "not set"."""

    field: str  # "partitions", "replication_factor" or a config name
    desired: str | None
    actual: str | None


@dataclass(frozen=True, slots=True)
class Notice:
    """A refusal or warning: a short reason per topic, and the explanation said once."""

    reason: str
    explanation: str


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What apply does to one topic, and why it may not."""

    spec: TopicSpec
    actual: TopicState | None
    differences: tuple[Difference, ...] = ()
    unmanaged: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    create: bool = False
    config_changes: tuple[Difference, ...] = ()  # desired None: override removed (prune)
    new_partitions: int | None = None  # the new total, when partitions are added
    refusals: tuple[Notice, ...] = ()
    warnings: tuple[Notice, ...] = ()
    prune: bool = False

    @property
    def unchanged(self) -> bool:
        return not (self.create or self.config_changes or self.new_partitions or self.refusals)

    @property
    def status(self) -> str:
        """missing, drift or ok: what ``ares topics list`` prints."""
        if self.actual is None:
            return "missing"
        return "drift" if self.differences else "ok"

    def override_set(self) -> dict[str, str]:
        """The complete override set to send: legacy AlterConfigs (the only one aiokafka 0.14
        offers) replaces every override of the topic, so the kept ones must be re-sent."""
        kept = {} if self.prune else dict(self.unmanaged)
        return {**kept, **self.spec.configs}


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """The changes of every topic of a plan, in plan order."""

    plan: TopicPlan
    changes: tuple[TopicChange, ...]
    brokers: int

    @property
    def refusals(self) -> tuple[str, ...]:
        """"<topic>: <reason>" per refusal, then each explanation once."""
        return _lines([(c.spec.name, n) for c in self.changes for n in c.refusals])

    @property
    def warnings(self) -> tuple[str, ...]:
        return _lines([(c.spec.name, n) for c in self.changes for n in c.warnings])


def _lines(notices: list[tuple[str, Notice]]) -> tuple[str, ...]:
    """Five co-partitioned topics refused for one reason share one explanation."""
    explanations = dict.fromkeys(n.explanation for _, n in notices)
    return (*(f"{name}: {n.reason}" for name, n in notices), *explanations)


def compare(spec: TopicSpec, actual: TopicState) -> tuple[Difference, ...]:
    """Where an existing topic differs from its spec (configs against its own overrides)."""
    found: list[Difference] = []
    if actual.partitions != spec.partitions:
        found.append(Difference("partitions", str(spec.partitions), str(actual.partitions)))
    if actual.replication_factor != spec.replication_factor:
        found.append(Difference("replication_factor", str(spec.replication_factor),
                                str(actual.replication_factor)))
    for key, desired in spec.configs.items():
        current = actual.overrides.get(key)
        if current is None or not same_value(key, desired, current):
            found.append(Difference(key, desired, current))
    return tuple(found)


def plan_changes(plan: TopicPlan, states: Mapping[str, TopicState | None], *, brokers: int,
                 allow_repartition: bool = False, prune: bool = False) -> ChangeSet:
    """Decide, per topic, what apply does; ``states`` is keyed by cluster name."""
    changes = tuple(
        _change(spec, states.get(spec.name), brokers=brokers,
                allow_repartition=allow_repartition, prune=prune)
        for spec in plan.topics
    )
    return ChangeSet(plan=plan, changes=changes, brokers=brokers)


def _change(spec: TopicSpec, actual: TopicState | None, *, brokers: int,
            allow_repartition: bool, prune: bool) -> TopicChange:
    if actual is None:
        too_few = spec.replication_factor > brokers
        return TopicChange(spec=spec, actual=None, create=True, refusals=(Notice(
            f"replication factor {spec.replication_factor} exceeds the {brokers} broker(s) "
            "of the cluster",
            "A replica needs a broker of its own: lower replication_factor for this "
            "environment in topics.yaml, or set ARES_TOPIC_REPLICATION_FACTOR."),
        ) if too_few else ())
    differences = compare(spec, actual)
    unmanaged = {k: v for k, v in actual.overrides.items() if k not in spec.configs}
    config_changes = tuple(d for d in differences
                           if d.field not in ("partitions", "replication_factor"))
    if prune:
        config_changes += tuple(Difference(k, None, v) for k, v in sorted(unmanaged.items()))
    refusals: list[Notice] = []
    warnings: list[Notice] = []
    new_partitions = _partition_decision(spec, actual, allow_repartition, refusals, warnings)
    if actual.replication_factor != spec.replication_factor:
        refusals.append(Notice(
            f"replication factor is {actual.replication_factor}, topics.yaml wants "
            f"{spec.replication_factor}",
            "apply does not move replicas: change the replication factor with "
            "kafka-reassign-partitions.sh, or align topics.yaml with the cluster."))
    return TopicChange(spec=spec, actual=actual, differences=differences,
                       unmanaged=MappingProxyType(unmanaged), config_changes=config_changes,
                       new_partitions=new_partitions, refusals=tuple(refusals),
                       warnings=tuple(warnings), prune=prune)


def _partition_decision(spec: TopicSpec, actual: TopicState, allow_repartition: bool,
                        refusals: list[Notice], warnings: list[Notice]) -> int | None:
    have, want = actual.partitions, spec.partitions
    if want == have:
        return None
    if want < have:
        refusals.append(Notice(
            f"partition count cannot decrease ({have} → {want})",
            "Kafka cannot remove partitions: keep the current count in topics.yaml, or delete "
            "and recreate the topic (its data is lost)."))
        return None
    remapping = ("Adding partitions changes the key → partition mapping: records of one key "
                 "written before and after land in different partitions, so per-key order "
                 "does not hold across the change.")
    if not spec.copartitioned:
        warnings.append(Notice(f"partitions {have} → {want}", remapping))
        return want
    moved = (f"{remapping} On the co-partitioned topics it also moves agents to other "
             "owners, away from the partitions that hold their events and snapshots")
    if not allow_repartition:
        refusals.append(Notice(
            f"adding partitions ({have} → {want}) to a co-partitioned topic",
            f"{moved}: stop every runtime manager, then rerun with --allow-repartition."))
        return None
    warnings.append(Notice(
        f"partitions {have} → {want} (co-partitioned, --allow-repartition)",
        f"{moved}: the history of a moved agent stays in its old partition, which "
        "recovery (a partition scan) no longer reads for it."))
    return want
