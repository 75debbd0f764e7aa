"""The shipped example agents under crashes: no step paid twice, no e-mail sent twice, a
chat that remembers everything after a resurrection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ares.agents import LocalRuntime, OutcomeStatus, token_ledger
from ares.examples import ChatAgent, PipelineAgent, evidence
from ares.examples.pipeline import InjectedCrash
from tests.unit.agents.support import Killed


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(evidence.LEDGER_DIR_ENV, str(tmp_path))
    return tmp_path


def _lines(directory: Path, name: str) -> list[dict[str, Any]]:
    return list(evidence.read_lines(directory / name))


async def test_pipeline_crash_at_step_k_resumes_without_paying_twice(ledger: Path) -> None:
    rt = LocalRuntime(PipelineAgent, "p1")
    with pytest.raises(InjectedCrash, match="before step 3"):
        await rt.submit({"steps": 5, "step_ms": 0, "email": True, "fail_at": 3}, "t1")
    await rt.resurrect()
    [outcome] = await rt.run_open_tasks()

    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.output["steps"] == 5
    assert outcome.output["email"]["sent"] is True
    calls = _lines(ledger, evidence.LLM_CALLS)
    assert [(c["step"], c["incarnation"]) for c in calls] == [
        (0, 1), (1, 1), (2, 1), (3, 2), (4, 2)]
    assert {c["agent_id"] for c in calls} == {"p1"}
    assert {c["task_id"] for c in calls} == {"t1"}
    [mail] = _lines(ledger, evidence.SIDE_EFFECTS)
    assert mail["task_id"] == "t1"
    assert mail["incarnation"] == 2

    book = token_ledger(await rt.events())
    assert (book.calls, book.reused_calls, book.spent_twice, book.resumes) == (5, 3, 0, 1)
    assert book.reused_tokens > 0


async def test_pipeline_output_is_the_same_with_or_without_crashes(ledger: Path) -> None:
    calm = LocalRuntime(PipelineAgent, "p1")
    expected = (await calm.submit({"steps": 4}, "t1")).output
    crashy = LocalRuntime(PipelineAgent, "p1")
    with pytest.raises(InjectedCrash):
        await crashy.submit({"steps": 4, "fail_at": 2}, "t1")
    await crashy.resurrect()
    assert (await crashy.run_open_tasks())[0].output == expected


async def test_an_email_sent_just_before_a_kill_is_reconciled_not_resent(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = PipelineAgent.send_email

    async def send_then_die(self: PipelineAgent, *args: Any, **kwargs: Any) -> Any:
        await original(self, *args, **kwargs)
        raise Killed("SIGKILL after the e-mail, before its outcome record")

    monkeypatch.setattr(PipelineAgent, "send_email", send_then_die)
    rt = LocalRuntime(PipelineAgent, "p1")
    with pytest.raises(Killed):
        await rt.submit({"steps": 2, "email": True}, "t1")
    monkeypatch.setattr(PipelineAgent, "send_email", original)
    await rt.resurrect()
    [outcome] = await rt.run_open_tasks()

    assert outcome.status is OutcomeStatus.COMPLETED
    assert len(_lines(ledger, evidence.SIDE_EFFECTS)) == 1
    assert outcome.output["email"]["sent"] is True
    assert [c["step"] for c in _lines(ledger, evidence.LLM_CALLS)] == [0, 1]


async def test_without_reconcile_an_interrupted_email_is_in_doubt_despite_evidence(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = PipelineAgent.send_email

    async def send_then_die(self: PipelineAgent, *args: Any, **kwargs: Any) -> Any:
        await original(self, *args, **kwargs)
        raise Killed

    monkeypatch.setattr(PipelineAgent, "send_email", send_then_die)
    rt = LocalRuntime(PipelineAgent, "p1", {"reconcile": False})
    with pytest.raises(Killed):
        await rt.submit({"steps": 1, "email": True}, "t1")
    monkeypatch.setattr(PipelineAgent, "send_email", original)
    await rt.resurrect()
    [outcome] = await rt.run_open_tasks()
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert "no reconcile hook" in outcome.in_doubt[0].reason
    await rt.resolve(outcome.in_doubt[0].call_id, "skip")
    [skipped] = await rt.run_open_tasks()
    assert skipped.error_type == "ares.agents.errors.ToolSkipped"
    assert len(_lines(ledger, evidence.SIDE_EFFECTS)) == 1


async def test_without_evidence_an_interrupted_email_is_in_doubt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(evidence.LEDGER_DIR_ENV, raising=False)
    original = PipelineAgent.send_email
    sent = 0

    async def send_then_die(self: PipelineAgent, *args: Any, **kwargs: Any) -> Any:
        nonlocal sent
        sent += 1
        await original(self, *args, **kwargs)
        raise Killed

    monkeypatch.setattr(PipelineAgent, "send_email", send_then_die)
    rt = LocalRuntime(PipelineAgent, "p1")
    with pytest.raises(Killed):
        await rt.submit({"steps": 1, "email": True}, "t1")
    await rt.resurrect()
    [outcome] = await rt.run_open_tasks()
    assert outcome.status is OutcomeStatus.PAUSED_IN_DOUBT
    assert sent == 1
    assert "ARES_EXAMPLE_LEDGER_DIR" in outcome.in_doubt[0].reason
    await rt.resolve(outcome.in_doubt[0].call_id, "done", {"sent": True, "by": "operator"})
    [done] = await rt.run_open_tasks()
    assert done.output["email"] == {"sent": True, "by": "operator"}
    assert sent == 1


@pytest.mark.parametrize(("task_input", "message"), [
    ({"steps": -1}, "'steps' must be an integer >= 0"),
    ({"email": "yes"}, "'email' must be true or false"),
    ({"fail_at": "2"}, "'fail_at' must be an integer or null"),
    ("steps=3", "must be an object"),
])
async def test_pipeline_rejects_bad_input_as_a_failed_task(task_input: Any,
                                                           message: str) -> None:
    outcome = await LocalRuntime(PipelineAgent, "p1").submit(task_input)
    assert outcome.status is OutcomeStatus.FAILED
    assert message in (outcome.error or "")


async def test_pipeline_step_latency_is_provider_time() -> None:
    # step_ms only slows real executions: a replay does not sleep (measured by the
    # provider's sleeps, not by wall clock).
    rt = LocalRuntime(PipelineAgent, "p1")
    outcome = await rt.submit({"steps": 2, "step_ms": 1}, "t1")
    assert outcome.status is OutcomeStatus.COMPLETED
    assert outcome.stats.llm_calls == 2


async def _chat(rt: LocalRuntime, *messages: str) -> list[Any]:
    return [(await rt.submit({"message": m}, f"turn-{i}")).output
            for i, m in enumerate(messages, start=len(rt.agent.history))]  # type: ignore[attr-defined]


@pytest.mark.parametrize("from_snapshot", [False, True])
async def test_chat_keeps_its_history_across_a_resurrection(from_snapshot: bool) -> None:
    rt = LocalRuntime(ChatAgent, "c1")
    await _chat(rt, "hi", "what is ares?")
    await rt.take_snapshot()
    await _chat(rt, "and kafka?")  # after the snapshot: comes back by apply()
    before = rt.agent.history  # type: ignore[attr-defined]

    agent = await rt.resurrect(from_snapshot=from_snapshot)
    assert isinstance(agent, ChatAgent)
    assert agent.history == before
    assert len(before) == 3
    [answer] = await _chat(rt, "thanks")

    twin = LocalRuntime(ChatAgent, "c1")  # never crashed: the same conversation
    expected = await _chat(twin, "hi", "what is ares?", "and kafka?", "thanks")
    assert answer == expected[-1]
    assert answer["turns"] == 4


async def test_chat_killed_mid_turn_answers_once() -> None:
    rt = LocalRuntime(ChatAgent, "c1")
    await _chat(rt, "hi")
    original = rt.sink.append
    appends = 0

    async def die_before_task_completed(events: Any) -> int:
        nonlocal appends
        appends += 1
        if appends == 3:  # task.assigned, llm.call, then task.completed: killed
            raise Killed
        return await original(events)

    rt.sink.append = die_before_task_completed  # type: ignore[method-assign]
    with pytest.raises(Killed):
        await _chat(rt, "second")
    rt.sink.append = original  # type: ignore[method-assign]
    agent = await rt.resurrect(from_snapshot=False)
    assert isinstance(agent, ChatAgent)
    assert len(agent.history) == 1
    assert agent.pending == {"turn-1": "second"}
    [outcome] = await rt.run_open_tasks()
    assert outcome.output["turns"] == 2
    assert outcome.stats.reused_llm_calls == 1
    assert len(agent.history) == 2
    assert Counter(e.type for e in await rt.events())["llm.call"] == 2


async def test_chat_snapshot_round_trip_and_bad_input() -> None:
    rt = LocalRuntime(ChatAgent, "c1", {"system": "Be brief.", "max_turns": 1})
    await _chat(rt, "one", "two")
    state = rt.agent.snapshot()
    fresh = ChatAgent("c1", {"system": "Be brief.", "max_turns": 1})
    fresh.restore(state)
    assert fresh.history == rt.agent.history  # type: ignore[attr-defined]
    failed = await rt.submit({"text": "wrong key"})
    assert failed.status is OutcomeStatus.FAILED
    assert "message" in (failed.error or "")
    assert rt.agent.pending == {}  # type: ignore[attr-defined]


def test_torn_ledger_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    evidence.append_line(path, {"a": 1})
    with path.open("a") as f:
        f.write('{"b": ')
    assert list(evidence.read_lines(path)) == [{"a": 1}]
    assert list(evidence.read_lines(tmp_path / "missing.jsonl")) == []
