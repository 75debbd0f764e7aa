"""The lifecycle domain and the views are pure: importing them loads no Kafka client, no
database driver and no service (each checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = ["ares.lifecycle", "ares.lifecycle.state", "ares.lifecycle.genealogy",
        "ares.lifecycle.recovery", "ares.lifecycle.backoff", "ares.views", "ares.views.agents"]
FORBIDDEN = ("aiokafka", "asyncpg", "aiohttp", "ares.events.kafka_", "ares.runtime_manager",
             "ares.health_checker", "ares.compactor", "ares.replay_reader")


def _loaded_by(module: str) -> list[str]:
    code = (f"import json, sys, {module}; "
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return list(json.loads(done.stdout))


@pytest.mark.parametrize("module", PURE)
def test_importing_loads_no_infrastructure(module: str) -> None:
    loaded = _loaded_by(module)
    assert module in loaded
    assert [name for name in loaded if name.startswith(FORBIDDEN)] == []
