"""The compactor service outlives a failed pass, whatever the error's type, and stops when
fenced (reliability finding 7: a stray aiokafka error used to end the service)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError, ProducerFenced

from ares.compactor.config import CompactionConfig
from ares.compactor.service import CompactorService
from ares.config import Settings
from ares.errors import FencedError, UnavailableError
from ares.topics import load_topics


class _Passes:
    """A compactor whose passes fail with the given errors, then succeed."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.closed = False

    async def open(self) -> None:
        return None

    async def run_pass(self) -> list[Any]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return []

    async def close(self) -> None:
        self.closed = True


async def _started(passes: _Passes) -> CompactorService:
    settings = Settings(topic_prefix="svc-test.")
    service = CompactorService(settings, load_topics(settings), CompactionConfig(interval_s=0.01))
    service.compactor = passes  # type: ignore[assignment]
    await service.start()
    return service


async def _run_until(service: CompactorService, passes: int) -> None:
    for _ in range(500):
        if service.passes >= passes or service.ended:
            return
        await asyncio.sleep(0.01)


async def test_failed_passes_of_any_kind_are_retried() -> None:
    passes = _Passes(KafkaTimeoutError(), UnavailableError("broker away"))
    service = await _started(passes)
    await _run_until(service, passes=1)
    assert service.ready
    assert (service.failures, service.passes) == (2, 1)
    await service.stop()
    assert passes.closed
    assert not service.ready


@pytest.mark.parametrize("fenced", [ProducerFenced(), FencedError("newer compactor")])
async def test_a_fenced_compactor_stops(fenced: BaseException) -> None:
    passes = _Passes(fenced)
    service = await _started(passes)
    await _run_until(service, passes=1)
    assert service.ended
    assert not service.ready
    with pytest.raises(FencedError):  # the process exits by it (1)
        await service.wait_stopped()
    await service.stop()  # the fenced error was said once; the stop still closes
    assert passes.closed
