"""CompactionConfig from ARES_COMPACTION_* and flags, validated with the setting named."""

from __future__ import annotations

import pytest

from ares.compactor.config import CompactionConfig
from ares.errors import ConfigError


def test_defaults_are_the_documented_ones() -> None:
    config = CompactionConfig.from_env({})
    assert (config.threshold, config.keep_recent, config.summary_ttl_s, config.trimming) == (
        500, 100, 30 * 86_400, False)
    assert config.max_summaries_per_stream == 20


def test_environment_then_flags() -> None:
    env = {"ARES_COMPACTION_THRESHOLD": "50", "ARES_COMPACTION_KEEP_RECENT": "5",
           "ARES_COMPACTION_SUMMARY_TTL": "12h", "ARES_COMPACTION_TRIM": "true",
           "ARES_COMPACTION_INTERVAL": "500ms", "ARES_COMPACTION_MAX_SUMMARIES": "3",
           "ARES_COMPACTION_SNAPSHOT_TIMEOUT": "2"}
    config = CompactionConfig.from_env(env, threshold=60, trimming=None)
    assert config.threshold == 60
    assert config.keep_recent == 5
    assert config.summary_ttl_s == 12 * 3600
    assert config.trimming is True
    assert config.interval_s == 0.5
    assert config.snapshot_timeout_s == 2
    assert config.with_overrides(trimming=False).trimming is False


@pytest.mark.parametrize(("env", "named"), [
    ({"ARES_COMPACTION_THRESHOLD": "x"}, "ARES_COMPACTION_THRESHOLD"),
    ({"ARES_COMPACTION_THRESHOLD": "100", "ARES_COMPACTION_KEEP_RECENT": "100"},
     "ARES_COMPACTION_THRESHOLD"),
    ({"ARES_COMPACTION_KEEP_RECENT": "-1"}, "ARES_COMPACTION_KEEP_RECENT"),
    ({"ARES_COMPACTION_TRIM": "maybe"}, "ARES_COMPACTION_TRIM"),
    ({"ARES_COMPACTION_SUMMARY_TTL": "soon"}, "ARES_COMPACTION_SUMMARY_TTL"),
    ({"ARES_COMPACTION_SUMMARY_TTL": "0"}, "ARES_COMPACTION_SUMMARY_TTL"),
    ({"ARES_COMPACTION_MAX_SUMMARIES": "0"}, "ARES_COMPACTION_MAX_SUMMARIES"),
])
def test_invalid_settings_are_named(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        CompactionConfig.from_env(env)
