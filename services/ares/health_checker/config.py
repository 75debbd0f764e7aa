"""The health checker's settings: thresholds, windows and the webhook.

Every setting is an ``ARES_HEALTH_*`` environment variable (the webhook's URL is
``ARES_ALERT_WEBHOOK_URL``); ``ares run health-checker`` flags override them. Durations are
seconds. ``HealthConfig.from_env`` validates and names the setting that is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from ares.config import bool_setting
from ares.errors import ConfigError


@dataclass(frozen=True, slots=True)
class HealthConfig:
    # Silence: an agent (or worker) unheard of for silence_factor x the interval its worker
    # declares in every heartbeat; silence_s, when set, replaces that for every worker.
    silence_factor: float = 3.0
    silence_s: float | None = None
    # Stalls: an agent working on a task with no progress for its declared step timeout
    # (config_json "step_timeout_s" of agent.started), else the kind's, else this default;
    # None turns stall detection off for agents that declare nothing.
    step_timeout_s: float | None = 600.0
    step_timeouts: Mapping[str, float] = field(default_factory=dict)
    # No verdict this long after a (re)start, a hand-off or a partition changing owner:
    # the new incarnation or owner must get a chance to say it is alive. None: the silence.
    grace_s: float | None = None
    # Feedback: a death not followed by agent.resurrected and a fresh heartbeat in time is
    # late (alert); an incarnation that lived healthy_after_s forgives the earlier deaths.
    resurrection_deadline_s: float = 60.0
    healthy_after_s: float = 300.0
    # Death loops: loop_deaths deaths within loop_window_s.
    loop_deaths: int = 5
    loop_window_s: float = 600.0
    # A verdict that could not be delivered (no owner answered) is sent again after this.
    retry_s: float = 5.0
    # How often the detector looks at the clock.
    tick_s: float = 0.1
    # How far back the state is rebuilt from ares.events and ares.heartbeats on start and
    # on every partition assignment. None: twice the longest window above.
    lookback_s: float | None = None
    # A worker_lost verdict also takes the worker out of the runtime's consumer group
    # (KIP-345 LeaveGroup), so its partitions move at once instead of after the session
    # timeout. On by default: sub-second failover is what users get. The price, a worker
    # whose loop stalls past the silence (load, a long GC) is fenced and pays a rebalance,
    # is weighed in docs/health.md; false leaves failover to the session timeout.
    remove_lost_workers: bool = True
    webhook_url: str | None = None
    webhook_attempts: int = 8
    webhook_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> HealthConfig:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, key, kind in _ENV:
            raw = env.get(key)
            if raw is None or raw == "":
                continue
            try:
                values[name] = kind(raw)
            except ValueError:
                raise ConfigError(f"{key} must be {_KIND_NAMES[kind]} (got {raw!r})") from None
        if (timeouts := env.get("ARES_HEALTH_STEP_TIMEOUTS")):
            values["step_timeouts"] = parse_step_timeouts(timeouts, "ARES_HEALTH_STEP_TIMEOUTS")
        if env.get("ARES_HEALTH_REMOVE_LOST_WORKERS"):
            values["remove_lost_workers"] = bool_setting(env, "ARES_HEALTH_REMOVE_LOST_WORKERS")
        if (url := env.get("ARES_ALERT_WEBHOOK_URL")):
            values["webhook_url"] = url
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def validate(self) -> None:
        for name, key, _ in _ENV:
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{key} must be positive (got {value})")
        if self.step_timeout_s is not None and self.step_timeout_s <= 0:
            raise ConfigError("ARES_HEALTH_STEP_TIMEOUT_S must be positive")
        for kind, seconds in self.step_timeouts.items():
            if not seconds > 0:
                raise ConfigError(f"ARES_HEALTH_STEP_TIMEOUTS: {kind}={seconds} must be > 0")
        if self.loop_deaths < 2:
            raise ConfigError(f"ARES_HEALTH_LOOP_DEATHS must be at least 2 "
                              f"(got {self.loop_deaths})")
        if self.webhook_url is not None:
            parts = urlsplit(self.webhook_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                # Not echoed: a webhook URL often carries its secret in the path or query.
                raise ConfigError("ARES_ALERT_WEBHOOK_URL must be an http(s) URL")

    def with_overrides(self, **overrides: Any) -> HealthConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    # -- derived ------------------------------------------------------------------------

    def silence_for(self, interval_s: float) -> float:
        """How long a worker declaring ``interval_s`` may stay silent."""
        if self.silence_s is not None:
            return self.silence_s
        return self.silence_factor * (interval_s if interval_s > 0 else 1.0)

    def grace_for(self, interval_s: float) -> float:
        return self.grace_s if self.grace_s is not None else self.silence_for(interval_s)

    def step_timeout_for(self, kind: str | None, declared: float | None) -> float | None:
        if declared is not None and declared > 0:
            return declared
        if kind is not None and kind in self.step_timeouts:
            return self.step_timeouts[kind]
        return self.step_timeout_s

    @property
    def rebuild_lookback_s(self) -> float:
        if self.lookback_s is not None:
            return self.lookback_s
        return 2 * max(self.loop_window_s, self.resurrection_deadline_s, self.healthy_after_s)


def parse_step_timeouts(text: str, setting: str) -> dict[str, float]:
    """``kind=seconds[,kind=seconds...]``."""
    result: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, sep, value = item.partition("=")
        try:
            if not sep or not kind.strip():
                raise ValueError(item)
            result[kind.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{setting}: {item!r} is not kind=seconds") from None
    return result


_ENV: tuple[tuple[str, str, type[Any]], ...] = (
    ("silence_factor", "ARES_HEALTH_SILENCE_FACTOR", float),
    ("silence_s", "ARES_HEALTH_SILENCE_S", float),
    ("step_timeout_s", "ARES_HEALTH_STEP_TIMEOUT_S", float),
    ("grace_s", "ARES_HEALTH_GRACE_S", float),
    ("resurrection_deadline_s", "ARES_HEALTH_RESURRECTION_DEADLINE_S", float),
    ("healthy_after_s", "ARES_HEALTH_HEALTHY_AFTER_S", float),
    ("loop_deaths", "ARES_HEALTH_LOOP_DEATHS", int),
    ("loop_window_s", "ARES_HEALTH_LOOP_WINDOW_S", float),
    ("retry_s", "ARES_HEALTH_RETRY_S", float),
    ("tick_s", "ARES_HEALTH_TICK_S", float),
    ("lookback_s", "ARES_HEALTH_LOOKBACK_S", float),
    ("webhook_attempts", "ARES_ALERT_WEBHOOK_ATTEMPTS", int),
    ("webhook_timeout_s", "ARES_ALERT_WEBHOOK_TIMEOUT_S", float),
)
_KIND_NAMES = {float: "a number", int: "an integer"}
