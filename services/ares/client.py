"""``ares.Client``: how external systems append events and send commands.

External systems never write events directly: they send commands to the owner of the
stream's partition and await its reply, correlated by command id, on one partition of
``ares.replies`` chosen per client.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from types import TracebackType

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from ares.commands.deadlines import NotAnsweredError, deadline_s_for, with_deadline
from ares.commands.model import (
    Command,
    Reply,
    ReplyStatus,
    append_command,
    decode_reply,
)
from ares.config import Settings
from ares.errors import AresError, ConflictError, SchemaError
from ares.events.kafka.errors import translate
from ares.events.kafka.reader import new_consumer, topic_partitions
from ares.events.kafka.retry import connect
from ares.events.model import ANY_VERSION, NewEvent
from ares.events.wire.canonical import canonical_json
from ares.tasks import cancel_and_wait, stop_client, wait_for
from ares.topics import COMMANDS, REPLIES, TopicPlan, load_topics

log = logging.getLogger(__name__)
__all__ = ["Client", "CommandRejectedError", "NotAnsweredError"]


class CommandRejectedError(AresError):
    """The owner refused the command (invalid input); the reply says why."""


class Client:
    def __init__(self, settings: Settings, plan: TopicPlan | None = None,
                 issuer: str = "client") -> None:
        self.settings = settings
        self.plan = plan or load_topics(settings)
        self.issuer = issuer
        self._producer: AIOKafkaProducer | None = None
        self._replies: AIOKafkaConsumer | None = None
        self._reply_partition = 0
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._listener: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect (waiting out a broker that answers "not yet" for ARES_RETRY_TIMEOUT_S) and
        pin the reply partition's position before any command is sent."""
        settings = self.settings
        try:
            self._producer = await connect(self._new_producer, what="connecting to Kafka",
                                           settings=settings)
            self._replies = await connect(
                lambda: new_consumer(settings, fetch_max_wait_ms=50),
                what="connecting to Kafka", settings=settings)
            topic = self.plan.name(REPLIES)
            partitions = await topic_partitions(self._replies, topic)
            self._reply_partition = random.choice(sorted(partitions))
            tp = TopicPartition(topic, self._reply_partition)
            self._replies.assign([tp])
            await self._replies.seek_to_end(tp)
            await self._replies.position(tp)  # pin the position before any command is sent
        except (KafkaError, TimeoutError) as exc:
            await self.close()
            raise translate(exc, "connecting to Kafka") from exc
        except BaseException:
            await self.close()
            raise
        self._listener = asyncio.create_task(self._listen(), name="client-replies")

    def _new_producer(self) -> AIOKafkaProducer:
        settings = self.settings
        return AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True,
            **settings.kafka_options(),
            acks="all", linger_ms=1, request_timeout_ms=int(settings.request_timeout_s * 1000),
            max_request_size=max(settings.max_record_bytes * 2, 1_048_576),
        )

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        await cancel_and_wait(listener)
        for client in (self._producer, self._replies):
            if client is not None:
                await stop_client(client)  # a client renewed after failures: aiokafka#647
        self._producer = self._replies = None

    @property
    def reply_partition(self) -> int:
        """The partition of ``ares.replies`` this client reads: its commands' ``reply_to``."""
        return self._reply_partition

    def expect_reply(self, command_id: str) -> asyncio.Future[Reply]:
        """A future resolved by the reply to ``command_id`` (for commands sent by hand)."""
        return self._pending.setdefault(command_id,
                                        asyncio.get_running_loop().create_future())

    async def send(self, command: Command, timeout_s: float | None = None,
                   deadline_s: float | None = None) -> Reply:
        """Send ``command`` and wait ``timeout_s`` for its owner's reply
        (``NotAnsweredError`` after that: the command stays on ``ares.commands``).

        ``deadline_s``: seconds from now after which no owner may apply it (it is answered
        "expired" and dead-lettered instead). Without one the command is kept until an
        owner takes it, except for the commands about a moment (``agent.kill``,
        ``worker.crash``), whose deadline is the wait (``ares.commands.deadlines``)."""
        if self._producer is None:
            raise AresError("the client is not started (use `async with Client(...)`)")
        timeout = timeout_s if timeout_s is not None else self.settings.request_timeout_s
        command = with_deadline(
            Command(type=command.type, stream_id=command.stream_id, payload=command.payload,
                    issuer=command.issuer or self.issuer, id=command.id,
                    timestamp=command.timestamp, reply_to=str(self._reply_partition),
                    metadata=command.metadata),
            deadline_s_for(command.type, deadline_s, timeout), time.time())
        waiter = self.expect_reply(command.id)
        try:
            await self._producer.send_and_wait(self.plan.name(COMMANDS), command.encode(),
                                               key=command.stream_id.encode())
            return await wait_for(waiter, timeout)
        except TimeoutError:
            raise NotAnsweredError(command, timeout) from None
        except KafkaError as exc:
            raise translate(exc, f"sending {command.type}") from exc
        finally:
            self._pending.pop(command.id, None)

    async def append(self, stream_id: str, events: Sequence[NewEvent],
                     expected_version: int = ANY_VERSION, timeout_s: float | None = None,
                     deadline_s: float | None = None) -> int:
        """Append through the stream's owner; the new stream version."""
        reply = await self.send(append_command(stream_id, events, expected_version,
                                               self.issuer), timeout_s, deadline_s)
        if reply.status is ReplyStatus.OK:
            return reply.stream_version
        if reply.status is ReplyStatus.CONFLICT:
            raise ConflictError(stream_id, expected_version,
                                reply.actual_version if reply.actual_version is not None
                                else reply.stream_version)
        raise CommandRejectedError(f"the owner of {stream_id!r} refused the append: "
                                   f"{reply.message}")

    async def command(self, command_type: str, stream_id: str,
                      timeout_s: float | None = None, deadline_s: float | None = None,
                      **payload: object) -> Reply:
        """Send one command (``agent.start``, ``task.assign``...) and return the owner's
        reply; ``CommandRejectedError`` when it refuses (an expired one included)."""
        reply = await self.send(Command(type=command_type, stream_id=stream_id,
                                        payload=payload, issuer=self.issuer), timeout_s,
                                deadline_s)
        if reply.status is not ReplyStatus.OK:
            raise CommandRejectedError(f"{command_type} for {stream_id!r} refused: "
                                       f"{reply.message}")
        return reply

    async def start_agent(self, agent_id: str, kind: str,
                          config: dict[str, object] | None = None,
                          deadline_s: float | None = None) -> Reply:
        return await self.command("agent.start", agent_id, deadline_s=deadline_s, kind=kind,
                                  config_json=canonical_json(config or {}))

    async def assign_task(self, agent_id: str, task_id: str, task_input: object,
                          deadline_s: float | None = None) -> Reply:
        return await self.command("task.assign", agent_id, deadline_s=deadline_s,
                                  task_id=task_id, input_json=canonical_json(task_input))

    async def _listen(self) -> None:
        assert self._replies is not None
        while True:
            batch = await self._replies.getmany(timeout_ms=1000)
            for records in batch.values():
                for record in records:
                    try:
                        reply = decode_reply(record.value)
                    except SchemaError as exc:
                        log.warning("undecodable reply at offset %d: %s", record.offset, exc)
                        continue
                    waiter = self._pending.get(reply.correlation_id)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(reply)
