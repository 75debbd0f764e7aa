"""ARES_COMMAND_ISSUERS: who may send which command to which agents."""

from __future__ import annotations

import pytest

from ares.commands.policy import IssuerPolicy
from ares.config import Settings
from ares.errors import ConfigError


def test_no_setting_means_no_policy() -> None:
    assert IssuerPolicy.parse("") is None
    assert IssuerPolicy.parse(" ; ") is None


def test_rules_match_issuer_prefix_and_command() -> None:
    policy = IssuerPolicy.parse("ops=*:*; health-checker=*:agent.declare_dead,agent.quarantine;"
                                "billing=billing-:task.assign,agent.start")
    assert policy is not None
    assert policy.allows("ops", "anything", "agent.kill")
    assert policy.allows("health-checker", "a1", "agent.declare_dead")
    assert not policy.allows("health-checker", "a1", "agent.kill")
    assert policy.allows("billing", "billing-7", "task.assign")
    assert not policy.allows("billing", "payroll-7", "task.assign")
    assert not policy.allows("billing", "billing-7", "events.append")
    assert not policy.allows("stranger", "billing-7", "task.assign")
    assert list(policy.issuers()) == ["billing", "health-checker", "ops"]


@pytest.mark.parametrize(("text", "says"), [
    ("ops", "is not issuer=prefix:command"),
    ("ops=*", "is not issuer=prefix:command"),
    ("=*:*", "is not issuer=prefix:command"),
    ("ops=*:agent.explode", "unknown command(s) ['agent.explode']"),
])
def test_bad_rules_fail_at_start_up_naming_the_setting(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match="ARES_COMMAND_ISSUERS") as error:
        Settings.from_env({"ARES_COMMAND_ISSUERS": text})
    assert says in str(error.value)
