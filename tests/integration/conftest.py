"""Everything under tests/integration talks to the real broker and database."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def sigint_not_ignored() -> Iterator[None]:
    """A suite started in the background by a shell without job control runs with SIGINT
    ignored, and a child inherits that: its Ctrl-C would do nothing, by Unix convention.
    A test that sends SIGINT to a child needs the default disposition (Python's
    KeyboardInterrupt) for it."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
