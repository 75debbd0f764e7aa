"""``ares topics``: make the cluster's topics match topics.yaml, and show where they do not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ares.cli.common import err_console, run_async, settings_of
from ares.topics import ChangeSet, TopicChange, TopicPlan, apply_topics, inspect_topics, load_topics

_FILE_HELP = ("topics file  [default: $ARES_TOPICS_FILE, else topics.yaml of the checkout, "
              "else the packaged copy]")
_ENV_HELP = "section of environments: to apply  [default: $ARES_TOPIC_ENVIRONMENT, else none]"


@click.group()
def topics() -> None:
    """Kafka topics from topics.yaml, the single source of names, partitions and configs.

    \b
    ARES_TOPIC_PREFIX (--topic-prefix) prefixes every name; ARES_TOPIC_ENVIRONMENT picks a
    section of environments:; ARES_TOPIC_PARTITIONS and ARES_TOPIC_REPLICATION_FACTOR
    override the counts. Exit codes: 1 refused change, 2 invalid topics.yaml, 4 no broker.
    """


@topics.command()
@click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path),
              help=_FILE_HELP)
@click.option("--environment", help=_ENV_HELP)
@click.option("--dry-run", is_flag=True, help="print what would change; change nothing")
@click.option("--allow-repartition", is_flag=True,
              help="allow adding partitions to the co-partitioned per-agent topics "
                   "(moves agents to other owners: stop every runtime manager first)")
@click.option("--prune", is_flag=True,
              help="also remove config overrides that topics.yaml does not set")
@click.pass_context
def apply(ctx: click.Context, *, file: Path | None, environment: str | None, dry_run: bool,
          allow_repartition: bool, prune: bool) -> None:
    """Create missing topics and bring configs and partition counts in line (idempotent).

    A partition decrease, a replication factor change or one larger than the cluster's
    broker count is refused, and then nothing at all is changed (exit 1).
    """
    settings = settings_of(ctx)
    plan = load_topics(settings, file, environment=environment)
    changes = run_async(apply_topics(plan, settings, dry_run=dry_run,
                                     allow_repartition=allow_repartition, prune=prune))
    click.echo(_header(plan, changes.brokers))
    width = max(len(c.spec.name) for c in changes.changes)
    for change in changes.changes:
        verb, detail = _describe(change, dry_run)
        click.echo(f"  {verb:<13} {change.spec.name:<{width}}  {detail}".rstrip())
        for diff in change.config_changes:
            click.echo(f"  {'':<13}   {diff.field}: {diff.actual or '(not set)'} → "
                       f"{diff.desired or '(removed)'}")
    for warning in changes.warnings:
        err_console.print(f"[bold yellow]WARNING:[/] {warning}", highlight=False)
    click.echo(_summary(changes, dry_run))


@topics.command(name="list")
@click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path),
              help=_FILE_HELP)
@click.option("--environment", help=_ENV_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_context
def list_(ctx: click.Context, *, file: Path | None, environment: str | None,
          as_json: bool) -> None:
    """Desired (topics.yaml) against actual (the cluster) per topic; drift is marked."""
    settings = settings_of(ctx)
    plan = load_topics(settings, file, environment=environment)
    changes = run_async(inspect_topics(plan, settings))
    if as_json:
        click.echo(json.dumps(_as_json(changes), indent=2))
        return
    click.echo(_header(plan, changes.brokers))
    width = max(len(c.spec.name) for c in changes.changes)
    for change in changes.changes:
        spec = change.spec
        marker = {"ok": "ok", "drift": "DRIFT", "missing": "MISSING"}[change.status]
        click.echo(f"  {marker:<8} {spec.name:<{width}}  partitions {spec.partitions}, "
                   f"RF {spec.replication_factor}"
                   + (", co-partitioned" if spec.copartitioned else ""))
        for diff in change.differences:
            actual = "not set" if diff.actual is None else diff.actual
            click.echo(f"  {'':<8}   {diff.field}: desired {diff.desired}, actual {actual}")
        for key, value in sorted(change.unmanaged.items()):
            click.echo(f"  {'':<8}   {key}: {value} (override not in topics.yaml)")
    drifted = sum(c.status != "ok" for c in changes.changes)
    click.echo(f"{len(changes.changes)} topics, {drifted} missing or drifted"
               + ("; run `ares topics apply`" if drifted else ""))


def _header(plan: TopicPlan, brokers: int) -> str:
    return (f"topics from {plan.source}; environment {plan.environment or '(default)'}; "
            f"prefix {plan.prefix!r}; {brokers} broker(s)")


def _describe(change: TopicChange, dry_run: bool) -> tuple[str, str]:
    """(what happened, details) for one line of apply's output."""
    spec = change.spec
    if change.create:
        return ("would create" if dry_run else "created",
                f"{spec.partitions} partitions, RF {spec.replication_factor}, "
                f"{len(spec.configs)} configs")
    parts: list[str] = []
    if change.new_partitions and change.actual is not None:
        parts.append(f"partitions {change.actual.partitions} → {change.new_partitions}")
    if change.config_changes:
        parts.append(f"{len(change.config_changes)} config(s):")
    if not parts:
        return "unchanged", ""
    return ("would update" if dry_run else "updated"), ", ".join(parts)


def _summary(changes: ChangeSet, dry_run: bool) -> str:
    created = sum(c.create for c in changes.changes)
    unchanged = sum(c.unchanged for c in changes.changes)
    updated = len(changes.changes) - created - unchanged
    text = f"{len(changes.changes)} topics: {created} created, {updated} updated, " \
           f"{unchanged} unchanged"
    return f"dry run, nothing changed; would be {text}" if dry_run else text


def _as_json(changes: ChangeSet) -> dict[str, Any]:
    plan = changes.plan
    return {
        "source": plan.source, "environment": plan.environment, "prefix": plan.prefix,
        "partitions": plan.partitions, "brokers": changes.brokers,
        "drift": any(c.status != "ok" for c in changes.changes),
        "topics": [_topic_json(c) for c in changes.changes],
    }


def _topic_json(change: TopicChange) -> dict[str, Any]:
    spec, actual = change.spec, change.actual
    return {
        "topic": spec.logical, "name": spec.name, "status": change.status,
        "copartitioned": spec.copartitioned,
        "desired": {"partitions": spec.partitions,
                    "replication_factor": spec.replication_factor,
                    "configs": dict(spec.configs)},
        "actual": None if actual is None else {
            "partitions": actual.partitions,
            "replication_factor": actual.replication_factor,
            "configs": dict(actual.overrides)},
        "differences": [{"field": d.field, "desired": d.desired, "actual": d.actual}
                        for d in change.differences],
        "unmanaged_configs": dict(change.unmanaged),
    }
