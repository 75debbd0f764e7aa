"""The CI-sized chaos runs: `ares chaos --faults 50 --json` as a user runs it, on one broker
and on a three-node cluster (`--cluster 3`), 0 violations.

Each run starts its own brokers (and PostgreSQL when the replay reader is installed) on
free ports in a temporary directory, so it may SIGKILL them; the shared development broker
is never touched. Nothing skips: without Java, Maven or toxiproxy's Go toolchain the run
says why (the proxy falls back to the built-in one, which the report names).

The seeds are fixed so CI is repeatable; ARES_CHAOS_SEED and ARES_CHAOS_CLUSTER_SEED
explore others, and every run prints its seed for replay (`ares chaos --faults 50 --seed S
[--cluster 3]`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ares.chaos.faults import CLUSTER, FaultKind
from ares.chaos.runner import available_services

FAULTS = int(os.environ.get("ARES_CHAOS_FAULTS", "50"))
SEED = os.environ.get("ARES_CHAOS_SEED", "20261130")
CLUSTER_SEED = os.environ.get("ARES_CHAOS_CLUSTER_SEED", "20261207")


@pytest.mark.timeout(900)
def test_fifty_faults_under_load_break_no_promise() -> None:
    report, stderr = run_chaos(SEED)
    _known_broker_bug(report)
    assert_no_broken_promise(report, stderr, SEED, set(FaultKind) - set(CLUSTER))


@pytest.mark.timeout(1200)
def test_fifty_faults_on_a_three_broker_cluster_break_no_promise() -> None:
    """The cluster's own faults (a leader, a coordinator SIGKILLed, a broker cut off or
    slowed, a rolling restart) beside the process and network ones: 0 violations, no
    tolerated broker failure (RF 3 / min ISR 2: the coordinator's decision survives on
    the other replicas)."""
    report, stderr = run_chaos(CLUSTER_SEED, "--cluster", "3")
    assert_no_broken_promise(report, stderr, CLUSTER_SEED,
                             set(FaultKind) - {FaultKind.BROKER_KILL})


def run_chaos(seed: str, *extra: str) -> tuple[dict[str, Any], str]:
    """``ares chaos --faults FAULTS --seed SEED --json [extra]``: its report and stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "ares", "chaos", "--faults", str(FAULTS), "--seed", seed,
         "--json", *extra],
        capture_output=True, text=True, timeout=1180, check=False)
    assert result.returncode in (0, 5), (
        f"`ares chaos` failed to run (exit {result.returncode}):\n{result.stderr[-6000:]}")
    report: dict[str, Any] = json.loads(result.stdout)
    print(json.dumps({k: v for k, v in report.items() if k != "faults"}, indent=2))
    assert report["seed"] == int(seed)
    if report["violations"] == []:
        assert result.returncode == 0
    return report, result.stderr


def assert_no_broken_promise(report: dict[str, Any], stderr: str, seed: str,
                             kinds: set[FaultKind]) -> None:
    """0 violations, every one of ``kinds`` injected, and the load really ran."""
    assert report["violations"] == [], (
        f"seed {seed} broke promises:\n" + "\n".join(report["violations"])
        + f"\nlogs kept in {report['workdir']}\n{stderr[-4000:]}")
    assert report["faults_injected"] >= FAULTS
    expected = {str(k) for k in kinds}
    if "replay-reader" not in available_services():
        expected.discard(str(FaultKind.POSTGRES_STOP))  # no service of ours uses PostgreSQL
    assert {k for k, n in report["faults_by_kind"].items() if n > 0} == expected
    load, outcome = report["load"], report["outcome"]
    assert load["tasks_acknowledged"] > 0
    assert load["appends_acknowledged"] > 0
    # Fifty faults can spend an agent's restart budget: its quarantine is a verdict (the
    # invariants check it is alerted) and its tasks wait for an operator. An integrity
    # quarantine would mean a corrupted log or a wrong reader: never acceptable here.
    assert all(not reason.startswith("integrity")
               for reason in outcome["quarantine_reasons"].values()), outcome
    assert (outcome["tasks_completed"] + outcome["tasks_in_doubt"]
            + outcome["tasks_awaiting_operator"]) >= load["tasks_acknowledged"]


# Kafka 4.4 can skip the COMMIT markers of a transaction caught in PREPARE_COMMIT by the
# SIGKILL (right after the restart its coordinator finds "no leader endpoint" for the
# partitions and takes them for deleted): the records stay undecided, a hanging
# transaction. The next owner completes it with the coordinator's decision when it can
# (tests/chaos/test_hanging_repair.py); when it cannot (the decision was erased by another
# takeover first, e.g. a rebalance during the wait) it refuses to write behind it
# (test_hanging_transaction.py) and the partition waits for an operator's
# `kafka-transactions.sh abort`, so its agents' tasks cannot finish within the run. A run
# whose only violations are those unfinished tasks, with the broker's and the owner's own
# evidence in their logs, is reported as this known broker failure; anything else fails.
BROKER_SIGNATURE = "Couldn't find leader endpoint for partitions"
OWNER_SIGNATURE = "hanging) transaction"
STALLED_KINDS = {"task_not_finished", "dead_without_verdict", "email_missing",
                 "request_unanswered"}


def _known_broker_bug(report: dict[str, Any]) -> None:
    violations = [str(v) for v in report["violations"]]
    if not violations or {v.split(":", 1)[0] for v in violations} - STALLED_KINDS:
        return
    workdir = Path(str(report["workdir"]))
    broker = _lines_with(workdir / "kafka" / "broker.log", BROKER_SIGNATURE)
    owners = [line for log in sorted((workdir / "logs").glob("runtime-manager-*.log"))
              for line in _lines_with(log, OWNER_SIGNATURE)]
    if broker and owners:
        pytest.xfail(f"known Kafka failure (seed {SEED}), a hanging transaction after a "
                     f"broker SIGKILL: broker: {broker[0][:200]} / owner: {owners[0][:300]} "
                     f"/ {len(violations)} violation(s), first: {violations[0]}")


def _lines_with(path: Path, needle: str) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines() if needle in line]
