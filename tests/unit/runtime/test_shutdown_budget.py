"""The runtime manager's shutdown budgets: read from ARES_SHUTDOWN_<PHASE>_S, and a phase
that overruns its budget is abandoned (the next phase still runs)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from ares.errors import ConfigError
from ares.runtime_manager.shutdown import ShutdownBudget, within


def overruns(phase: str) -> float:
    return REGISTRY.get_sample_value("ares_shutdown_overruns_total", {"phase": phase}) or 0.0


def test_budgets_come_from_the_charts_variables_and_unset_means_no_limit() -> None:
    budget = ShutdownBudget.from_env({"ARES_SHUTDOWN_DRAIN_S": "5",
                                      "ARES_SHUTDOWN_SNAPSHOT_S": "20.5"})
    assert budget == ShutdownBudget(drain_s=5.0, snapshot_s=20.5)
    assert budget.of("finish") is None


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "4000"])
def test_a_bad_budget_names_its_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match="ARES_SHUTDOWN_RELEASE_S"):
        ShutdownBudget.from_env({"ARES_SHUTDOWN_RELEASE_S": raw})


async def test_an_overrunning_phase_is_abandoned_and_counted() -> None:
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    before = overruns("snapshot")
    assert await within(ShutdownBudget(snapshot_s=0.05), "snapshot", stuck()) is False
    assert cancelled.is_set()
    assert overruns("snapshot") == before + 1


async def test_a_phase_within_its_budget_or_without_one_runs_to_its_end() -> None:
    ran: list[str] = []

    async def quick(name: str) -> None:
        await asyncio.sleep(0)
        ran.append(name)

    assert await within(ShutdownBudget(finish_s=30), "finish", quick("finish"))
    assert await within(ShutdownBudget(), "release", quick("release"))
    assert ran == ["finish", "release"]
