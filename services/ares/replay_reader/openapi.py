"""The OpenAPI 3.0 document of the replay reader's HTTP API, served at ``/openapi.json``.

Written by hand, next to the handlers (``http_api``): the integration tests run
schemathesis against it, so every documented parameter, status and body is checked
against what the server really does.
"""

from __future__ import annotations

from typing import Any

from ares.lifecycle.state import Status

# What the API accepts as a stream (agent) id: no control characters, no "/" (a path
# segment), at most 256 characters. The limits below match the handlers' checks.
ID_PATTERN = r"^[^\x00-\x1f\x7f/]+$"
ID_MAX = 256
MAX_PAGE = 500
MAX_EVENTS_PAGE = 1000
MAX_VERSION = 2**53 - 1

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


def document(server_url: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "ares-mesh replay reader", "version": "1",
                 "description": "The read side of ares-mesh: agents, genealogy, streams, "
                                "state at any version or time, integrity audits, live events."
                                " Errors are RFC 9457 problem details. /healthz, /readyz and "
                                "/metrics are served on the same port."},
        "paths": _PATHS,
        "components": {"schemas": _SCHEMAS},
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc
