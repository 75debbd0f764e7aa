"""``ares bench``: every benchmark of ``bench/``, one report (ours, ceiling, ratio each)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ares.cli.common import settings_of
from ares.errors import ConfigError
from ares.gc_policy import apply_gc_policy

# In the order they run; each module has ``async def run(settings, **opts) -> dict``.
BENCHMARKS = ("append", "read", "replay", "recovery", "scaling", "heartbeats", "waits",
              "takeover", "delegation", "dashboard_live", "java_clients", "tokens", "budgets",
              "signing")
# What --cluster runs unless --only says otherwise: the figures replication changes most.
CLUSTER_BENCHMARKS = ("append", "replay", "recovery")
# Benchmarks that need PostgreSQL (a --cluster run brings one if the configured one is down).
NEEDS_POSTGRES = frozenset({"replay", "dashboard_live"})
err = Console(stderr=True)


def bench_dir() -> Path:
    """``bench/`` of this checkout (the benchmarks are not part of the installed package)."""
    for candidate in (Path.cwd() / "bench", Path(__file__).resolve().parents[3] / "bench"):
        if (candidate / "harness.py").exists():
            return candidate
    raise ConfigError("no bench/ directory here: run `ares bench` from an ares-mesh checkout")


@click.command()
@click.option("--only", "only", multiple=True, type=click.Choice(BENCHMARKS),
              help="Run only these benchmarks (repeatable).")
@click.option("--cluster", "nodes", type=click.IntRange(1, 5), default=1, show_default=True,
              help="Start a fresh N-node Kafka cluster on free ports in a temporary directory, "
                   "run on it (from 3 nodes: topics with replication factor 3 and min ISR 2, "
                   "acks=all) and stop it at the end; default selection "
                   f"{', '.join(CLUSTER_BENCHMARKS)}. 1: the configured broker.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report.")
@click.pass_context
def bench(ctx: click.Context, only: tuple[str, ...], nodes: int, as_json: bool) -> None:
    """Run the benchmarks against the configured broker (or a cluster of their own with
    --cluster), each next to its raw ceiling (raw aiokafka produce/consume of the same
    bytes, fastavro encode/decode) measured in the same run; `docs/benchmarks.md` explains
    each figure."""
    settings = settings_of(ctx)
    root = bench_dir()
    apply_gc_policy(settings.gc_threshold)  # as `ares run <service>`; ceilings run under it too
    sys.path.insert(0, str(root.parent))
    selected = only or (CLUSTER_BENCHMARKS if nodes > 1 else BENCHMARKS)
    harness = importlib.import_module("bench.harness")
    report: dict[str, Any] = {"sections": {}}
    with contextlib.ExitStack() as stack:
        if nodes > 1:
            cluster = importlib.import_module("bench.cluster")
            settings = stack.enter_context(cluster.private_cluster(
                settings, nodes, postgres=bool(NEEDS_POSTGRES.intersection(selected)),
                progress=lambda line: err.print(f"[dim]{line}[/]", highlight=False)))
        where = asyncio.run(harness.topology(settings))
        report["cluster"] = where
        for name in selected:
            try:
                module = importlib.import_module(f"bench.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"bench.{name}":  # the module is there, one of its imports not
                    raise
                err.print(f"[yellow]{name}: no bench/{name}.py in this checkout, skipped[/]")
                continue
            err.print(f"[cyan]▸[/] {name} ...", highlight=False)
            started = time.monotonic()
            section = asyncio.run(module.run(settings))
            section["wall_s"] = round(time.monotonic() - started, 1)
            section["cluster"] = where
            report["sections"][name] = section
            if not as_json:
                click.echo(harness.render(section))
    if as_json:
        click.echo(json.dumps(report, indent=2))
