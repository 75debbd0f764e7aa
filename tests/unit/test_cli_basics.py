"""The ``ares`` command line's contract: help, version, and errors mapped to exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import click
import pytest

import ares.cli
from ares.cli import cli
from ares.cli.common import run_cli, settings_of
from ares.errors import (
    AresError,
    ConfigError,
    ConflictError,
    FencedError,
    InfrastructureError,
    IntegrityError,
    SchemaError,
    TransientError,
    UnavailableError,
)

RunAres = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_ares(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> RunAres:
    """Run a click group as ``main()`` does (through ``run_cli``) with the given argv."""

    def run(*args: str, group: click.Group = cli) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["ares", *args])
        code = run_cli(group)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def settings_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command on the real root group that resolves settings (as every Kafka command
    will) and prints the bootstrap address it got."""

    @click.command("settings-probe")
    @click.pass_context
    def probe(ctx: click.Context) -> None:
        click.echo(settings_of(ctx).kafka_bootstrap)

    monkeypatch.setitem(cli.commands, "settings-probe", probe)


def test_python_dash_m_ares_is_the_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "ares", "--help"], capture_output=True,
                            text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage: python -m ares [OPTIONS] COMMAND" in result.stdout
    assert "dev" in result.stdout.split("Commands:", 1)[1]


def test_help_lists_the_commands_and_the_settings(run_ares: RunAres) -> None:
    code, out, _ = run_ares("--help")
    assert code == 0
    assert "dev" in out.split("Commands:", 1)[1]
    for env_var in ("ARES_KAFKA_BOOTSTRAP", "ARES_POSTGRES_DSN", "ARES_TOPIC_PREFIX"):
        assert env_var in out


def test_dev_help_lists_up_down_status(run_ares: RunAres) -> None:
    code, out, _ = run_ares("dev", "-h")
    assert code == 0
    commands = out.split("Commands:", 1)[1]
    for name in ("up", "down", "status"):
        assert f"  {name} " in commands


def test_version(run_ares: RunAres) -> None:
    from importlib.metadata import version

    from ares import native

    code, out, _ = run_ares("--version")
    assert code == 0
    assert out.splitlines() == [f"ares, version {version('ares-mesh')}", native.summary()]


def test_unknown_command_is_a_usage_error(run_ares: RunAres) -> None:
    code, _, err = run_ares("no-such-command")
    assert code == 2
    assert "No such command" in err


def test_a_real_command_with_an_invalid_setting_exits_2_before_any_io() -> None:
    env = {**os.environ, "ARES_KAFKA_BOOTSTRAP": "nonsense"}
    result = subprocess.run([sys.executable, "-m", "ares", "topics", "list"], env=env,
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "ARES_KAFKA_BOOTSTRAP" in result.stderr
    assert "'nonsense' is not host:port" in result.stderr


def test_invalid_setting_from_the_environment_exits_2_naming_it(
    run_ares: RunAres, settings_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARES_KAFKA_BOOTSTRAP", "nonsense")
    code, out, err = run_ares("settings-probe")
    assert code == 2
    assert out == ""
    assert "ARES_KAFKA_BOOTSTRAP" in err
    assert "nonsense" in err


def test_invalid_flag_exits_2_naming_the_setting(
    run_ares: RunAres, settings_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ARES_KAFKA_BOOTSTRAP", raising=False)
    code, _, err = run_ares("--bootstrap-servers", "nonsense", "settings-probe")
    assert code == 2
    assert "ARES_KAFKA_BOOTSTRAP" in err


def test_flag_beats_environment(
    run_ares: RunAres, settings_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARES_KAFKA_BOOTSTRAP", "from-env:9092")
    assert run_ares("settings-probe")[:2] == (0, "from-env:9092\n")
    assert run_ares("--bootstrap-servers", "from-flag:9092", "settings-probe")[:2] == (
        0, "from-flag:9092\n")


@pytest.mark.parametrize(("error", "code"), [
    (AresError("generic"), 1),
    (ConfigError("ARES_X is bad"), 2),
    (ConflictError("agent-1", expected=3, actual=5), 3),
    (UnavailableError("broker down"), 4),
    (IntegrityError("hash chain broken"), 5),
    (FencedError("fenced"), 1),
    (SchemaError("undecodable"), 1),
    (TransientError("timeout"), 1),
    (InfrastructureError("java not found"), 1),
])
def test_each_error_maps_to_its_exit_code_with_one_message(
    run_ares: RunAres, error: AresError, code: int
) -> None:
    @click.group()
    def tiny() -> None:
        pass

    @tiny.command()
    def fail() -> None:
        raise error

    exit_code, _, err = run_ares("fail", group=tiny)
    assert exit_code == code
    assert err.startswith("error: ")
    assert str(error).split()[0] in err
    assert "Traceback" not in err


def test_exit_codes_are_documented_in_the_cli_module() -> None:
    doc = " ".join((ares.cli.__doc__ or "").split())
    for phrase in ("0 ok", "1 error", "2 usage or configuration", "3 version conflict",
                   "4 unavailable", "5 integrity failure"):
        assert phrase in doc
