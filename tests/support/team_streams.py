"""A team's event streams as the SDK and the runtime manager write them (issue 26): the
leader's ``delegation.dispatched``, each child's ``task.assigned`` + ``task.delegated``,
outcomes back as ``signal.received`` and ``delegation.reported``. Plain (type, payload)
pairs, so unit tests seal them (``tests.unit.runtime.streams``) and integration tests
append them to Kafka (``NewEvent``).

The team of ``team()``, rooted at ``lead``:

    lead (team.lead) running, task t1, 120+30 tokens
    ├─ lead.research-2 (team.researcher) running, task lead/t1/2, 100+20 tokens
    │  └─ lead.research-2.fetch-1 (team.fetcher) idle (its task completed), 5+5 tokens
    └─ lead.write-3 (team.writer) running, incarnation 2, idle, 40+2 tokens, 42 reused

``lead`` also dispatched ``lead.research-2`` a second time (same child, another task:
listed once) and ``lead.ghost-4``, whose agent never started (not a member). ``solo``
is an agent of no team.
"""

from __future__ import annotations

import json
from typing import Any

from ares.lifecycle import events as ev

Pair = tuple[str, dict[str, Any]]

LEAD, RESEARCH, FETCH, WRITE, GHOST = ("lead", "lead.research-2", "lead.research-2.fetch-1",
                                       "lead.write-3", "lead.ghost-4")


def started(kind: str, incarnation: int = 1) -> Pair:
    return (ev.AGENT_STARTED, {"kind": kind, "config_json": "{}", "incarnation": incarnation,
                               "worker": "w-1"})


def assigned(task_id: str) -> Pair:
    return (ev.TASK_ASSIGNED, {"task_id": task_id, "input_json": "{}"})


def llm(task_id: str, name: str, prompt: int, completion: int) -> Pair:
    return ("llm.call", {"task_id": task_id, "name": name, "occurrence": 0, "model": "m",
                         "prompt_hash": "h", "output": "{}", "prompt_tokens": prompt,
                         "completion_tokens": completion})


def dispatched(parent: str, task_id: str, name: str, position: int, child_kind: str,
               child_id: str | None = None) -> Pair:
    where = f"{task_id}/{position}"
    return (ev.DELEGATION_DISPATCHED, {
        "task_id": task_id, "name": name, "occurrence": 0,
        "child_id": child_id or f"{parent}.{name}-{position}", "child_kind": child_kind,
        "child_task_id": f"{parent}/{where}", "input_json": "{}", "config_json": "{}",
        "on_parent_stop": "stop", "deadline": None, "signal": f"child:{where}"})


def delegated(task_id: str, parent: str, parent_task_id: str, position: int) -> list[Pair]:
    """A delegated assignment: ``task.assigned`` then ``task.delegated``."""
    return [assigned(task_id), (ev.TASK_DELEGATED, {
        "task_id": task_id, "parent_id": parent, "parent_task_id": parent_task_id,
        "signal": f"child:{parent_task_id}/{position}", "on_parent_stop": "stop"})]


def completed(task_id: str) -> Pair:
    return (ev.TASK_COMPLETED, {"task_id": task_id, "output_json": "{}"})


def reported(task_id: str, parent: str, parent_task_id: str, position: int,
             child: str) -> Pair:
    return (ev.DELEGATION_REPORTED, {
        "task_id": task_id, "parent_id": parent, "parent_task_id": parent_task_id,
        "signal": f"child:{parent_task_id}/{position}", "signal_id": f"{child}/{task_id}",
        "status": "completed", "error": None})


def outcome(child: str, child_task_id: str, signal: str) -> Pair:
    return (ev.SIGNAL_RECEIVED, {
        "signal_id": f"{child}/{child_task_id}", "name": signal,
        "payload_json": json.dumps({"child_id": child, "task_id": child_task_id,
                                    "status": "completed", "output": {}})})


def team() -> dict[str, list[Pair]]:
    """The streams of the team above (and ``solo``), each in stream order."""
    research_task, fetch_task, write_task = "lead/t1/2", "lead.research-2/lead/t1/2/1", \
        "lead/t1/3"
    return {
        LEAD: [
            started("team.lead"), assigned("t1"), llm("t1", "plan", 120, 30),
            dispatched(LEAD, "t1", "research", 2, "team.researcher"),
            dispatched(LEAD, "t1", "write", 3, "team.writer"),
            outcome(WRITE, write_task, "child:t1/3"),
            # The same child again (an explicit agent id), for another task: listed once.
            dispatched(LEAD, "t1", "research", 5, "team.researcher", child_id=RESEARCH),
            dispatched(LEAD, "t1", "ghost", 4, "team.ghost"),
        ],
        RESEARCH: [
            started("team.researcher"), *delegated(research_task, LEAD, "t1", 2),
            llm(research_task, "search", 100, 20),
            dispatched(RESEARCH, research_task, "fetch", 1, "team.fetcher"),
            outcome(FETCH, fetch_task, f"child:{research_task}/1"),
        ],
        FETCH: [
            started("team.fetcher"), *delegated(fetch_task, RESEARCH, research_task, 1),
            llm(fetch_task, "fetch", 5, 5), completed(fetch_task),
            reported(fetch_task, RESEARCH, research_task, 1, FETCH),
        ],
        WRITE: [
            started("team.writer"), *delegated(write_task, LEAD, "t1", 3),
            llm(write_task, "draft", 40, 2),
            (ev.AGENT_DEAD, {"cause": "crashed", "incarnation": 1}),
            (ev.AGENT_RESURRECTED, {"incarnation": 2, "parent_incarnation": 1,
                                    "replayed_events": 5, "recovery_ms": 3}),
            ("task.resumed", {"task_id": write_task, "reused_llm_calls": 1,
                              "reused_prompt_tokens": 40, "reused_completion_tokens": 2}),
            completed(write_task), reported(write_task, LEAD, "t1", 3, WRITE),
        ],
        "solo": [started("example.chat"), assigned("s1")],
    }


def expected_tree() -> dict[str, Any]:
    """``team()``'s tree document rooted at ``lead``."""
    def node(agent_id: str, kind: str, incarnation: int, task_id: str | None, spent: int,
             reused: int, parent: str | None, *children: dict[str, Any]) -> dict[str, Any]:
        return {"agent_id": agent_id, "kind": kind, "status": "running",
                "incarnation": incarnation, "task_id": task_id, "tokens_spent": spent,
                "tokens_reused": reused, "parent_id": parent, "children": list(children)}

    return node(LEAD, "team.lead", 1, "t1", 150, 0, None,
                node(RESEARCH, "team.researcher", 1, "lead/t1/2", 120, 0, LEAD,
                     node(FETCH, "team.fetcher", 1, None, 10, 0, RESEARCH)),
                node(WRITE, "team.writer", 2, None, 42, 42, LEAD))
