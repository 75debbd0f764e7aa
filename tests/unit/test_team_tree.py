"""Teams on the read side (issue 26): the tally's links (``parent_id``, ``delegated_to``),
the tree of ``ares.views.team`` (dispatch order, each agent once, cycles), its renderings
(``ares agents tree``, ``ares agents status``) and the projection's row of it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from ares.agents import LocalRuntime, OutcomeStatus
from ares.agents.agent import Agent, Task
from ares.agents.context import Context
from ares.agents.delegation import Delegation, outcome_payload
from ares.agents.host_api import AgentServices
from ares.cli import cli
from ares.cli.agents import _view_lines, _views_table, tree_lines
from ares.events.model import Event
from ares.events.wire.canonical import parse_json
from ares.lifecycle import events as ev
from ares.replay_reader import openapi
from ares.replay_reader.projection import AGENT_COLUMNS, AgentRow, Located, project
from ares.views.agents import NoSuchAgentError, all_agent_views
from ares.views.team import Member, TeamScan, TeamTree, team_tree
from tests.support import team_streams as ts
from tests.unit.agents.support import FakeClock
from tests.unit.runtime.streams import Stream


def sealed(streams: dict[str, list[ts.Pair]]) -> dict[str, list[Event]]:
    out = {}
    for stream_id, pairs in streams.items():
        s = Stream(stream_id)
        for i, (type_, payload) in enumerate(pairs):
            s.add(type_, payload, at_s=i)
        out[stream_id] = s.events
    return out


def interleaved(streams: dict[str, list[Event]]) -> list[Event]:
    """Round robin over the streams: how a partition scan mixes them."""
    queues = [list(events) for events in streams.values()]
    mixed = []
    while any(queues):
        for q in queues:
            if q:
                mixed.append(q.pop(0))
    return mixed


def members_of(streams: dict[str, list[ts.Pair]]) -> dict[str, Member]:
    scan = TeamScan()
    for event in interleaved(sealed(streams)):
        scan.add(event)
    return scan.members()


def member(agent_id: str, parent: str | None = None, *delegated_to: str) -> Member:
    return Member(agent_id, "k", "running", 1, None, 0, 0, parent, tuple(delegated_to))


def shape(tree: TeamTree) -> list[tuple[str, list[str]]]:
    return [(node.member.agent_id, [c.member.agent_id for c in node.children])
            for _, node in tree.walk()]


# -- the tally ---------------------------------------------------------------------------


def test_the_tally_keeps_every_dispatched_child_once_in_dispatch_order() -> None:
    events = sealed(ts.team())
    folded = project([Located(0, i, e) for i, e in enumerate(events[ts.LEAD])], {})
    row = folded.agents[ts.LEAD]
    # research (twice: once), write, ghost (never started: still dispatched)
    assert row.delegated_to == (ts.RESEARCH, ts.WRITE, ts.GHOST)
    assert row.parent_id is None
    # The lifecycle keeps only the open delegations; the tally keeps them all.
    assert ts.WRITE not in [c.child_id for c in row.lifecycle.children]
    # Folded a batch at a time, or one event at a time: the same tally.
    split = 5
    first = project([Located(0, i, e) for i, e in enumerate(events[ts.LEAD][:split])], {})
    rest = project([Located(0, i, e) for i, e in enumerate(events[ts.LEAD][split:])],
                   {ts.LEAD: first.agents[ts.LEAD]})
    assert rest.agents[ts.LEAD] == row
    assert first.agents[ts.LEAD].delegated_to == (ts.RESEARCH, ts.WRITE)
    stepped = members_of({ts.LEAD: ts.team()[ts.LEAD]})[ts.LEAD]
    assert stepped.delegated_to == row.delegated_to


def test_the_parent_is_the_one_of_the_latest_delegated_task() -> None:
    members = members_of(ts.team())
    assert members[ts.RESEARCH].parent_id == ts.LEAD
    assert members[ts.FETCH].parent_id == ts.RESEARCH
    assert members["solo"].parent_id is None
    assert ts.GHOST not in members  # dispatched, never started: no agent
    views = {v.agent_id: v for v in all_agent_views(interleaved(sealed(ts.team())))}
    assert views[ts.FETCH].parent_id == ts.RESEARCH
    assert views[ts.LEAD].delegated_to == (ts.RESEARCH, ts.WRITE, ts.GHOST)
    assert views[ts.FETCH].to_json()["parent_id"] == ts.RESEARCH
    assert views[ts.LEAD].to_json()["parent_id"] is None


class _Lead(Agent):
    kind = "test.lead"

    async def handle(self, task: Task, ctx: Context) -> Any:
        parts = [Delegation(f"part-{i}", "test.worker", {"i": i}) for i in range(4)]
        return await ctx.delegate_many(parts, max_parallel=2)


async def test_the_children_are_the_sdk_s_dispatches_in_order_across_re_runs() -> None:
    """The SDK's own ``delegation.dispatched`` (``ctx.delegate_many``, re-run after every
    outcome, as a resurrection or a wake-up re-runs it) make ``delegated_to``."""
    rt = LocalRuntime(_Lead, "lead-1", services=AgentServices(clock=FakeClock()))
    outcome = await rt.submit({}, task_id="t1")
    reported: set[str] = set()
    while outcome.status is OutcomeStatus.WAITING:
        for event in await rt.events():
            d = event.payload
            if event.type != ev.DELEGATION_DISPATCHED or d["child_id"] in reported:
                continue
            reported.add(d["child_id"])  # the child's owner reports its outcome
            assert await rt.signal(d["signal"], parse_json(outcome_payload(
                d["child_id"], d["child_task_id"], "completed", "1", None, None)),
                signal_id=f"{d['child_id']}/{d['child_task_id']}")
        [outcome] = await rt.run_open_tasks()
    assert outcome.status is OutcomeStatus.COMPLETED
    events = await rt.events()
    dispatched = [e.payload["child_id"] for e in events if e.type == ev.DELEGATION_DISPATCHED]
    assert len(dispatched) == 4
    scan = TeamScan()
    for event in events:
        scan.add(event)
    lead = scan.members()["lead-1"]
    assert lead.delegated_to == tuple(dispatched)
    # child id = f"{parent}.{name}-{position}": the parts, in the order delegated
    assert [c.rsplit("-", 1)[0] for c in lead.delegated_to] == [
        f"lead-1.part-{i}" for i in range(4)]
    view = all_agent_views(events)[0]
    assert view.delegated_to == lead.delegated_to
    assert view.parent_id is None


# -- the tree ----------------------------------------------------------------------------


def test_the_team_tree_from_real_streams() -> None:
    tree = team_tree(ts.LEAD, members_of(ts.team()))
    assert tree.to_json() == ts.expected_tree()
    assert tree.size == 4
    # Any member is the root of its own subtree; the root's parent is shown, not walked.
    sub = team_tree(ts.RESEARCH, members_of(ts.team())).to_json()
    assert (sub["parent_id"], [c["agent_id"] for c in sub["children"]]) == (ts.LEAD, [ts.FETCH])
    alone = team_tree("solo", members_of(ts.team())).to_json()
    assert alone["children"] == []
    assert alone["task_id"] == "s1"


def test_children_in_dispatch_order_then_by_parent_each_once() -> None:
    members = {m.agent_id: m for m in [
        member("r", None, "c", "a", "b", "a", "c"),  # as folded: duplicates never stay,
        member("a", "r"), member("b", "r"), member("c", "r"),  # but a list may have them
        member("z", "r"), member("m", "r"),  # named by their parent only: after, by id
    ]}
    assert shape(team_tree("r", members))[0] == ("r", ["c", "a", "b", "m", "z"])


def test_a_cycle_of_delegations_ends() -> None:
    # r -> a -> b -> r (b delegated back to the root), and a -> a (to itself)
    members = {m.agent_id: m for m in [member("r", "b", "a"), member("a", "r", "b", "a"),
                                       member("b", "a", "r")]}
    assert shape(team_tree("r", members)) == [("r", ["a"]), ("a", ["b"]), ("b", [])]
    assert shape(team_tree("b", members)) == [("b", ["r"]), ("r", ["a"]), ("a", [])]
    # Only parent links, in a loop: the same.
    looped = {m.agent_id: m for m in [member("x", "y"), member("y", "x")]}
    assert shape(team_tree("x", looped)) == [("x", ["y"]), ("y", [])]


def test_a_shared_child_is_shown_once_at_its_shallowest_place() -> None:
    # r -> a -> s and r -> b -> s ... and r -> s directly, last: s sits under r.
    members = {m.agent_id: m for m in [member("r", None, "a", "b", "s"),
                                       member("a", "r", "s"), member("b", "r", "s"),
                                       member("s", "b")]}
    tree = team_tree("r", members)
    assert shape(tree) == [("r", ["a", "b", "s"]), ("a", []), ("b", []), ("s", [])]
    assert tree.size == 4


def test_an_unknown_root_is_no_such_agent() -> None:
    with pytest.raises(NoSuchAgentError, match="no agent 'nobody'"):
        team_tree("nobody", members_of(ts.team()))


def test_a_deep_team_needs_no_recursion() -> None:
    depth = sys.getrecursionlimit() * 3
    members = {f"n{i}": member(f"n{i}", f"n{i - 1}" if i else None,
                               *((f"n{i + 1}",) if i + 1 < depth else ()))
               for i in range(depth)}
    tree = team_tree("n0", members)
    assert tree.size == depth
    doc = tree.to_json()
    for _ in range(depth - 1):
        [doc] = doc["children"]
    assert (doc["agent_id"], doc["children"]) == (f"n{depth - 1}", [])
    assert len(tree_lines(tree)) == depth


# -- renderings --------------------------------------------------------------------------


def test_the_text_tree_is_indented_one_line_per_member() -> None:
    lines = tree_lines(team_tree(ts.LEAD, members_of(ts.team())))
    assert lines == [
        "lead (team.lead) · running · incarnation 1 · task t1 · tokens 150 spent, 0 reused",
        "├─ lead.research-2 (team.researcher) · running · incarnation 1 · task lead/t1/2 · "
        "tokens 120 spent, 0 reused",
        "│  └─ lead.research-2.fetch-1 (team.fetcher) · running · incarnation 1 · no task · "
        "tokens 10 spent, 0 reused",
        "└─ lead.write-3 (team.writer) · running · incarnation 2 · no task · tokens 42 spent, "
        "42 reused"]


def test_the_text_tree_draws_open_levels_and_escapes_the_log() -> None:
    members = {m.agent_id: m for m in [member("r", None, "a", "b"), member("a", "r", "a1"),
                                       member("a1", "a", "x\x1b[2J"), member("x\x1b[2J", "a1"),
                                       member("b", "r")]}
    lines = tree_lines(team_tree("r", members))
    prefixes = [line.split(" (")[0] for line in lines]
    assert prefixes == ["r", "├─ a", "│  └─ a1", "│     └─ x\\x1b[2J", "└─ b"]
    assert all(line.isprintable() for line in lines)


def test_status_shows_the_parent_and_the_children() -> None:
    views = {v.agent_id: v for v in all_agent_views(interleaved(sealed(ts.team())))}
    research = "\n".join(_view_lines(views[ts.RESEARCH]))
    assert "parent    lead (its team: ares agents tree lead)" in research
    assert "children  1 delegated to (the team: ares agents tree lead.research-2)" in research
    solo = "\n".join(_view_lines(views["solo"]))
    assert "parent" not in solo
    assert "children" not in solo
    with_teams = _views_table(list(views.values()))
    assert [c.header for c in with_teams.columns][-1] == "PARENT"
    without = _views_table([views["solo"]])
    assert "PARENT" not in [c.header for c in without.columns]


# -- the projection and the API document -------------------------------------------------


def test_the_projected_row_holds_the_links_and_round_trips() -> None:
    events = interleaved(sealed(ts.team()))
    rows = project([Located(0, i, e) for i, e in enumerate(events)], {}).agents
    research = rows[ts.RESEARCH]
    stored = dict(zip(AGENT_COLUMNS, research.record(), strict=True))
    assert (stored["parent_id"], stored["delegated_to"]) == (ts.LEAD, [ts.FETCH])
    assert AgentRow.from_record(stored) == research
    assert research.to_json()["parent_id"] == ts.LEAD
    assert rows[ts.LEAD].to_json()["parent_id"] is None
    # The projection's members make the same tree as the CLI's scan.
    projected = {a: Member.of(r) for a, r in rows.items()}
    assert team_tree(ts.LEAD, projected).to_json() == ts.expected_tree()
    # A row stored before 0002_team_links (no dispatches): children by parent still.
    old = {a: Member.of(AgentRow.from_record({**dict(zip(AGENT_COLUMNS, r.record(),
                                                         strict=True)),
                                             "delegated_to": []}))
           for a, r in rows.items()}
    assert shape(team_tree(ts.LEAD, old))[:2] == [(ts.LEAD, [ts.RESEARCH, ts.WRITE]),
                                                  (ts.RESEARCH, [ts.FETCH])]


def test_the_openapi_tree_document_is_the_tree_s_fields() -> None:
    doc = openapi.document()
    schemas = doc["components"]["schemas"]
    tree = schemas["AgentTree"]
    assert set(tree["properties"]) == set(tree["required"]) == set(ts.expected_tree())
    assert tree["properties"]["children"]["items"] == {"$ref": "#/components/schemas/AgentTree"}
    ok = doc["paths"]["/agents/{agent_id}/tree"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AgentTree"}
    assert "parent_id" in schemas["Agent"]["required"]
    assert schemas["Agent"]["properties"]["parent_id"]["nullable"] is True


def test_the_team_view_is_pure() -> None:
    code = "import json, sys, ares.views.team; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.startswith(("aiokafka", "asyncpg", "aiohttp",
                                                "ares.replay_reader", "ares.events.kafka"))] == []


def test_tree_help_teaches_the_command() -> None:
    result = CliRunner().invoke(cli, ["agents", "tree", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for taught in ("team rooted at agent ID", "├─", "dispatch order", "--json",
                   "tokens_spent", "children", "GET /agents/{id}/tree", "unknown ID exits 1"):
        assert taught in text, taught
    listed = CliRunner().invoke(cli, ["agents", "--help"])
    assert "tree" in listed.output
