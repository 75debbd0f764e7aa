"""Prometheus metrics of the compactor (served on /metrics by `ares run compactor`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PASSES = Counter("ares_compactor_passes_total", "Compaction passes, by result", ["result"])
PASS_SECONDS = Histogram("ares_compactor_pass_seconds", "Duration of a compaction pass",
                         buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
SUMMARIES_WRITTEN = Counter("ares_compactor_summaries_written_total",
                            "Summaries written to ares.summaries", ["partition"])
SUMMARIES_MERGED = Counter("ares_compactor_summaries_merged_total",
                           "Summaries replaced by merges (max summaries per stream)",
                           ["partition"])
SUMMARIES_EXPIRED = Counter("ares_compactor_summaries_expired_total",
                            "Summaries deleted by the summary TTL", ["partition"])
SNAPSHOT_REQUESTS = Counter("ares_compactor_snapshot_requests_total",
                            "snapshot.request commands sent before a trim", ["result"])
TRIMMED_RECORDS = Counter("ares_compactor_trimmed_records_total",
                          "Records deleted from ares.events (DeleteRecords)", ["partition"])
TRIMS = Counter("ares_compactor_trims_total", "DeleteRecords calls on ares.events",
                ["partition"])
LOG_START = Gauge("ares_compactor_log_start_offset", "Log start offset of ares.events",
                  ["partition"])
TRIM_POINT = Gauge("ares_compactor_trim_point_offset", "Computed safe trim point of "
                   "ares.events", ["partition"])
TRIM_BACKLOG = Gauge("ares_compactor_trim_held_records", "Records between the trim point "
                     "and the last stable offset", ["partition"])
