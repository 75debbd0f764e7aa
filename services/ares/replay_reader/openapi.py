"""The OpenAPI 3.0 document of the replay reader's HTTP API, served at ``/openapi.json``.

Written by hand, next to the handlers (``http_api``): the integration tests run
schemathesis against it, so every documented parameter, status and body is checked
against what the server really does.
"""

from __future__ import annotations

from typing import Any

from ares.commands.deadlines import DURATION_PATTERN
from ares.commands.model import MAX_SIGNAL_NAME, MAX_SIGNAL_PAYLOAD_BYTES
from ares.lifecycle.state import Status

# What the API accepts as a stream (agent) id: no control characters, no "/" (a path
# segment), at most 256 characters. The limits below match the handlers' checks.
ID_PATTERN = r"^[^\x00-\x1f\x7f/]+$"
ID_MAX = 256
MAX_PAGE = 500
MAX_EVENTS_PAGE = 1000
MAX_VERSION = 2**53 - 1
# The largest Last-Event-ID of a token stream (a Kafka offset, whose next one is an int64).
MAX_OFFSET = 2**63 - 2
# A signal's name in a path: a path segment as is (RFC 3986 pchar but percent-escapes),
# not "." or ".." (clients remove those segments), so no client, shell or proxy rewrites
# it on the way. The owner takes any printable name (the CLI and the command can send one).
SIGNAL_NAME_CHARS = "A-Za-z0-9._~!$&'()*+,;=:@-"
SIGNAL_NAME_PATTERN = r"^[A-Za-z0-9_~!$&'()*+,;=:@-][A-Za-z0-9._~!$&'()*+,;=:@-]*$"
# A signal id in a body: 1-256 characters, no control characters.
SIGNAL_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
# The security scheme: `Authorization: Bearer <token>`, a token of ARES_API_TOKENS (or
# ARES_API_TOKEN): every write (an operator's), and every read with ARES_API_READS=token.
BEARER = "bearerToken"
# The largest body of a write but a signal's: 413 beyond.
MAX_BODY_BYTES = 64 * 1024
# The longest note of a resolution.
MAX_NOTE = 4096

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
    "StartRequest": {
        "type": "object", "additionalProperties": False, "required": ["kind"],
        "properties": {
            "kind": {"type": "string", "minLength": 1, "maxLength": ID_MAX,
                     "pattern": SIGNAL_ID_PATTERN,
                     "description": "the agent kind, e.g. example.pipeline (the owner refuses "
                                    "a kind it does not know: 422)"},
            "config": {"type": "object", "description": "the agent's configuration "
                                                        "(default {})"}}},
    "StopRequest": {
        "type": "object", "additionalProperties": False,
        "description": "An empty body is the same as {}.",
        "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": ID_MAX,
                                  "pattern": SIGNAL_ID_PATTERN,
                                  "description": "why, recorded in agent.stopped (default "
                                                 "'requested')"}}},
    "EmptyRequest": {"type": "object", "additionalProperties": False, "properties": {},
                     "description": "No body, or {}."},
    "TaskRequest": {
        "type": "object", "additionalProperties": False, "required": ["input"],
        "properties": {
            "input": {"description": "the task's input, any JSON value"},
            "task_id": {"type": "string", "minLength": 1, "maxLength": ID_MAX,
                        "pattern": SIGNAL_ID_PATTERN,
                        "description": "the task's id (default: a new uuid): assigning the "
                                       "same id again is a no-op, so a retry after a 503 "
                                       "must reuse it"}}},
    "ResolveRequest": {
        "description": "done (the call happened; `result`: what it returned, any JSON value, "
                       "default null), or retry (it did not: run it again) or skip (do not "
                       "run it), which take no `result` (400)",
        "oneOf": [
            {"type": "object", "additionalProperties": False, "required": ["as"],
             "properties": {"as": {"type": "string", "enum": ["done"]},
                            "result": {"description": "what the call returned"},
                            "note": _ref("ResolveNote")}},
            {"type": "object", "additionalProperties": False, "required": ["as"],
             "properties": {"as": {"type": "string", "enum": ["retry", "skip"]},
                            "note": _ref("ResolveNote")}}]},
    "ResolveNote": {"type": "string", "minLength": 1, "maxLength": MAX_NOTE,
                    "pattern": r"^[^\x00-\x08\x0b-\x1f\x7f]+$",
                    "description": "a note for the record (who, why)"},
    "CommandAccepted": _obj({
        "agent_id": {"type": "string"},
        "command": {"type": "string",
                    "enum": ["agent.start", "agent.stop", "agent.kill", "agent.resume"]},
        "status": {"type": "string", "enum": ["ok"]},
        "message": {"type": "string", "description": "what the owner did, or its note "
                                                     "(e.g. 'already running')"},
        "version": {"type": "integer", "description": "the agent's stream version after "
                                                      "the command"}}),
    "TaskAccepted": _obj({
        "agent_id": {"type": "string"}, "task_id": {"type": "string"},
        "status": {"type": "string", "enum": ["ok"]}, "message": {"type": "string"},
        "version": {"type": "integer"}}),
    "ResolveAccepted": _obj({
        "agent_id": {"type": "string"}, "call_id": {"type": "string"},
        "as": {"type": "string", "enum": ["done", "retry", "skip"]},
        "status": {"type": "string", "enum": ["ok"]}, "message": {"type": "string"},
        "version": {"type": "integer", "description": "the stream's version after "
                                                      "tool.call.resolved"}}),
    "CrashAccepted": _obj({
        "worker_id": {"type": "string"},
        "command": {"type": "string", "enum": ["worker.crash"]},
        "status": {"type": "string", "enum": ["ok"]},
        "message": {"type": "string", "description": "the worker's answer before it exits"}}),
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
             "description": "a token of ARES_API_TOKENS (role:token pairs; or "
                            "ARES_API_TOKEN, an operator's): writes need an operator's "
                            "(403 with a viewer's; 403 for every write while no operator "
                            "token is set); reads need a viewer's or an operator's with "
                            "ARES_API_READS=token, none with ARES_API_READS=open. Browsers "
                            "of the dashboard use its session cookie instead (and, for "
                            "writes, the header X-CSRF-Token)."},
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
    "/agents/{agent_id}/tokens": {"get": {
        "summary": "The agent's LLM token streams as Server-Sent Events (ares.tokens): one "
                   "event per record, `id` its offset, `event` its kind (start, restarted, "
                   "delta, end, error), `data` the record (docs/streaming.md). Resumes after "
                   "Last-Event-ID; endless (keepalive comments while idle)",
        "operationId": "streamAgentTokens",
        "parameters": [
            _AGENT,
            _query("from", {"type": "string", "enum": ["beginning", "end"],
                            "default": "beginning"},
                   "without a Last-Event-ID: every record the topic retains (about an "
                   "hour), or only new ones"),
            _query("last_event_id", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
                   "resume after this event id (the header Last-Event-ID wins)"),
            {"name": "Last-Event-ID", "in": "header", "required": False,
             "description": "the id of the last event received: the stream goes on after "
                            "it (what an EventSource sends when it reconnects)",
             "schema": {"type": "string", "pattern": r"^[0-9]{1,19}$"}}],
        "responses": {"200": {"description": "an endless event stream",
                              "content": {"text/event-stream": {"schema": {
                                  "type": "string"}}}},
                      "400": _PROBLEM, "503": _PROBLEM}}},
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
_UNAUTHORIZED = {**_PROBLEM, "description": "no credentials, or invalid ones",
                 "headers": {"WWW-Authenticate": _HEADER}}


DEADLINE_MAX = 40
# Every write's command is kept on ares.commands until an owner takes it, unless the request
# asks for a deadline (ares.commands.deadlines; a kill's and a crash's default is the wait).
_DEADLINE = _query("deadline", {"type": "string", "maxLength": DEADLINE_MAX,
                               "pattern": DURATION_PATTERN},
                   "seconds or a duration (30, 90s, 5m, 1h, 2d) after which no owner may "
                   "apply the command: one that takes it later answers expired (409) and "
                   "dead-letters it to ares.dlq. Default: none, the command is kept until an "
                   "owner takes it (kill and crash: the server's wait for the reply)")
_EXPIRED = ("the `deadline` passed before an owner took the command: not applied, "
            "dead-lettered to ares.dlq (reason expired)")
_KEPT = ("no owner answered in time; `detail` says what becomes of the command: without a "
         "deadline it is kept on ares.commands and applied when an owner takes it")


def _write(op_id: str, summary: str, params: list[dict[str, Any]], body: str,
           accepted: dict[str, Any], writes: bool, *, body_required: bool = False,
           refusals: dict[str, str], too_large: str | None = None,
           retry: str = f"{_KEPT}; the same request waits for it again (applied once)",
           ) -> dict[str, Any]:
    """A write: an operator's bearer token. With writes disabled (no operator token) no
    credential is accepted: the operation then states no security requirement, and every
    request answers 403."""
    responses: dict[str, Any] = {
        "202": accepted,
        "400": _PROBLEM,
        "401": _UNAUTHORIZED,
        "403": {**_PROBLEM, "description": "a viewer's credentials, a session's write "
                                           "without its CSRF token, or writes disabled (no "
                                           "operator token set)"},
        "413": {**_PROBLEM, "description": too_large or f"a body over {MAX_BODY_BYTES} "
                                                        "bytes (nothing sent)"},
        "415": {**_PROBLEM, "description": "a body that is not application/json"},
        "409": {**_PROBLEM, "description": _EXPIRED},
    }
    responses.update({status: {**_PROBLEM, "description": what}
                      for status, what in refusals.items()})
    responses["503"] = {**_PROBLEM, "description": retry,
                        "headers": {"Retry-After": _HEADER}}
    op: dict[str, Any] = {
        "summary": summary + (". Needs an operator's token." if writes else
                              "; writes are disabled on this server (403)."),
        "operationId": op_id, "parameters": [*params, _DEADLINE],
        "requestBody": {"required": body_required, "content": {
            "application/json": {"schema": _ref(body)}}},
        "responses": dict(sorted(responses.items()))}
    if writes:
        op["security"] = [{BEARER: []}]
    return op


_NO_AGENT = "the owner has no such agent (nothing appended)"
_OWNER_REFUSED = "the owner refused the command; `detail` says why (nothing appended)"


def _writes(writes: bool) -> dict[str, Any]:
    accepted = _json(_ref("CommandAccepted"), "the owner applied the command (or had "
                                              "nothing to do: `message` says so)")
    lifecycle = {"404": _NO_AGENT, "422": _OWNER_REFUSED}
    return {
        "/agents/{agent_id}/start": {"post": _write(
            "startAgent", "Start an agent of a kind (its first incarnation); starting a "
            "running agent is a no-op, a stopped one is resumed instead (422)",
            [_AGENT], "StartRequest", accepted, writes, body_required=True,
            refusals={"422": "the owner refused: an unknown kind, an invalid configuration, "
                             "or an agent that is stopped or quarantined (resume it)"})},
        "/agents/{agent_id}/stop": {"post": _write(
            "stopAgent", "Stop an agent voluntarily: it is not resurrected until resumed",
            [_AGENT], "StopRequest", accepted, writes, refusals=lifecycle)},
        "/agents/{agent_id}/kill": {"post": _write(
            "killAgent", "Crash an agent as if it raised (the arena): the runtime records "
            "agent.dead (cause killed) and resurrects it", [_AGENT], "EmptyRequest",
            accepted, writes, refusals=lifecycle,
            retry="no owner answered in time: a kill's deadline is the wait (unless "
                  "`deadline` says otherwise), so an owner that takes it later refuses it "
                  "and dead-letters it (expired)")},
        "/agents/{agent_id}/resume": {"post": _write(
            "resumeAgent", "Resume a stopped or quarantined agent (a new incarnation, a "
            "fresh restart budget)", [_AGENT], "EmptyRequest", accepted, writes,
            refusals=lifecycle)},
        "/agents/{agent_id}/tasks": {"post": _write(
            "assignTask", "Assign a task to an agent (tasks run one at a time, in "
            "assignment order)", [_AGENT], "TaskRequest",
            _json(_ref("TaskAccepted"), "the owner recorded the task (or already had it: "
                                        "same task_id)"), writes, body_required=True,
            refusals=lifecycle,
            retry=f"{_KEPT}; the same request with the same task_id (the problem's "
                  "`task_id`) waits for it again (assigned once)")},
        "/agents/{agent_id}/calls/{call_id}/resolve": {"post": _write(
            "resolveCall", "Resolve a tool call that is in doubt (as `ares agents "
            "resolve`): appends tool.call.resolved and the paused task runs again",
            [_AGENT, _path_id("call_id", "the in-doubt call's id (see the agent's status)")],
            "ResolveRequest",
            _json(_ref("ResolveAccepted"), "tool.call.resolved appended"), writes,
            body_required=True,
            refusals={"404": "no such agent",
                      "409": "the call is not in doubt (unknown, running, with an outcome "
                             "or already resolved), or the stream kept moving, or "
                             + _EXPIRED,
                      "422": _OWNER_REFUSED},
            retry=f"{_KEPT}; check the call before resolving it again (a resolved call is "
                  "refused, 409)")},
        "/agents/{agent_id}/signals/{name}": {"post": _send_signal(writes)},
        "/workers/{worker_id}/crash": {"post": _write(
            "crashWorker", "The arena: make a runtime manager exit abruptly (worker.crash, "
            "os._exit) so that its agents fail over for real. Only on a server run with "
            "--arena (ARES_ARENA=1), else 403",
            [_path_id("worker_id", "the runtime manager (its worker id, as the workers "
                                   "page and its heartbeats name it)")],
            "EmptyRequest",
            _json(_ref("CrashAccepted"), "the worker accepted the crash and exits now"),
            writes,
            refusals={"404": "no such worker holds partitions in the runtime group",
                      "422": "the worker refused: its runtime manager runs without --arena "
                             "(the command is dead-lettered, nothing crashed)"},
            retry="no owner answered in time: the crash's deadline is the wait (unless "
                  "`deadline` says otherwise), so an owner that takes it later refuses it "
                  "and dead-letters it (expired)")},
    }


def _send_signal(writes: bool) -> dict[str, Any]:
    """``POST /agents/{agent_id}/signals/{name}``."""
    return _write(
        "sendSignal", "Send the signal `name` to an agent (e.g. `approved` for a tool "
        "waiting for its approval): a task waiting for it goes on, else the first wait for "
        "that name consumes it",
        [_AGENT,
         {"name": "name", "in": "path", "required": True,
          "description": "the signal's name: letters, digits and "
                         "- . _ ~ ! $ & ' ( ) * + , ; = : @, not starting with '.'",
          "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SIGNAL_NAME,
                     "pattern": SIGNAL_NAME_PATTERN}}],
        "SignalRequest",
        _json(_ref("SignalAccepted"), "the agent's owner appended signal.received (or had "
                                      "already: same signal_id)"), writes,
        refusals={"404": _NO_AGENT, "422": "the owner refused the signal; `detail` says why"},
        too_large=f"a payload over {MAX_SIGNAL_PAYLOAD_BYTES} bytes (nothing sent)",
        retry=f"{_KEPT}; the same request with the same signal_id (the problem's "
              "`signal_id`) waits for it again (applied once)")


def _secured(path: dict[str, Any]) -> dict[str, Any]:
    """A read with ARES_API_READS=token: a viewer's or an operator's token."""
    secured: dict[str, Any] = {}
    for method, op in path.items():
        responses = dict(op["responses"])
        responses["401"] = _UNAUTHORIZED
        responses["403"] = {**_PROBLEM, "description": "credentials without the viewer role"}
        secured[method] = {**op, "security": [{BEARER: []}],
                           "responses": dict(sorted(responses.items()))}
    return secured


def document(server_url: str | None = None, *, writes: bool = True,
             reads_open: bool = True) -> dict[str, Any]:
    """The document; ``writes``: whether this server takes writes (an operator token is
    set); ``reads_open``: ARES_API_READS=open (else every read states the bearer scheme)."""
    reads = _PATHS if reads_open else {k: _secured(v) for k, v in _PATHS.items()}
    paths = {**reads, **_writes(writes)}
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "ares-mesh replay reader", "version": "1",
                 "description": "The read side of ares-mesh: agents, genealogy, teams, streams, "
                                "state at any version or time, integrity audits, live events;"
                                " and the writes: start, stop, kill, resume, tasks, "
                                "resolutions of in-doubt calls and signals (an operator's "
                                "bearer token). Errors are "
                                "RFC 9457 problem details. /healthz, /readyz and /metrics are "
                                "served on the same port."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS, "securitySchemes": _SECURITY_SCHEMES},
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc
