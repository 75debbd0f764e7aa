"""``ares compaction``: how far each partition could be trimmed, and a pass on demand.

``status`` only reads (no summary is written, nothing is trimmed); ``run --once`` is one
pass of `ares run compactor`, with the same settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ares.cli.common import run_async, settings_of
from ares.compactor.compactor import Compactor
from ares.compactor.config import CompactionConfig, parse_duration_s
from ares.compactor.report import PartitionReport
from ares.config import Settings
from ares.topics import load_topics

F = TypeVar("F", bound=Callable[..., Any])


def compaction_options(func: F) -> F:
    """The CompactionConfig flags (each overrides its ARES_COMPACTION_* variable)."""
    options = [
        click.option("--threshold", type=click.IntRange(1), metavar="N",
                     help="summarise a stream once more than N events follow its last "
                          "summary (ARES_COMPACTION_THRESHOLD)  [default: 500]"),
        click.option("--keep-recent", type=click.IntRange(0), metavar="N",
                     help="never summarise a stream's newest N events "
                          "(ARES_COMPACTION_KEEP_RECENT)  [default: 100]"),
        click.option("--max-summaries", type=click.IntRange(1), metavar="N",
                     help="merge the oldest summaries of a stream above N "
                          "(ARES_COMPACTION_MAX_SUMMARIES)  [default: 20]"),
        click.option("--summary-ttl", metavar="DURATION",
                     help="delete the summaries of streams gone this long, e.g. 30d "
                          "(ARES_COMPACTION_SUMMARY_TTL)  [default: 30d]"),
        click.option("--trim/--no-trim", "trimming", default=None,
                     help="DeleteRecords on ares.events up to each partition's safe point "
                          "(ARES_COMPACTION_TRIM)  [default: off]"),
        click.option("--snapshot-timeout", metavar="DURATION",
                     help="how long to wait for an owner's snapshot before a trim "
                          "(ARES_COMPACTION_SNAPSHOT_TIMEOUT)  [default: 10s]"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def compaction_config(threshold: int | None, keep_recent: int | None,
                      max_summaries: int | None, summary_ttl: str | None,
                      trimming: bool | None, snapshot_timeout: str | None,
                      interval: str | None = None) -> CompactionConfig:
    return CompactionConfig.from_env(
        threshold=threshold, keep_recent=keep_recent, max_summaries_per_stream=max_summaries,
        summary_ttl_s=None if summary_ttl is None
        else parse_duration_s("--summary-ttl", summary_ttl),
        trimming=trimming,
        snapshot_timeout_s=None if snapshot_timeout is None
        else parse_duration_s("--snapshot-timeout", snapshot_timeout),
        interval_s=None if interval is None else parse_duration_s("--interval", interval))


@click.group()
def compaction() -> None:
    """Summaries of old events and trimming of ares.events (the compactor).

    \b
    status          per partition: log start, trim point and the stream holding it back;
                    per stream: events since its last summary (reads only)
    run --once      one compaction pass now (what `ares run compactor` does every interval)
    Exit codes: 0 ok, 1 error, 2 bad flag or setting, 4 broker unreachable or topics
    missing (`ares topics apply`).
    """


@compaction.command()
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True,
              metavar="P", help="only partition P (repeatable)")
@click.option("--all", "all_streams", is_flag=True, help="list every stream, not the 20 "
              "furthest from a summary per partition")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
@compaction_options
@click.pass_context
def status(ctx: click.Context, /, *, partitions: tuple[int, ...], all_streams: bool,
           as_json: bool, **flags: Any) -> None:
    """Per partition: log start offset, trim point and what holds it back (the stream and
    why: no_snapshot, no_summary, snapshot, summary, journal, head, checkpoint, ...); per
    stream: events since its last summary.

    \b
    --json: {"config", "runtime_group", "partitions": [{"partition", "log_start_offset",
    "end_offset", "trim_point", "trimmable", "held_by", "hold", "detail",
    "checkpoint_offset", "summaries", "last_trim", "streams": [{"stream_id", "kind",
    "first_version", "head_version", "events_since_summary", "summarised_through",
    "summaries", "snapshot_version", "limit", "hold", "detail"}]}]}
    """
    config = compaction_config(**flags)
    settings = settings_of(ctx)
    reports = run_async(_status(settings, config, partitions or None))
    _show(reports, config, as_json, all_streams)


@compaction.command("run")
@click.option("--once", is_flag=True, help="one pass, then exit")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True,
              metavar="P", help="only partition P (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
@compaction_options
@click.pass_context
def run_once(ctx: click.Context, /, *, once: bool, partitions: tuple[int, ...], as_json: bool,
             **flags: Any) -> None:
    """Force one compaction pass: summarise, request snapshots, trim (with --trim)."""
    if not once:
        raise click.UsageError("`ares compaction run` needs --once; `ares run compactor` "
                               "runs passes continuously")
    config = compaction_config(**flags)
    reports = run_async(_run(settings_of(ctx), config, partitions or None))
    _show(reports, config, as_json, all_streams=False)


async def _status(settings: Settings, config: CompactionConfig,
                  partitions: tuple[int, ...] | None) -> tuple[list[PartitionReport], str]:
    compactor = Compactor(settings, load_topics(settings), config)
    await compactor.open(write=False)
    try:
        reports = await compactor.status(partitions)
        group = reports[0].runtime_group if reports else None
        return reports, group or ""
    finally:
        await compactor.close()


async def _run(settings: Settings, config: CompactionConfig,
               partitions: tuple[int, ...] | None) -> tuple[list[PartitionReport], str]:
    compactor = Compactor(settings, load_topics(settings), config)
    await compactor.open()
    try:
        reports = await compactor.run_pass(partitions)
        return reports, await compactor.runtime_group_state()
    finally:
        await compactor.close()


def _show(result: tuple[list[PartitionReport], str], config: CompactionConfig,
          as_json: bool, all_streams: bool) -> None:
    reports, group = result
    if as_json:
        click.echo(json.dumps({"config": config.to_json(), "runtime_group": group,
                               "partitions": [r.to_json() for r in reports]},
                              ensure_ascii=False))
        return
    click.echo(f"runtime group: {group or 'unknown'}; trimming "
               f"{'on' if config.trimming else 'off'}, threshold {config.threshold}, "
               f"keep recent {config.keep_recent}")
    for report in reports:
        for line in report.lines(stream_limit=None if all_streams else 20):
            click.echo(line)
