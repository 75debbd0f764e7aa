"""``CompactionConfig``: when the compactor summarises, what it keeps raw, whether it trims.

Every field is an ``ARES_COMPACTION_*`` environment variable; ``ares run compactor`` and
``ares compaction run`` flags override them. ``from_env`` validates and names the setting
that is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ares.errors import ConfigError
from ares.topics.configs import canonical_value

DAY_S = 86_400.0

ENV_THRESHOLD = "ARES_COMPACTION_THRESHOLD"
ENV_KEEP_RECENT = "ARES_COMPACTION_KEEP_RECENT"
ENV_MAX_SUMMARIES = "ARES_COMPACTION_MAX_SUMMARIES"
ENV_SUMMARY_TTL = "ARES_COMPACTION_SUMMARY_TTL"
ENV_TRIM = "ARES_COMPACTION_TRIM"
ENV_INTERVAL = "ARES_COMPACTION_INTERVAL"
ENV_SNAPSHOT_TIMEOUT = "ARES_COMPACTION_SNAPSHOT_TIMEOUT"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    # A stream is summarised once more than this many events follow its last summary.
    threshold: int = 500
    # The newest events of a stream are never summarised (nor, therefore, trimmed).
    keep_recent: int = 100
    # Above this many summaries the oldest adjacent ones are merged into one.
    max_summaries_per_stream: int = 20
    # Summaries of a stream silent for this long are deleted (the agent is long gone);
    # younger ones are rewritten before the topic's retention could drop them.
    summary_ttl_s: float = 30 * DAY_S
    # DeleteRecords on ares.events up to the safe point of each partition.
    trimming: bool = False
    # Seconds between passes of `ares run compactor`.
    interval_s: float = 60.0
    # How long a pass waits for an owner to answer a snapshot.request.
    snapshot_timeout_s: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> CompactionConfig:
        """``ARES_COMPACTION_*`` variables, then the non-None ``overrides`` (CLI flags)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        if (raw := env.get(ENV_THRESHOLD)) not in (None, ""):
            values["threshold"] = _int(ENV_THRESHOLD, raw)
        if (raw := env.get(ENV_KEEP_RECENT)) not in (None, ""):
            values["keep_recent"] = _int(ENV_KEEP_RECENT, raw)
        if (raw := env.get(ENV_MAX_SUMMARIES)) not in (None, ""):
            values["max_summaries_per_stream"] = _int(ENV_MAX_SUMMARIES, raw)
        if (raw := env.get(ENV_SUMMARY_TTL)) not in (None, ""):
            values["summary_ttl_s"] = parse_duration_s(ENV_SUMMARY_TTL, raw)
        if (raw := env.get(ENV_TRIM)) not in (None, ""):
            values["trimming"] = _bool(ENV_TRIM, raw)
        if (raw := env.get(ENV_INTERVAL)) not in (None, ""):
            values["interval_s"] = parse_duration_s(ENV_INTERVAL, raw)
        if (raw := env.get(ENV_SNAPSHOT_TIMEOUT)) not in (None, ""):
            values["snapshot_timeout_s"] = parse_duration_s(ENV_SNAPSHOT_TIMEOUT, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        config = cls(**values)
        config.validate()
        return config

    def with_overrides(self, **overrides: Any) -> CompactionConfig:
        config = replace(self, **{k: v for k, v in overrides.items() if v is not None})
        config.validate()
        return config

    def validate(self) -> None:
        if self.keep_recent < 0:
            raise ConfigError(f"{ENV_KEEP_RECENT} must be >= 0 (got {self.keep_recent})")
        if self.threshold < 1 or self.threshold <= self.keep_recent:
            raise ConfigError(f"{ENV_THRESHOLD} must be >= 1 and above {ENV_KEEP_RECENT} "
                              f"(got {self.threshold} and {self.keep_recent})")
        if self.max_summaries_per_stream < 1:
            raise ConfigError(f"{ENV_MAX_SUMMARIES} must be >= 1 "
                              f"(got {self.max_summaries_per_stream})")
        if self.summary_ttl_s <= 0:
            raise ConfigError(f"{ENV_SUMMARY_TTL} must be a positive duration such as 30d")
        if self.interval_s <= 0:
            raise ConfigError(f"{ENV_INTERVAL} must be a positive duration such as 60s")
        if self.snapshot_timeout_s <= 0:
            raise ConfigError(f"{ENV_SNAPSHOT_TIMEOUT} must be a positive duration")

    def to_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "keep_recent": self.keep_recent,
                "max_summaries_per_stream": self.max_summaries_per_stream,
                "summary_ttl_s": self.summary_ttl_s, "trimming": self.trimming,
                "interval_s": self.interval_s, "snapshot_timeout_s": self.snapshot_timeout_s}


def parse_duration_s(name: str, raw: str) -> float:
    """``30d``, ``12h``, ``90s``, ``500ms`` or plain seconds, as seconds."""
    text = raw.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return int(canonical_value("duration.ms", text)) / 1000
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer (got {raw!r})") from None


def _bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false (got {raw!r})")
