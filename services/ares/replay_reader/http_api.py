"""The replay reader's HTTP API (aiohttp): the documents of ``openapi.py``.

Reads come from the PostgreSQL projections; when PostgreSQL is unavailable they are
computed from the log (``fallback``) and say so (``"source": "log"``, header
``X-Ares-Source: log``). Every error is an RFC 9457 problem document
(``application/problem+json``), including unknown paths and methods; nothing escapes as
a bare 500 page. Parameters are checked against the limits the OpenAPI document states.

Who may do what is ``auth.ApiAuth``'s: reads are open, or need a viewer's or operator's
token with ``ARES_API_READS=token`` (but /healthz, /readyz and /metrics); writes (``POST``)
need an operator's token of ``ARES_API_TOKENS`` (or ``ARES_API_TOKEN``), as a bearer token
or the dashboard's session (then with its CSRF token). A refused write is answered before
its body is read and sends nothing. Writes go to the agents' owners as commands on
``ares.commands``, one per request, through an ``ares.Client`` of the API's own (issuer
``http-api``), started on the first write.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from http import HTTPStatus
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlencode

from aiohttp import web
from prometheus_client import REGISTRY, Counter
from prometheus_client.exposition import choose_encoder

from ares.agents.records import RESOLUTIONS
from ares.agents.registry import AgentRegistry
from ares.client import Client, CommandRejectedError, NotAnsweredError
from ares.commands.deadlines import is_expired, parse_seconds
from ares.commands.model import (
    MAX_SIGNAL_NAME,
    MAX_SIGNAL_PAYLOAD_BYTES,
    Command,
    Reply,
    ReplyStatus,
)
from ares.config import Settings
from ares.errors import AresError, ConflictError, TransientError
from ares.events.model import Event, EventFilter
from ares.events.ports import SummarySource
from ares.events.wire.canonical import canonical_json
from ares.lifecycle.state import Status
from ares.llm.tokens import FROM_BEGINNING, FROM_CHOICES, TokenEvent, TokenTail
from ares.replay_reader import arena_api, fallback, openapi, ui
from ares.replay_reader.audit_run import AuditScope, run_audit
from ares.replay_reader.auth import ApiAuth, Principal, Role
from ares.replay_reader.auth import ApiError as ApiError  # noqa: PLC0414 (re-exported)
from ares.replay_reader.kafka_source import KafkaStreamReader
from ares.replay_reader.live import Listener, LiveEvent, LiveFeed
from ares.replay_reader.pg_store import ProjectionStore, ProjectionUnavailableError
from ares.replay_reader.projection import AgentRow, agent_json, genealogy_json
from ares.replay_reader.session import NoSuchStreamError, ReplaySession, failure_json
from ares.replay_reader.source import NoSummaries
from ares.resolution import resolve_call as resolve_in_doubt
from ares.tasks import wait_for
from ares.topics import TOKENS, load_topics
from ares.views.agents import NoSuchAgentError, NotResolvableError
from ares.views.team import Member, team_tree

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
REQUESTS = Counter("ares_replay_http_requests_total", "HTTP requests", ["route", "status"])
_ID_RE = re.compile(openapi.ID_PATTERN)
_TEXT_RE = re.compile(r"^[^\x00-\x1f\x7f]*$")
_STATUSES = {s.value for s in Status}
_KEEPALIVE_S = 15.0
# A token stream's Last-Event-ID: a Kafka offset (at most 2**63 - 1, so the next is too).
MAX_OFFSET = openapi.MAX_OFFSET
_OFFSET_RE = re.compile(r"[0-9]{1,19}")
# The issuer of the commands the API sends (ARES_COMMAND_ISSUERS rules can name it).
ISSUER = "http-api"
# A 503 of a write: when to try again (with the same signal id).
RETRY_AFTER_S = 5
_RETRY_AFTER = {"Retry-After": str(RETRY_AFTER_S)}
_SIGNAL_NAME_RE = re.compile(openapi.SIGNAL_NAME_PATTERN)
_SIGNAL_ID_RE = re.compile(openapi.SIGNAL_ID_PATTERN)
_SIGNAL_FIELDS = frozenset({"payload", "signal_id"})
# The largest body of a write but a signal's (whose payload alone may be 64 KiB): 413 beyond.
MAX_BODY_BYTES = openapi.MAX_BODY_BYTES
_START_FIELDS = frozenset({"kind", "config"})
_STOP_FIELDS = frozenset({"reason"})
_TASK_FIELDS = frozenset({"input", "task_id"})
_RESOLVE_FIELDS = frozenset({"as", "result", "note"})
_NOTE_RE = re.compile(r"^[^\x00-\x08\x0b-\x1f\x7f]*$")  # a note may hold line breaks
# What a lifecycle write's 202 says when the owner adds nothing.
_DONE = {"agent.start": "started", "agent.stop": "stopped",
         "agent.kill": "killed: the runtime records the death and resurrects it",
         "agent.resume": "resumed"}
# Reads that stay open with ARES_API_READS=token: the probes and the metrics (no agent data:
# series by route), the dashboard's sign-in page and its static files. Any other dashboard
# page without credentials is sent to the sign-in page (303).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
UI_PREFIX = "/ui"
UI_LOGIN = "/ui/login"
UI_STATIC = "/ui/static/"
# How an owner says it hosts no such agent (host_commands: "unknown_agent: no agent 'x'
# to signal ..." or "no agent 'x' (...)"); anchored: an agent id is quoted in messages.
_NO_AGENT_RE = re.compile(r"^(unknown_agent: )?no agent\b")


def problem(status: int, detail: str, instance: str, *,
            headers: Mapping[str, str] | None = None,
            extra: Mapping[str, Any] | None = None) -> web.Response:
    body = {**(extra or {}), "type": "about:blank", "title": _title(status), "status": status,
            "detail": detail, "instance": instance}
    return web.Response(status=status, text=json.dumps(body), headers=headers,
                        content_type="application/problem+json")


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _dumps(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, datetime)
                      else str(v))


def _ok(body: Any, source: str | None = None) -> web.Response:
    headers = {} if source is None else {"X-Ares-Source": source}
    return web.Response(text=_dumps(body), content_type="application/json", headers=headers)


# -- parameters --------------------------------------------------------------------------


def _id(value: str | None, name: str) -> str:
    if value is None or not value or len(value) > openapi.ID_MAX or not _ID_RE.match(value):
        raise ApiError(400, f"{name} must be 1-{openapi.ID_MAX} characters without control "
                            "characters or '/'")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ApiError(400, f"{name} is not valid Unicode text") from None
    return value


def _text(request: web.Request, name: str) -> str | None:
    value = request.query.get(name)
    if value is None:
        return None
    if len(value) > openapi.ID_MAX or not _TEXT_RE.match(value):
        raise ApiError(400, f"{name} must be at most {openapi.ID_MAX} characters without "
                            "control characters")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ApiError(400, f"{name} is not valid Unicode text") from None
    return value


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    value = _opt_int(request, name, low, high)
    return default if value is None else value


def _opt_int(request: web.Request, name: str, low: int, high: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not re.fullmatch(r"-?[0-9]{1,20}", raw):
        raise ApiError(400, f"{name} must be an integer, got {raw[:40]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be between {low} and {high}, got {value}")
    return value


def _deadline_s(request: web.Request) -> float | None:
    """``?deadline=``: seconds or a duration after which no owner may apply the write's
    command (then answered expired and dead-lettered); none: kept until an owner takes it."""
    raw = request.query.get("deadline")
    if raw is None:
        return None
    if len(raw) > openapi.DEADLINE_MAX:
        raise ApiError(400, f"deadline: at most {openapi.DEADLINE_MAX} characters")
    try:
        return parse_seconds(raw)
    except ValueError as exc:
        raise ApiError(400, f"deadline: {exc}") from None


def _time(request: web.Request, name: str) -> datetime | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise ApiError(400, f"{name} must be an RFC 3339 time, got {raw[:40]!r}") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _unicode(value: str, name: str) -> str:
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ApiError(400, f"{name} is not valid Unicode text") from None
    return value


# -- writes ------------------------------------------------------------------------------


def _signal_name(value: str) -> str:
    if not 1 <= len(value) <= MAX_SIGNAL_NAME or not _SIGNAL_NAME_RE.fullmatch(value):
        raise ApiError(400, f"a signal name is 1-{MAX_SIGNAL_NAME} characters of "
                            f"{openapi.SIGNAL_NAME_CHARS}, not starting with '.'")
    return value


async def _signal_body(request: web.Request) -> tuple[str, str]:
    """The body's (payload as canonical JSON, signal id): an empty body is ``{}``."""
    raw = await request.read()  # over client_max_size: aiohttp's 413
    body: Any = _decoded(request, raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise ApiError(400, 'the body must be a JSON object: {"payload": <any JSON value>, '
                            '"signal_id": "<id>"}')
    _no_unknown_fields(body, _SIGNAL_FIELDS, "a signal's body has payload and signal_id only")
    signal_id = body["signal_id"] if "signal_id" in body else str(uuid.uuid4())
    if (not isinstance(signal_id, str) or not 1 <= len(signal_id) <= openapi.ID_MAX
            or not _SIGNAL_ID_RE.fullmatch(signal_id)):
        raise ApiError(400, f"signal_id must be a string of 1-{openapi.ID_MAX} characters "
                            "without control characters")
    try:
        text = canonical_json(body.get("payload"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ApiError(400, f"the payload cannot be a signal's: {str(exc)[:200]}") from None
    size = len(_unicode(text, "the payload").encode())
    if size > MAX_SIGNAL_PAYLOAD_BYTES:
        raise ApiError(413, f"a signal payload of {size} bytes (canonical JSON), over the "
                            f"{MAX_SIGNAL_PAYLOAD_BYTES} a signal may carry")
    return text, _unicode(signal_id, "signal_id")


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _refused(reply: Reply) -> ApiError:
    """The owner's refusal as the API's: 404 when it hosts no such agent, 409 when the
    stream moved under an expected version or the request's deadline passed before an owner
    took the command (a conflict with the time: nothing applied), else 422 (its message says
    why)."""
    message = reply.message or f"the owner answered {reply.status}"
    if reply.status is ReplyStatus.CONFLICT or is_expired(message):
        return ApiError(409, message)
    return ApiError(404 if _NO_AGENT_RE.match(message) else 422, message)


async def _json_object(request: web.Request, fields: frozenset[str], shape: str,
                       ) -> dict[str, Any]:
    """The body as a JSON object of ``fields`` at most (an empty body is ``{}``): 413 over
    ``MAX_BODY_BYTES``, 415 when it is not JSON, 400 (naming what is wrong) otherwise."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, f"a body of {request.content_length} bytes, over the "
                            f"{MAX_BODY_BYTES} a write may carry")
    raw = await request.read()  # over client_max_size: aiohttp's 413
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"a body of {len(raw)} bytes, over the {MAX_BODY_BYTES} a write "
                            "may carry")
    if not raw.strip():
        return {}
    body = _decoded(request, raw)
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object: {shape}")
    _no_unknown_fields(body, fields, f"the body is {shape}")
    return body


def _decoded(request: web.Request, raw: bytes) -> Any:
    """A write's non-empty body as JSON: 415 unless its Content-Type is JSON, 400 when it
    does not parse (NaN and Infinity refused)."""
    content_type = request.content_type
    if content_type != "application/json" and not content_type.endswith("+json"):
        raise ApiError(415, "the body must be JSON (Content-Type: application/json)")
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"the body is not JSON: {str(exc)[:200]}") from None


def _no_unknown_fields(body: Mapping[str, Any], fields: frozenset[str], what: str) -> None:
    """400 naming (up to three of) the body's fields outside ``fields``; ``what`` says
    which fields a body has."""
    unknown = sorted(set(body) - fields)
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(repr(k[:40]) for k in unknown[:3])}:"
                            f" {what}")


def _body_text(body: Mapping[str, Any], name: str, *, required: bool = False,
               max_len: int = openapi.ID_MAX, pattern: re.Pattern[str] = _TEXT_RE,
               ) -> str | None:
    """A string field of a body: 400 unless 1-``max_len`` characters matching ``pattern``."""
    if name not in body:
        if required:
            raise ApiError(400, f"{name} is required")
        return None
    value = body[name]
    if not isinstance(value, str) or not 1 <= len(value) <= max_len \
            or not pattern.fullmatch(value):
        raise ApiError(400, f"{name} must be a string of 1-{max_len} characters without "
                            "control characters")
    return _unicode(value, name)


def _canonical(value: Any, name: str) -> str:
    try:
        text = canonical_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ApiError(400, f"{name} cannot be sent: {str(exc)[:200]}") from None
    return _unicode(text, name)


# -- the application ---------------------------------------------------------------------


class ReplayApi:
    def __init__(self, settings: Settings, reader: KafkaStreamReader,
                 store: ProjectionStore | None, feed: LiveFeed, registry: AgentRegistry, *,
                 snapshots_topic: str | None, ready: Callable[[], bool],
                 summaries: SummarySource | None = None) -> None:
        self.settings = settings
        self.summaries = summaries or NoSummaries()
        self.reader = reader
        self.store = store
        self.feed = feed
        self.registry = registry
        self.snapshots_topic = snapshots_topic
        self.ready = ready
        self.draining = False
        self.auth = ApiAuth.from_settings(settings)
        self._client: Client | None = None
        self._client_lock = asyncio.Lock()
        self._closed = False
        self._tokens_topic: str | None = None

    def app(self, *, probes: bool = True) -> web.Application:
        """The API, the dashboard and (``probes``) /healthz, /readyz and /metrics."""
        app = web.Application(middlewares=[self._problems])
        get = app.router.add_get
        get("/openapi.json", self.openapi)
        get("/agents", self.list_agents)
        get("/agents/{agent_id}", self.get_agent)
        get("/agents/{agent_id}/genealogy", self.get_genealogy)
        get("/agents/{agent_id}/tree", self.get_tree)
        get("/agents/{agent_id}/tokens", self.agent_tokens)
        get("/streams/{stream_id}/events", self.stream_events)
        get("/streams/{stream_id}/state", self.stream_state)
        get("/audit/{stream_id}", self.audit)
        get("/alerts", self.list_alerts)
        get("/events/stream", self.live)
        if probes:
            get("/healthz", self.healthz)
            get("/readyz", self.readyz)
            get("/metrics", self.metrics)
        ui.setup(app, self)  # the dashboard, /ui/ (docs/dashboard.md)
        post = app.router.add_post
        post("/agents/{agent_id}/start", self.start_agent)
        post("/agents/{agent_id}/stop", self.stop_agent)
        post("/agents/{agent_id}/kill", self.kill_agent)
        post("/agents/{agent_id}/resume", self.resume_agent)
        post("/agents/{agent_id}/tasks", self.assign_task)
        post("/agents/{agent_id}/calls/{call_id}/resolve", self.resolve_call)
        post("/agents/{agent_id}/signals/{name}", self.send_signal)
        # The arena's Crash worker (403 unless --arena): ares.replay_reader.arena_api.
        post("/workers/{worker_id}/crash", partial(arena_api.crash_worker, self))
        return app

    async def close(self) -> None:
        """Close the command client, if a write started it (the service's shutdown)."""
        async with self._client_lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            await client.close()

    @web.middleware
    async def _problems(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        try:
            if request.method in ("GET", "HEAD") and not self._open_read(request.path):
                self._check_read(request)  # ARES_API_READS=token: 401/403 here
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = problem(exc.status, exc.reason, request.path)
            if isinstance(exc, web.HTTPMethodNotAllowed):
                response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        except ApiError as exc:
            response = problem(exc.status, exc.detail, request.path, headers=exc.headers,
                               extra=exc.extra)
        except NoSuchStreamError as exc:
            response = problem(404, str(exc), request.path)
        except TransientError as exc:
            response = problem(503, str(exc), request.path)
        except AresError as exc:
            response = problem(500, str(exc), request.path)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            response = problem(500, f"internal error: {type(exc).__name__}", request.path)
        REQUESTS.labels(name, str(response.status)).inc()
        return response

    def _open_read(self, path: str) -> bool:
        return (self.auth.reads_open or path in OPEN_PATHS or path == UI_LOGIN
                or path.startswith(UI_STATIC))

    def _check_read(self, request: web.Request) -> None:
        """ARES_API_READS=token: a viewer's or operator's credentials, else 401/403 (a
        dashboard page without credentials: to its sign-in page instead)."""
        try:
            self.auth.check_read(request)
        except ApiError as exc:
            path = request.path
            if exc.status == 401 and (path == UI_PREFIX or path.startswith(UI_PREFIX + "/")):
                raise web.HTTPSeeOther(f"{UI_LOGIN}?{urlencode({'next': request.path_qs})}") \
                    from None
            raise

    async def openapi(self, request: web.Request) -> web.Response:
        return _ok(openapi.document(writes=self.auth.writes_enabled,
                                    reads_open=self.auth.reads_open))

    # -- agents ----------------------------------------------------------------------------

    async def list_agents(self, request: web.Request) -> web.Response:
        limit = _int(request, "limit", 50, 1, openapi.MAX_PAGE)
        after = request.query.get("after")
        after = None if after is None else _id(after, "after")
        status = request.query.get("status")
        if status is not None and status not in _STATUSES:
            raise ApiError(400, f"status must be one of {sorted(_STATUSES)}")
        kind = _text(request, "kind")
        try:
            if self.store is None:
                raise ProjectionUnavailableError("no projection store")
            rows = [agent_json(r) for r in await self.store.list_agents(limit + 1, after,
                                                                          status, kind)]
            source = "projection"
        except ProjectionUnavailableError:
            every = await fallback.agents_from_log(self.reader)
            rows = [a.to_json() for _, a in sorted(every.items())
                    if (after is None or a.agent_id > after)
                    and (status is None or a.lifecycle.status.value == status)
                    and (kind is None or a.lifecycle.kind == kind)][:limit + 1]
            source = "log"
        more = len(rows) > limit
        rows = rows[:limit]
        return _ok({"items": rows, "next": rows[-1]["agent_id"] if more else None,
                    "source": source}, source)

    async def get_agent(self, request: web.Request) -> web.Response:
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        row, source = await self._agent(agent_id)
        if row is None:
            raise ApiError(404, f"no agent {agent_id!r}")
        return _ok(row, source)

    async def _agent(self, agent_id: str) -> tuple[dict[str, Any] | None, str]:
        try:
            if self.store is None:
                raise ProjectionUnavailableError("no projection store")
            stored = await self.store.agent(agent_id)
            if stored is not None:
                return agent_json(stored), "projection"
            # Not projected (yet): the log decides, so a new agent is never a 404.
            found: AgentRow | None = await fallback.agent_from_log(self.reader, agent_id)
            return (None if found is None else found.to_json()), "log"
        except ProjectionUnavailableError:
            found = await fallback.agent_from_log(self.reader, agent_id)
            return (None if found is None else found.to_json()), "log"

    async def get_genealogy(self, request: web.Request) -> web.Response:
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        agent, source = await self._agent(agent_id)
        if agent is None:
            raise ApiError(404, f"no agent {agent_id!r}")
        incarnations: list[dict[str, Any]] | None = None
        if source == "projection" and self.store is not None:
            try:
                incarnations = [genealogy_json(r) for r in await self.store.genealogy(agent_id)]
            except ProjectionUnavailableError:
                incarnations = None
        if incarnations is None:
            source = "log"
            found = await fallback.genealogy_from_log(self.reader, agent_id) or []
            incarnations = [i.to_json() for i in found]
        if incarnations and incarnations[-1]["end"] is None:
            # A running incarnation lasts up to the stream's head (lifecycle events only
            # are stored, so the projection's last_version stops at the last of them).
            incarnations[-1]["last_version"] = max(incarnations[-1]["last_version"],
                                                   agent["version"])
        return _ok({"agent_id": agent_id, "incarnations": incarnations, "source": source},
                   source)

    async def get_tree(self, request: web.Request) -> web.Response:
        """The team rooted at the agent: ``ares agents tree --json``'s document."""
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        members, source = await self._team(agent_id)
        if agent_id not in members:
            raise ApiError(404, f"no agent {agent_id!r}")
        return _ok(team_tree(agent_id, members).to_json(), source)

    async def _team(self, agent_id: str) -> tuple[dict[str, Member], str]:
        """The team's members (a superset) and where they come from. The projection when
        it has the root; else the log: the root's stream first, so an unknown agent costs
        one partition's scan, then every agent (the whole log, as the listing's fallback)."""
        try:
            if self.store is None:
                raise ProjectionUnavailableError("no projection store")
            rows = await self.store.team(agent_id)
            if rows:
                return {r["agent_id"]: Member.of(AgentRow.from_record(r))
                        for r in rows}, "projection"
        except ProjectionUnavailableError:
            pass
        # Not projected (yet), or PostgreSQL is down: the log decides.
        if await fallback.agent_from_log(self.reader, agent_id) is None:
            return {}, "log"
        every = await fallback.agents_from_log(self.reader)
        return {a: Member.of(row) for a, row in every.items()}, "log"

    # -- streams ---------------------------------------------------------------------------

    async def stream_events(self, request: web.Request) -> web.Response:
        stream_id = _id(request.match_info["stream_id"], "stream_id")
        start = _int(request, "from", 1, 1, openapi.MAX_VERSION)
        limit = _int(request, "limit", 100, 1, openapi.MAX_EVENTS_PAGE)
        events = await self.reader.read(stream_id, start, limit + 1)
        if not events and start == 1:
            raise ApiError(404, f"stream {stream_id!r} has no events")
        more = len(events) > limit
        events = events[:limit]
        source = "log" if self.reader.degraded else "projection"
        return _ok({"stream_id": stream_id, "items": [e.to_json() for e in events],
                    "next_from": events[-1].version + 1 if more else None, "source": source})

    async def stream_state(self, request: web.Request) -> web.Response:
        stream_id = _id(request.match_info["stream_id"], "stream_id")
        version = _opt_int(request, "version", 0, openapi.MAX_VERSION)
        at = _time(request, "at")
        session = await ReplaySession.open(self.reader, stream_id, registry=self.registry,
                                           summaries=self.summaries)
        if at is not None:  # with both, the earlier: "at version N, but not after T"
            as_of = await self.reader.version_at(stream_id, at)
            version = as_of if version is None else min(version, as_of)
        step = await session.to_version(openapi.MAX_VERSION if version is None else version)
        body: dict[str, Any] = {
            "stream_id": stream_id, "step": session.position, "version": session.state.version,
            "head_version": session.head, "event": None if step is None else step.event.to_json(),
            "state": session.state.to_json(), "integrity": failure_json(session.failure)}
        return _ok(body)

    async def audit(self, request: web.Request) -> web.Response:
        stream_id = _id(request.match_info["stream_id"], "stream_id")
        scope = AuditScope(self.reader.topic, self.snapshots_topic, [stream_id],
                           index=self.store, summaries=self.summaries)
        report = await run_audit(self.settings, scope)
        if report.unknown:
            raise ApiError(404, f"stream {stream_id!r}: no event, snapshot or index entry")
        body = report.streams[0].to_json()
        body["notes"] = scope.notes
        return _ok(body)

    async def list_alerts(self, request: web.Request) -> web.Response:
        stream = request.query.get("stream")
        stream = None if stream is None else _id(stream, "stream")
        limit = _int(request, "limit", 50, 1, openapi.MAX_PAGE)
        before = request.query.get("before")
        before = None if before is None else _id(before, "before")
        if self.store is None:
            raise ApiError(503, "alerts are read from the projections only")
        try:
            rows = await self.store.alerts(limit + 1, stream, before)
        except ProjectionUnavailableError as exc:
            raise ApiError(503, f"alerts are read from the projections only: {exc}") from exc
        more = len(rows) > limit
        rows = rows[:limit]
        items = [{"alert_id": r["alert_id"], "stream_id": r["stream_id"], "kind": r["kind"],
                  "severity": r["severity"], "message": r["message"], "source": r["source"],
                  "timestamp": r["ts"].isoformat(), "details": json.loads(r["details"])}
                 for r in rows]
        return _ok({"items": items, "next": rows[-1]["alert_id"] if more and rows else None})

    # -- writes ----------------------------------------------------------------------------

    async def _commands(self) -> Client:
        """The API's command client, started by the first write (a broker that answers "not
        yet" is waited out for ARES_RETRY_TIMEOUT_S, as by every client); a start that
        fails is tried again by the next write."""
        async with self._client_lock:
            if self._closed:
                raise ApiError(503, "the service is stopping", headers=_RETRY_AFTER)
            if self._client is None:
                client = Client(self.settings, issuer=ISSUER)
                await client.start()  # closes itself when it fails
                self._client = client
            return self._client

    def authorize_write(self, request: web.Request) -> Principal:
        """An operator's request, or the 401/403 to answer (logged); a session's also
        carries its CSRF token (header X-CSRF-Token). Before anything else of a write: a
        refused one reads no body and sends nothing."""
        principal = self.auth.require(request, Role.OPERATOR)
        if principal.via == "session":
            self.auth.check_csrf(request, None)
        return principal

    async def send_command(self, request: web.Request, command_type: str, agent_id: str,
                           payload: dict[str, Any], *, again: str = "",
                           extra: Mapping[str, Any] | None = None) -> Reply:
        """Send one command to the agent's owner, with the request's ``?deadline=``; its OK
        reply, else the ApiError to answer: 404/409/422 (``_refused``; an expired command
        is a 422), 503 with Retry-After when no owner answered (the detail says what becomes
        of the command; ``again``: how to wait for it again while an owner may still apply
        it; ``extra``: members of the problem)."""
        deadline_s = _deadline_s(request)
        command = Command(type=command_type, stream_id=agent_id, issuer=ISSUER,
                          payload=payload)
        try:
            reply = await (await self._commands()).send(command, deadline_s=deadline_s)
        except NotAnsweredError as exc:
            detail = f"{exc}: {again}" if again and exc.kept else str(exc)
            raise ApiError(503, detail, headers=_RETRY_AFTER, extra=extra) from None
        except TransientError as exc:  # no broker
            raise ApiError(503, str(exc), headers=_RETRY_AFTER, extra=extra) from None
        if reply.status is not ReplyStatus.OK:
            raise _refused(reply)
        return reply

    async def _lifecycle(self, request: web.Request, command_type: str,
                         payload: dict[str, Any]) -> web.Response:
        agent_id = request.match_info["agent_id"]
        reply = await self.send_command(
            request, command_type, agent_id, payload,
            again="the same request waits for it again (applied once)")
        message = reply.message or _DONE[command_type]
        log.info("%s for %r from %s: %s", command_type, agent_id, request.remote, message)
        return web.json_response({"agent_id": agent_id, "command": command_type,
                                  "status": "ok", "message": message,
                                  "version": reply.stream_version}, status=202)

    async def start_agent(self, request: web.Request) -> web.Response:
        self.authorize_write(request)  # before anything else: a refused write learns nothing
        _id(request.match_info["agent_id"], "agent_id")
        body = await _json_object(request, _START_FIELDS,
                                  '{"kind": "<kind>", "config": {...}}')
        kind = _body_text(body, "kind", required=True)
        config = body.get("config", {})
        if not isinstance(config, dict):
            raise ApiError(400, "config must be a JSON object (the agent's configuration)")
        return await self._lifecycle(request, "agent.start", {
            "kind": kind, "config_json": _canonical(config, "config")})

    async def stop_agent(self, request: web.Request) -> web.Response:
        self.authorize_write(request)
        _id(request.match_info["agent_id"], "agent_id")
        body = await _json_object(request, _STOP_FIELDS, '{"reason": "<why>"} or empty')
        reason = _body_text(body, "reason") or "requested"
        return await self._lifecycle(request, "agent.stop", {"reason": reason})

    async def kill_agent(self, request: web.Request) -> web.Response:
        self.authorize_write(request)
        _id(request.match_info["agent_id"], "agent_id")
        await _json_object(request, frozenset(), "empty (or {})")
        return await self._lifecycle(request, "agent.kill", {"reason": ISSUER})

    async def resume_agent(self, request: web.Request) -> web.Response:
        self.authorize_write(request)
        _id(request.match_info["agent_id"], "agent_id")
        await _json_object(request, frozenset(), "empty (or {})")
        return await self._lifecycle(request, "agent.resume", {"reason": "operator"})

    async def assign_task(self, request: web.Request) -> web.Response:
        self.authorize_write(request)
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        body = await _json_object(request, _TASK_FIELDS,
                                  '{"input": <any JSON value>, "task_id": "<id>"}')
        if "input" not in body:
            raise ApiError(400, "input is required (the task's input, any JSON value)")
        input_json = _canonical(body["input"], "input")
        task_id = _body_text(body, "task_id", pattern=_SIGNAL_ID_RE) or str(uuid.uuid4())
        reply = await self.send_command(
            request, "task.assign", agent_id, {"task_id": task_id, "input_json": input_json},
            again=f"the same request with task_id {task_id!r} waits for it again (assigned "
                  "once)", extra={"task_id": task_id})
        message = reply.message or "assigned"
        log.info("task %r for %r from %s: %s", task_id, agent_id, request.remote, message)
        return web.json_response({"agent_id": agent_id, "task_id": task_id, "status": "ok",
                                  "message": message, "version": reply.stream_version},
                                 status=202)

    async def resolve_call(self, request: web.Request) -> web.Response:
        """``ares agents resolve``'s code path (``ares.resolution``): read the stream,
        check the call is in doubt, append tool.call.resolved at that version."""
        self.authorize_write(request)
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        call_id = _id(request.match_info["call_id"], "call_id")
        body = await _json_object(request, _RESOLVE_FIELDS,
                                  '{"as": "done"|"retry"|"skip", "result": <any JSON value>, '
                                  '"note": "<text>"}')
        as_ = body.get("as")
        if as_ not in RESOLUTIONS:
            raise ApiError(400, f"as must be one of {', '.join(RESOLUTIONS)}")
        if "result" in body and as_ != "done":
            raise ApiError(400, 'a result only goes with "as": "done"')
        result = body.get("result")
        _canonical(result, "result")
        note = _body_text(body, "note", max_len=openapi.MAX_NOTE, pattern=_NOTE_RE)
        try:
            client = await self._commands()
            version = await resolve_in_doubt(
                client, self._whole_stream, agent_id, call_id, as_, result=result,
                note=note, module=ISSUER, by="operator", deadline_s=_deadline_s(request))
        except NoSuchAgentError as exc:
            raise ApiError(404, str(exc)) from None
        except NotResolvableError as exc:
            raise ApiError(409, str(exc)) from None
        except ConflictError as exc:
            raise ApiError(409, f"{exc}: the stream kept moving; read it and try again") \
                from None
        except CommandRejectedError as exc:
            raise ApiError(409 if is_expired(str(exc)) else 422, str(exc)) from None
        except TransientError as exc:
            raise ApiError(503, f"{exc}. Check the call before resolving it again (a "
                                "resolved call is refused, 409)", headers=_RETRY_AFTER) \
                from None
        log.info("call %r of %r resolved as %s from %s (version %d)", call_id, agent_id,
                 as_, request.remote, version)
        return web.json_response({"agent_id": agent_id, "call_id": call_id, "as": as_,
                                  "status": "ok", "message": f"resolved as {as_}",
                                  "version": version}, status=202)

    async def _whole_stream(self, stream_id: str) -> list[Event]:
        events: list[Event] = []
        start = 1
        while True:
            page = await self.reader.read(stream_id, start, openapi.MAX_EVENTS_PAGE)
            events.extend(page)
            if len(page) < openapi.MAX_EVENTS_PAGE:
                return events
            start = page[-1].version + 1

    async def send_signal(self, request: web.Request) -> web.Response:
        self.authorize_write(request)  # before anything else: a refused write learns nothing
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        name = _signal_name(request.match_info["name"])
        payload_json, signal_id = await _signal_body(request)
        reply = await self.send_command(
            request, "agent.signal", agent_id,
            {"name": name, "signal_id": signal_id, "payload_json": payload_json},
            again=f"the same request with signal_id {signal_id!r} waits for it again (applied "
                  "once)", extra={"signal_id": signal_id})
        log.info("signal %r (%s) for %r from %s: %s", name, signal_id, agent_id,
                 request.remote, reply.message or "received")
        return web.json_response({
            "agent_id": agent_id, "name": name, "signal_id": signal_id, "status": "ok",
            "message": reply.message or "signal received", "version": reply.stream_version},
            status=202)

    # -- live ------------------------------------------------------------------------------

    async def live(self, request: web.Request) -> web.StreamResponse:
        stream = request.query.get("stream")
        event_filter = EventFilter(stream_id=None if stream is None else _id(stream, "stream"),
                                   type_prefix=_text(request, "type"),
                                   module=_text(request, "module"))
        listener = await self.feed.subscribe(event_filter)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        try:
            await response.prepare(request)
            await response.write(b": subscribed\n\n")
            await _pump(response, listener)
        except ConnectionError:
            pass  # the client went away: nothing to answer
        finally:
            self.feed.unsubscribe(listener)
        return response

    async def agent_tokens(self, request: web.Request) -> web.StreamResponse:
        """SSE: the agent's LLM token records (``ares.llm.tokens``), one event each: id its
        offset, event its kind, data the record. Resumes after ``Last-Event-ID`` (header,
        else ``?last_event_id=``); without it ``?from=beginning`` (default: what the topic
        retains) or ``?from=end``. Reads are checked by the middleware, as every GET."""
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        after = _last_event_id(request)
        start = request.query.get("from", FROM_BEGINNING)
        if start not in FROM_CHOICES:
            raise ApiError(400, f"from must be one of {', '.join(FROM_CHOICES)}")
        if self._tokens_topic is None:
            self._tokens_topic = load_topics(self.settings).name(TOKENS)
        # Opened before the response starts: a broker that does not answer is a 503.
        tail = await TokenTail.open(self.settings, self._tokens_topic, agent_id, after=after,
                                    start=start, timeout_s=self.settings.request_timeout_s)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})

        async def send(token: TokenEvent) -> bool:
            data = json.dumps(token.record.to_json(), separators=(",", ":"))
            await response.write(f"id: {token.offset}\nevent: {token.record.kind}\n"
                                 f"data: {data}\n\n".encode())
            return True

        try:
            await response.prepare(request)
            await response.write(b": subscribed\n\n")
            await sse_loop(response, tail.next, send)
        except ConnectionError:
            pass  # the client went away (noticed at the next write, a keepalive at worst)
        finally:
            await tail.close()
        return response

    # -- probes ----------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(self, request: web.Request) -> web.Response:
        if self.draining:
            return web.json_response({"status": "draining"}, status=503)
        ok = self.ready()
        return web.json_response({"status": "ready" if ok else "not ready"},
                                 status=200 if ok else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(REGISTRY), headers={"Content-Type": content_type})


def _last_event_id(request: web.Request) -> int | None:
    """The offset a token stream resumes after: the ``Last-Event-ID`` header (what an
    EventSource sends when it reconnects, so it wins), else ``?last_event_id=``."""
    raw = request.headers.get("Last-Event-ID")
    name = "Last-Event-ID"
    if raw is None:
        raw, name = request.query.get("last_event_id"), "last_event_id"
    if raw is None:
        return None
    raw = raw.strip()
    if not _OFFSET_RE.fullmatch(raw) or int(raw) > MAX_OFFSET:
        raise ApiError(400, f"{name} must be the id of an event of this stream (an offset, "
                            f"0-{MAX_OFFSET}), got {raw[:40]!r}")
    return int(raw)


async def sse_loop(response: web.StreamResponse, receive: Callable[[], Awaitable[T]],
                   send: Callable[[T], Awaitable[bool]],
                   keepalive_s: float = _KEEPALIVE_S) -> None:
    """Write what ``receive`` gets with ``send`` until ``send`` returns False; a keepalive
    comment while nothing came for ``keepalive_s`` (proxies close idle connections, and a
    write is how a client that went away is noticed). ``receive`` is cancelled on each
    keepalive: it must lose nothing then."""
    while True:
        try:
            item = await wait_for(receive(), keepalive_s)
        except TimeoutError:
            await response.write(b": keepalive\n\n")
            continue
        if not await send(item):
            return


async def _pump(response: web.StreamResponse, listener: Listener) -> None:
    async def send(live: LiveEvent | None) -> bool:
        if live is None:
            reason = json.dumps({"reason": listener.dropped})
            await response.write(f"event: ares.closed\ndata: {reason}\n\n".encode())
            return False
        data = _dumps(live.event.to_json())
        await response.write(f"id: {live.id}\nevent: ares.event\ndata: {data}\n\n".encode())
        return True

    await sse_loop(response, listener.next, send)
