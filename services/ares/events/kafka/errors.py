"""Kafka failures at the adapter's edge: which are worth retrying (the one place that
decides), and their translation into the ares error tree."""

from __future__ import annotations

import re

from aiokafka import errors as kafka

from ares.errors import AresError, FencedError, TransientError, UnavailableError
from ares.logs import recent_kafka_errors

_AUTH_FAILURE = re.compile(r"authenticat|sasl|illegal sasl state|unsupportedsasl", re.I)


class AuthenticationError(AresError):
    """The broker refused this client's credentials (SASL): a setting to fix, not retry."""

    exit_code = 4


# Temporary by their nature, though aiokafka leaves ``retriable`` False on them (the
# coordinator, leader and controller errors it already marks).
_ALSO_RETRIABLE: tuple[type[BaseException], ...] = (
    kafka.BrokerNotAvailableError,
    kafka.KafkaTimeoutError,
    kafka.ConcurrentTransactions,
    ConnectionError,
    TimeoutError,
)

# What a user reads for the errors a starting broker answers with.
_PLAIN_WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (kafka.CoordinatorNotAvailableError, "no coordinator yet (the broker is still starting)"),
    (kafka.CoordinatorLoadInProgressError, "the coordinator is still loading"),
    (kafka.NotCoordinatorError, "the coordinator is moving"),
    (kafka.LeaderNotAvailableError, "a partition has no leader yet"),
    (kafka.NotLeaderForPartitionError, "a partition's leader is moving"),
    (kafka.UnknownTopicOrPartitionError, "a topic is not known to the broker yet"),
    (kafka.KafkaConnectionError, "no connection"),
    (kafka.NoBrokersAvailable, "no connection"),
    (kafka.NodeNotReadyError, "no connection"),
    (ConnectionError, "no connection"),
    (kafka.KafkaTimeoutError, "no answer in time"),
    (kafka.RequestTimedOutError, "no answer in time"),
    (TimeoutError, "no answer in time"),
)


class UnansweredRequest(TimeoutError):
    """A request of a transaction (produce, AddPartitionsToTxn, TxnOffsetCommit, EndTxn) got
    no answer within the producer's request timeout: it may still reach the broker later."""


# Failures that leave a transaction's outcome unknown: the request may have reached the
# broker, or may still (a timeout, a dropped connection), or the broker answered with an
# error that says nothing of what it did (UnknownServerError).
_RESULT_UNKNOWN: tuple[type[BaseException], ...] = (
    TimeoutError,  # UnansweredRequest among them
    kafka.KafkaTimeoutError,
    kafka.RequestTimedOutError,
    kafka.KafkaConnectionError,
    kafka.NodeNotReadyError,
    kafka.UnknownError,
    ConnectionError,
)


def result_unknown(exc: BaseException) -> bool:
    """Whether a transaction that failed with ``exc`` may still be changed by a request of it
    that is late, not lost: then its producer must write no more (KIP-890).

    Under the transaction protocol that aiokafka 0.14 and librdkafka speak (KIP-890's
    "version 1"), every transaction of a producer epoch looks alike to the broker: a late
    EndTxn would commit or abort the *next* transaction, a late produce or
    AddPartitionsToTxn would land in it. Only a new epoch refuses them, so such a failure
    retires the producer; a new one's ``init_transactions`` bumps the epoch. A fence is
    not one of them (the producer is done anyway), nor is an answer that refused the
    request (nothing of it was done).
    """
    return isinstance(exc, _RESULT_UNKNOWN)


def is_retriable(exc: BaseException) -> bool:
    """Whether trying the same operation again may succeed without changing anything.

    A connection that failed because the broker refused our credentials is not: that is a
    setting to fix (aiokafka reports it as a plain connection error, its log says why)."""
    if isinstance(exc, AresError):
        return exc.retriable
    if isinstance(exc, kafka.KafkaConnectionError | kafka.NoBrokersAvailable):
        return _refused_credentials() is None
    if isinstance(exc, kafka.KafkaError) and exc.retriable:
        return True
    return isinstance(exc, _ALSO_RETRIABLE)


def reason(exc: BaseException) -> str:
    """A short, plain reason for a retriable failure (the exception's class otherwise)."""
    for kind, words in _PLAIN_WORDS:
        if isinstance(exc, kind):
            return words
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def translate(exc: BaseException, what: str) -> AresError:
    """The ares error for a Kafka failure while doing ``what`` (raise it ``from exc``)."""
    if isinstance(exc, kafka.ProducerFenced | kafka.InvalidProducerEpoch):
        return FencedError(f"{what}: this writer was fenced by a newer owner of the partition")
    if isinstance(exc, kafka.KafkaConnectionError | kafka.NoBrokersAvailable):
        refused = _refused_credentials()
        if refused is not None:
            return AuthenticationError(
                f"{what}: Kafka refused our credentials ({refused}); check "
                "ARES_KAFKA_SASL_USERNAME / ARES_KAFKA_SASL_PASSWORD and the mechanism "
                "(ARES_KAFKA_SASL_MECHANISM)")
        return UnavailableError(
            f"{what}: the Kafka broker {_addresses(exc)}is unreachable ({reason(exc)}); "
            "start one with `ares dev up` or point ARES_KAFKA_BOOTSTRAP at yours"
        )
    if isinstance(exc, kafka.KafkaTimeoutError | TimeoutError):
        return UnavailableError(f"{what}: Kafka did not answer in time ({reason(exc)})")
    if is_retriable(exc):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}")
    return AresError(f"{what}: {type(exc).__name__}: {exc}")


def _refused_credentials() -> str | None:
    """aiokafka's last logged refusal of our login, if any in the last minute."""
    refused = [m for m in recent_kafka_errors() if _AUTH_FAILURE.search(m)]
    return refused[-1] if refused else None


_ADDRESS = re.compile(r"\('([^']+)', (\d+)")


def _addresses(exc: BaseException) -> str:
    """ "at host:port " from aiokafka's "Unable to bootstrap from [('host', port, ...)]"."""
    found = [f"{host}:{port}" for host, port in _ADDRESS.findall(str(exc))]
    return f"at {', '.join(found)} " if found else ""
