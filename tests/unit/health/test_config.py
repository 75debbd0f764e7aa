"""The checker's settings: environment, flags over it, errors naming the setting."""

from __future__ import annotations

import pytest

from ares.errors import ConfigError
from ares.health_checker.cli import health_config
from ares.health_checker.config import HealthConfig


def test_defaults_follow_the_issue() -> None:
    config = HealthConfig()
    assert config.silence_for(1.0) == 3.0  # 3 x the heartbeat interval
    assert config.silence_for(2.5) == 7.5
    assert (config.loop_deaths, config.loop_window_s) == (5, 600.0)
    assert config.rebuild_lookback_s == 1200.0
    assert config.step_timeout_for("any", None) == 600.0
    assert config.step_timeout_for("any", 2.0) == 2.0


def test_environment_and_overrides() -> None:
    env = {"ARES_HEALTH_SILENCE_S": "5", "ARES_HEALTH_LOOP_DEATHS": "3",
           "ARES_HEALTH_STEP_TIMEOUTS": "a.b=10, c.d=2.5",
           "ARES_ALERT_WEBHOOK_URL": "https://hooks.example/T0/secret"}
    config = HealthConfig.from_env(env, loop_deaths=4)
    assert config.silence_for(1.0) == 5.0
    assert config.loop_deaths == 4
    assert config.step_timeouts == {"a.b": 10.0, "c.d": 2.5}
    assert config.step_timeout_for("c.d", None) == 2.5
    assert config.webhook_url == "https://hooks.example/T0/secret"


@pytest.mark.parametrize(("env", "named"), [
    ({"ARES_HEALTH_SILENCE_S": "soon"}, "ARES_HEALTH_SILENCE_S"),
    ({"ARES_HEALTH_LOOP_WINDOW_S": "-1"}, "ARES_HEALTH_LOOP_WINDOW_S"),
    ({"ARES_HEALTH_LOOP_DEATHS": "1"}, "ARES_HEALTH_LOOP_DEATHS"),
    ({"ARES_HEALTH_STEP_TIMEOUTS": "nokind"}, "ARES_HEALTH_STEP_TIMEOUTS"),
    ({"ARES_ALERT_WEBHOOK_URL": "ftp://x/secret-token"}, "ARES_ALERT_WEBHOOK_URL"),
])
def test_a_bad_setting_is_named(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named) as caught:
        HealthConfig.from_env(env)
    assert "secret-token" not in str(caught.value)


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARES_HEALTH_LOOP_DEATHS", "9")
    config = health_config(loop_deaths=3, step_timeouts="x=1", silence_s=None)
    assert config.loop_deaths == 3
    assert config.step_timeouts == {"x": 1.0}


def test_lost_workers_are_removed_unless_the_setting_says_false() -> None:
    """Sub-second failover is the default; ``false`` leaves it to the session timeout."""
    assert HealthConfig().remove_lost_workers is True
    assert HealthConfig.from_env({}).remove_lost_workers is True
    off = {"ARES_HEALTH_REMOVE_LOST_WORKERS": "false"}
    assert HealthConfig.from_env(off).remove_lost_workers is False
    assert HealthConfig.from_env({}, remove_lost_workers=False).remove_lost_workers is False
