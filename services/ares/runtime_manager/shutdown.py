"""The runtime manager's graceful shutdown, phase by phase, each within its budget.

Kubernetes gives a pod ``terminationGracePeriodSeconds`` after SIGTERM, then SIGKILLs it.
The Helm chart sizes that period from four budgets and passes each as
``ARES_SHUTDOWN_<PHASE>_S``; the owner (``PartitionOwner.stop``) runs every phase within
its own, so that a slow phase costs its own time and never the next phase's:

1. ``drain``: the batch of commands in flight finishes (the consume loop stops between
   batches);
2. ``finish``: the agents' tasks stop (what they committed stays);
3. ``snapshot``: per partition, final snapshots and the ``agent.handed_off`` events;
4. ``release``: the consumer, the partition writers and the other clients close.

A phase that overruns is abandoned, with a warning and ``ares_shutdown_overruns_total``,
and the stop moves on to the next phase. A transaction already handed to a partition
writer commits or aborts as a whole: the writer, not its caller, runs it, until the
release phase closes the writer (one still open then is aborted by the next owner's
fencing of the same transactional id). Whatever did not commit is exactly
what a crash at that point would lose, which the transactions make safe: the next owner
recovers from the log (a batch's commands come back, a missing hand-off reads as a death
and is resurrected). Unset: no limit.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass

from prometheus_client import Counter

from ares.errors import ConfigError
from ares.tasks import wait_for

log = logging.getLogger(__name__)

# Each phase and the variable of its budget (the names the Helm chart sets).
PHASES = {"drain": "ARES_SHUTDOWN_DRAIN_S", "finish": "ARES_SHUTDOWN_FINISH_S",
          "snapshot": "ARES_SHUTDOWN_SNAPSHOT_S", "release": "ARES_SHUTDOWN_RELEASE_S"}

OVERRUNS = Counter("ares_shutdown_overruns_total",
                   "Graceful-shutdown phases of the runtime manager abandoned at the end of "
                   "their budget (ARES_SHUTDOWN_<PHASE>_S)", ["phase"])


@dataclass(frozen=True, slots=True)
class ShutdownBudget:
    """Seconds per phase; ``None``: that phase runs to its end."""

    drain_s: float | None = None
    finish_s: float | None = None
    snapshot_s: float | None = None
    release_s: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ShutdownBudget:
        env = os.environ if env is None else env
        values: dict[str, float | None] = {}
        for phase, name in PHASES.items():
            raw = env.get(name, "").strip()
            if not raw:
                values[f"{phase}_s"] = None
                continue
            try:
                seconds = float(raw)
            except ValueError:
                raise ConfigError(f"{name} must be a number of seconds (got {raw!r})") from None
            if not 0 < seconds < 3600:
                raise ConfigError(f"{name} must be more than 0 and less than 3600 seconds "
                                  f"(got {raw})")
            values[f"{phase}_s"] = seconds
        return cls(**values)

    def of(self, phase: str) -> float | None:
        seconds: float | None = getattr(self, f"{phase}_s")
        return seconds


async def within(budget: ShutdownBudget, phase: str, work: Awaitable[None]) -> bool:
    """Run one phase within its budget; False (logged, counted) when it was abandoned."""
    seconds = budget.of(phase)
    if seconds is None:
        await work
        return True
    try:
        await wait_for(work, seconds)
    except TimeoutError:
        OVERRUNS.labels(phase).inc()
        log.warning("shutdown: the %s phase overran its budget of %g s (%s) and was "
                    "abandoned; the next owner recovers what it had not committed from the "
                    "log", phase, seconds, PHASES[phase])
        return False
    return True
