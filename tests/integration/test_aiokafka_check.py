"""``ares run`` refuses an aiokafka that lacks a private attribute ares reaches for: exit 2
and one line naming it, before anything else is logged (issue 40's acceptance: the
attribute the owner's rebalance heartbeat uses, removed in a test).

The real CLI runs as a process, started through tests/support/aiokafka_without.py, which
deletes the attribute from aiokafka's class first: the product code has no test hook.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aiokafka
import pytest

from ares.config import Settings
from tests.support.processes import ares_env

WITHOUT = Path(__file__).resolve().parents[1] / "support" / "aiokafka_without.py"


@pytest.mark.parametrize(("service", "removed", "feature"), [
    ("runtime-manager", "aiokafka.consumer.group_coordinator:GroupCoordinator._do_heartbeat",
     "the runtime manager's heartbeat during rebalance callbacks"),
    # Every service starts through the same check, whatever it uses itself.
    ("health-checker",
     "aiokafka.producer.transaction_manager:TransactionManager.maybe_add_partition_to_txn",
     "completing a hanging transaction at a partition takeover"),
])
def test_a_service_refuses_an_aiokafka_without_an_attribute_it_reaches_for(
        settings: Settings, service: str, removed: str, feature: str) -> None:
    proc = subprocess.run([sys.executable, str(WITHOUT), removed, "run", service],
                          env=ares_env(settings, 4), text=True, capture_output=True,
                          timeout=120, check=False)
    module, _, attribute = removed.partition(":")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: aiokafka {aiokafka.__version__} lacks {module}.{attribute} (needed by "
        f"{feature}): ares runs with the aiokafka pinned in pyproject.toml (0.14.0), see "
        "docs/development.md, \"aiokafka's internals\""]
    assert proc.stdout == ""
