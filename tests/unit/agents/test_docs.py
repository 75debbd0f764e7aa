"""docs/sdk.md's worked example is real: under 30 lines, and it runs."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "sdk.md"


def test_the_worked_example_runs_in_under_30_lines(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[0]
    assert len(code.strip().splitlines()) < 30
    (tmp_path / "greeter.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    runpy.run_path(str(tmp_path / "greeter.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "card for Ada" in out
    assert "completed {'text':" in out

    from ares.agents import load_registry

    sys.modules.pop("greeter", None)
    assert load_registry("greeter:REGISTRY").kinds() == ["demo.greeter"]


async def test_the_team_leader_is_under_40_lines_and_runs_its_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "Teams" leader, with each child run in-process as its owner would run it and its
    outcome delivered to the leader as the child's owner sends it."""
    from ares.agents import LocalRuntime
    from ares.agents.delegation import outcome_payload
    from ares.events.wire.canonical import canonical_json, parse_json
    from ares.lifecycle import events as ev

    text = DOC.read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text[text.index("## Teams"):], re.S)[0]
    assert len(code.strip().splitlines()) < 40
    (tmp_path / "team_doc.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = runpy.run_path(str(tmp_path / "team_doc.py"))
    leader = LocalRuntime(module["Leader"], "lead-1")
    outcome = await leader.submit({"question": "Why Kafka?"}, task_id="t1")
    while outcome.status.value == "waiting":
        for event in await leader.events():
            d = event.payload
            if event.type != ev.DELEGATION_DISPATCHED or leader.lifecycle.knows_signal(
                    f"{d['child_id']}/{d['child_task_id']}"):
                continue
            child = LocalRuntime(module["Researcher"], str(d["child_id"]))
            done = await child.submit(parse_json(str(d["input_json"])),
                                      task_id=str(d["child_task_id"]))
            payload = outcome_payload(str(d["child_id"]), str(d["child_task_id"]),
                                      done.status.value, canonical_json(done.output))
            await leader.signal(str(d["signal"]), parse_json(payload),
                                signal_id=f"{d['child_id']}/{d['child_task_id']}")
        [outcome] = await leader.run_open_tasks()
    assert outcome.status.value == "completed", outcome
    assert outcome.output["failed"] == []
    dispatched = [e for e in await leader.events() if e.type == ev.DELEGATION_DISPATCHED]
    assert 1 <= len(dispatched) <= 8
    assert len({e.payload["child_id"] for e in dispatched}) == len(dispatched)


def test_the_chat_and_tools_example_runs_each_model_chosen_tool_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The "Chat and tools" ReAct example: the offline model calls both tools, the
    at-most-once one runs once, and the final answer is the task's output."""
    text = DOC.read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text[text.index("## Chat and tools"):], re.S)[0]
    assert len(code.strip().splitlines()) <= 35
    (tmp_path / "concierge.py").write_text(code, encoding="utf-8")
    runpy.run_path(str(tmp_path / "concierge.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count("table booked in ") == 1
    status, answer = out.strip().splitlines()[-1].split(" ", 1)
    assert status == "completed"
    assert answer.strip()
