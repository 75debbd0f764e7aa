"""Who may send which command to which agents: ``ARES_COMMAND_ISSUERS``.

Kafka ACLs decide who may write ``ares.commands`` at all; this decides, per command, whether
its ``issuer`` may act on that stream. Rules are ``issuer=prefix:command,command`` separated
by ``;`` — ``*`` as the prefix means every stream, ``*`` as the command list every command::

    ARES_COMMAND_ISSUERS="ops=*:*;health-checker=*:agent.declare_dead,agent.quarantine;
                          compactor=*:snapshot.request;billing=billing-:task.assign,agent.start"

An issuer may have several rules; a command is allowed when one of them matches. Unset or
empty: every issuer may do everything (the behaviour without the setting).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ares.errors import ConfigError
from ares.events.wire.schemas import COMMAND_PAYLOADS

SETTING = "ARES_COMMAND_ISSUERS"
ANY = "*"


@dataclass(frozen=True, slots=True)
class IssuerRule:
    issuer: str
    prefix: str  # "" (from "*") matches every stream
    commands: frozenset[str] | None  # None: every command

    def allows(self, issuer: str, stream_id: str, command_type: str) -> bool:
        return (issuer == self.issuer and stream_id.startswith(self.prefix)
                and (self.commands is None or command_type in self.commands))


@dataclass(frozen=True, slots=True)
class IssuerPolicy:
    rules: tuple[IssuerRule, ...]

    def allows(self, issuer: str, stream_id: str, command_type: str) -> bool:
        return any(rule.allows(issuer, stream_id, command_type) for rule in self.rules)

    @classmethod
    def parse(cls, text: str) -> IssuerPolicy | None:
        """The policy of a setting's value; None (no policy) when it is empty."""
        rules = [_rule(part.strip()) for part in text.split(";") if part.strip()]
        return cls(tuple(rules)) if rules else None

    def issuers(self) -> Iterable[str]:
        return sorted({rule.issuer for rule in self.rules})


def _rule(text: str) -> IssuerRule:
    issuer, sep, scope = text.partition("=")
    prefix, colon, commands = scope.partition(":")
    if not sep or not colon or not issuer.strip() or not prefix.strip() or not commands.strip():
        raise ConfigError(f"{SETTING}: {text!r} is not issuer=prefix:command[,command] "
                          "(use * for every stream or every command)")
    names = frozenset(c.strip() for c in commands.split(",") if c.strip())
    unknown = names - set(COMMAND_PAYLOADS) - {ANY}
    if unknown:
        raise ConfigError(f"{SETTING}: unknown command(s) {sorted(unknown)} in {text!r} "
                          f"(known: {', '.join(sorted(COMMAND_PAYLOADS))})")
    prefix = prefix.strip()
    return IssuerRule(issuer.strip(), "" if prefix == ANY else prefix,
                      None if ANY in names else names)
