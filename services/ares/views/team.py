"""Teams: the tree of agents below a leader, from the agents' read models (issue 26).

Pure, no I/O: ``ares agents tree`` builds it from a scan of ``ares.events`` (``TeamScan``),
the replay reader's ``GET /agents/{id}/tree`` from the PostgreSQL projection (or the same
scan while PostgreSQL is down); both fold ``AgentTally`` and call ``team_tree``, so they
answer the same document.

A member's children are the agents it delegated to (``AgentTally.delegated_to``: the
``child_id`` of its ``delegation.dispatched`` events, in dispatch order, each once), then
the agents that name it as their parent (``parent_id``, from their ``task.delegated``) and
are not among those, by agent id: a parent whose dispatches are missing (a projection
row written before it had ``delegated_to``) still finds its children. Only agents are
members: a child whose ``agent.started`` is not in the log yet is left out until it is.

Every agent appears once, at its shallowest depth (the tree is built breadth first, a
child claimed by the first member that reaches it): a cycle (a child that delegates back
to an ancestor) ends there, and a child two members delegated to is shown under the
first, never twice. Nothing here recurses, so a deep team cannot exhaust the stack.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ares.events.model import Event
from ares.lifecycle import state as lc
from ares.views.agents import NoSuchAgentError
from ares.views.tally import AgentTally


@dataclass(frozen=True, slots=True)
class Member:
    """What the tree shows of one agent."""

    agent_id: str
    kind: str
    status: str
    incarnation: int
    task_id: str | None  # the current task (tasks run one at a time), None: idle
    tokens_spent: int  # prompt + completion tokens of its llm.call records
    tokens_reused: int  # re-used from the journal by recoveries
    parent_id: str | None
    delegated_to: tuple[str, ...] = ()

    @classmethod
    def of(cls, tally: AgentTally) -> Member:
        life = tally.lifecycle
        current = life.current_task
        return cls(tally.agent_id, life.kind, life.status.value, life.incarnation,
                   None if current is None else current.task_id,
                   tally.tokens_prompt + tally.tokens_completion, tally.tokens_reused,
                   life.parent_id, tally.delegated_to)

    def to_json(self) -> dict[str, Any]:
        """The member's fields of the tree document (``children`` is the tree's)."""
        return {"agent_id": self.agent_id, "kind": self.kind, "status": self.status,
                "incarnation": self.incarnation, "task_id": self.task_id,
                "tokens_spent": self.tokens_spent, "tokens_reused": self.tokens_reused,
                "parent_id": self.parent_id}


@dataclass(frozen=True, slots=True)
class TeamTree:
    """A member and the subtrees of its children, in order."""

    member: Member
    children: tuple[TeamTree, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The document of ``ares agents tree --json`` and ``GET /agents/{id}/tree``: the
        member's fields and ``children``, a list of documents of the same shape."""
        root: dict[str, Any] = {**self.member.to_json(), "children": []}
        stack: list[tuple[TeamTree, dict[str, Any]]] = [(self, root)]
        while stack:
            node, doc = stack.pop()
            for child in node.children:
                child_doc: dict[str, Any] = {**child.member.to_json(), "children": []}
                doc["children"].append(child_doc)
                stack.append((child, child_doc))
        return root

    def walk(self) -> Iterator[tuple[tuple[bool, ...], TeamTree]]:
        """Every node, depth first, children in order, with its path below the root: for
        each level, whether the node on the path is the last child there (what an indented
        rendering draws: ``├─``, ``└─`` and the ``│`` of the levels still open)."""
        stack: list[tuple[tuple[bool, ...], TeamTree]] = [((), self)]
        while stack:
            path, node = stack.pop()
            yield path, node
            last = len(node.children) - 1
            for i in range(last, -1, -1):
                stack.append(((*path, i == last), node.children[i]))

    @property
    def size(self) -> int:
        """How many members the tree holds."""
        return sum(1 for _ in self.walk())


def team_tree(root_id: str, members: Mapping[str, Member]) -> TeamTree:
    """The tree rooted at ``root_id`` over ``members`` (any superset of the team, keyed by
    agent id); ``NoSuchAgentError`` when the root is not among them."""
    if root_id not in members:
        raise NoSuchAgentError(root_id)
    named_by: dict[str, list[str]] = {}
    for member in members.values():
        if member.parent_id is not None and member.parent_id != member.agent_id:
            named_by.setdefault(member.parent_id, []).append(member.agent_id)
    order = [root_id]
    claimed = {root_id}
    children: dict[str, list[str]] = {}
    for agent_id in order:  # grows while it is read: breadth first
        mine: list[str] = []
        children[agent_id] = mine
        for child in (*members[agent_id].delegated_to, *sorted(named_by.get(agent_id, ()))):
            if child not in claimed and child in members:
                claimed.add(child)
                mine.append(child)
                order.append(child)
    nodes: dict[str, TeamTree] = {}
    for agent_id in reversed(order):  # children before their parent
        nodes[agent_id] = TeamTree(members[agent_id],
                                   tuple(nodes[c] for c in children[agent_id]))
    return nodes[root_id]


class TeamScan:
    """The members of every agent from one pass over the log, in log order (streams
    interleaved, as a partition scan yields them): ``add`` every event, then ``members``.

    A stream is folded from its ``agent.started`` on, as the projection does; only the
    tallies are kept (no payloads), so a scan of the whole log stays small."""

    def __init__(self) -> None:
        self._tallies: dict[str, AgentTally] = {}

    def add(self, event: Event) -> None:
        tally = self._tallies.get(event.stream_id)
        if tally is None:
            if event.type != lc.AGENT_STARTED:
                return  # not an agent's stream (so far)
            tally = AgentTally(lc.AgentLifecycle(event.stream_id))
        self._tallies[event.stream_id], _ = tally.step(event)

    def members(self) -> dict[str, Member]:
        return {agent_id: Member.of(t) for agent_id, t in self._tallies.items()}


__all__ = ["Member", "TeamScan", "TeamTree", "team_tree"]
