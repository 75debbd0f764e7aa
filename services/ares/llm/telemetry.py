"""What an LLM call tells the world besides its recorded step: its usage (``ares.usage``),
its token deltas (``ares.tokens``), and the fleet budget it must respect (``ares.budgets``).

These are ports: the SDK calls them, the runtime manager plugs in the Kafka-backed
implementations (``ares.llm.kafka_telemetry``, ``ares.budgets.view``), and unit tests and
the local runner use the in-process ones below. None of them is transactional: what a
provider answered was paid whether or not the step's transaction commits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ares.errors import AresError

DEFAULT_TENANT = "default"

# Usage outcomes: the provider answered and the answer was used / rejected by validate /
# the provider refused or failed (tokens usually 0, the attempt is still on record).
OK = "ok"
INVALID = "invalid"
ERROR = "error"

# Token stream record kinds (``ares.tokens``). Every stream opens with START, or RESTARTED
# when its step is being requested again after a crash or a retry: a client drops any text
# it holds for that stream id. Then DELTA records, then END (or ERROR).
START = "start"
RESTARTED = "restarted"
DELTA = "delta"
END = "end"
STREAM_ERROR = "error"

# Budget policies of ctx.chat / ctx.llm when the tenant is over budget.
WAIT = "wait"
FAIL = "fail"
POLICIES = (WAIT, FAIL)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One provider answer's cost: the value of an ``ares.usage`` record (key: tenant)."""

    tenant: str
    agent_id: str
    kind: str
    task_id: str
    name: str
    provider: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    outcome: str = OK
    at: float = 0.0  # epoch seconds when the provider answered
    usage_id: str = ""  # unique; the keeper's dedupe key

    def __post_init__(self) -> None:
        if not self.usage_id:
            object.__setattr__(self, "usage_id", uuid.uuid4().hex)
        if not self.at:
            object.__setattr__(self, "at", time.time())

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UsageRecord:
        """``ValueError`` when a field is missing or of the wrong type."""
        try:
            return cls(tenant=text_field(data, "tenant"), agent_id=text_field(data, "agent_id"),
                       kind=text_field(data, "kind"), task_id=text_field(data, "task_id"),
                       name=text_field(data, "name"), provider=text_field(data, "provider"),
                       model=text_field(data, "model"),
                       prompt_tokens=count_field(data, "prompt_tokens"),
                       completion_tokens=count_field(data, "completion_tokens"),
                       cost_usd=float(data["cost_usd"]), outcome=text_field(data, "outcome"),
                       at=float(data["at"]), usage_id=text_field(data, "usage_id"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a usage record: {type(e).__name__}: {e}") from None


@dataclass(frozen=True, slots=True)
class StreamId:
    """Which recorded call a token stream belongs to (one stream per attempt)."""

    agent_id: str
    task_id: str
    name: str
    occurrence: int

    def __str__(self) -> str:
        return f"{self.task_id}/{self.name}/{self.occurrence}"


class TokenStream(Protocol):
    async def delta(self, text: str) -> None: ...

    async def end(self, error: str | None = None) -> None: ...


class LlmTelemetry(Protocol):
    async def usage(self, record: UsageRecord) -> None:
        """Publish once the provider answered; returns when the record is durable."""
        ...

    async def open_stream(self, stream: StreamId, *, incarnation: int,
                          restarted: bool) -> TokenStream:
        """Announce a stream (START or RESTARTED) and return where its deltas go."""
        ...


class BudgetExceeded(AresError):
    """The tenant's fleet budget is spent and the call's policy is ``fail``."""

    def __init__(self, tenant: str, reason: str) -> None:
        super().__init__(f"tenant {tenant!r} is over its LLM budget: {reason}")
        self.tenant = tenant
        self.reason = reason


class BudgetGate(Protocol):
    async def admit(self, tenant: str, policy: str) -> float:
        """Return when ``tenant`` may call (the seconds it waited), or raise
        ``BudgetExceeded`` under policy ``fail`` while it is over budget."""
        ...


class NullTelemetry:
    """Publishes nothing: the default of an ``AgentServices`` built without a runtime."""

    async def usage(self, record: UsageRecord) -> None:
        return None

    async def open_stream(self, stream: StreamId, *, incarnation: int,
                          restarted: bool) -> TokenStream:
        return _NullStream()


class _NullStream:
    async def delta(self, text: str) -> None:
        return None

    async def end(self, error: str | None = None) -> None:
        return None


class MemoryTelemetry:
    """Keeps what it is told, in order: for unit tests and the local runner."""

    def __init__(self) -> None:
        self.usages: list[UsageRecord] = []
        self.tokens: list[tuple[str, str, str]] = []  # (stream id, kind, text)

    async def usage(self, record: UsageRecord) -> None:
        self.usages.append(record)

    async def open_stream(self, stream: StreamId, *, incarnation: int,
                          restarted: bool) -> TokenStream:
        self.tokens.append((str(stream), RESTARTED if restarted else START, ""))
        return _MemoryStream(self, str(stream))


@dataclass(slots=True)
class _MemoryStream:
    telemetry: MemoryTelemetry
    stream: str

    async def delta(self, text: str) -> None:
        self.telemetry.tokens.append((self.stream, DELTA, text))

    async def end(self, error: str | None = None) -> None:
        self.telemetry.tokens.append((self.stream, STREAM_ERROR if error else END,
                                      error or ""))


class OpenBudget:
    """No budget: every call is admitted at once."""

    async def admit(self, tenant: str, policy: str) -> float:
        return 0.0


def text_field(data: Mapping[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    return value


def count_field(data: Mapping[str, Any], name: str) -> int:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{name} must be an int >= 0")
    return value
