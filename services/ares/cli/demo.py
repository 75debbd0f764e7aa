"""``ares demo``: the main job — a fleet killed mid-task and resurrected, with a report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from ares.cli.common import settings_of
from ares.config import Settings
from ares.demo.report import DemoReport
from ares.demo.runner import DashboardAccess, DemoOptions, DemoRun, run_demo, stop_services
from ares.demo.view import render
from ares.devenv import DevEnvironment
from ares.devenv import kafka as dev_kafka
from ares.errors import ConfigError
from ares.logs import quiet_aiokafka

err = Console(stderr=True)


@click.command()
@click.option("--agents", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="example.pipeline agents (each: a multi-step task and one e-mail).")
@click.option("--chats", type=click.IntRange(0, 100), default=2, show_default=True,
              help="example.chat agents (a three-turn conversation each).")
@click.option("--steps", type=click.IntRange(1, 100), default=8, show_default=True,
              help="LLM steps per pipeline task.")
@click.option("--step-ms", type=click.IntRange(0, 10_000), default=250, show_default=True,
              help="Simulated LLM latency per step.")
@click.option("--kill-at", type=click.FloatRange(0.0, 0.95), default=0.35, show_default=True,
              help="Fraction of all steps done when a runtime manager is SIGKILLed.")
@click.option("--keep-running", is_flag=True,
              help="Leave the services running afterwards (explore with `ares replay`).")
@click.option("--ui", is_flag=True,
              help="End in the arena: after the report, keep every service running and the "
                   "dashboard open (its URL and a generated operator token are printed, "
                   "once; log in with the token to Kill, Stop or Crash worker) until Ctrl+C, "
                   "which stops them all.")
@click.option("--llm", "chat_llm", type=click.Choice(["offline", "service"]), default="offline",
              show_default=True,
              help="Who answers the chat agents: the deterministic offline model, or the "
                   "provider the environment configures (ARES_LLM_PROVIDER=openai|anthropic "
                   "and its key: a real model, docs/sdk.md). Pipelines and teams stay "
                   "offline either way.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".ares/demo"), show_default=True,
              help="Where service logs and the agents' ledgers go.")
@click.pass_context
def demo(ctx: click.Context, agents: int, chats: int, steps: int, step_ms: int,
         kill_at: float, keep_running: bool, ui: bool, chat_llm: str, as_json: bool,
         workdir: Path) -> None:
    """Start a fleet of agents, SIGKILL a worker mid-task, watch every agent come back.

    Two runtime managers run as real processes on a real Kafka broker (started with
    `ares dev up` when none is configured). The report checks every promise from outside
    the runtime: every task completed, no completed step executed twice, each e-mail sent
    once, every hash chain intact, and each fault it injected proven to have hit busy work
    (its victim mid-task at the death it caused, a later incarnation finishing the task).
    Exit code 1 when a promise was broken, a missed fault included.

    With --ui the demo ends in the arena: the replay reader serves the dashboard (/ui/:
    the fleet live, each agent's replay step by step, Kill and Stop; Crash worker, the
    services running with --arena) and everything keeps running after the report until
    Ctrl+C. The URL and a generated operator token are printed once, after the report (on
    stderr with --json).
    """
    if chat_llm == "service":
        _check_provider()
    settings = _ensure_broker(settings_of(ctx))
    options = DemoOptions(agents=agents, chats=chats, steps=steps, step_ms=step_ms,
                          kill_at=kill_at, keep_running=keep_running or ui, ui=ui,
                          chat_llm=chat_llm, workdir=workdir)
    live_view = sys.stdout.isatty() and not as_json
    run = _run(settings, options, live_view)
    assert run.report is not None
    if as_json:
        click.echo(json.dumps(run.report.to_json(), indent=2))
    else:
        _print_report(run, options)
    if run.ui is not None:
        _stay_in_the_arena(run, run.ui, as_json)
    ctx.exit(0 if not run.report.broken_promises else 1)


def _check_provider() -> None:
    """--llm service: the provider the workers will build, built here first, so that a
    missing SDK or key is one clear line before anything starts."""
    from ares.llm import provider_from_env

    try:
        provider = provider_from_env()
    except (ConfigError, ValueError) as e:
        raise click.UsageError(f"--llm service: {e}") from None
    err.print(f"chat agents answered by {provider!r}")


def _stay_in_the_arena(run: DemoRun, access: DashboardAccess, as_json: bool) -> None:
    """The dashboard's URL and token, printed once; the services kept until Ctrl+C (or
    SIGTERM), then stopped."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        _until_ready(access, next(s.log for s in run.services if s.name == "replay-reader"))
        click.echo(f"\ndashboard: {access.url}  (log in with the operator token {access.token}"
                   f" to Kill, Stop or Crash worker; Ctrl+C stops every service)",
                   err=as_json)
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            while not stop.wait(0.5):
                pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        err.print("stopping the services ...")
        stop_services(run)


def _until_ready(access: DashboardAccess, log: Path, timeout_s: float = 60.0) -> None:
    """/readyz of the dashboard's replay reader answers 200 (it has served since the fleet
    started; this only makes sure before the URL is printed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{access.port}/readyz",
                                        timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            err.print(f"[yellow]the dashboard is not ready after {timeout_s:.0f}s; its log: "
                      f"{log}[/]", highlight=False)
            return
        time.sleep(0.5)


def _run(settings: Settings, options: DemoOptions, live_view: bool) -> DemoRun:
    if not live_view:
        last: list[str] = []

        def log_phase(run: DemoRun) -> None:
            if not last or last[-1] != run.phase:
                last.append(run.phase)
                err.print(f"[cyan]▸[/] {run.phase}", highlight=False)

        return asyncio.run(run_demo(settings, options, log_phase))
    with Live(console=Console(), refresh_per_second=8) as live:
        return asyncio.run(run_demo(settings, options,
                                    lambda run: live.update(render(run.state, run.phase))))


def _ensure_broker(settings: Settings) -> Settings:
    if "ARES_KAFKA_BOOTSTRAP" in os.environ:
        return settings
    try:
        with quiet_aiokafka():
            asyncio.run(dev_kafka.probe(settings.kafka_bootstrap))
        return settings
    except Exception:
        err.print("no broker configured: starting the local one (`ares dev up`) ...")
        return settings.with_overrides(kafka_bootstrap=DevEnvironment.default().up_kafka())


def _print_report(run: DemoRun, options: DemoOptions) -> None:
    report: DemoReport = run.report  # type: ignore[assignment]
    out = Console()
    table = Table(title="ares demo — report", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    ok, bad = "[green]✓[/]", "[red]✗[/]"
    table.add_row("agents", f"{report.agents} ({options.agents} pipelines, "
                            f"{options.chats} chats)")
    table.add_row("faults injected (proof)", "\n".join(
        f"{ok if f.hit else bad if f.missed else '-'} {f.line}"
        for f in report.fault_evidence) or "-")
    all_done = report.tasks_completed >= report.tasks_assigned
    table.add_row("tasks completed", f"{ok if all_done else bad} "
                                     f"{report.tasks_completed}/{report.tasks_assigned}")
    table.add_row("agents resurrected", str(len({r.agent_id for r in report.resurrections})))
    for cause in sorted({r.cause for r in report.resurrections}):
        detection = [r.detection_s for r in report.resurrections
                     if r.cause == cause and r.detection_s is not None]
        totals = [r.total_s for r in report.resurrections
                  if r.cause == cause and r.total_s is not None]
        if detection and totals:
            table.add_row(f"  {cause} ({len(detection)})",
                          f"fault → death recorded p50 {_pct(detection, 50):.2f}s; "
                          f"→ running again max {max(totals):.2f}s")
    phases = [(r.load_ms, r.replay_ms, r.resume_ms) for r in report.resurrections
              if r.replay_ms is not None]
    if phases:
        table.add_row("recovery phases (max)",
                      f"load {max(p[0] or 0 for p in phases)} ms, replay "
                      f"{max(p[1] or 0 for p in phases)} ms, resume "
                      f"{max(p[2] or 0 for p in phases)} ms")
    table.add_row("LLM steps", f"{report.llm_calls_recorded} recorded, "
                               f"{report.llm_executions} really executed (ledger)")
    table.add_row("steps not re-executed", f"{report.steps_reused} re-used from the journal, "
                                           f"{report.tokens_saved:,} tokens saved")
    table.add_row("steps executed twice after being recorded",
                  f"{ok if not report.steps_executed_twice else bad} "
                  f"{len(report.steps_executed_twice)}")
    table.add_row("e-mails", f"{ok if not report.emails_sent_twice else bad} "
                             f"{report.emails_sent} sent for {report.emails_expected} tasks, "
                             f"{len(report.emails_sent_twice)} twice, "
                             f"{len(report.in_doubt)} in doubt")
    table.add_row("integrity (hash chains)", f"{ok if not report.integrity_failures else bad} "
                                             f"{report.agents - len(report.integrity_failures)}"
                                             f"/{report.agents} streams intact")
    for label, kept, detail in (report.team.rows() if report.team else []):
        table.add_row(label, f"{ok if kept else bad} {detail}")
    out.print(table)
    verdict = ("[bold green]every promise kept[/]" if not report.broken_promises else
               "[bold red]broken: " + "; ".join(report.broken_promises) + "[/]")
    out.print(verdict)
    prefix = run.settings.topic_prefix
    out.print(f"\nlook next: ares --topic-prefix {prefix} agents genealogy pipeline-01\n"
              f"           ares --topic-prefix {prefix} agents tree team-1\n"
              f"           ares --topic-prefix {prefix} events read pipeline-01\n"
              f"           ares --topic-prefix {prefix} events dump --topic ares.dlq",
              highlight=False)


def _pct(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
