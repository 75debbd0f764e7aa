"""What every CLI command shares: settings, error → exit code mapping, output helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
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


def run_cli(group: click.Group) -> int:
    """Run the group; map ares errors to one clear message and their exit code."""
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
    return result if isinstance(result, int) else 0
