"""A re-run that asks for other steps than the journal recorded is stopped, loudly."""

from __future__ import annotations

from typing import Any

import pytest

from ares.agents import NonDeterminismError, OutcomeStatus, Task
from ares.agents.context import Context
from ares.agents.errors import TaskFailed
from tests.unit.agents.support import FnAgent, Harness, Killed


def _killed_after_two_steps(order: list[str]) -> Any:
    async def handler(task: Task, ctx: Context) -> Any:
        for name in order:
            await ctx.step(name, lambda n=name: n)
        if ctx.incarnation == 0:
            raise Killed
        return "done"

    return handler


async def _recorded(order: list[str]) -> Harness:
    h = Harness(FnAgent(_killed_after_two_steps(order)))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    return h


async def test_a_different_step_at_a_recorded_position_names_both() -> None:
    h = await _recorded(["fetch", "rank"])
    h.agent.handler = _killed_after_two_steps(["fetch", "filter", "rank"])  # type: ignore[attr-defined]
    with pytest.raises(NonDeterminismError) as info:
        await h.rerun(Task("t1"))
    message = str(info.value)
    assert "task 't1' at position 1" in message
    assert "recorded step 'rank' (occurrence 0)" in message
    assert "requested step 'filter' (occurrence 0)" in message
    assert "do not branch on time, randomness" in message
    assert info.value.position == 1


async def test_swapped_order_is_detected() -> None:
    h = await _recorded(["a", "b"])
    h.agent.handler = _killed_after_two_steps(["b", "a"])  # type: ignore[attr-defined]
    with pytest.raises(NonDeterminismError, match="at position 0: the journal recorded step 'a'"):
        await h.rerun(Task("t1"))


async def test_a_different_kind_at_the_same_name_is_detected() -> None:
    h = await _recorded(["a", "b"])

    async def handler(task: Task, ctx: Context) -> Any:
        await ctx.step("a", lambda: "a")
        return await ctx.llm("b", prompt="now an llm call")

    h.agent.handler = handler  # type: ignore[attr-defined]
    with pytest.raises(NonDeterminismError, match="requested llm 'b'"):
        await h.rerun(Task("t1"))


async def test_returning_without_replaying_recorded_steps_is_detected() -> None:
    h = await _recorded(["a", "b"])

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("a", lambda: "a")

    h.agent.handler = handler  # type: ignore[attr-defined]
    with pytest.raises(NonDeterminismError, match="returned without requesting it"):
        await h.rerun(Task("t1"))
    assert "task.completed" not in await h.sink.types()


async def test_a_changed_prompt_is_detected() -> None:
    prompts = iter(["first prompt", "another prompt"])

    async def handler(task: Task, ctx: Context) -> Any:
        await ctx.llm("ask", prompt=next(prompts))
        if ctx.incarnation == 0:
            raise Killed
        return "done"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    with pytest.raises(NonDeterminismError, match="requested it with a different prompt"):
        await h.rerun(task)


async def test_a_swallowed_non_determinism_still_crashes_the_run() -> None:
    h = await _recorded(["a", "b"])

    async def handler(task: Task, ctx: Context) -> Any:
        try:
            await ctx.step("z", lambda: "z")
        except Exception as e:
            raise TaskFailed("giving up") from e
        return "never"

    h.agent.handler = handler  # type: ignore[attr-defined]
    with pytest.raises(NonDeterminismError):
        await h.rerun(Task("t1"))
    assert "task.failed" not in await h.sink.types()


async def test_deterministic_reruns_pass() -> None:
    h = await _recorded(["a", "b"])
    outcome = await h.rerun(Task("t1"))
    assert outcome.status is OutcomeStatus.COMPLETED
