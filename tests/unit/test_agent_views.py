"""The agent read model (``ares.views.agents``) from realistic events: sealed lifecycle
streams, and the SDK's own records from ``LocalRuntime`` runs with crashes and in-doubt
calls. Plus the CLI's usage errors and renderings that need no broker."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from ares.agents import LocalRuntime, OutcomeStatus, token_ledger
from ares.agents import records as r
from ares.cli import cli
from ares.cli.agents import _view_lines, _views_table
from ares.cli.common import run_cli
from ares.events.model import Event
from ares.examples import PipelineAgent
from ares.examples.pipeline import InjectedCrash
from ares.views.agents import (
    PAUSED_IN_DOUBT,
    RUNNING,
    WAITING,
    AgentViews,
    NoSuchAgentError,
    NotResolvableError,
    agent_builder,
    agent_view,
    all_agent_views,
)
from tests.unit.agents.support import Killed
from tests.unit.runtime.streams import Stream, at


def _lifecycle_stream(agent_id: str = "a1") -> Stream:
    s = Stream(agent_id)
    s.add("agent.started", {"kind": "example.pipeline", "config_json": '{"reconcile":false}',
                            "incarnation": 1, "worker": "w1"}, at_s=0)
    s.add("task.assigned", {"task_id": "t1", "input_json": '{"steps":2}'}, at_s=1)
    s.add("agent.dead", {"cause": "killed", "incarnation": 1, "last_version": 2}, at_s=2)
    s.add("agent.resurrecting", {"incarnation": 2, "parent_incarnation": 1, "attempt": 1,
                                 "backoff_ms": 0, "cause": "killed"}, at_s=2)
    s.add("agent.resurrected", {"incarnation": 2, "parent_incarnation": 1, "worker": "w2",
                                "snapshot_version": None, "replayed_events": 4,
                                "recovery_ms": 12}, at_s=3)
    return s


def test_lifecycle_fields_come_from_the_runtime_fold() -> None:
    s = _lifecycle_stream()
    view = agent_view(s.events)
    assert (view.agent_id, view.kind, view.status) == ("a1", "example.pipeline", "running")
    assert (view.incarnation, view.restarts, view.deaths, view.recent_deaths) == (2, 1, 1, 1)
    assert (view.worker, view.version) == ("w2", 5)
    assert view.last_event_time == at(3)
    assert view.last_event_type == "agent.resurrected"
    assert view.started_at == at(3)
    assert view.config == {"reconcile": False}
    assert view.last_death is not None
    assert (view.last_death.cause, view.last_death.incarnation) == ("killed", 1)
    assert (view.current_task, view.task_state) == ("t1", RUNNING)
    assert (view.tasks.assigned, view.tasks.completed, view.tasks.pending) == (1, 0, ("t1",))

    s.add("task.completed", {"task_id": "t1", "output_json": "{}"}, at_s=4)
    s.add("agent.stopped", {"reason": "maintenance"}, at_s=5)
    s.add("task.assigned", {"task_id": "t2", "input_json": "null"}, at_s=6)
    done = agent_view(s.events)
    assert (done.status, done.current_task, done.task_state) == ("stopped", "t2", WAITING)
    assert (done.tasks.assigned, done.tasks.completed, done.tasks.failed) == (2, 1, 0)


def test_json_document_is_the_contract() -> None:
    doc = agent_view(_lifecycle_stream().events).to_json()
    assert set(doc) == {
        "agent_id", "kind", "status", "incarnation", "restarts", "deaths", "recent_deaths",
        "worker", "version", "last_event_time", "last_event_type", "started_at", "config",
        "snapshot_version", "last_death", "quarantine_reason", "current_task", "tasks",
        "tokens", "in_doubt", "waiting_for", "parent_id"}
    assert doc["waiting_for"] is None
    assert doc["current_task"] == {"task_id": "t1", "state": "running"}
    assert doc["last_death"]["cause"] == "killed"
    assert doc["last_event_time"] == at(3).isoformat()
    assert {"spent", "saved", "spent_twice", "spent_tokens", "reused_tokens"} <= set(
        doc["tokens"])
    json.dumps(doc)  # JSON all the way down


def test_a_stream_without_agent_started_is_no_agent() -> None:
    s = Stream("notes")
    s.add("note.added", {"text": "hi"})
    with pytest.raises(NoSuchAgentError, match="no agent 'notes'"):
        agent_view(s.events)
    with pytest.raises(NoSuchAgentError, match="no agent 'ghost'"):
        agent_view([], "ghost")


def test_all_agents_in_one_pass_over_interleaved_streams() -> None:
    b, a, notes = _lifecycle_stream("b"), _lifecycle_stream("a"), Stream("notes")
    notes.add("note.added", {"text": "not an agent"})
    interleaved = [e for trio in zip(b.events, a.events, notes.events * 5, strict=False)
                   for e in trio]
    interleaved += b.events[len(interleaved) // 3:] + a.events[len(interleaved) // 3:]
    views = all_agent_views(interleaved)
    assert [v.agent_id for v in views] == ["a", "b"]
    assert [v.version for v in views] == [5, 5]
    incremental = AgentViews()
    for event in interleaved:
        incremental.add(event)
    assert incremental.views() == views


async def test_tokens_after_a_crash_are_spent_once_and_saved_on_the_rerun() -> None:
    rt = LocalRuntime(PipelineAgent, "p1")
    with pytest.raises(InjectedCrash):
        await rt.submit({"steps": 4, "step_ms": 0, "fail_at": 2}, "t1")
    await rt.resurrect()
    [outcome] = await rt.run_open_tasks()
    assert outcome.status is OutcomeStatus.COMPLETED
    events = await rt.events()

    view = agent_view(events)
    assert view.tokens == token_ledger(events)  # the slimmed records change nothing
    assert view.tokens.calls == 4
    assert view.tokens.spent_twice == 0
    assert view.tokens.reused_calls == 2
    assert view.tokens.reused_tokens > 0
    doc = view.to_json()["tokens"]
    assert (doc["spent"], doc["saved"], doc["spent_twice"]) == (
        view.tokens.spent_tokens, view.tokens.reused_tokens, 0)
    assert (view.tasks.completed, view.current_task, view.restarts) == (1, None, 1)


async def test_a_step_paid_twice_is_counted() -> None:
    rt = LocalRuntime(PipelineAgent, "p1")
    await rt.submit({"steps": 1}, "t1")
    events = await rt.events()
    [paid] = [e for e in events if e.type == r.LLM_CALL]
    s = Stream("p1")
    for event in [*events, paid]:
        s.add(event.type, event.payload, metadata=event.metadata)
    view = agent_view(s.events)
    assert (view.tokens.spent_twice, view.tokens.twice) == (1, (("t1", "step-0", 0),))


async def _in_doubt_runtime(monkeypatch: pytest.MonkeyPatch) -> LocalRuntime:
    """example.pipeline without reconcile, killed after sending its e-mail and before the
    outcome record: on the re-run, the call is in doubt and the task paused."""
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
    return rt


async def test_in_doubt_calls_pause_the_current_task(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = await _in_doubt_runtime(monkeypatch)
    events = await rt.events()
    view = agent_view(events)
    [call] = view.in_doubt
    assert (call.call_id, call.task_id, call.tool) == ("t1:send_email:0:0", "t1", "send_email")
    assert "no reconcile hook" in call.reason
    assert call.since == next(e.timestamp for e in events if e.type == r.TOOL_IN_DOUBT)
    assert (view.current_task, view.task_state) == ("t1", PAUSED_IN_DOUBT)
    assert view.to_json()["in_doubt"][0]["call_id"] == "t1:send_email:0:0"
    assert agent_builder(events).check_resolvable("t1:send_email:0:0") == call


async def test_resolvable_only_while_in_doubt(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = await _in_doubt_runtime(monkeypatch)
    builder = agent_builder(await rt.events())
    with pytest.raises(NotResolvableError,
                       match=r"no tool call 'nope'; calls in doubt: t1:send_email:0:0"):
        builder.check_resolvable("nope")

    await rt.resolve("t1:send_email:0:0", "done", {"sent": True})
    resolved = agent_builder(await rt.events())
    assert resolved.build().in_doubt == ()
    with pytest.raises(NotResolvableError, match="already resolved as done by operator"):
        resolved.check_resolvable("t1:send_email:0:0")

    [finished] = await rt.run_open_tasks()
    assert finished.status is OutcomeStatus.COMPLETED
    view = agent_view(await rt.events())
    assert (view.current_task, view.tasks.completed, view.in_doubt) == (None, 1, ())


async def test_a_call_with_an_outcome_or_still_running_is_not_in_doubt() -> None:
    rt = LocalRuntime(PipelineAgent, "p1")
    await rt.submit({"steps": 0, "email": True}, "t1")
    events = await rt.events()
    with pytest.raises(NotResolvableError, match=r"already has an outcome \(completed\)"):
        agent_builder(events).check_resolvable("t1:send_email:0:0")

    # The intent alone: the call may be executing right now.
    cut = next(i for i, e in enumerate(events) if e.type == r.TOOL_COMPLETED)
    with pytest.raises(NotResolvableError, match="not reported it in doubt"):
        agent_builder(events[:cut]).check_resolvable("t1:send_email:0:0")


def test_human_renderings_are_compact_and_complete() -> None:
    view = agent_view(_lifecycle_stream().events)
    lines = _view_lines(view)
    text = "\n".join(lines)
    assert len(lines) <= 8
    assert "a1 (example.pipeline)" in text
    assert "running · incarnation 2 · restarts 1 · worker w2" in text
    assert "last death killed" in text
    assert "spent twice 0" in text
    table = _views_table([view])
    assert [c.header for c in table.columns][:4] == ["AGENT", "KIND", "STATUS", "INC"]


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["ares", *args])
    # An unroutable broker: a usage error must be found before anything connects.
    monkeypatch.setenv("ARES_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    code = run_cli(cli)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["start", "a", "--kind", "k", "--config", "{bad"], "--config: not valid JSON"),
    (["start", "a", "--kind", "k", "--config", "[1]"], "--config: must be a JSON object"),
    (["task", "a", "--input", "{"], "--input: not valid JSON"),
    (["resolve", "a", "--call", "c", "--as", "skip", "--result", "1"],
     "--result: a result only goes with --as done"),
    (["resolve", "a", "--call", "c", "--as", "done", "--result", "{x"],
     "--result: not valid JSON"),
    (["resolve", "a", "--call", "c", "--as", "maybe"], "'maybe' is not one of"),
])
def test_usage_errors_exit_2_naming_the_flag(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             args: list[str], message: str) -> None:
    code, err = _run(monkeypatch, capsys, "agents", *args)
    assert code == 2
    assert message in err


def test_views_hold_no_bulky_payloads() -> None:
    s = _lifecycle_stream()
    s.add("llm.call", {"task_id": "t1", "name": "step-0", "occurrence": 0,
                       "prompt_tokens": 3, "completion_tokens": 4, "model": "m",
                       "prompt_hash": "h", "output": "x" * 10_000})
    builder = agent_builder(s.events)
    kept: list[Event] = builder._ledger
    assert all("output" not in e.payload for e in kept)
    assert builder.build().tokens.spent_tokens == 7
