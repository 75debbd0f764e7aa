"""Kafka's own command-line tools (kafka-tools from Maven Central) and what they print.

The broker's classpath leaves kafka-tools out (it drags in connect-runtime and a second
logging binding), so the tools get a classpath of their own, resolved once per version
into the same cache (``templates/tools-pom.xml``). ``find_hanging`` asks
``TransactionsCommand find-hanging`` (``kafka-transactions.sh``) for the transactions left
open on a broker's partitions that their coordinator no longer knows: the check the chaos
runs make after every run, beside their own invariants, with a judge that is not ours.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares.devenv.kafka import maven_classpath, require_tools

TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
# The columns find-hanging prints (a tab-separated table, its header first, even when empty).
HANGING_COLUMNS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")
TOOL_TIMEOUT_S = 120.0


def resolve_tools_classpath(version: str) -> Path:
    """The kafka-tools jars for ``version``, resolved through Maven once into the cache."""
    return maven_classpath("tools-pom.xml", f"kafka-tools-{version}", version,
                           f"org.apache.kafka:kafka-tools:{version}")


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """One row of ``find-hanging``: records of an open transaction its coordinator has
    forgotten, which block read_committed readers of the partition (its LSO) forever."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int
    duration_min: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "coordinator_epoch": self.coordinator_epoch,
                "start_offset": self.start_offset, "last_timestamp_ms": self.last_timestamp_ms,
                "duration_min": self.duration_min}

    def describe(self) -> str:
        return (f"{self.topic}-{self.partition}: producer {self.producer_id} epoch "
                f"{self.producer_epoch}, open since offset {self.start_offset} "
                f"({self.duration_min} min)")


class ToolOutputError(ValueError):
    """The tool printed something that is not its table: never read as 'nothing found'."""


def parse_find_hanging(stdout: str) -> list[HangingTransaction]:
    """The rows of ``find-hanging``'s table. An output without the table's header (an
    error, another version's format) raises ``ToolOutputError``: a check that could not be
    read must not pass for a clean one."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines)
                   if tuple(_cells(line)) == HANGING_COLUMNS), None)
    if header is None:
        raise ToolOutputError(f"find-hanging printed no table: {stdout.strip()[-500:]!r}")
    rows = []
    for line in lines[header + 1:]:
        cells = _cells(line)
        if len(cells) != len(HANGING_COLUMNS):
            raise ToolOutputError(f"find-hanging printed a row of {len(cells)} columns, "
                                  f"not {len(HANGING_COLUMNS)}: {line!r}")
        topic, *numbers = cells
        try:
            values = [int(n) for n in numbers]
        except ValueError as exc:
            raise ToolOutputError(f"find-hanging printed a row that is not numbers: "
                                  f"{line!r}") from exc
        rows.append(HangingTransaction(topic, *values))
    return rows


def _cells(line: str) -> list[str]:
    # prettyPrintTable pads each cell with spaces and ends every cell with a tab.
    return [cell.strip() for cell in line.rstrip().split("\t") if cell.strip()]


def find_hanging_command(libs: Path, bootstrap: str, broker_id: int,
                         max_transaction_timeout_min: int) -> list[str]:
    """``kafka-transactions.sh --bootstrap-server B find-hanging --broker-id N``, as java.

    ``max_transaction_timeout_min``: only transactions silent for longer count (the tool's
    default is 15 minutes, the broker's ``transaction.max.timeout.ms``)."""
    java, _ = require_tools()
    return [java, "-Xmx256m", "-cp", f"{libs}/*", TRANSACTIONS_COMMAND,
            "--bootstrap-server", bootstrap, "find-hanging", "--broker-id", str(broker_id),
            "--max-transaction-timeout", str(max_transaction_timeout_min)]


def run_find_hanging(command: list[str]) -> list[HangingTransaction]:
    """Run ``command`` (``find_hanging_command``); its rows, or ``ToolOutputError`` with
    what it printed when it failed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ToolOutputError(f"find-hanging did not answer within {TOOL_TIMEOUT_S:.0f}s") \
            from exc
    if done.returncode != 0:
        raise ToolOutputError(f"find-hanging exited with {done.returncode}: "
                              f"{(done.stdout + done.stderr).strip()[-800:]}")
    return parse_find_hanging(done.stdout)
