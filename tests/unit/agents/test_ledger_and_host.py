"""The token ledger, and the host contract of run_task / TaskJournal / open_tasks."""

from __future__ import annotations

from typing import Any

import pytest

import ares
from ares.agents import (
    AgentServices,
    OutcomeStatus,
    Task,
    TaskFailed,
    token_ledger,
)
from ares.agents.context import Context
from ares.agents.host_api import TaskJournal, open_tasks, recorded_outcome
from ares.events.model import NewEvent
from ares.llm import OfflineProvider
from tests.unit.agents.support import FnAgent, Harness, Killed


def _llm_call(task_id: str, name: str, occurrence: int, tokens: tuple[int, int]) -> NewEvent:
    return NewEvent("llm.call", "test", {
        "name": name, "model": "m", "prompt_hash": "0" * 64, "output": "x",
        "prompt_tokens": tokens[0], "completion_tokens": tokens[1],
        "occurrence": occurrence, "task_id": task_id})


async def test_ledger_counts_spent_reused_and_spent_twice() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        for i in range(3):
            await ctx.llm(f"s{i}", prompt=f"prompt {i}")
        if ctx.incarnation == 0:
            raise Killed
        return "ok"

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    outcome = await h.rerun(task)
    book = token_ledger(await h.sink.events())
    assert (book.calls, book.reused_calls, book.spent_twice, book.resumes) == (3, 3, 0, 1)
    assert book.reused_prompt == outcome.stats.reused_prompt_tokens > 0
    assert book.reused_tokens == book.spent_tokens  # everything paid once was re-used once
    assert book.to_json()["spent_twice"] == 0

    # A stream where a durable step was paid again: spent_twice says so.
    await h.sink.append([_llm_call("t1", "s1", 0, (10, 5)), _llm_call("t1", "s1", 0, (1, 1))])
    twice = token_ledger(await h.sink.events())
    assert twice.spent_twice == 2
    assert twice.spent_twice_tokens == 17
    assert twice.twice == (("t1", "s1", 0),)
    assert token_ledger(await h.sink.events(), task_id="other").calls == 0


async def test_task_failed_is_an_outcome_not_a_crash() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        await ctx.step("check", lambda: 1)
        raise TaskFailed("the customer does not exist", retriable=True)

    h = Harness(FnAgent(handler))
    task = await h.assign()
    outcome = await h.run(task)
    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.retriable
    assert outcome.error == "the customer does not exist"
    [failed] = await h.sink.of_type("task.failed")
    assert failed.payload == {"task_id": "t1", "error_type": "ares.agents.errors.TaskFailed",
                              "error_message": "the customer does not exist",
                              "retriable": True}
    journal = TaskJournal.from_events("t1", await h.sink.events())
    assert recorded_outcome("t1", journal).error == outcome.error


async def test_any_other_exception_is_a_crash_and_keeps_its_logs() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        ctx.log("about to divide")
        return 1 / 0

    h = Harness(FnAgent(handler))
    with pytest.raises(ZeroDivisionError):
        await h.run(await h.assign())
    types = await h.sink.types()
    assert types == ["task.assigned", "agent.log"]  # no task outcome: the task is open
    assert [t.task_id for t, _ in open_tasks(await h.sink.events())] == ["t1"]


async def test_journals_and_open_tasks_keep_tasks_apart() -> None:
    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.step("work", lambda: task.input)

    h = Harness(FnAgent(handler))
    first = await h.assign({"n": 1}, "a")
    await h.assign({"n": 2}, "b")
    await h.assign({"n": 3}, "c")
    await h.run(first)
    events = await h.sink.events()
    assert [(t.task_id, t.input) for t, _ in open_tasks(events)] == [("b", {"n": 2}),
                                                                     ("c", {"n": 3})]
    journal = TaskJournal.from_events("a", events)
    assert journal.task == Task("a", {"n": 1})
    assert journal.outcome is not None
    assert [c.name for c in journal.calls.values()] == ["work"]
    assert TaskJournal.from_events("b", events).is_empty
    assert TaskJournal.from_events("zzz", events).task is None


async def test_in_doubt_calls_are_visible_to_the_runtime() -> None:
    def send() -> None:
        raise Killed

    async def handler(task: Task, ctx: Context) -> Any:
        return await ctx.tool("send", send)

    h = Harness(FnAgent(handler))
    task = await h.assign()
    with pytest.raises(Killed):
        await h.run(task)
    assert TaskJournal.from_events("t1", await h.sink.events()).in_doubt_calls() == []
    await h.rerun(task)
    [(call, attempt)] = TaskJournal.from_events("t1", await h.sink.events()).in_doubt_calls()
    assert call.name == "send"
    assert attempt.call_id == "t1:send:0:0"


def test_task_from_event_and_services_from_env() -> None:
    with pytest.raises(ValueError, match=r"task\.assigned"):
        Task.from_event(type("E", (), {"type": "task.completed"})())
    services = AgentServices.from_env({})
    assert isinstance(services.llm, OfflineProvider)
    assert len(services.reconcilers) == 0


def test_the_public_surface_is_reexported_lazily() -> None:
    from ares import agents

    assert ares.Agent is agents.Agent
    assert ares.Effect.KEYED.value == "keyed"
    assert ares.OfflineProvider is OfflineProvider
    assert "Context" in dir(ares)
    assert set(ares.__all__) <= set(dir(ares))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = ares.Nope


async def test_task_groups_pause_and_fail_like_plain_handlers() -> None:
    import asyncio

    from ares.agents import StepFailed

    def send() -> None:
        raise Killed

    async def paused(task: Task, ctx: Context) -> Any:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(ctx.tool("send", send))
            tg.create_task(ctx.step("other", lambda: 1))
        return "never"

    h = Harness(FnAgent(paused))
    task = await h.assign()
    with pytest.raises(BaseExceptionGroup):  # Killed is a BaseException: a crash
        await h.run(task)
    outcome = await h.rerun(task)
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT

    def broken() -> None:
        raise ValueError("bad")

    async def failing(task: Task, ctx: Context) -> Any:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(ctx.step("broken", broken))
        return "never"

    h = Harness(FnAgent(failing))
    outcome = await h.run(await h.assign())
    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.error_type == f"{StepFailed.__module__}.StepFailed"

    async def crashing(task: Task, ctx: Context) -> Any:
        async def bug() -> None:
            raise RuntimeError("bug")

        async with asyncio.TaskGroup() as tg:
            tg.create_task(bug())
        return "never"

    h = Harness(FnAgent(crashing))
    with pytest.raises(ExceptionGroup):
        await h.run(await h.assign())
