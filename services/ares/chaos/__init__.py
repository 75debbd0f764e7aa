"""Chaos under load: seeded faults against real processes, promises checked from outside.

``ares chaos`` (``ares.cli.chaos``) and ``tests/chaos`` drive ``run_chaos``.
"""

from ares.chaos.faults import Fault, FaultKind, Targets, by_kind, schedule
from ares.chaos.runner import ChaosOptions, ChaosReport, run_chaos

__all__ = ["ChaosOptions", "ChaosReport", "Fault", "FaultKind", "Targets", "by_kind",
           "run_chaos", "schedule"]
