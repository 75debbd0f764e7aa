"""Rebalances of the runtime group per fault: a paused or slow worker fenced, not thrashed.

Fast failover (the health checker removes a worker silent for three 0.25 s heartbeats)
has a price: a worker that is only paused or slow is fenced too. Once is the design: one
rebalance to move its partitions away, one to take it back when it returns. A worker that
is removed, rejoins, is removed again while the fault lasts is a rebalance storm: the
group spends the fault rebalancing instead of working.

The group coordinator's own log line counts the rebalances: "Stabilized group G generation
N with M members" (one per completed rebalance, on whichever broker coordinates the group;
a generation seen on two brokers is counted once). Each fault is charged the generations
stabilized from its start until the group is whole again (``members`` members, stable)
after its heal. Pure but for ``read_group_log``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ares.chaos.faults import BROKER, NETWORK, PROCESS, RUNTIME_MANAGER, FaultKind

# log4j's "[%d]": local time, as the JVM and this process share the machine's zone.
_STAMP = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]"
_STABILIZED = re.compile(_STAMP + r".*Stabilized group (\S+) generation (\d+) with (\d+) members")
_PREPARING = re.compile(_STAMP + r".*Preparing to rebalance group (\S+) ")
# A static member (re)joining names its instance id: a fenced worker coming back.
_JOINING = re.compile(r"Adding new member \S+ with group instance id ([^;\s)]+)")
_EMPTY = re.compile(_STAMP + r".*Group (\S+) with generation \d+ is now empty")
# After its heal, how long a fault is charged at most while the group is not whole again.
SETTLE_CAP_S = 60.0
# A fault may cost each worker it touches one fence and one return: two rebalances per
# worker fault, two per worker for a fault on the brokers (every member may be fenced).
FENCE_AND_RETURN = 2


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """A rebalance starting (``generation`` None) or done (the generation, its members)."""

    at: float  # epoch seconds
    generation: int | None
    members: int = 0
    joining: str = ""  # the instance id a rebalance starts for, when it is a (re)join


@dataclass(frozen=True, slots=True)
class Strike:
    """A fault as it happened: from its start to its heal, in epoch seconds."""

    index: int
    kind: FaultKind
    target: str
    started: float
    healed: float

    @property
    def on_worker(self) -> bool:
        """Pauses, kills and network faults of a runtime manager, or a slow broker (every
        worker slow): the faults fast failover must fence, not thrash."""
        return ((self.kind in (*PROCESS, *NETWORK) and self.target.startswith(RUNTIME_MANAGER))
                or self.kind is FaultKind.BROKER_SLOW)

    @property
    def on_brokers(self) -> bool:
        return self.kind in BROKER


def parse_group_log(lines: Iterable[str], group: str) -> list[GroupEvent]:
    """The group's rebalances in one broker log, in order."""
    events = []
    for line in lines:
        if (m := _STABILIZED.match(line)) and m[2] == group:
            events.append(GroupEvent(_epoch(m[1]), int(m[3]), int(m[4])))
        elif (m := _PREPARING.match(line)) and m[2] == group:
            joining = _JOINING.search(line)
            events.append(GroupEvent(_epoch(m[1]), None, joining=joining[1] if joining else ""))
        elif (m := _EMPTY.match(line)) and m[2] == group:
            events.append(GroupEvent(_epoch(m[1]), None))
    return events


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def read_group_log(logs: Sequence[Path], group: str) -> list[GroupEvent]:
    """Every broker's view merged: in time order, each generation once (its first)."""
    events: list[GroupEvent] = []
    for path in logs:
        if path.exists():
            with path.open(errors="replace") as lines:
                events += parse_group_log(lines, group)
    return merge(events)


def merge(events: Iterable[GroupEvent]) -> list[GroupEvent]:
    seen: set[int] = set()
    merged = []
    for event in sorted(events, key=lambda e: e.at):
        if event.generation is not None:
            if event.generation in seen:
                continue
            seen.add(event.generation)
        merged.append(event)
    return merged


def whole_again(events: Sequence[GroupEvent], after: float, members: int) -> float:
    """When the group is stable with ``members`` members again, from ``after`` on (at most
    ``SETTLE_CAP_S`` later)."""
    before = [e for e in events if e.at <= after]
    if before and before[-1].generation is not None and before[-1].members >= members:
        return after
    return next((e.at for e in events if after < e.at <= after + SETTLE_CAP_S
                 and e.generation is not None and e.members >= members),
                after + SETTLE_CAP_S)


@dataclass(frozen=True, slots=True)
class Charge:
    strike: Strike
    rebalances: int  # generations stabilized from its start until the group was whole
    budget: int  # what the faults overlapping that window may cost (FENCE_AND_RETURN)
    # Times the victim worker (re)joined in that window, up to the next fault on it: 1
    # when fenced (or killed) and back once (2 when the next fault struck before it was
    # back); more is the victim itself thrashed. None for a fault on no one worker.
    victim_joins: int | None = None


def charge(strikes: Sequence[Strike], events: Sequence[GroupEvent], members: int,
           instances: Mapping[str, str] | None = None) -> list[Charge]:
    """Each worker fault's rebalances and the budget of the faults that overlap it;
    ``instances`` (service name -> group instance id) names each victim's rejoins."""
    windows = [(s, s.started, whole_again(events, s.healed, members)) for s in strikes]
    charges = []
    for strike, start, end in windows:
        if not strike.on_worker:
            continue
        count = sum(1 for e in events if e.generation is not None and start <= e.at <= end)
        overlapping = [s for s, s_start, s_end in windows if s_start <= end and s_end >= start]
        budget = sum(FENCE_AND_RETURN * (members if s.on_brokers or s.kind is
                                         FaultKind.BROKER_SLOW else 1)
                     for s in overlapping if s.on_worker or s.on_brokers)
        instance = (instances or {}).get(strike.target)
        # Each join of the victim belongs to the latest fault on it that had started: the
        # next fault on the same worker (the per-target lock starts it after this heal)
        # ends this one's share, so back-to-back faults never count one join twice.
        until = min([end, *(s.started for s in strikes
                             if s.target == strike.target and s.started > start)])
        joins = None if not instance else sum(
            1 for e in events if e.joining == instance and start <= e.at < until)
        charges.append(Charge(strike, count, budget, joins))
    return charges


def per_kind(charges: Sequence[Charge]) -> dict[str, dict[str, int]]:
    """``rebalances_per_worker_fault``: per kind, the faults, their rebalances, the most
    for one, and the most times one fault's victim joined again (``max_victim_joins``: 1
    is fenced and back once)."""
    out: dict[str, dict[str, int]] = {}
    for c in charges:
        row = out.setdefault(str(c.strike.kind), {"faults": 0, "rebalances": 0, "max": 0,
                                                  "max_victim_joins": 0})
        row["faults"] += 1
        row["rebalances"] += c.rebalances
        row["max"] = max(row["max"], c.rebalances)
        row["max_victim_joins"] = max(row["max_victim_joins"], c.victim_joins or 0)
    return out


def storms(charges: Sequence[Charge]) -> list[str]:
    """A fault whose window saw more rebalances than every fault overlapping it may cost:
    a worker thrashed (removed, back, removed again), not fenced."""
    return [f"rebalance_storm: fault #{c.strike.index} {c.strike.kind} on {c.strike.target}: "
            f"{c.rebalances} rebalances from its start until the group was whole again, more "
            f"than the {c.budget} the faults overlapping it may cost" for c in charges
            if c.rebalances > c.budget]


def to_json(charges: Sequence[Charge], events: Sequence[GroupEvent], since: float,
            until: float) -> dict[str, Any]:
    rebalances = sum(1 for e in events if e.generation is not None and since <= e.at <= until)
    return {"rebalances_during_run": rebalances,
            "per_fault": [{"index": c.strike.index, "kind": str(c.strike.kind),
                           "target": c.strike.target, "started": _iso(c.strike.started),
                           "healed": _iso(c.strike.healed), "rebalances": c.rebalances,
                           "budget": c.budget, "victim_joins": c.victim_joins}
                          for c in charges]}


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).isoformat(timespec="milliseconds")
