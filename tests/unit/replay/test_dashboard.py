"""The dashboard's templates rendered with fixture data (no server): every page, its
stable test ids, autoescaping of what comes from the log; and the pure helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jinja2
import pytest

from ares.events.model import Event
from ares.replay_reader.ui import data
from ares.replay_reader.ui.pages import STATUSES, _next, environment, journal_rows

EVIL = '<script>alert("x")</script>'
WHO = {"role": "operator", "via": "session", "csrf": "c5rf", "writes": True}


@pytest.fixture(scope="module")
def env() -> jinja2.Environment:
    return environment()


def render(env: jinja2.Environment, name: str, **context: Any) -> str:
    return env.get_template(name).render(who=WHO, path="/ui/", flash=None, **context)


def agent_doc(agent_id: str = "a-1", **over: Any) -> dict[str, Any]:
    doc = {"agent_id": agent_id, "kind": "example.chat", "status": "running", "incarnation": 2,
           "restarts": 0, "deaths": 1, "resurrections": 1, "worker": "w-1", "version": 9,
           "last_event_type": "llm.call", "last_event_at": "2026-01-01T00:00:00+00:00",
           "last_death_cause": "crashed", "quarantine_reason": None,
           "tasks": {"assigned": 1, "completed": 0, "failed": 0, "pending": 1},
           "tokens": {"llm_calls": 1, "prompt": 11, "completion": 7, "spent": 18,
                      "reused": 5, "resumes": 1},
           "pending_tasks": ["t0"], "waiting_for": None, "pending_signals": [],
           "parent_id": None}
    doc.update(over)
    return doc


def event(version: int, type_: str, payload: dict[str, Any]) -> Event:
    return Event(id=f"e{version}", stream_id="a-1", type=type_, module="m", version=version,
                 timestamp=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=version),
                 payload=payload, metadata={}, prev_hash="", hash=f"h{version}")


def replay_doc(position: int = 1) -> dict[str, Any]:
    return {"agent_id": "a-1", "position": position, "head": 3, "steps": 3,
            "event": {"version": 1, "type": "agent.started", "module": "rm",
                      "timestamp": "2026-01-01T00:00:01+00:00", "payload": {"kind": EVIL},
                      "metadata": {}, "hash": "h"},
            "state": {"version": 1, "lifecycle": {"status": "running", "incarnation": 1},
                      "agent": None, "agent_note": EVIL},
            "diff": data.diff({"lifecycle": {"status": "starting"}},
                              {"lifecycle": {"status": "running"}}),
            "integrity": None, "at": None}


def test_fleet_page_rows_filters_pager_and_escaping(env: jinja2.Environment) -> None:
    rows = [{**agent_doc(f"a-{i}", kind=EVIL if i == 0 else "k"), "current_task": "t0",
             "beat_at": datetime.now(UTC), "progress": None} for i in range(3)]
    page = data.FleetPage([], total=250, page=2, size=100, kinds=["k", EVIL], workers=["w-1"])
    html = render(env, "fleet.html", rows=rows, page=page,
                  filter=data.FleetFilter(status="running", worker="w-1", in_doubt=True),
                  statuses=STATUSES, source="projection",
                  query=data.FleetFilter(status="running").query(), heartbeats_error=None)
    assert html.count('data-testid="agent-row"') == 3
    assert 'data-agent-id="a-1" data-status="running" data-incarnation="2"' in html
    assert EVIL not in html
    assert "&lt;script&gt;" in html
    assert 'data-testid="page-prev"' in html
    assert 'data-testid="page-next"' in html
    assert "page=3" in html
    assert "status=running" in html
    assert "page 2 of 3" in html
    assert '<option value="running" selected>' in html
    assert 'data-testid="filter-in-doubt" checked' in html
    assert '<script src="/ui/static/ui.js" defer></script>' in html
    assert "<script>" not in html  # no inline script: the CSP forbids them


def test_fleet_page_empty(env: jinja2.Environment) -> None:
    html = render(env, "fleet.html", rows=[], page=data.FleetPage([], 0, 1, 100),
                  filter=data.FleetFilter(), statuses=STATUSES, source="log", query={},
                  heartbeats_error="no topic")
    assert 'data-testid="fleet-empty"' in html
    assert 'data-testid="fleet-source"' in html
    assert 'data-testid="page-next"' not in html


def test_agent_page(env: jinja2.Environment) -> None:
    genealogy = [{"incarnation": 1, "parent": None, "started_at": "t1", "ended_at": "t2",
                  "lifetime_s": 1.5, "end": "died", "cause_of_death": EVIL,
                  "stop_reason": None, "quarantined": False, "worker": "w-1", "attempts": 1,
                  "backoff_ms": [100], "recovery": {"replayed": 3},
                  "first_version": 1, "last_version": 5}]
    stream = [event(1, "task.assigned", {"task_id": "t0", "input_json": "{}"}),
              event(2, "llm.call", {"task_id": "t0", "name": "answer", "occurrence": 0,
                                    "model": "offline", "prompt_hash": "h", "output": "{}",
                                    "prompt_tokens": 11, "completion_tokens": 7})]
    view = {"current_task": {"task_id": "t0", "state": "paused_in_doubt"},
            "in_doubt": [{"call_id": "c/1", "task_id": "t0", "tool": "pay",
                          "idempotency_key": None, "reason": EVIL, "since": None}]}
    team = {"agent_id": "a-1", "parent_id": "boss", "children": [
        {"agent_id": "kid", "kind": "k", "status": "running", "children": []}]}
    html = render(env, "agent.html", agent=agent_doc(EVIL), source="projection",
                  genealogy=genealogy, team=team,
                  events=[{"version": 2, "type": "llm.call", "module": "m",
                           "timestamp": "t", "payload": {"x": EVIL}}],
                  head=2, journal=journal_rows(stream), journal_truncated=False, view=view,
                  replay=replay_doc())
    assert EVIL not in html
    for testid in ("kill-button", "stop-button", "replay-step", "replay-back",
                   "replay-state", "replay-diff", "event-row", "incarnation-row",
                   "journal-call", "team-child", "team-parent", "resolve-done",
                   "in-doubt-row", "audit-run", "flash"):
        assert f'data-testid="{testid}"' in html, testid
    assert 'action="/agents/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E/kill"' in html
    assert 'action="/agents/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E/calls/c%2F1/resolve"' \
        in html
    assert 'name="csrf" value="c5rf"' in html
    assert 'name="as" value="done"' in html
    assert "11 + 7" in html  # the llm call's tokens
    assert 'data-path="lifecycle.status"' in html


def test_replay_fragment_at_both_ends(env: jinja2.Environment) -> None:
    start = render(env, "_replay.html", replay={**replay_doc(0), "event": None, "diff": []},
                   agent={"agent_id": "a-1"})
    assert 'aria-disabled="true">◀ back' in start
    assert "Before the first event" in start
    end = render(env, "_replay.html", replay=replay_doc(3), agent={"agent_id": "a-1"})
    assert 'data-testid="replay-step" aria-disabled="true"' in end
    assert 'data-fragment="/ui/agents/a-1/replay?step=2"' in end


def test_alerts_page_actions(env: jinja2.Environment) -> None:
    alerts = [
        {"alert_id": "1", "stream_id": "q-1", "kind": "agent_quarantined", "severity": "critical",
         "message": EVIL, "source": "rm", "timestamp": "t", "details": {}},
        {"alert_id": "2", "stream_id": "d-1", "kind": "tool_in_doubt", "severity": "critical",
         "message": "paused", "source": "rm", "timestamp": "t", "details": {"task_id": "t0"}},
        {"alert_id": "3", "stream_id": "x", "kind": "integrity_failure", "severity": "critical",
         "message": "broken", "source": "audit", "timestamp": "t", "details": {}}]
    html = render(env, "alerts.html", alerts=alerts, next="3", stream=None,
                  in_doubt={"d-1": [{"call_id": "c1", "tool": "pay"}]},
                  statuses={"q-1": "quarantined"})
    assert html.count('data-testid="alert-row"') == 3
    assert EVIL not in html
    assert 'action="/agents/q-1/resume"' in html
    assert 'data-testid="resume-button"' in html
    assert 'action="/agents/d-1/calls/c1/resolve"' in html
    assert 'name="as" value="retry"' in html
    assert 'data-testid="page-next"' in html


def workers_page(env: jinja2.Environment, arena: bool, worker: str = "w-1") -> str:
    return render(env, "workers.html", workers=[
        {"worker": worker, "partitions": [0, 2], "agents": 7,
         "last_at": datetime.now(UTC), "interval_ms": 1000}],
        projected=[{"worker": "w-1", "agents": 7, "statuses": {"running": 7}}],
        offsets=[{"topic": "ares.events", "partition": 0, "next_offset": 5, "end_offset": 9,
                  "lag": 4, "updated_at": "t"}], projection_error=None,
        heartbeats_error=None, arena=arena)


def test_workers_page(env: jinja2.Environment) -> None:
    html = workers_page(env, arena=False)
    assert 'data-worker-id="w-1"' in html
    assert "0, 2" in html
    assert '<td>4</td>' in html
    assert "crash-worker-button" not in html  # the arena is off
    assert "/crash" not in html


def test_workers_page_with_the_arena_has_a_crash_button_per_worker(
        env: jinja2.Environment) -> None:
    html = workers_page(env, arena=True)
    row = html[html.index('data-testid="worker-row" data-worker-id="w-1"'):]
    row = row[:row.index("</tr>")]
    assert 'data-testid="crash-worker-button"' in row  # inside the worker's row
    assert 'action="/workers/w-1/crash"' in row
    assert 'name="csrf" value="c5rf"' in row  # ui.js sends it as X-CSRF-Token
    assert "data-write" in row
    assert "data-confirm=" in row
    evil = workers_page(env, arena=True, worker=EVIL)
    assert EVIL not in evil
    assert 'action="/workers/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E/crash"' in evil


def test_genealogy_fragment_alone(env: jinja2.Environment) -> None:
    html = env.get_template("_genealogy.html").render(
        genealogy=[{"incarnation": 2, "parent": 1, "started_at": "t2", "ended_at": None,
                    "lifetime_s": None, "end": None, "cause_of_death": None,
                    "stop_reason": None, "quarantined": False, "worker": "w-2",
                    "attempts": 1, "backoff_ms": [], "recovery": None,
                    "first_version": 6, "last_version": 9}],
        agent={"agent_id": "a/1", "version": 9})
    assert 'id="genealogy"' in html
    assert 'data-fragment="/ui/agents/a%2F1/genealogy" data-version="9"' in html
    assert 'data-testid="incarnation-row" data-incarnation="2" data-end=""' in html


def test_login_and_error_pages(env: jinja2.Environment) -> None:
    html = env.get_template("login.html").render(
        who={"role": None, "via": None, "csrf": "", "writes": True}, path="/ui/login",
        flash={"ok": False, "text": "401: this token is not valid"}, next="/ui/")
    assert 'data-testid="login-token"' in html
    assert 'data-testid="login-submit"' in html
    assert 'data-ok="false"' in html
    assert "401: this token is not valid" in html
    error = render(env, "error.html", status=404, detail=EVIL)
    assert EVIL not in error
    assert 'data-testid="error-status">404' in error


def test_diff_and_flatten() -> None:
    before = {"a": 1, "b": {"c": [1, 2]}, "d": [{"x": 1}], "gone": True}
    after = {"a": 2, "b": {"c": [1, 2, 3]}, "d": [{"x": 1}, {"x": 2}], "new": None}
    changes = {c["path"]: c["change"] for c in data.diff(before, after)}
    assert changes == {"a": "changed", "b.c": "changed", "d[1].x": "added",
                       "gone": "removed", "new": "added"}
    assert data.diff(before, before) == []


def test_next_allows_dashboard_paths_only() -> None:
    assert _next("/ui/agents/a") == "/ui/agents/a"
    for bad in (None, "", "https://evil.example/", "//evil.example/ui/", "/ui/\\x", "/agents"):
        assert _next(bad) == "/ui/"


def test_filter_query() -> None:
    assert data.FleetFilter().query() == {}
    assert data.FleetFilter(kind="k", quarantined=True, in_doubt=True).query() == {
        "kind": "k", "quarantined": "1", "in_doubt": "1"}


def test_beats_by_agent_keeps_the_newest() -> None:
    now = datetime.now(UTC)
    old = data.Beat("w-1", 0, 1, now - timedelta(seconds=9), 1000, ({"agent_id": "a"},))
    new = data.Beat("w-2", 0, 2, now, 1000, ({"agent_id": "a", "progress": "step 3"},))
    assert data.beats_by_agent([new, old])["a"][0] is new
