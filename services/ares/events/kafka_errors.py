"""Translation of aiokafka errors into the ares error tree, at the adapter's edge."""

from __future__ import annotations

import re

from aiokafka import errors as kafka

from ares.errors import AresError, FencedError, TransientError, UnavailableError
from ares.logs import recent_kafka_errors

_AUTH_FAILURE = re.compile(r"authenticat|sasl|illegal sasl state|unsupportedsasl", re.I)


class AuthenticationError(AresError):
    """The broker refused this client's credentials (SASL): a setting to fix, not retry."""

    exit_code = 4


def translate(exc: BaseException, what: str) -> AresError:
    """The ares error for a Kafka failure while doing ``what`` (raise it ``from exc``)."""
    if isinstance(exc, kafka.ProducerFenced | kafka.InvalidProducerEpoch):
        return FencedError(f"{what}: this writer was fenced by a newer owner of the partition")
    if isinstance(exc, kafka.KafkaConnectionError | kafka.NoBrokersAvailable):
        refused = [m for m in recent_kafka_errors() if _AUTH_FAILURE.search(m)]
        if refused:
            return AuthenticationError(
                f"{what}: Kafka refused our credentials ({refused[-1]}); check "
                "ARES_KAFKA_SASL_USERNAME / ARES_KAFKA_SASL_PASSWORD and the mechanism "
                "(ARES_KAFKA_SASL_MECHANISM)")
        return UnavailableError(
            f"{what}: the Kafka broker is unreachable ({exc}); start one with `ares dev up` "
            "or point ARES_KAFKA_BOOTSTRAP at yours"
        )
    if isinstance(exc, kafka.KafkaTimeoutError | TimeoutError):
        return UnavailableError(f"{what}: Kafka did not answer in time ({exc})")
    if isinstance(exc, kafka.KafkaError) and getattr(exc, "retriable", False):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}")
    return AresError(f"{what}: {type(exc).__name__}: {exc}")
