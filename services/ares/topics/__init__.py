"""Kafka topics of ares-mesh: topics.yaml is the single source of their names and configs.

The services ask here for topic names and the co-partitioned partition count::

    plan = load_topics(settings)
    producer.send(plan.name(EVENTS), key=agent_id, ...)
    owner_of = murmur2(agent_id) % plan.partitions

``ares topics apply`` makes the cluster match the plan; ``ares topics list`` shows drift.
"""

from ares.topics.apply import RefusedChangeError, apply_topics, delete_topics, inspect_topics
from ares.topics.diff import ChangeSet, Difference, TopicChange, TopicState, plan_changes
from ares.topics.loader import checkout_topics_file, load_topics, packaged_topics_file
from ares.topics.spec import (
    ALERTS,
    BUDGET_LIMITS,
    BUDGETS,
    COMMANDS,
    DLQ,
    EVENTS,
    HEARTBEATS,
    PER_AGENT_TOPICS,
    REPLIES,
    REQUIRED_TOPICS,
    SCHEDULES,
    SNAPSHOTS,
    SUMMARIES,
    TOKENS,
    USAGE,
    TopicOverrides,
    TopicPlan,
    TopicSpec,
    build_plan,
)

__all__ = [
    "ALERTS",
    "BUDGETS",
    "BUDGET_LIMITS",
    "COMMANDS",
    "DLQ",
    "EVENTS",
    "HEARTBEATS",
    "PER_AGENT_TOPICS",
    "REPLIES",
    "REQUIRED_TOPICS",
    "SCHEDULES",
    "SNAPSHOTS",
    "SUMMARIES",
    "TOKENS",
    "USAGE",
    "ChangeSet",
    "Difference",
    "RefusedChangeError",
    "TopicChange",
    "TopicOverrides",
    "TopicPlan",
    "TopicSpec",
    "TopicState",
    "apply_topics",
    "build_plan",
    "checkout_topics_file",
    "delete_topics",
    "inspect_topics",
    "load_topics",
    "packaged_topics_file",
    "plan_changes",
]
