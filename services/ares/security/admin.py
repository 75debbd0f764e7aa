"""``ares acls apply``: make the broker's ACLs of the planned principals match the plan.

Through Kafka's Admin API (DescribeAcls, CreateAcls, DeleteAcls, version 1: the pattern
type; every broker since 2.0, and the versions Kafka 4 still serves). aiokafka has the
request structures but no admin calls for them, so the calls are made here, one request
for all bindings. The connection's principal needs Alter (create, delete) and Describe
(describe) on the cluster: a super user, or an ACL administrator.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aiokafka import AIOKafkaClient
from aiokafka import errors as kafka
from aiokafka.protocol.admin import (
    CreateAclsRequest_v1,
    DeleteAclsRequest_v1,
    DescribeAclsRequest_v1,
)
from aiokafka.protocol.api import Request

from ares.config import Settings
from ares.errors import AresError
from ares.events.kafka.errors import translate
from ares.events.kafka.retry import connect
from ares.security.acls import LITERAL, PREFIXED, Acl

# Kafka's wire codes (org.apache.kafka.common.resource/acl).
_RESOURCE = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
_PATTERN = {LITERAL: 3, PREFIXED: 4}
_OPERATION = {"ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7,
              "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
              "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}
_ANY, _ALLOW = 1, 3
_RESOURCE_NAMES = {code: name for name, code in _RESOURCE.items()}
_PATTERN_NAMES = {code: name for name, code in _PATTERN.items()}
_OPERATION_NAMES = {code: name for name, code in _OPERATION.items()}


class AclAdminError(AresError):
    """The broker refused to describe or change ACLs (the message says which and why)."""


# aiokafka's request builders send one binding per request; these send all of them.
_CreateStruct: TypeAlias = CreateAclsRequest_v1
_DeleteStruct: TypeAlias = DeleteAclsRequest_v1
_DescribeStruct: TypeAlias = DescribeAclsRequest_v1


class _CreateAcls(Request[_CreateStruct]):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 30

    def __init__(self, acls: Sequence[Acl]) -> None:
        self._acls = acls

    def build(self, request_struct_class: type[_CreateStruct]) -> _CreateStruct:
        return request_struct_class([
            (_RESOURCE[a.resource_type], a.name, _PATTERN[a.pattern], a.principal, "*",
             _OPERATION[a.operation], _ALLOW) for a in self._acls])


class _DeleteAcls(Request[_DeleteStruct]):  # type: ignore[misc]
    API_KEY = 31

    def __init__(self, acls: Sequence[Acl]) -> None:
        self._acls = acls

    def build(self, request_struct_class: type[_DeleteStruct]) -> _DeleteStruct:
        return request_struct_class([
            (_RESOURCE[a.resource_type], a.name, _PATTERN[a.pattern], a.principal, "*",
             _OPERATION[a.operation], _ALLOW) for a in self._acls])


class _DescribeAcls(Request[_DescribeStruct]):  # type: ignore[misc]
    API_KEY = 29

    def __init__(self, principal: str) -> None:
        self._principal = principal

    def build(self, request_struct_class: type[_DescribeStruct]) -> _DescribeStruct:
        # Every resource, pattern and operation of one principal, from any host.
        return request_struct_class(_ANY, None, _ANY, self._principal, None, _ANY, _ANY)


@dataclass(slots=True)
class AclChanges:
    """What ``apply_acls`` found and did, per binding."""

    created: list[Acl] = field(default_factory=list)
    present: list[Acl] = field(default_factory=list)
    extra: list[Acl] = field(default_factory=list)  # held by a planned principal, not planned
    deleted: list[Acl] = field(default_factory=list)  # the extra ones, with prune
    other: list[str] = field(default_factory=list)  # DENY rules or host-bound: left alone


async def apply_acls(settings: Settings, acls: Sequence[Acl], *, dry_run: bool = False,
                     prune: bool = False) -> AclChanges:
    """Create the missing ``acls``; with ``prune`` delete the ALLOW rules of their principals
    that the plan does not hold. Nothing changes with ``dry_run``."""
    opened = await _open(settings)
    client = opened.client
    try:
        existing, other = await _existing(client, {a.principal for a in acls})
        wanted = set(acls)
        changes = AclChanges(present=sorted(wanted & existing),
                             extra=sorted(existing - wanted), other=other)
        missing = sorted(wanted - existing)
        if not dry_run and missing:
            await _create(client, missing)
        changes.created = missing
        if prune and changes.extra:
            if not dry_run:
                await _delete(client, changes.extra)
            changes.deleted = list(changes.extra)
        return changes
    except kafka.KafkaError as exc:
        raise translate(exc, "changing the ACLs") from exc
    finally:
        await client.close()


async def describe_acls(settings: Settings, principals: Iterable[str]) -> set[Acl]:
    """The ALLOW-from-any-host rules the broker holds for ``principals``."""
    opened = await _open(settings)
    client = opened.client
    try:
        found, _ = await _existing(client, set(principals))
        return found
    except kafka.KafkaError as exc:
        raise translate(exc, "describing the ACLs") from exc
    finally:
        await client.close()


class _Connection:
    """A bare client, started the way ``connect`` starts clients (a fresh one per attempt)."""

    def __init__(self, settings: Settings) -> None:
        self.client = AIOKafkaClient(
            bootstrap_servers=settings.kafka_bootstrap, client_id="ares-acls",
            request_timeout_ms=int(settings.request_timeout_s * 1000),
            **settings.kafka_options())

    async def start(self) -> None:
        await self.client.bootstrap()

    async def stop(self) -> None:
        await self.client.close()


async def _open(settings: Settings) -> _Connection:
    return await connect(lambda: _Connection(settings), what="connecting to Kafka",
                         settings=settings)


async def _send(client: AIOKafkaClient, request: Request[Any]) -> Any:
    return await client.send(client.get_random_node(), request)


async def _existing(client: AIOKafkaClient, principals: set[str]) -> tuple[set[Acl], list[str]]:
    found: set[Acl] = set()
    other: list[str] = []
    for principal in sorted(principals):
        response = await _send(client, _DescribeAcls(principal))
        _check(response.error_code, response.error_message, f"describing the ACLs of {principal}")
        for rtype, name, pattern, rules in response.resources:
            for rule_principal, host, operation, permission in rules:
                kind, how = _RESOURCE_NAMES.get(rtype), _PATTERN_NAMES.get(pattern)
                op = _OPERATION_NAMES.get(operation)
                if (permission != _ALLOW or host != "*" or kind is None or how is None
                        or op is None or rule_principal != principal):
                    other.append(f"{rule_principal} {'ALLOW' if permission == _ALLOW else 'DENY'}"
                                 f" {op or operation} on {kind or rtype} {name!r} "
                                 f"({how or pattern}) from {host}")
                    continue
                found.add(Acl(principal, kind, name, op, how))
    return found, other


async def _create(client: AIOKafkaClient, acls: Sequence[Acl]) -> None:
    response = await _send(client, _CreateAcls(acls))
    for acl, (code, message) in zip(acls, response.creation_responses, strict=True):
        _check(code, message, f"creating {_show(acl)}")


async def _delete(client: AIOKafkaClient, acls: Sequence[Acl]) -> None:
    response = await _send(client, _DeleteAcls(acls))
    for acl, (code, message, _matches) in zip(acls, response.filter_responses, strict=True):
        _check(code, message, f"deleting {_show(acl)}")


def _show(acl: Acl) -> str:
    return f"{acl.operation} on {acl.resource_type} {acl.name!r} ({acl.pattern}) for " \
           f"{acl.principal}"


def _check(code: int, message: str | None, what: str) -> None:
    if code == 0:
        return
    error = kafka.for_code(code)
    hint = ""
    if error is kafka.ClusterAuthorizationFailedError:
        hint = ("; the principal of this connection needs ALTER and DESCRIBE on the cluster "
                "(run `ares acls apply` as a super user or an ACL administrator)")
    elif error is kafka.SecurityDisabledError:
        hint = "; the broker has no authorizer (authorizer.class.name)"
    raise AclAdminError(f"{what}: {error.__name__}{f': {message}' if message else ''}{hint}")
