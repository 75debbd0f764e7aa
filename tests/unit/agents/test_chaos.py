"""example.pipeline killed at every possible append, in many random schedules: every task
completes, no step is executed again once its record was durable, and the e-mail goes out
exactly once (an interrupted one is reconciled from the evidence, never re-sent)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from ares.agents import OutcomeStatus, token_ledger
from ares.events.model import Event
from ares.examples import PipelineAgent, evidence
from tests.unit.agents.support import Harness, Killed

STEPS = 4
# Appends of one clean run: 4 llm.call, the e-mail's intent, its outcome, task.completed.
APPENDS = STEPS + 3


async def _run_until_done(h: Harness, schedule: list[int | None]) -> None:
    task = await h.assign({"steps": STEPS, "email": True})
    for kill_at in [*schedule, None]:
        try:
            outcome = await h.run(task, kill_at=kill_at)
        except Killed:
            h.incarnation += 1
            continue
        assert outcome.status is OutcomeStatus.COMPLETED, outcome
        return
    pytest.fail("the task did not complete")


def _check(h: Harness, ledger: Path, events: list[Event]) -> None:
    lines = list(evidence.read_lines(ledger / evidence.LLM_CALLS))
    executions = Counter(line["step"] for line in lines)
    # A step runs again only when the append of its record was the one killed.
    lost = Counter(int(e.payload["name"].split("-")[1]) for batch in h.sink.killed
                   for e in batch if e.type == "llm.call")
    for step in range(STEPS):
        assert executions[step] == 1 + lost[step], (step, executions, lost)
    assert len(list(evidence.read_lines(ledger / evidence.SIDE_EFFECTS))) == 1
    book = token_ledger(events)
    assert book.spent_twice == 0
    assert book.calls == STEPS


@pytest.mark.parametrize("kill_at", range(1, APPENDS + 1))
async def test_a_kill_before_any_append_is_survived(kill_at: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(evidence.LEDGER_DIR_ENV, str(tmp_path))
    h = Harness(PipelineAgent("p1"))
    await _run_until_done(h, [kill_at])
    _check(h, tmp_path, await h.sink.events())


@pytest.mark.parametrize("seed", range(25))
async def test_random_kill_schedules(seed: int, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(evidence.LEDGER_DIR_ENV, str(tmp_path))
    rng = random.Random(seed)
    h = Harness(PipelineAgent("p1"))
    schedule: list[int | None] = [rng.randint(1, 3) for _ in range(rng.randint(1, 6))]
    await _run_until_done(h, schedule)
    _check(h, tmp_path, await h.sink.events())
