"""Reading Kafka's ``find-hanging`` table: every row, and never an unreadable output taken
for a clean one."""

from __future__ import annotations

from pathlib import Path

import pytest

from ares.chaos.hanging import HangingCheck
from ares.devenv.kafka_tools import (
    HangingTransaction,
    ToolOutputError,
    find_hanging_command,
    parse_find_hanging,
)

# As TransactionsCommand 4.4.0 prints it: cells padded with spaces, each ended by a tab.
HEADER = ("Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\t"
          "LastTimestamp\tDuration(min)\t\n")
SLF4J = 'SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n'


def test_an_empty_table_is_no_hanging_transaction() -> None:
    assert parse_find_hanging(HEADER) == []
    assert parse_find_hanging(SLF4J + HEADER + "\n") == []


def test_each_row_is_one_hanging_transaction() -> None:
    rows = ("chaos-7.ares.events\t4        \t1003      \t2            \t0               \t"
            "5120       \t1765130000000\t3            \t\n"
            "chaos-7.ares.events\t11       \t1009      \t0            \t-1              \t"
            "88         \t1765130060000\t2            \t\n")
    found = parse_find_hanging(HEADER + rows)
    assert found == [
        HangingTransaction("chaos-7.ares.events", 4, 1003, 2, 0, 5120, 1765130000000, 3),
        HangingTransaction("chaos-7.ares.events", 11, 1009, 0, -1, 88, 1765130060000, 2)]
    assert found[0].describe() == ("chaos-7.ares.events-4: producer 1003 epoch 2, open "
                                   "since offset 5120 (3 min)")


@pytest.mark.parametrize("output", [
    "", "Failed to describe producers for 92 partitions on broker Optional[1]\n",
    HEADER + "chaos-7.ares.events\t4\t1003\n",
    HEADER + "chaos-7.ares.events\t4\tx\t2\t0\t5120\t1765130000000\t3\t\n"])
def test_an_output_that_is_not_the_table_is_an_error(output: str) -> None:
    with pytest.raises(ToolOutputError):
        parse_find_hanging(output)


def test_the_command_asks_one_broker_for_transactions_older_than_the_limit(
        tmp_path: Path) -> None:
    command = find_hanging_command(tmp_path, "127.0.0.1:9092", 2, 1)
    assert command[command.index("-cp") + 1] == f"{tmp_path}/*"
    assert command[-7:] == ["--bootstrap-server", "127.0.0.1:9092", "find-hanging",
                            "--broker-id", "2", "--max-transaction-timeout", "1"]


def test_a_listed_transaction_and_an_unanswered_broker_are_violations() -> None:
    check = HangingCheck(transactions=[{"describe": "t-4: producer 1", "broker_id": 1}],
                         failures=["broker 2: find-hanging exited with 1: ..."])
    assert check.violations == [
        "hanging_transaction: t-4: producer 1 (Kafka's find-hanging on broker 1)",
        "hanging_check_failed: broker 2: find-hanging exited with 1: ..."]
    assert HangingCheck().violations == []
