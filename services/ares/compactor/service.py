"""``ares run compactor``: a pass every ``interval_s``, for as long as the process runs.

Run one compactor per environment: its summary writer is transactional with one id per
summaries topic, so a second one fences the first, whose pass then fails with
``FencedError`` and whose service ends (``wait_stopped`` raises it: exit 1). A pass
interrupted at any point (stop, SIGKILL) leaves nothing half-written: each partition's
summaries commit in one transaction, and the next pass recomputes from what is committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from aiokafka.errors import KafkaError

from ares.compactor.compactor import Compactor
from ares.compactor.config import CompactionConfig
from ares.config import Settings
from ares.errors import AresError, FencedError
from ares.events.kafka.errors import translate
from ares.service import Service
from ares.topics import TopicPlan

log = logging.getLogger(__name__)


class CompactorService(Service):
    name = "compactor"

    def __init__(self, settings: Settings, plan: TopicPlan, config: CompactionConfig) -> None:
        super().__init__()
        self.config = config
        self.compactor = Compactor(settings, plan, config)
        self.passes = 0
        self.failures = 0

    async def on_start(self) -> None:
        await self.compactor.open()
        log.info("compactor: passes every %gs, trimming %s (%s)", self.config.interval_s,
                 "on" if self.config.trimming else "off", self.config.to_json())

    def background(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {"compactor-passes": self._run()}

    async def on_shutdown(self) -> None:
        await self.compactor.close()

    async def _run(self) -> None:
        while True:
            try:
                reports = await self.compactor.run_pass()
            except (AresError, KafkaError) as exc:  # an untranslated one: by its kind
                error = exc if isinstance(exc, AresError) else translate(exc, "compaction pass")
                if isinstance(error, FencedError):
                    log.error("compactor: fenced by another compactor; this one stops")
                    if error is exc:
                        raise
                    raise error from exc
                self.failures += 1  # broker trouble: the next pass starts over
                log.warning("compactor: pass failed: %s", error)
            else:
                self.passes += 1
                written = sum(r.written for r in reports)
                trimmed = sum(r.trimmed.to_offset - r.trimmed.from_offset
                              for r in reports if r.trimmed is not None)
                log.info("compactor: pass %d: %d summaries written, %d records trimmed",
                         self.passes, written, trimmed)
            await asyncio.sleep(self.config.interval_s)
