"""Dashboard benchmark: server time of the fleet page (/ui/) with 10,000 agents.

Run alone: ``python bench/dashboard.py [--agents N] [--repeat R]`` (ARES_POSTGRES_DSN).

A projections schema of its own gets N agents (rows made by the projection's own
``AgentRow.record()``); then the fleet page's server work is timed as the handler does it:
the SQL page with its count (``ui.data.fleet_page``) and the Jinja2 render of
``fleet.html`` (100 rows), for the first page, a far page and a filtered page. Heartbeats
(read from Kafka, cached 2 s) and the network are left out. Figures: median and worst of
R runs, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from ares.config import Settings
from ares.lifecycle import state as lc
from ares.replay_reader.pg_store import ProjectionStore
from ares.replay_reader.projection import AGENT_COLUMNS, AgentRow
from ares.replay_reader.ui import data
from ares.replay_reader.ui.pages import STATUSES, environment

STATUS_CYCLE = [lc.Status.RUNNING] * 8 + [lc.Status.DEAD, lc.Status.QUARANTINED]


def agent(i: int) -> tuple[Any, ...]:
    life = lc.AgentLifecycle(f"agent-{i:05d}", kind=f"kind-{i % 5}",
                             status=STATUS_CYCLE[i % len(STATUS_CYCLE)], incarnation=1 + i % 3,
                             worker=f"worker-{i % 4}", version=10 + i % 50,
                             last_event_type="llm.call", last_event_time=time.time())
    return AgentRow(life, llm_calls=3, tokens_prompt=30, tokens_completion=20).record()


async def run(settings: Settings, agents: int, repeat: int) -> dict[str, Any]:
    schema = f"bench_ui_{uuid.uuid4().hex[:8]}"
    store = ProjectionStore(settings.postgres_dsn, schema, events_topic="ares.events")
    env = environment()
    template = env.get_template("fleet.html")
    try:
        await store.migrate()
        async with store.connection() as conn:
            await conn.copy_records_to_table("agents", columns=AGENT_COLUMNS,
                                             records=[agent(i) for i in range(agents)])
            await conn.execute("ANALYZE agents")
        cases = {"first page": (data.FleetFilter(), 1),
                 "page 50": (data.FleetFilter(), 50),
                 "filtered (status, worker)": (data.FleetFilter(status="running",
                                                                worker="worker-1"), 3)}
        out: dict[str, Any] = {"agents": agents, "repeat": repeat, "cases": {}}
        for name, (flt, page_no) in cases.items():
            sql_ms, render_ms = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                page = await data.fleet_page(store, flt, page_no)
                t1 = time.perf_counter()
                rows = [{**r, "current_task": None, "beat_at": None, "progress": None}
                        for r in page.items]
                template.render(who={"role": None, "via": None, "csrf": "", "writes": True},
                                path="/ui/", flash=None, rows=rows, page=page, filter=flt,
                                statuses=STATUSES, source="projection", query=flt.query(),
                                heartbeats_error=None)
                t2 = time.perf_counter()
                sql_ms.append((t1 - t0) * 1000)
                render_ms.append((t2 - t1) * 1000)
            total = [a + b for a, b in zip(sql_ms, render_ms, strict=True)]
            out["cases"][name] = {
                "rows": len(page.items), "sql_ms_median": round(statistics.median(sql_ms), 2),
                "render_ms_median": round(statistics.median(render_ms), 2),
                "total_ms_median": round(statistics.median(total), 2),
                "total_ms_max": round(max(total), 2)}
        return out
    finally:
        await store.drop()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(Settings.from_env(), args.agents, args.repeat)),
                     indent=2))


if __name__ == "__main__":
    main()
