"""Median of several benchmark runs as the markdown table of ``docs/benchmarks.md``.

    python bench/append.py --json > runs/append-1.json   # ... three times, and read.py
    python bench/table.py runs/*.json

Every section (and part) of the reports is one row: our figure, the ceiling's, the ratio,
each the median over the runs (the ratio is the median of the runs' ratios, not the ratio of
the medians), and the CPU-us per event of both sides. Latency sections get a p50 row too.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

Section = dict[str, Any]


def sections(report: Section) -> Iterator[Section]:
    yield report
    for part in report.get("parts", {}).values():
        yield from sections(part)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def row(name: str, runs: Sequence[Section], metric: str | None = None) -> str:
    """The section's own metric, or another figure both sides report (e.g. p50_ms)."""
    metric = metric or runs[0]["metric"]
    ours = median([r["ours"][metric] for r in runs])
    ceiling = median([r["ceiling"][metric] for r in runs])
    ratio = median([r["ours"][metric] / r["ceiling"][metric] for r in runs
                    if r["ceiling"][metric]])
    cpu = [median([r[side].get("cpu_us_per_event", float("nan")) for r in runs])
           for side in ("ours", "ceiling")]
    target = runs[0].get("target") if metric == runs[0]["metric"] else None
    relation = ">=" if runs[0]["higher_is_better"] else "<="
    verdict = f"{relation} {target['ratio']}" if target else ""
    return (f"| {name} | {metric} | {ours:,.1f} | {ceiling:,.1f} | {ratio:.2f} | {verdict} "
            f"| {cpu[0]:,.1f} | {cpu[1]:,.1f} | {len(runs)} |")


def table(reports: Sequence[Section]) -> str:
    by_name: dict[str, list[Section]] = {}
    for report in reports:
        for s in sections(report):
            by_name.setdefault(s["name"], []).append(s)
    lines = ["| section | metric | ours | ceiling | ratio | target | ours CPU-us/ev "
             "| ceiling CPU-us/ev | runs |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for name, runs in by_name.items():
        lines.append(row(name, runs))
        if runs[0]["metric"] != "p50_ms" and "p50_ms" in runs[0]["ours"]:
            lines.append(row(name, runs, "p50_ms"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Median of benchmark runs as a table")
    parser.add_argument("reports", nargs="+", type=Path, help="JSON reports (--json output)")
    args = parser.parse_args()
    print(table([json.loads(path.read_text()) for path in args.reports]))


if __name__ == "__main__":
    main()
