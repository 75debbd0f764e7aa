"""The records of the budget topics: limits (``ares.budget-limits``) and the state the
keeper publishes (``ares.budgets``), both JSON keyed by tenant.

``from_json`` raises ``ValueError`` on anything malformed, so a reader can dead-letter or
skip the record instead of crashing on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

MINUTE_S = 60
MAX_TENANT = 200


def minute_start(at: float) -> int:
    """The start (epoch seconds) of the tumbling 60 s window holding ``at``."""
    return int(at // MINUTE_S) * MINUTE_S


def utc_day(at: float) -> str:
    """The UTC day (YYYY-MM-DD) holding ``at``."""
    return _day_name(int(at // 86_400))


@lru_cache(maxsize=64)  # per record on the keeper's hot path: strftime costs ~2 us
def _day_name(day_index: int) -> str:
    return datetime.fromtimestamp(day_index * 86_400, UTC).strftime("%Y-%m-%d")


def day_start(at: float) -> float:
    """Epoch seconds of 00:00 UTC of the day holding ``at``."""
    return float(int(at // 86_400) * 86_400)


def check_tenant(tenant: str) -> str:
    if not tenant or len(tenant) > MAX_TENANT or not tenant.isprintable():
        raise ValueError(f"a tenant is 1 to {MAX_TENANT} printable characters (got {tenant!r})")
    return tenant


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """A tenant's limits; None: that dimension is unlimited."""

    tokens_per_minute: int | None = None
    usd_per_day: float | None = None

    def __post_init__(self) -> None:
        tpm = self.tokens_per_minute
        if tpm is not None and (isinstance(tpm, bool) or not isinstance(tpm, int) or tpm < 1):
            raise ValueError(f"tokens_per_minute must be an int >= 1 (got {tpm!r})")
        usd = self.usd_per_day
        if usd is not None and (isinstance(usd, bool) or not isinstance(usd, int | float)
                                or not math.isfinite(usd) or usd <= 0):
            raise ValueError(f"usd_per_day must be a number > 0 (got {usd!r})")

    @property
    def unlimited(self) -> bool:
        return self.tokens_per_minute is None and self.usd_per_day is None

    def to_json(self) -> dict[str, Any]:
        return {"tokens_per_minute": self.tokens_per_minute, "usd_per_day": self.usd_per_day}

    @classmethod
    def from_json(cls, data: Any) -> BudgetLimits:
        if not isinstance(data, Mapping):
            raise ValueError(f"budget limits must be a JSON object (got {type(data).__name__})")
        unknown = set(data) - {"tokens_per_minute", "usd_per_day"}
        if unknown:
            raise ValueError(f"unknown budget limit field(s): {', '.join(sorted(unknown))}")
        usd = data.get("usd_per_day")
        return cls(tokens_per_minute=data.get("tokens_per_minute"),
                   usd_per_day=float(usd) if isinstance(usd, int) and not isinstance(usd, bool)
                   else usd)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> BudgetLimits:
        return cls.from_json(_json(raw))


@dataclass(frozen=True, slots=True)
class BudgetState:
    """What the keeper knows of one tenant at ``updated_at``: the tokens of the minute
    window starting at ``minute_start`` and the USD of UTC day ``day``."""

    tenant: str
    limits: BudgetLimits
    minute_start: int
    minute_tokens: int
    day: str
    day_usd: float
    over: bool
    reason: str
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "limits": self.limits.to_json(),
                "minute_start": self.minute_start, "minute_tokens": self.minute_tokens,
                "day": self.day, "day_usd": self.day_usd, "over": self.over,
                "reason": self.reason, "updated_at": self.updated_at}

    @classmethod
    def from_json(cls, data: Any) -> BudgetState:
        if not isinstance(data, Mapping):
            raise ValueError(f"a budget state must be a JSON object (got {type(data).__name__})")
        try:
            day = _typed(data, "day", str)
            datetime.strptime(day, "%Y-%m-%d")
            return cls(tenant=check_tenant(_typed(data, "tenant", str)),
                       limits=BudgetLimits.from_json(data["limits"]),
                       minute_start=_typed(data, "minute_start", int),
                       minute_tokens=_typed(data, "minute_tokens", int), day=day,
                       day_usd=float(_typed(data, "day_usd", int | float)),
                       over=_typed(data, "over", bool), reason=_typed(data, "reason", str),
                       updated_at=float(_typed(data, "updated_at", int | float)))
        except KeyError as exc:
            raise ValueError(f"a budget state needs {exc}") from None

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> BudgetState:
        return cls.from_json(_json(raw))


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _typed(data: Mapping[str, Any], name: str, kind: Any) -> Any:
    value = data[name]
    # bool is an int in Python; a JSON true is never a count or an amount.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{name} has the wrong type ({type(value).__name__})")
    return value
