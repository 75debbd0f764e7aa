"""``ares bench``'s options: --cluster is offered and bounded; scaling is selectable."""

from __future__ import annotations

from click.testing import CliRunner

from ares.cli.bench import BENCHMARKS, CLUSTER_BENCHMARKS, bench


def test_help_lists_the_cluster_option() -> None:
    result = CliRunner().invoke(bench, ["--help"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())  # click wraps the help to the terminal
    assert "--cluster" in shown
    assert "replication factor 3 and min ISR 2" in shown


def test_a_cluster_size_out_of_range_is_refused_before_anything_starts() -> None:
    for size in ("0", "6"):
        result = CliRunner().invoke(bench, ["--cluster", size])
        assert result.exit_code == 2, result.output
        assert "--cluster" in result.output


def test_scaling_runs_after_recovery_and_the_cluster_selection_is_known() -> None:
    assert BENCHMARKS.index("scaling") == BENCHMARKS.index("recovery") + 1
    assert set(CLUSTER_BENCHMARKS) <= set(BENCHMARKS)
    assert CLUSTER_BENCHMARKS == ("append", "replay", "recovery")
