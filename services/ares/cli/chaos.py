"""``ares chaos``: faults under load on an isolated broker, then every promise checked.

\b
Exit codes: 0 every invariant held, 5 a violation (each one named), 1 the run itself
failed (infrastructure), 2 usage.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ares.chaos.faults import FaultKind
from ares.chaos.load import LoadShape
from ares.chaos.runner import ChaosOptions, ChaosReport, run_chaos
from ares.cli.common import run_async

INTEGRITY_EXIT = 5


@click.command()
@click.option("--faults", type=click.IntRange(min=0), default=50, show_default=True,
              metavar="N", help="how many faults to inject")
@click.option("--seed", type=click.IntRange(min=0), metavar="S",
              help="the schedule's seed (printed by every run, to replay it)  "
                   "[default: random]")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON report on stdout: faults_injected, faults_by_kind, violations...")
@click.option("--span", type=click.FloatRange(min=1), metavar="SECONDS",
              help="spread the faults over this long  [default: 2.5 s per fault, 30 s min]")
@click.option("--agents", type=click.IntRange(1, 200), default=8, show_default=True,
              help="example.pipeline agents under load")
@click.option("--runtime-managers", type=click.IntRange(1, 8), default=3, show_default=True)
@click.option("--partitions", type=click.IntRange(1, 64), default=6, show_default=True)
@click.option("--cluster", "brokers", type=click.IntRange(1, 5), default=1, show_default=True,
              metavar="N", help="run on N brokers: 1, or a KRaft cluster of 3 to 5 (topics at "
              "RF 3 / min ISR 2, and the cluster's own faults instead of broker_kill)")
@click.option("--without", "without", multiple=True, metavar="KIND",
              type=click.Choice([str(kind) for kind in FaultKind]),
              help="leave this kind of fault out (repeatable); faults_by_kind still lists "
                   "it, at 0. CI runs --without broker_kill on one node: a Kafka 4.4 defect "
                   "can leave a transaction hanging there (docs/reliability.md)")
@click.option("--settle-timeout", type=click.FloatRange(min=1), default=240.0,
              show_default=True, metavar="SECONDS",
              help="how long the run may take, after the last fault, for every promise to hold")
@click.option("--no-optional-services", is_flag=True,
              help="runtime managers only (no health checker, compactor, replay reader)")
@click.option("--no-toxiproxy", is_flag=True,
              help="use the built-in asyncio proxy instead of building toxiproxy")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="where the run keeps its broker, logs and ledgers  [default: a temp dir]")
@click.option("--keep", is_flag=True, help="keep the work directory even when the run passes")
@click.pass_context
def chaos(ctx: click.Context, faults: int, seed: int | None, as_json: bool, span: float | None,
          agents: int, runtime_managers: int, partitions: int, brokers: int,
          without: tuple[str, ...], settle_timeout: float,
          no_optional_services: bool, no_toxiproxy: bool, workdir: Path | None,
          keep: bool) -> None:
    """Inject N faults into a fleet of example.pipeline agents under load, then check.

    \b
    Faults (drawn from the seed, every kind at least once when N allows):
      sigkill, sigstop   of runtime managers and the other services (SIGCONT later)
      broker_kill        SIGKILL of the run's own Kafka broker, restarted on its data
    with --cluster 3, instead of broker_kill:
      leader_kill        SIGKILL of the broker leading the most ares.events partitions
      coordinator_kill   SIGKILL of the runtime group's and the writers' coordinator
      broker_partition   one broker cut off from the other brokers and every client
      broker_slow        every byte to and from one broker delayed
      rolling_restart    every broker in turn, graceful, back in sync before the next
      postgres_stop      the run's own PostgreSQL stopped for 30 s (with the replay reader)
      net_latency, net_reset, net_partition   through toxiproxy, per service
    \b
    Invariants checked from outside: no acknowledged event lost, nothing appended twice,
    versions contiguous and chains intact (plus the full integrity audit), no completed
    step run again and no e-mail sent twice (the example ledgers), every task completed or
    surfaced in doubt, no agent left dead without a verdict; Kafka's own
    `kafka-transactions.sh find-hanging` lists no hanging transaction on any broker; no
    worker fault costs more rebalances than the faults overlapping it explain (a storm).

    The shared development broker and database are never touched: the run starts its
    own on free ports.
    """
    if brokers == 2:
        raise click.BadParameter("a cluster needs 3 brokers at least: its topics keep 3 "
                                 "replicas with 2 in sync", param_hint="--cluster")
    options = ChaosOptions(
        faults=faults, seed=seed, span_s=span, runtime_managers=runtime_managers,
        partitions=partitions, brokers=brokers, shape=LoadShape(agents=agents),
        without=frozenset(FaultKind(kind) for kind in without),
        settle_timeout_s=settle_timeout,
        optional_services=not no_optional_services, use_toxiproxy=not no_toxiproxy,
        workdir=workdir, keep_workdir=keep)

    def progress(line: str) -> None:
        click.echo(f"chaos: {line}", err=True)

    report = run_async(run_chaos(options, progress))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print(report)
    ctx.exit(INTEGRITY_EXIT if report.violations else 0)


def _print(report: ChaosReport) -> None:
    click.echo(f"seed {report.seed}: {report.faults_injected} of {report.faults_requested} "
               f"faults injected in {report.duration_s:.0f}s ({report.proxy})")
    for kind in FaultKind:
        click.echo(f"  {kind:<16} {report.faults_by_kind.get(str(kind), 0)}")
    load = report.load
    click.echo(f"load: {load.get('agents', 0)} agents, {load.get('tasks_acknowledged', 0)} "
               f"tasks and {load.get('appends_acknowledged', 0)} appends acknowledged, "
               f"{load.get('retries', 0)} retries")
    out = report.outcome
    click.echo(f"outcome: {out.get('tasks_completed', 0)} tasks completed, "
               f"{out.get('tasks_in_doubt', 0)} in doubt, {out.get('deaths', 0)} deaths, "
               f"{out.get('resurrections', 0)} resurrections, {out.get('emails_sent', 0)} "
               f"e-mails, {out.get('events_checked', 0)} events checked")
    hanging = report.hanging
    click.echo(f"Kafka's find-hanging: {len(hanging.transactions)} hanging transaction(s)"
               f"{f', {len(hanging.failures)} broker(s) not checked' if hanging.failures else ''}"
               f" ({len(hanging.commands)} broker(s) asked)")
    click.echo(f"rebalances: {report.rebalances.get('rebalances_during_run', 0)} during the "
               "run; per worker fault (faults, rebalances, most for one, most rejoins of "
               "one victim):")
    for name, row in report.rebalances_per_worker_fault.items():
        click.echo(f"  {name:<16} {row['faults']:>4} {row['rebalances']:>5} {row['max']:>4} "
                   f"{row.get('max_victim_joins', 0):>4}")
    for line in report.unexpected_exits:
        click.echo(f"unexpected exit: {line}")
    if report.violations:
        click.echo(f"{len(report.violations)} VIOLATION(S) (logs in {report.workdir}):")
        for line in report.violations:
            click.echo(f"  {line}")
    else:
        click.echo("violations: none")
