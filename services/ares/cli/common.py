"""What every CLI command shares: settings, error → exit code mapping, output helpers."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from ares.config import Settings
from ares.errors import AresError

T = TypeVar("T")
err_console = Console(stderr=True)


@dataclass(slots=True)
class AppContext:
    """The root group's options, resolved into ``Settings`` on first use."""

    overrides: dict[str, Any] = field(default_factory=dict)
    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_env(**self.overrides)
        return self._settings


def settings_of(ctx: click.Context) -> Settings:
    app = ctx.find_object(AppContext)
    return app.settings if app is not None else Settings.from_env()


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def run_cli(group: click.Group, *, debug: bool = False) -> int:
    """Run the group; map ares errors to one clear message and their exit code.

    An unexpected error (a bug, or a failure no adapter translated) is one line too, naming
    the file that holds its full trace; with ``debug`` (``--debug``, ``ARES_DEBUG=1``) the
    trace is printed instead."""
    try:
        # Without standalone mode, click returns ctx.exit(n)'s code instead of exiting.
        result = group.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        err_console.print("aborted")
        return 1
    except AresError as exc:
        # Plain, unwrapped text: scripts grep these messages.
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        click.echo(f"error: unexpected {type(exc).__name__}: {exc} (full trace in "
                   f"{_save_trace(exc)}; --debug prints it)", err=True)
        return 1
    return result if isinstance(result, int) else 0


def _save_trace(exc: BaseException) -> Path:
    """Write ``exc``'s trace (with the command line) to a file of its own; its path."""
    folder = Path(tempfile.gettempdir()) / "ares-traces"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ares-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    path.write_text(f"$ {shlex.join(sys.argv)}\n\n" + "".join(
        traceback.format_exception(exc)), encoding="utf-8")
    return path
