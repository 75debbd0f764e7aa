"""One Kafka principal per service, each with exactly the ACLs its code needs.

``SERVICES`` declares, per service, what its code does on Kafka: the topics it reads and
writes, its consumer groups, its transactional ids, whether it deletes records or manages
topics. ``plan_acls`` resolves that table against topics.yaml (the topic names with their
prefix, every topic for the topics hook) into ALLOW bindings, one per operation;
``ares acls plan`` prints them and ``ares acls apply`` creates them
(``ares.security.admin``).

Kafka's implications keep the table short: Read, Write, Delete and Alter each imply
Describe (on the same resource), AlterConfigs implies DescribeConfigs, and since Kafka 3.0
Write on any topic implies IdempotentWrite on the cluster (``legacy_idempotence`` adds it
explicitly for older brokers).

Nobody but the runtime managers may write ``ares.events`` and ``ares.snapshots``; external
systems (``producer``) may write ``ares.commands`` only. Unit tests tie the names below to
the code that uses them (groups, transactional ids) and keep that rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ares.errors import ConfigError
from ares.topics.spec import (
    ALERTS,
    BUDGET_LIMITS,
    BUDGETS,
    COMMANDS,
    DLQ,
    EVENTS,
    HEARTBEATS,
    REPLIES,
    SCHEDULES,
    SNAPSHOTS,
    SUMMARIES,
    TOKENS,
    USAGE,
    TopicPlan,
)

# Resource types, pattern types and operations: the names of Kafka's Java enums
# (ResourceType, PatternType, AclOperation), as kafka-acls.sh and the Admin API spell them.
TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER = "TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
READ, WRITE, DESCRIBE, DELETE = "READ", "WRITE", "DESCRIBE", "DELETE"
CREATE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS = ("CREATE", "ALTER", "DESCRIBE_CONFIGS",
                                                  "ALTER_CONFIGS")
IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name
EVERY_TOPIC = "*"  # in a Need: every topic of topics.yaml, each by its literal name

RESOURCE_TYPES = (TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER)
OPERATIONS = (READ, WRITE, DESCRIBE, DELETE, CREATE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS,
              IDEMPOTENT_WRITE)
_TEMPLATE = re.compile(r"\{([^{}]+)\}")


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """One ALLOW rule: ``principal`` may ``operation`` on a resource, from any host."""

    principal: str
    resource_type: str  # TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER
    name: str
    operation: str  # READ, WRITE, DESCRIBE, ...
    pattern: str = LITERAL  # or PREFIXED

    def arg(self) -> str:
        """``PRINCIPAL|TYPE|NAME|PATTERN|OPERATION`` (devenv's AclTool.java)."""
        return "|".join((self.principal, self.resource_type, self.name, self.pattern,
                         self.operation))


@dataclass(frozen=True, slots=True)
class Need:
    """What a service's code does to one resource, and why.

    ``name``: for a TOPIC its logical name in topics.yaml (``EVERY_TOPIC``: all of them);
    otherwise a template in which ``{prefix}`` is the topic prefix and ``{ares.events}``
    (any logical topic) that topic's cluster name. ``feature``: needed only with that
    optional feature on (``FEATURES``)."""

    resource_type: str
    name: str
    operations: tuple[str, ...]
    why: str
    pattern: str = LITERAL
    feature: str | None = None


@dataclass(frozen=True, slots=True)
class ServiceNeeds:
    name: str  # the key: `ares acls plan --service <name>`, the chart's secret
    runs: str  # what runs under the principal
    needs: tuple[Need, ...]
    idempotent: bool = True  # has an idempotent or transactional producer

    @property
    def default_user(self) -> str:
        return f"ares-{self.name}"


# Optional features: a service gets the rows marked with one only when it is asked for.
FEATURES: dict[str, str] = {
    "api-writes": "the replay reader's API and dashboard send commands (operator tokens in "
                  "ARES_API_TOKENS); without it they only read",
    "arena": "the arena's Crash worker (ARES_ARENA=1): the replay reader reads the runtime "
             "group's members (with api-writes)",
    "webhook": "the health checker forwards alerts to ARES_ALERT_WEBHOOK_URL in a consumer "
               "group of its own",
}


def _topic(logical: str, *ops: str, why: str, feature: str | None = None) -> Need:
    return Need(TOPIC, logical, ops, why, feature=feature)


def _client(feature: str | None = None, who: str = "") -> tuple[Need, ...]:
    """``ares.Client``: commands out, replies in (an assigned partition, no group)."""
    return (_topic(COMMANDS, WRITE, why=f"{who}commands to the owners (ares.Client)",
                   feature=feature),
            _topic(REPLIES, READ, why="the owners' replies (an assigned partition, no group)",
                   feature=feature))


def _dead_letters(service: str, what: str) -> tuple[Need, ...]:
    """``ares.events.kafka.dlq.DeadLetters``: a transactional writer per service that reads
    ``ares.dlq`` back (the letters already written), so a record is dead-lettered once."""
    return (_topic(DLQ, READ, WRITE, why=f"dead letters ({what}), each once: the letters "
                                         "already there are read back"),
            Need(TRANSACTIONAL_ID, f"{{prefix}}ares-dlq.{service}", (WRITE,),
                 "its dead-letter writer (the same id for every instance: one writes at a "
                 "time)"))



SERVICES: dict[str, ServiceNeeds] = {s.name: s for s in (
    ServiceNeeds("runtime-manager", "ares run runtime-manager", (
        Need(GROUP, "{prefix}ares-runtime", (READ,),
             "the owners' group on ares.commands (offsets commit inside the transactions)"),
        _topic(COMMANDS, READ, WRITE,
               why="commands in; a misrouted command forwarded, a delegated task, a "
                   "schedule's tick out"),
        _topic(EVENTS, READ, WRITE, why="recovery scans (no group); the fenced appends"),
        _topic(SNAPSHOTS, READ, WRITE,
               why="snapshot-first recovery; snapshots and partition checkpoints"),
        _topic(SCHEDULES, READ, WRITE,
               why="the owned partitions' schedules at takeover; their ticks and changes"),
        _topic(REPLIES, WRITE, why="replies to callers"),
        *_dead_letters("runtime-manager", "rejected commands, in their transaction; "
                                          "unreadable snapshots, schedules, budgets"),
        _topic(HEARTBEATS, WRITE, why="batched heartbeats of agents and the worker"),
        _topic(ALERTS, WRITE, why="quarantines, integrity failures, in-doubt tool calls"),
        _topic(TOKENS, WRITE, why="LLM token deltas of streamed calls"),
        _topic(USAGE, WRITE, why="one usage record per LLM answer"),
        _topic(BUDGETS, READ, why="the fleet budgets, before every LLM call (no group)"),
        Need(TRANSACTIONAL_ID, "{ares.events}.writer-", (WRITE,),
             "one fenced transactional writer per owned partition (.writer- and its number)",
             PREFIXED),
    )),
    ServiceNeeds("health-checker", "ares run health-checker", (
        Need(GROUP, "{prefix}ares-health-checker", (READ,),
             "its group on ares.heartbeats and ares.events (instances split partitions)"),
        _topic(HEARTBEATS, READ, why="liveness in"),
        _topic(EVENTS, READ, why="lifecycle in"),
        _topic(ALERTS, READ, WRITE,
               why="its own alerts of the lookback window (no group); alerts out"),
        *_client(who="agent.declare_dead, agent.quarantine: "),
        # Read, not Describe: removing a lost worker is a LeaveGroup on its behalf, which
        # Kafka authorizes as Read on the group (KIP-231's table); on by default.
        Need(GROUP, "{prefix}ares-runtime", (READ,),
             "whether the owners' group is rebalancing, and its members; a lost worker "
             "removed from it (LeaveGroup: --remove-lost-workers)"),
        *_dead_letters("health-checker", "unreadable heartbeats"),
        Need(GROUP, "{prefix}ares-alert-webhook", (READ,),
             "the webhook forwarder's group on ares.alerts", feature="webhook"),
    )),
    ServiceNeeds("compactor", "ares run compactor, ares compaction run", (
        _topic(EVENTS, READ, DELETE,
               why="scans (no group); DeleteRecords below what is snapshotted and summarised"),
        _topic(SNAPSHOTS, READ, why="which snapshot holds a trim point back"),
        _topic(SUMMARIES, READ, WRITE, why="summaries and __trim__ records"),
        Need(TRANSACTIONAL_ID, "{ares.summaries}.compactor", (WRITE,),
             "its transactional summary writer (one compactor per environment)"),
        *_client(who="snapshot.request before a trim: "),
        Need(GROUP, "{prefix}ares-runtime", (DESCRIBE,),
             "no trim while the owners' group rebalances"),
        *_dead_letters("compactor", "unreadable summaries"),
    )),
    ServiceNeeds("replay-reader", "ares run replay-reader (API, dashboard, projections)", (
        _topic(EVENTS, READ, why="projections, replays, audits, live streams (no group)"),
        _topic(SNAPSHOTS, READ, why="replays from a snapshot"),
        _topic(SUMMARIES, READ, why="streams whose log was trimmed"),
        _topic(ALERTS, READ, why="the alerts pages and stream"),
        _topic(HEARTBEATS, READ, why="the workers page"),
        _topic(TOKENS, READ, why="live token streams"),
        *_dead_letters("replay-reader", "unreadable events and alerts"),
        *_client("api-writes", who="the API's writes: "),
        Need(GROUP, "{prefix}ares-runtime", (DESCRIBE,),
             "a worker's partitions, for its crash", feature="arena"),
    )),
    ServiceNeeds("budget-keeper", "ares run budget-keeper", (
        Need(GROUP, "{prefix}ares-budget-keeper", (READ,),
             "its group on ares.usage (tenants shared out by partition)"),
        _topic(USAGE, READ, why="LLM usage in"),
        _topic(BUDGET_LIMITS, READ, why="the limits (no group)"),
        _topic(BUDGETS, WRITE, why="each tenant's budget state out"),
        *_dead_letters("budget-keeper", "records that are not usage records or limits"),
    )),
    ServiceNeeds("operator", "the ares CLI of an operator (not `ares compaction run`, "
                             "`ares topics`, `ares acls`)", (
        *_client(who="every command that changes something: "),
        _topic(EVENTS, READ, why="ares events, agents status, audit, replay (no group)"),
        _topic(SNAPSHOTS, READ, why="ares replay, agents status"),
        _topic(SUMMARIES, READ, why="streams whose log was trimmed; compaction status"),
        _topic(ALERTS, READ, why="ares alerts tail"),
        _topic(DLQ, READ, why="ares events dump --topic ares.dlq"),
        _topic(SCHEDULES, READ, why="ares schedules list"),
        _topic(TOKENS, READ, why="ares agents tail --tokens"),
        _topic(HEARTBEATS, READ, why="ares events dump --topic ares.heartbeats"),
        _topic(BUDGETS, READ, why="ares budgets status"),
        _topic(BUDGET_LIMITS, READ, WRITE, why="ares budgets set; status"),
        Need(GROUP, "{prefix}ares-runtime", (DESCRIBE,), "ares compaction status"),
    )),
    ServiceNeeds("producer", "an external system sending commands (ares.Client, or any "
                             "Kafka producer)", _client()),
    ServiceNeeds("topics", "ares topics apply | list (the chart's hook Job)", (
        Need(TOPIC, EVERY_TOPIC, (CREATE, ALTER, ALTER_CONFIGS),
             "create the topics, set their configs, add partitions (--allow-repartition)"),
    ), idempotent=False),
)}


def default_principal(service: str) -> str:
    return f"User:{SERVICES[service].default_user}"


@dataclass(frozen=True, slots=True)
class Row:
    """One resource of one service, resolved: its operations and why."""

    service: str
    principal: str
    resource_type: str
    name: str
    pattern: str
    operations: tuple[str, ...]
    why: str

    def acls(self) -> list[Acl]:
        return [Acl(self.principal, self.resource_type, self.name, op, self.pattern)
                for op in self.operations]

    def to_json(self) -> dict[str, object]:
        return {"service": self.service, "principal": self.principal,
                "resource_type": self.resource_type, "name": self.name,
                "pattern": self.pattern, "operations": list(self.operations), "why": self.why}


@dataclass(frozen=True, slots=True)
class AclPlan:
    rows: tuple[Row, ...]
    principals: Mapping[str, str]  # service -> principal
    features: frozenset[str]
    prefix: str

    @property
    def acls(self) -> list[Acl]:
        """Every binding, once, sorted."""
        return sorted({acl for row in self.rows for acl in row.acls()})

    def of(self, service: str) -> list[Acl]:
        return sorted({acl for row in self.rows if row.service == service
                       for acl in row.acls()})


def plan_acls(plan: TopicPlan, *, services: Iterable[str] | None = None,
              principals: Mapping[str, str] | None = None,
              features: Iterable[str] = (), legacy_idempotence: bool = False) -> AclPlan:
    """The ACLs of ``services`` (default: all) for the topics of ``plan``.

    ``principals`` maps a service to its principal (``User:<name>``; default
    ``User:ares-<service>``); ``features`` turns on optional rows (``FEATURES``);
    ``legacy_idempotence`` adds Cluster IdempotentWrite for the services with idempotent
    producers (brokers before Kafka 3.0)."""
    chosen = list(SERVICES) if services is None else list(dict.fromkeys(services))
    unknown = [s for s in chosen if s not in SERVICES]
    unknown += [s for s in (principals or {}) if s not in SERVICES]
    if unknown:
        raise ConfigError(f"unknown service(s) {', '.join(sorted(set(unknown)))}: "
                          f"one of {', '.join(SERVICES)}")
    wanted = frozenset(features)
    if wanted - FEATURES.keys():
        raise ConfigError(f"unknown feature(s) {', '.join(sorted(wanted - FEATURES.keys()))}: "
                          f"one of {', '.join(FEATURES)}")
    names = {s: (principals or {}).get(s) or default_principal(s) for s in chosen}
    for service, principal in names.items():
        if not re.fullmatch(r"User:[^\s]+", principal):
            raise ConfigError(f"the principal of {service} must be User:<name> "
                              f"(got {principal!r})")
    rows: list[Row] = []
    for service in chosen:
        spec = SERVICES[service]
        for need in spec.needs:
            if need.feature is not None and need.feature not in wanted:
                continue
            for name in _resolve(need, plan):
                rows.append(Row(service, names[service], need.resource_type, name,
                                need.pattern, need.operations, need.why))
        if legacy_idempotence and spec.idempotent:
            rows.append(Row(service, names[service], CLUSTER, CLUSTER_NAME, LITERAL,
                            (IDEMPOTENT_WRITE,), "idempotent producers (brokers before 3.0)"))
    return AclPlan(tuple(rows), names, wanted, plan.prefix)


def _resolve(need: Need, plan: TopicPlan) -> list[str]:
    if need.resource_type == TOPIC:
        if need.name == EVERY_TOPIC:
            return [spec.name for spec in plan.topics]
        return [plan.name(need.name)]
    if need.resource_type == CLUSTER:
        return [CLUSTER_NAME]
    return [_TEMPLATE.sub(lambda m: plan.prefix if m[1] == "prefix" else plan.name(m[1]),
                          need.name)]


def writers(acl_plan: AclPlan, topic: str) -> set[str]:
    """The services that may write ``topic`` (a cluster name) under ``acl_plan``."""
    return {row.service for row in acl_plan.rows
            if row.resource_type == TOPIC and row.name == topic and WRITE in row.operations}


# -- renderings -------------------------------------------------------------------------------

_KINDS = {TOPIC: "Topic", GROUP: "Group", TRANSACTIONAL_ID: "TransactionalId",
          CLUSTER: "Cluster"}
_KAFKA_ACLS_FLAG = {TOPIC: "--topic", GROUP: "--group",
                    TRANSACTIONAL_ID: "--transactional-id", CLUSTER: "--cluster"}


def _camel(operation: str) -> str:
    return "".join(word.capitalize() for word in operation.split("_"))


def _feature_of(row: Row) -> str | None:
    return next((n.feature for n in SERVICES[row.service].needs
                 if n.feature is not None and n.why == row.why), None)


def markdown(acl_plan: AclPlan) -> str:
    """The plan as the Markdown table of docs/operations.md ("ACLs each service needs")."""
    lines = ["| service | resource | operations | why |", "| --- | --- | --- | --- |"]
    for service, principal in acl_plan.principals.items():
        rows = [r for r in acl_plan.rows if r.service == service]
        every = {r.name for r in rows if r.resource_type == TOPIC} if any(
            n.name == EVERY_TOPIC for n in SERVICES[service].needs) else set()
        first = True
        for row in rows:
            if every and row.resource_type == TOPIC:
                if row.name != min(every):
                    continue
                resource = f"every Topic of `topics.yaml` ({len(every)})"
            else:
                resource = f"{_KINDS[row.resource_type]} `{row.name}`" + (
                    " (prefixed)" if row.pattern == PREFIXED else "")
            feature = _feature_of(row)
            why = row.why.replace("|", "\\|") + (f" (only `--with {feature}`)" if feature else "")
            who = f"{service} `{principal}`" if first else ""
            lines.append(f"| {who} | {resource} | "
                         f"{', '.join(_camel(op) for op in row.operations)} | {why} |")
            first = False
    return "\n".join(lines) + "\n"


def kafka_acls_commands(acl_plan: AclPlan) -> str:
    """The plan as ``kafka-acls.sh`` commands, for clusters whose ACLs are set by hand."""
    lines = ['acl() { kafka-acls.sh --bootstrap-server "$KAFKA" '
             '--command-config admin.properties --add "$@"; }']
    for row in acl_plan.rows:
        target = (_KAFKA_ACLS_FLAG[row.resource_type] if row.resource_type == CLUSTER
                  else f"{_KAFKA_ACLS_FLAG[row.resource_type]} '{row.name}'")
        pattern = " --resource-pattern-type prefixed" if row.pattern == PREFIXED else ""
        ops = " ".join(f"--operation {_camel(op)}" for op in row.operations)
        lines.append(f"acl --allow-principal '{row.principal}' {target}{pattern} {ops}")
    return "\n".join(lines) + "\n"
