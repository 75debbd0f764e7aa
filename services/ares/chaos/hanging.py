"""After every chaos run, Kafka's own judge: ``kafka-transactions.sh find-hanging``.

Our invariants read the log through our own reader; a transaction left open on a partition
by a coordinator that forgot it blocks every read_committed reader at that offset, and
Kafka's ``TransactionsCommand find-hanging`` finds it from the broker's side. It runs on
every broker of the run, before they stop; each transaction it lists is a violation, and
so is a tool that could not answer (a check that did not run is not a check that passed).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ares.devenv.kafka import kafka_version
from ares.devenv.kafka_tools import (
    ToolOutputError,
    find_hanging_command,
    resolve_tools_classpath,
    run_find_hanging,
)
from ares.errors import InfrastructureError

log = logging.getLogger(__name__)
# find-hanging only lists transactions silent for longer than this (whole minutes). Ours
# last milliseconds, and the coordinator aborts any after the producer's transaction
# timeout (60 s): an open transaction a minute old that the coordinator does not know is
# hanging, and none still in flight is mistaken for one.
MAX_TRANSACTION_TIMEOUT_MIN = 1
ATTEMPTS = 3  # a broker that just restarted may fail a DescribeProducers: ask again
RETRY_PAUSE_S = 5.0


@dataclass(slots=True)
class HangingCheck:
    """What the tool said, per broker: ``hanging_transactions`` in the report."""

    commands: list[str] = field(default_factory=list)
    transactions: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return ([f"hanging_transaction: {t['describe']} (Kafka's find-hanging on broker "
                 f"{t['broker_id']})" for t in self.transactions]
                + [f"hanging_check_failed: {why}" for why in self.failures])

    def to_json(self) -> dict[str, Any]:
        return {"commands": self.commands, "transactions": self.transactions,
                "failures": self.failures}


async def until_old_enough(healed_at: float) -> None:
    """Wait until a transaction left hanging by the last fault (healed at monotonic
    ``healed_at``) is old enough for the tool to list it."""
    await asyncio.sleep(max(0.0, healed_at + 60.0 * MAX_TRANSACTION_TIMEOUT_MIN + 5.0
                            - time.monotonic()))


async def find_hanging(bootstrap: str, broker_ids: Sequence[int]) -> HangingCheck:
    """``find-hanging --broker-id N`` for each of ``broker_ids`` through ``bootstrap``."""
    check = HangingCheck()
    try:
        libs = await asyncio.to_thread(resolve_tools_classpath, kafka_version())
    except InfrastructureError as exc:
        check.failures.append(f"kafka-tools could not be resolved: {exc}")
        return check
    for broker_id in broker_ids:
        command = find_hanging_command(libs, bootstrap, broker_id,
                                       MAX_TRANSACTION_TIMEOUT_MIN)
        check.commands.append(shlex.join(command))
        for attempt in range(1, ATTEMPTS + 1):
            try:
                found = await asyncio.to_thread(run_find_hanging, command)
            except ToolOutputError as exc:
                log.info("find-hanging on broker %d, attempt %d: %s", broker_id, attempt, exc)
                if attempt == ATTEMPTS:
                    check.failures.append(f"broker {broker_id}: {exc}")
                else:
                    await asyncio.sleep(RETRY_PAUSE_S)
                continue
            check.transactions += [{**t.to_json(), "broker_id": broker_id,
                                    "describe": t.describe()} for t in found]
            break
    return check
