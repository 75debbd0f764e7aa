"""Kafka topic config values: the names a broker knows, and one canonical spelling per value.

topics.yaml lets people write ``retention.ms: 7d`` or ``cleanup.policy: [compact, delete]``;
the broker stores and reports ``604800000`` and ``compact,delete``. Diffs compare canonical
strings, so re-applying an unchanged file is a no-op instead of an endless "update".
"""

from __future__ import annotations

import difflib
import re

# Every topic-level config of Apache Kafka 4.x (DescribeConfigs of a topic on 4.4). A typo such
# as `retention.msec` is caught here, in a dry run and in unit tests, not half-way through an
# apply. Vendor configs (Confluent's `confluent.*`) pass through unchecked.
KNOWN_TOPIC_CONFIGS = frozenset({
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "errors.deadletterqueue.group.enable",
    "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.decompressed.message.bytes", "max.message.bytes",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "min.insync.replicas", "preallocate", "remote.copy.lag.bytes", "remote.copy.lag.ms",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes",
    "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable",
})
PASS_THROUGH_PREFIXES = ("confluent.",)
# Configs whose value is a comma-separated set: order does not matter to the broker.
LIST_CONFIGS = frozenset({
    "cleanup.policy", "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
})
CLEANUP_POLICIES = frozenset({"compact", "delete"})

_DURATION_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
                "w": 604_800_000}
_SIZE_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_QUANTITY_RE = re.compile(r"^\s*(-?\d+)\s*([A-Za-z]*)\s*$")

ConfigValue = str | int | float | bool | list[str] | None


def check_config_name(key: str) -> str | None:
    """None when ``key`` is a topic config; otherwise why not, with the closest known name."""
    if key in KNOWN_TOPIC_CONFIGS or key.startswith(PASS_THROUGH_PREFIXES):
        return None
    close = difflib.get_close_matches(key, sorted(KNOWN_TOPIC_CONFIGS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key!r} is not a Kafka topic config{hint}"


def canonical_value(key: str, value: object) -> str:
    """The broker's spelling of ``value``; ValueError (with the reason) when it is invalid."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        if key not in LIST_CONFIGS or not all(isinstance(v, str) for v in value):
            raise ValueError("a list is only allowed for " + ", ".join(sorted(LIST_CONFIGS)))
        text = ",".join(value)
    elif isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"expected a string, number or boolean, got {type(value).__name__}")
    if key.endswith(".ms"):
        text = str(_quantity(text, _DURATION_MS, "a duration such as 500ms, 30s, 10m, 1h, 7d"))
    elif key.endswith(".bytes"):
        text = str(_quantity(text, _SIZE_BYTES, "a size such as 1048576, 512KiB, 1MiB, 1GiB"))
    if key in LIST_CONFIGS:
        text = ",".join(sorted({part.strip() for part in text.split(",") if part.strip()}))
    if key == "cleanup.policy" and (not text or set(text.split(",")) - CLEANUP_POLICIES):
        raise ValueError("cleanup.policy must be delete, compact or both")
    return text


def same_value(key: str, desired: str, actual: str) -> bool:
    """Equal as the broker means it: sets for list configs, numbers for 0.5 vs 0.50."""
    if desired == actual:
        return True
    if key in LIST_CONFIGS:
        return set(desired.split(",")) == set(actual.split(","))
    try:
        return float(desired) == float(actual)
    except ValueError:
        return False


def _quantity(text: str, units: dict[str, int], expected: str) -> int:
    match = _QUANTITY_RE.match(text)
    if match is None or (match.group(2) not in units and match.group(2) != ""):
        raise ValueError(f"expected {expected}, got {text!r}")
    number, unit = int(match.group(1)), match.group(2)
    if number < 0 and (unit or number not in (-1, -2)):
        # -1 is "unlimited"; -2 is "same as the non-local value" (local.retention.*).
        raise ValueError(f"only -1 and -2 may be negative, got {text!r}")
    return number * units[unit] if unit else number
