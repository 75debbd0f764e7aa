"""The ares error tree.

Adapters translate driver errors at their edge (``raise ConflictError(...) from e``) so that
callers, the services and the CLI only ever handle these types. ``retriable`` drives retry
logic; ``exit_code`` is the CLI's documented exit status for the error.
"""

from __future__ import annotations


class AresError(Exception):
    """Base of every error ares raises on purpose."""

    retriable: bool = False
    exit_code: int = 1


class ConfigError(AresError):
    """A setting is missing or invalid; the message names the setting."""

    exit_code = 2


class ConflictError(AresError):
    """An append's expected version does not match the stream's version."""

    exit_code = 3

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"version conflict on stream {stream_id!r}: expected version {expected}, "
            f"actual version {actual}"
        )
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class FencedError(AresError):
    """This writer lost ownership of its partition: a newer owner fenced it."""


class WriterRetired(FencedError):
    """This writer's producer failed beyond repair: like a fenced one it writes no more, and
    its partition is taken over again (by its owner, if still assigned) with a new one."""


class IntegrityError(AresError):
    """A hash chain is broken, a version is missing or duplicated, or a stream is truncated."""

    exit_code = 5


class SchemaError(AresError):
    """A record cannot be encoded or decoded with the known schemas."""


class TransientError(AresError):
    """A temporary failure (broker unreachable, timeout); retrying may succeed."""

    retriable = True


class UnavailableError(TransientError):
    """A required service did not answer in time (broker down, no partition owner)."""

    exit_code = 4


class InfrastructureError(AresError):
    """The local development environment could not be prepared or started."""


class RecordTooLargeError(AresError):
    """An event or command is larger than the configured maximum record size."""
