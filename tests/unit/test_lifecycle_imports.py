"""The lifecycle domain and the views are pure: importing them loads no Kafka client, no
database driver and no service (each checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = ["ares.lifecycle", "ares.lifecycle.state", "ares.lifecycle.genealogy",
        "ares.lifecycle.recovery", "ares.lifecycle.verification", "ares.lifecycle.events",
        "ares.lifecycle.backoff", "ares.lifecycle.transitions", "ares.views",
        "ares.views.agents", "ares.views.tally"]
FORBIDDEN = ("aiokafka", "asyncpg", "aiohttp", "ares.events.kafka", "ares.runtime_manager",
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


def test_the_lifecycle_event_types_are_spelled_once() -> None:
    """Every module names them through ares.lifecycle.events; only the wire schema's map of
    types to Avro records (events/wire/schemas.py, below the domain) spells them too."""
    from pathlib import Path

    from ares.lifecycle import events as ev

    package = Path(ev.__file__).resolve().parents[1]
    allowed = {package / "lifecycle" / "events.py", package / "events" / "wire" / "schemas.py"}
    types = [value for name, value in vars(ev).items() if name.isupper()
             and isinstance(value, str)]
    spelled = [f"{path.relative_to(package)}: {kind}" for path in package.rglob("*.py")
               if path not in allowed for kind in types
               if f'"{kind}"' in path.read_text(encoding="utf-8")]
    assert spelled == []
