"""The demo's live terminal view (rich)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ares.demo.fleet import FleetState

_STATUS_STYLE = {"running": "green", "done": "bold green", "dead": "red",
                 "resurrecting": "yellow", "quarantined": "magenta", "starting": "dim"}


def render(state: FleetState, phase: str) -> RenderableType:
    header = Text.assemble(("ares demo", "bold"), "  ", (phase, "cyan"))
    cells = [Text(f"{status}: {count}", style=_STATUS_STYLE.get(status, ""))
             for status, count in sorted(state.by_status().items())]
    counts = Table.grid(padding=(0, 2))
    for _ in cells:
        counts.add_column()
    counts.add_row(*cells)
    total = max(state.total_steps, 1)
    bar = ProgressBar(total=total, completed=min(state.steps_done, total), width=50)
    stats = Table.grid(padding=(0, 2))
    stats.add_column(style="bold")
    stats.add_column()
    stats.add_row("steps", f"{state.steps_done}/{state.total_steps}")
    stats.add_row("tasks", f"{state.tasks_done}/{state.total_tasks}")
    stats.add_row("tokens", f"{state.tokens:,}")
    stats.add_row("resurrected", str(state.resurrected))
    workers = ", ".join(f"{w}: {n}" for w, n in sorted(state.workers().items())) or "-"
    stats.add_row("busy agents per worker", workers)
    for leader in (state.agents[a] for a in state.leaders if a in state.agents):
        members = [state.agents[c] for c in leader.dispatched if c in state.agents]
        stats.add_row(f"team {leader.agent_id}",
                      f"{leader.status} on {leader.worker or '-'}, {len(members)} dispatched, "
                      f"{sum(1 for m in members if state.busy(m.agent_id))} busy, "
                      f"{sum(1 for m in members if m.tasks_done)} done")
    faults = Text("\n".join(f"  ✗ {f}" for f in state.faults[-4:]), style="red")
    return Group(header, bar, counts, stats, faults)
