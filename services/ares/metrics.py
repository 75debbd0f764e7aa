"""Prometheus metrics of the runtime (served on /metrics by every `ares run` service)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS_APPENDED = Counter(
    "ares_events_appended_total", "Events committed to ares.events by this process",
    ["partition"])
TRANSACTIONS = Counter(
    "ares_transactions_total", "Transactions of the partition writers, by outcome",
    ["outcome"])
APPEND_LATENCY = Histogram(
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
