"""The Kafka side of topic management: aiokafka's admin client behind ares errors.

The only module of ares.topics that does I/O. Driver errors are translated here (``from e``):
a broker that answers "not yet" is retried for ARES_RETRY_TIMEOUT_S, then
``UnavailableError`` (exit 4), a config the broker rejects is
``ConfigError`` (exit 2), anything else an ``AresError`` naming the topic and the broker's
reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from ares.config import Settings
from ares.errors import AresError, ConfigError, TransientError
from ares.events.kafka.retry import retry
from ares.logs import quiet_aiokafka
from ares.tasks import wait_for
from ares.topics.diff import TopicState
from ares.topics.spec import TopicSpec

T = TypeVar("T")
_DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source: an override set on the topic
_UNKNOWN_TOPIC = 3
_BROKER_REJECTED_CONFIG = {"InvalidConfigurationError", "InvalidReplicationFactorError",
                           "InvalidPartitionsError", "InvalidTopicError"}


class TopicAdmin:
    """An admin connection for one command: ``async with TopicAdmin(settings) as admin``."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._timeout_s = settings.request_timeout_s
        self._client = AIOKafkaAdminClient(
            bootstrap_servers=settings.kafka_bootstrap, client_id="ares-topics",
            request_timeout_ms=int(settings.request_timeout_s * 1000),
            **settings.kafka_options(),
        )

    async def __aenter__(self) -> TopicAdmin:
        with quiet_aiokafka():
            await self._call("connecting to Kafka", self._client.start)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._client.close()

    async def broker_count(self) -> int:
        cluster = await self._call("describe the cluster", self._client.describe_cluster)
        return len(cluster["brokers"])

    async def describe(self, names: Sequence[str]) -> dict[str, TopicState | None]:
        """Partitions, replication factor and overrides of each topic; None when missing."""
        # Metadata for *all* topics: aiokafka asks for named topics with
        # allow_auto_topic_creation=true, and on a cluster with auto.create.topics.enable a
        # mere `ares topics list` would create them with the broker's defaults.
        metadata = await self._call("describe topics", lambda: self._client.describe_topics(None))
        wanted = set(names)
        layout = {t["topic"]: t["partitions"] for t in metadata
                  if t["topic"] in wanted and t["error_code"] == 0}
        overrides = await self._overrides(sorted(layout))
        states: dict[str, TopicState | None] = dict.fromkeys(names)
        for name, partitions in layout.items():
            states[name] = TopicState(
                name=name, partitions=len(partitions),
                replication_factor=max((len(p["replicas"]) for p in partitions), default=0),
                overrides=MappingProxyType(overrides.get(name, {})),
            )
        return states

    async def create(self, specs: Iterable[TopicSpec]) -> None:
        topics = [NewTopic(s.name, s.partitions, s.replication_factor,
                           topic_configs=dict(s.configs)) for s in specs]
        if not topics:
            return
        response = await self._call("create topics", lambda: self._client.create_topics(topics))
        _raise_errors("create", [(e["topic"], e["error_code"], e["error_message"])
                                 for e in response.to_object()["topic_errors"]])

    async def replace_overrides(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Set the complete override set of each topic (legacy AlterConfigs semantics)."""
        if not configs:
            return
        resources = [ConfigResource(ConfigResourceType.TOPIC, name, dict(values))
                     for name, values in configs.items()]
        responses = await self._call("alter configs", lambda: self._client.alter_configs(resources))
        _raise_errors("alter configs of", [
            (r["resource_name"], r["error_code"], r["error_message"])
            for response in responses for r in response.to_object()["resources"]])

    async def add_partitions(self, totals: Mapping[str, int]) -> None:
        """Grow topics to the given partition counts, in one request for all of them."""
        if not totals:
            return
        request = {name: NewPartitions(total) for name, total in totals.items()}
        # aiokafka raises the first per-topic error itself; _call translates it.
        await self._call("add partitions", lambda: self._client.create_partitions(request))

    async def delete(self, names: Sequence[str]) -> list[str]:
        """Delete topics (tests and teardown); returns the deleted ones, missing ones ignored.

        By name, through the controller: a topic created a moment ago may not be in a
        broker's metadata yet, but the controller knows it.
        """
        if not names:
            return []
        response = await self._call("delete topics",
                                    lambda: self._client.delete_topics(list(names)))
        results = [(topic, code, None) for topic, code in response.topic_error_codes]
        _raise_errors("delete", [r for r in results if r[1] != _UNKNOWN_TOPIC])
        return [topic for topic, code, _ in results if code == 0]

    async def _overrides(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        responses = await self._call("describe configs",
                                     lambda: self._client.describe_configs(resources))
        result: dict[str, dict[str, str]] = {}
        for response in responses:
            for res in response.to_object()["resources"]:
                if res["error_code"] not in (0, _UNKNOWN_TOPIC):
                    _raise_errors("describe configs of", [
                        (res["resource_name"], res["error_code"], res["error_message"])])
                result[res["resource_name"]] = {
                    e["config_names"]: e["config_value"] for e in res["config_entries"]
                    if e["config_source"] == _DYNAMIC_TOPIC_CONFIG
                    and e["config_value"] is not None}
        return result

    async def _call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        """``operation()``, retried while the broker answers "not yet" (a broker still
        starting, a controller moving) for ARES_RETRY_TIMEOUT_S."""
        bootstrap = self._settings.kafka_bootstrap

        async def attempt() -> T:
            return await wait_for(operation(), self._timeout_s)

        try:
            return await retry(attempt, what=what, bootstrap=bootstrap,
                               timeout_s=self._settings.retry_timeout_s)
        except KafkaError as exc:
            raise AresError(f"{what} failed on {bootstrap}: {exc}") from exc


def _raise_errors(operation: str, results: Sequence[tuple[str, int, Any]]) -> None:
    failures = [(topic, for_code(code), message) for topic, code, message in results if code]
    if not failures:
        return
    lines = "; ".join(f"{topic}: {cls.__name__}: {message or cls.description}"
                      for topic, cls, message in failures)
    text = f"the broker refused to {operation} {lines}"
    if all(cls.__name__ == "TopicAlreadyExistsError" for _, cls, _ in failures):
        raise TransientError(
            f"{text}: another apply created them, or the broker's metadata was behind; "
            "rerun `ares topics apply`")
    if all(cls.__name__ in _BROKER_REJECTED_CONFIG for _, cls, _ in failures):
        raise ConfigError(f"{text} (check topics.yaml)")
    if all(cls.retriable for _, cls, _ in failures):
        raise TransientError(f"{text} (retry)")
    raise AresError(text)
