"""The OpenAPI 3.0 document of the replay reader's HTTP API, served at ``/openapi.json``.

Written by hand, next to the handlers (``http_api``): the integration tests run
schemathesis against it, so every documented parameter, status and body is checked
against what the server really does.
"""

from __future__ import annotations

from typing import Any

from ares.commands.model import MAX_SIGNAL_NAME, MAX_SIGNAL_PAYLOAD_BYTES
from ares.lifecycle.state import Status

# What the API accepts as a stream (agent) id: no control characters, no "/" (a path
# segment), at most 256 characters. The limits below match the handlers' checks.
ID_PATTERN = r"^[^\x00-\x1f\x7f/]+$"
ID_MAX = 256
MAX_PAGE = 500
MAX_EVENTS_PAGE = 1000
MAX_VERSION = 2**53 - 1
# A signal's name in a path: a path segment as is (RFC 3986 pchar but percent-escapes),
# not "." or ".." (clients remove those segments), so no client, shell or proxy rewrites
# it on the way. The owner takes any printable name (the CLI and the command can send one).
SIGNAL_NAME_CHARS = "A-Za-z0-9._~!$&'()*+,;=:@-"
SIGNAL_NAME_PATTERN = r"^[A-Za-z0-9_~!$&'()*+,;=:@-][A-Za-z0-9._~!$&'()*+,;=:@-]*$"
# A signal id in a body: 1-256 characters, no control characters.
SIGNAL_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
# The write routes' security scheme: `Authorization: Bearer <ARES_API_TOKEN>`.
BEARER = "bearerToken"

_NULL_STR = {"type": "string", "nullable": True}
_NULL_INT = {"type": "integer", "nullable": True}
_NULL_TIME = {"type": "string", "format": "date-time", "nullable": True}
_ID = {"type": "string", "minLength": 1, "maxLength": ID_MAX, "pattern": ID_PATTERN}


def _obj(props: dict[str, Any], required: list[str] | None = None, *,
         nullable: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props,
                              "required": required if required is not None else list(props)}
    if nullable:
        schema["nullable"] = True
    return schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_PROBLEM = {"description": "an error (RFC 9457 problem details)",
            "content": {"application/problem+json": {"schema": _ref("Problem")}}}


def _op(summary: str, ok: dict[str, Any], params: list[dict[str, Any]],
        errors: tuple[int, ...] = (400, 404), op_id: str = "") -> dict[str, Any]:
    responses: dict[str, Any] = {"200": ok}
    for status in (*errors, 503):
        responses[str(status)] = _PROBLEM
    return {"summary": summary, "operationId": op_id, "parameters": params,
            "responses": responses}


def _path_id(name: str, what: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": what,
            "schema": dict(_ID)}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema}


_SCHEMAS: dict[str, Any] = {
    "Problem": _obj({"type": {"type": "string"}, "title": {"type": "string"},
                     "status": {"type": "integer"}, "detail": {"type": "string"},
                     "instance": {"type": "string"}}, ["type", "title", "status"]),
    "Agent": _obj({
        "agent_id": {"type": "string"}, "kind": {"type": "string"},
        "status": {"type": "string", "enum": [s.value for s in Status]},
        "incarnation": {"type": "integer"}, "restarts": {"type": "integer"},
        "deaths": {"type": "integer"}, "resurrections": {"type": "integer"},
        "worker": _NULL_STR, "version": {"type": "integer"},
        "last_event_type": _NULL_STR, "last_event_at": _NULL_TIME,
        "last_death_cause": _NULL_STR, "quarantine_reason": _NULL_STR,
        "tasks": _obj({k: {"type": "integer"} for k in
                       ("assigned", "completed", "failed", "pending")}),
        "tokens": _obj({k: {"type": "integer"} for k in
                        ("llm_calls", "prompt", "completion", "spent", "reused", "resumes")}),
        "pending_tasks": {"type": "array", "items": {"type": "string"}},
        "waiting_for": {
            "type": "object", "nullable": True,
            "description": "what the current task waits for (a durable wait), since when",
            "properties": {"task_id": {"type": "string"},
                           "kind": {"type": "string", "enum": ["signal", "timer", "approval"]},
                           "names": {"type": "array", "items": {"type": "string"}},
                           "deadline": _NULL_TIME, "since": _NULL_TIME}},
        "pending_signals": {"type": "array", "items": {"type": "string"},
                            "description": "names of the signals received and not consumed"},
        "parent_id": {**_NULL_STR, "description": "teams: the agent that delegated this "
                                                   "agent's latest delegated task"},
    }),
    "AgentTree": _obj({
        "agent_id": {"type": "string"}, "kind": {"type": "string"},
        "status": {"type": "string", "enum": [s.value for s in Status]},
        "incarnation": {"type": "integer"},
        "task_id": {**_NULL_STR, "description": "the current task"},
        "tokens_spent": {"type": "integer", "description": "prompt + completion tokens"},
        "tokens_reused": {"type": "integer",
                          "description": "re-used from the journal after recoveries"},
        "parent_id": {**_NULL_STR, "description": "the agent that delegated this agent's "
                                                   "latest delegated task"},
        "children": {"type": "array", "items": _ref("AgentTree"),
                     "description": "the agents it delegated to (dispatch order), then any "
                                    "other naming it as parent; each agent appears once in "
                                    "the tree"},
    }),
    "AgentPage": _obj({"items": {"type": "array", "items": _ref("Agent")},
                       "next": _NULL_STR, "source": _ref("Source")}),
    "Source": {"type": "string", "enum": ["projection", "log"],
               "description": "projection: PostgreSQL; log: scanned from Kafka (PostgreSQL "
                              "unavailable)"},
    "Incarnation": _obj({
        "incarnation": {"type": "integer"}, "parent": _NULL_INT,
        "started_at": {"type": "string", "format": "date-time"}, "ended_at": _NULL_TIME,
        "lifetime_s": {"type": "number", "nullable": True}, "end": _NULL_STR,
        "cause_of_death": _NULL_STR, "stop_reason": _NULL_STR, "quarantined": _NULL_STR,
        "worker": _NULL_STR, "attempts": {"type": "integer"},
        "backoff_ms": {"type": "array", "items": {"type": "integer"}},
        "recovery": {"type": "object", "nullable": True},
        "first_version": {"type": "integer"}, "last_version": {"type": "integer"},
    }),
    "Genealogy": _obj({"agent_id": {"type": "string"},
                       "incarnations": {"type": "array", "items": _ref("Incarnation")},
                       "source": _ref("Source")}),
    "Event": _obj({
        "id": {"type": "string"}, "stream_id": {"type": "string"}, "type": {"type": "string"},
        "module": {"type": "string"}, "version": {"type": "integer"},
        "timestamp": {"type": "string", "format": "date-time"},
        "payload": {"type": "object"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "prev_hash": {"type": "string"}, "hash": {"type": "string"},
    }),
    "EventPage": _obj({"stream_id": {"type": "string"},
                       "items": {"type": "array", "items": _ref("Event")},
                       "next_from": _NULL_INT, "source": _ref("Source")}),
    "Failure": _obj({"stream_id": {"type": "string"}, "version": {"type": "integer"},
                     "kind": {"type": "string"}, "detail": {"type": "string"}}, nullable=True),
    "State": _obj({
        "stream_id": {"type": "string"}, "step": {"type": "integer"},
        "version": {"type": "integer"}, "head_version": {"type": "integer"},
        "event": {"allOf": [_ref("Event")], "nullable": True},
        "state": _obj({"version": {"type": "integer"}, "lifecycle": {"type": "object"},
                       "agent": {"type": "object", "nullable": True},
                       "agent_note": _NULL_STR}),
        "integrity": _ref("Failure"),
    }),
    "Finding": _obj({"stream_id": {"type": "string"}, "version": {"type": "integer"},
                     "kind": {"type": "string"}, "detail": {"type": "string"},
                     "offset": _NULL_INT}),
    "Audit": _obj({
        "stream_id": {"type": "string"}, "ok": {"type": "boolean"},
        "events": {"type": "integer"}, "first_version": _NULL_INT,
        "head_version": {"type": "integer"}, "expected_version": _NULL_INT,
        "expected_from": _NULL_STR, "findings": {"type": "array", "items": _ref("Finding")},
        "more_findings": {"type": "integer"}, "summarised": {"type": "object", "nullable": True},
        "notes": {"type": "array", "items": {"type": "string"}},
    }),
    "Alert": _obj({"alert_id": {"type": "string"}, "stream_id": {"type": "string"},
                   "kind": {"type": "string"}, "severity": {"type": "string"},
                   "message": {"type": "string"}, "source": {"type": "string"},
                   "timestamp": {"type": "string", "format": "date-time"},
                   "details": {"type": "object",
                               "additionalProperties": {"type": "string"}}}),
    "AlertPage": _obj({"items": {"type": "array", "items": _ref("Alert")},
                       "next": _NULL_STR}),
    "SignalRequest": {
        "type": "object", "additionalProperties": False,
        "description": "An empty body is the same as {}.",
        "properties": {
            "payload": {"description": "the signal's value, any JSON value (default null); "
                                       f"at most {MAX_SIGNAL_PAYLOAD_BYTES} bytes as "
                                       "canonical JSON (413 beyond)"},
            "signal_id": {"type": "string", "minLength": 1, "maxLength": ID_MAX,
                          "pattern": SIGNAL_ID_PATTERN,
                          "description": "the signal's id (default: a new uuid): sending the "
                                         "same id again is applied once, so a retry after a "
                                         "503 must reuse it"}}},
    "SignalAccepted": _obj({
        "agent_id": {"type": "string"}, "name": {"type": "string"},
        "signal_id": {"type": "string"}, "status": {"type": "string", "enum": ["ok"]},
        "message": {"type": "string", "description": "'signal received', or 'signal "
                                                     "already received' for a duplicate id"},
        "version": {"type": "integer", "description": "the agent's stream version after "
                                                      "the signal.received event (for a "
                                                      "duplicate: its version now)"}}),
}

_SECURITY_SCHEMES: dict[str, Any] = {
    BEARER: {"type": "http", "scheme": "bearer",
             "description": "the token of ARES_API_TOKEN (or ARES_API_TOKEN_FILE), for "
                            "writes; reads need none. Writes answer 403 while it is unset."},
}

_LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}
_VERSION = {"type": "integer", "minimum": 0, "maximum": MAX_VERSION}
_TEXT = {"type": "string", "maxLength": ID_MAX, "pattern": r"^[^\x00-\x1f\x7f]*$"}
_AGENT = _path_id("agent_id", "the agent (its stream id)")
_STREAM = _path_id("stream_id", "the stream (an agent id)")

_PATHS: dict[str, Any] = {
    "/agents": {"get": _op(
        "Agents, by id; keyset pagination (pass `next` as `after`)",
        _json(_ref("AgentPage"), "a page of agents"),
        [_query("limit", _LIMIT, "page size"),
         _query("after", dict(_ID), "the `next` of the previous page"),
         _query("status", {"type": "string", "enum": [s.value for s in Status]},
                "only agents in this status"),
         _query("kind", _TEXT, "only agents of this kind")], (400,), "listAgents")},
    "/agents/{agent_id}": {"get": _op(
        "One agent: status, incarnation, restarts, worker, version, tasks, tokens",
        _json(_ref("Agent"), "the agent"), [_AGENT], op_id="getAgent")},
    "/agents/{agent_id}/genealogy": {"get": _op(
        "Every incarnation of an agent, with causes of death and recoveries",
        _json(_ref("Genealogy"), "the incarnations, oldest first"), [_AGENT],
        op_id="getGenealogy")},
    "/agents/{agent_id}/tree": {"get": _op(
        "The team rooted at an agent: the agents it delegated tasks to, theirs, and so on "
        "(the document of `ares agents tree --json`; header X-Ares-Source says where it was "
        "read)",
        _json(_ref("AgentTree"), "the root, its children nested"), [_AGENT],
        op_id="getAgentTree")},
    "/streams/{stream_id}/events": {"get": _op(
        "Events of a stream from a version; pass `next_from` as `from` for the next page",
        _json(_ref("EventPage"), "a page of events, in version order"),
        [_STREAM, _query("from", {"type": "integer", "minimum": 1, "maximum": MAX_VERSION,
                                  "default": 1}, "first version"),
         _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_EVENTS_PAGE,
                          "default": 100}, "page size")], op_id="getStreamEvents")},
    "/streams/{stream_id}/state": {"get": _op(
        "The folded state as of a version, a time, or both (the earlier of the two); "
        "the latest by default",
        _json(_ref("State"), "the state and the event that led to it"),
        [_STREAM, _query("version", _VERSION, "the state after this version"),
         _query("at", {"type": "string", "format": "date-time"},
                "the state as of this time (RFC 3339)")], op_id="getStreamState")},
    "/audit/{stream_id}": {"get": _op(
        "Integrity audit of one stream (a full scan of its partition)",
        _json(_ref("Audit"), "the verdict; `ok` false lists every finding"), [_STREAM],
        op_id="auditStream")},
    "/alerts": {"get": _op(
        "Alerts, newest first",
        _json(_ref("AlertPage"), "a page of alerts"),
        [_query("stream", dict(_ID), "only alerts of this stream"),
         _query("limit", _LIMIT, "page size"),
         _query("before", dict(_ID), "the `next` of the previous page")], (400,),
        "listAlerts")},
    "/events/stream": {"get": {
        "summary": "Live events as Server-Sent Events (event `ares.event`, data: an Event, "
                   "id: partition-offset), from the subscription on, in log order",
        "operationId": "streamEvents",
        "parameters": [_query("stream", dict(_ID), "only this stream"),
                       _query("type", _TEXT, "only types starting with this prefix"),
                       _query("module", _TEXT, "only events of this module")],
        "responses": {"200": {"description": "an endless event stream",
                              "content": {"text/event-stream": {"schema": {
                                  "type": "string"}}}},
                      "400": _PROBLEM, "503": _PROBLEM}}},
}


_HEADER = {"schema": {"type": "string"}, "required": True}


def _send_signal(writes: bool) -> dict[str, Any]:
    """``POST /agents/{agent_id}/signals/{name}``. With writes disabled (ARES_API_TOKEN
    unset) no credential is accepted: the operation then states no security requirement,
    and every request answers 403."""
    op: dict[str, Any] = {
        "summary": "Send the signal `name` to an agent (e.g. `approved` for a tool waiting "
                   "for its approval): a task waiting for it goes on, else the first wait "
                   "for that name consumes it. Needs the bearer token"
                   + ("." if writes else "; writes are disabled on this server (403)."),
        "operationId": "sendSignal",
        "parameters": [
            _AGENT,
            {"name": "name", "in": "path", "required": True,
             "description": "the signal's name: letters, digits and "
                            "- . _ ~ ! $ & ' ( ) * + , ; = : @, not starting with '.'",
             "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SIGNAL_NAME,
                        "pattern": SIGNAL_NAME_PATTERN}}],
        "requestBody": {"required": False, "content": {
            "application/json": {"schema": _ref("SignalRequest")}}},
        "responses": {
            "202": _json(_ref("SignalAccepted"),
                         "the agent's owner appended signal.received (or had already: same "
                         "signal_id)"),
            "400": _PROBLEM,
            "401": {**_PROBLEM, "description": "no bearer token, or a wrong one",
                    "headers": {"WWW-Authenticate": _HEADER}},
            "403": {**_PROBLEM, "description": "writes are disabled: ARES_API_TOKEN is unset"},
            "404": {**_PROBLEM, "description": "the owner has no such agent (nothing "
                                               "appended)"},
            "413": {**_PROBLEM, "description": f"a payload over {MAX_SIGNAL_PAYLOAD_BYTES} "
                                               "bytes (nothing sent)"},
            "415": {**_PROBLEM, "description": "a body that is not application/json"},
            "422": {**_PROBLEM, "description": "the owner refused the signal; `detail` says "
                                               "why"},
            "503": {**_PROBLEM, "description": "no owner answered in time: the signal may "
                                               "still arrive; retry with the same signal_id",
                    "headers": {"Retry-After": _HEADER}},
        }}
    if writes:
        op["security"] = [{BEARER: []}]
    return op


def document(server_url: str | None = None, *, writes: bool = True) -> dict[str, Any]:
    """The document; ``writes``: whether this server takes writes (a token is set)."""
    paths = {**_PATHS, "/agents/{agent_id}/signals/{name}": {"post": _send_signal(writes)}}
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "ares-mesh replay reader", "version": "1",
                 "description": "The read side of ares-mesh: agents, genealogy, teams, streams, "
                                "state at any version or time, integrity audits, live events;"
                                " and signals to agents (writes: bearer token). Errors are "
                                "RFC 9457 problem details. /healthz, /readyz and /metrics are "
                                "served on the same port."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS, "securitySchemes": _SECURITY_SCHEMES},
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc
