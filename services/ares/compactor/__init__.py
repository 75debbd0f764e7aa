"""The compactor: rule-based summaries of old events, snapshots, then safe trimming.

Public surface (see docs/compaction.md)::

    CompactionConfig            thresholds, keep_recent, summary TTL, trimming on/off
    Compactor                   one pass (run_pass) or a read-only look (status)
    CompactorService            `ares run compactor`: passes on an interval
    SummarisedReader            reads that return summaries for trimmed ranges
    verify_summarised           the audit's check of such a read (anchors, truncation)
    summarise / merge           the pure summariser
"""

from ares.compactor.compactor import Compactor
from ares.compactor.config import CompactionConfig
from ares.compactor.service import CompactorService
from ares.compactor.summariser import EventFact, merge, summarise, summarise_events
from ares.compactor.trim import Hold, TrimPlan, plan_trim
from ares.events.kafka.groups import runtime_group
from ares.summaries.reader import (
    SummarisedReader,
    anchor_matches,
    verify_summarised,
    with_summaries,
)
from ares.summaries.record import SYNTHETIC_TYPE, Summary, SummaryFacts

__all__ = [
    "SYNTHETIC_TYPE",
    "CompactionConfig",
    "Compactor",
    "CompactorService",
    "EventFact",
    "Hold",
    "SummarisedReader",
    "Summary",
    "SummaryFacts",
    "TrimPlan",
    "anchor_matches",
    "merge",
    "plan_trim",
    "runtime_group",
    "summarise",
    "summarise_events",
    "verify_summarised",
    "with_summaries",
]
