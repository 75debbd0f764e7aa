"""The dashboard's handlers: pages, HTML fragments for the replay panel, and the live SSE
feed of agent rows (see the package docstring and docs/dashboard.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlencode

import aiohttp_jinja2
import jinja2
from aiohttp import web

from ares.agents.journal import task_journals
from ares.errors import AresError, TransientError
from ares.events.model import Event, EventFilter
from ares.lifecycle import state as lc
from ares.lifecycle.transitions import Status
from ares.replay_reader import fallback
from ares.replay_reader.audit_run import AuditScope, run_audit
from ares.replay_reader.auth import ApiAuth, ApiError
from ares.replay_reader.pg_store import ProjectionUnavailableError
from ares.replay_reader.projection import AgentRow
from ares.replay_reader.session import NoSuchStreamError, ReplaySession, failure_json
from ares.replay_reader.ui import data
from ares.tasks import wait_for
from ares.views.agents import NoSuchAgentError, agent_builder

if TYPE_CHECKING:
    from ares.replay_reader.http_api import ReplayApi

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
STATIC = HERE / "static"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

EVENTS_SHOWN = 50  # the agent page's latest events
JOURNAL_EVENTS = 5000  # events read for the task journal (a longer stream says so)
MAX_LIVE_AGENTS = 500  # agent ids one /ui/live subscription may follow
MAX_CATCH_UP = 5000  # events a resumed live stream (?after=N) sends from the log, at most
KEEPALIVE_S = 15.0
STATUSES = [s.value for s in Status]
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """The templates' environment (autoescape on, strict undefined), for tests too."""
    env = jinja2.Environment(loader=loader or jinja2.PackageLoader(
        "ares.replay_reader.ui", "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    configure(env)
    return env


def configure(env: jinja2.Environment) -> None:
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    env.filters["compact"] = lambda v: v if isinstance(v, str) else json.dumps(
        v, sort_keys=True, default=str)
    env.filters["age"] = _age
    env.filters["url"] = lambda v: quote(str(v), safe="")
    env.globals["qs"] = lambda params: urlencode(
        {k: v for k, v in params.items() if v not in (None, "", False)})


def _age(value: Any) -> str:
    """How long ago an ISO time or a datetime was, short ("4s", "3m", "2h", "5d")."""
    if value is None:
        return ""
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    s = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


class Dashboard:
    def __init__(self, api: ReplayApi) -> None:
        self.api = api
        self.heartbeats = data.Heartbeats(api.settings)

    # -- wiring ----------------------------------------------------------------------------

    def mount(self, app: web.Application) -> None:
        env = aiohttp_jinja2.setup(app, loader=jinja2.PackageLoader(
            "ares.replay_reader.ui", "templates"), autoescape=True,
            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        configure(env)
        get, post = app.router.add_get, app.router.add_post
        get("/ui", self._redirect_root)
        get("/ui/", self._page(self.fleet))
        get("/ui/agents/{agent_id}", self._page(self.agent))
        get("/ui/agents/{agent_id}/replay", self._page(self.replay_fragment))
        get("/ui/agents/{agent_id}/audit", self._page(self.audit_fragment))
        get("/ui/agents/{agent_id}/genealogy", self._page(self.genealogy_fragment))
        get("/ui/alerts", self._page(self.alerts))
        get("/ui/workers", self._page(self.workers))
        get("/ui/login", self._page(self.login_form, public=True))
        post("/ui/login", self._page(self.login, public=True))
        post("/ui/logout", self._page(self.logout, public=True))
        get("/ui/live", self._page(self.live))
        app.router.add_static("/ui/static", STATIC, append_version=True)
        app.on_response_prepare.append(_security_headers)
        app.on_cleanup.append(self._close)

    async def _close(self, app: web.Application) -> None:
        await self.heartbeats.close()

    async def _redirect_root(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    def _page(self, handler: Handler, *, public: bool = False) -> Handler:
        """Reads checked (ARES_API_READS=token: without credentials, to the login page);
        errors as an HTML page of their status (the API's are problem documents)."""
        async def page(request: web.Request) -> web.StreamResponse:
            try:
                if not public:
                    self._check_read(request)
                return await handler(request)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                status, detail = exc.status, exc.reason
            except ApiError as exc:
                status, detail = exc.status, exc.detail
            except (NoSuchStreamError, NoSuchAgentError) as exc:
                status, detail = 404, str(exc)
            except (TransientError, ProjectionUnavailableError) as exc:
                status, detail = 503, str(exc)
            except AresError as exc:
                status, detail = 500, str(exc)
            response = self.render(request, "error.html", {"status": status, "detail": detail})
            response.set_status(status)
            return response
        return page

    # -- auth ------------------------------------------------------------------------------

    @property
    def auth(self) -> ApiAuth:
        return self.api.auth

    def _check_read(self, request: web.Request) -> None:
        try:
            self.auth.check_read(request)
        except ApiError as exc:
            if exc.status == 401 and request.method == "GET":
                raise web.HTTPSeeOther(f"/ui/login?{urlencode({'next': request.path_qs})}") \
                    from None
            raise

    def _who(self, request: web.Request) -> dict[str, Any]:
        principal = self.auth.principal(request)
        return {"role": None if principal is None else principal.role.value,
                "via": None if principal is None else principal.via,
                "csrf": self.auth.csrf_token(request), "writes": self.auth.writes_enabled}

    def render(self, request: web.Request, name: str,
               context: Mapping[str, Any]) -> web.Response:
        ctx = {"who": self._who(request), "path": request.path, "flash": None, **context}
        response = aiohttp_jinja2.render_template(name, request, ctx)
        response.headers["Cache-Control"] = "no-store"
        return response

    # -- fleet -----------------------------------------------------------------------------

    async def fleet(self, request: web.Request) -> web.StreamResponse:
        from ares.replay_reader.http_api import _int, _text
        q = request.query
        status = q.get("status") or None
        if status is not None and status not in STATUSES:
            status = None
        flt = data.FleetFilter(status=status, kind=_text(request, "kind") or None,
                               worker=_text(request, "worker") or None,
                               quarantined=q.get("quarantined") in ("1", "on", "true"),
                               in_doubt=q.get("in_doubt") in ("1", "on", "true"))
        page_no = _int(request, "page", 1, 1, 1_000_000)
        size = _int(request, "size", data.PAGE_SIZE, 1, data.MAX_PAGE_SIZE)
        source = "projection"
        try:
            if self.api.store is None:
                raise ProjectionUnavailableError("no projection store")
            page = await data.fleet_page(self.api.store, flt, page_no, size)
        except ProjectionUnavailableError:
            page = await self._fleet_from_log(flt, page_no, size)
            source = "log"
        beats = data.beats_by_agent(await self.heartbeats.latest())
        rows = []
        for item in page.items:
            beat = beats.get(item["agent_id"])
            rows.append({**item, "current_task": (item["pending_tasks"] or [None])[0],
                         "beat_at": None if beat is None else beat[0].at,
                         "progress": None if beat is None else beat[1].get("progress")})
        return self.render(request, "fleet.html", {
            "rows": rows, "page": page, "filter": flt, "statuses": STATUSES,
            "source": source, "query": flt.query(), "heartbeats_error": self.heartbeats.error})

    async def _fleet_from_log(self, flt: data.FleetFilter, page_no: int,
                              size: int) -> data.FleetPage:
        every = await fallback.agents_from_log(self.api.reader)
        rows = [a.to_json() for _, a in sorted(every.items())]
        rows = [r for r in rows if (flt.status is None or r["status"] == flt.status)
                and (flt.kind is None or r["kind"] == flt.kind)
                and (flt.worker is None or r["worker"] == flt.worker)
                and (not flt.quarantined or r["status"] == Status.QUARANTINED.value)]
        pages = max(1, -(-len(rows) // size))
        page_no = min(page_no, pages)
        return data.FleetPage(rows[(page_no - 1) * size:page_no * size], len(rows), page_no,
                              size, sorted({r["kind"] for r in rows}),
                              sorted({r["worker"] for r in rows if r["worker"]}))

    # -- agent -----------------------------------------------------------------------------

    async def agent(self, request: web.Request) -> web.StreamResponse:
        from ares.replay_reader.http_api import _id
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        agent, source = await self.api._agent(agent_id)
        if agent is None:
            raise ApiError(404, f"no agent {agent_id!r}")
        genealogy = _body(await self.api.get_genealogy(request))
        try:
            team: dict[str, Any] | None = _body(await self.api.get_tree(request))
        except ApiError:
            team = None
        head = await self.api.reader.head(agent_id)
        recent = await self.api.reader.read(agent_id, max(1, head - EVENTS_SHOWN + 1),
                                            EVENTS_SHOWN)
        stream = await self.api.reader.read(agent_id, 1, JOURNAL_EVENTS + 1)
        truncated = len(stream) > JOURNAL_EVENTS
        journal = journal_rows(stream[:JOURNAL_EVENTS])
        try:
            view: dict[str, Any] | None = agent_builder(
                stream[:JOURNAL_EVENTS], agent_id).build().to_json()
        except NoSuchAgentError:
            view = None
        replay = await self._replay(request, agent_id)
        return self.render(request, "agent.html", {
            "agent": agent, "source": source, "genealogy": genealogy["incarnations"],
            "team": team, "events": [_event_row(e) for e in reversed(recent)], "head": head,
            "journal": journal, "journal_truncated": truncated, "view": view,
            "replay": replay})

    async def genealogy_fragment(self, request: web.Request) -> web.StreamResponse:
        """The genealogy section alone (the agent page re-fetches it live)."""
        from ares.replay_reader.http_api import _id
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        agent, _ = await self.api._agent(agent_id)  # first: the genealogy is as new at least
        if agent is None:
            raise ApiError(404, f"no agent {agent_id!r}")
        genealogy = _body(await self.api.get_genealogy(request))
        return self.render(request, "_genealogy.html", {
            "genealogy": genealogy["incarnations"],
            "agent": {"agent_id": agent_id, "version": agent["version"]}})

    async def replay_fragment(self, request: web.Request) -> web.StreamResponse:
        from ares.replay_reader.http_api import _id
        agent_id = _id(request.match_info["agent_id"], "agent_id")
        replay = await self._replay(request, agent_id)
        if request.query.get("format") == "json":
            return web.json_response(replay, dumps=lambda v: json.dumps(v, default=str))
        return self.render(request, "_replay.html", {"replay": replay,
                                                     "agent": {"agent_id": agent_id}})

    async def _replay(self, request: web.Request, agent_id: str) -> dict[str, Any]:
        """The replay panel at ``?step=N`` (0: before the first event) or ``?at=TIME``:
        the state after that step, the state before it and their diff."""
        from ares.replay_reader.http_api import _opt_int, _time
        from ares.replay_reader.openapi import MAX_VERSION
        step = _opt_int(request, "step", 0, MAX_VERSION)
        at = _time(request, "at")
        session = await ReplaySession.open(self.api.reader, agent_id,
                                           registry=self.api.registry,
                                           summaries=self.api.summaries)
        if at is not None:
            await session.to_version(await self.api.reader.version_at(agent_id, at))
            step = session.position
        target = 0 if step is None else step
        before: dict[str, Any] | None = None
        if target > 0:
            await session.step_to(target - 1)
            before = session.state.to_json()
            current = await session.step()
            if current is None:  # past the end: the last step
                current = session.current()
                before = None
                if session.position > 0:
                    position = session.position
                    await session.step_to(position - 1)
                    before = session.state.to_json()
                    current = await session.step()
        else:
            current = None
        state = session.state.to_json()
        return {
            "agent_id": agent_id, "position": session.position, "head": session.head,
            "steps": session.total if session.total is not None else session.expected_total,
            "event": None if current is None else _event_row(current.event),
            "state": state, "diff": [] if before is None else data.diff(before, state),
            "integrity": failure_json(session.failure),
            "at": None if at is None else at.isoformat(),
        }

    async def audit_fragment(self, request: web.Request) -> web.StreamResponse:
        from ares.replay_reader.http_api import _id
        stream_id = _id(request.match_info["agent_id"], "agent_id")
        scope = AuditScope(self.api.reader.topic, self.api.snapshots_topic, [stream_id],
                           index=self.api.store, summaries=self.api.summaries)
        report = await run_audit(self.api.settings, scope)
        if report.unknown:
            raise ApiError(404, f"stream {stream_id!r}: no event, snapshot or index entry")
        return self.render(request, "_audit.html", {
            "audit": report.streams[0].to_json(), "notes": scope.notes,
            "agent": {"agent_id": stream_id}})

    # -- alerts ----------------------------------------------------------------------------

    async def alerts(self, request: web.Request) -> web.StreamResponse:
        body = _body(await self.api.list_alerts(request))
        in_doubt: dict[str, list[dict[str, Any]]] = {}
        for alert in body["items"]:
            stream_id = alert["stream_id"]
            if alert["kind"] != data.IN_DOUBT_ALERT or not stream_id or stream_id in in_doubt:
                continue
            events = await self.api.reader.read(stream_id, 1, JOURNAL_EVENTS)
            try:
                in_doubt[stream_id] = [c.to_json() for c in
                                       agent_builder(events, stream_id).in_doubt()]
            except NoSuchAgentError:
                in_doubt[stream_id] = []
        quarantined = {a["stream_id"] for a in body["items"]
                       if a["kind"] == "agent_quarantined" and a["stream_id"]}
        statuses: dict[str, str] = {}
        for stream_id in sorted(quarantined):
            agent, _ = await self.api._agent(stream_id)
            if agent is not None:
                statuses[stream_id] = agent["status"]
        return self.render(request, "alerts.html", {
            "alerts": body["items"], "next": body["next"], "in_doubt": in_doubt,
            "statuses": statuses, "stream": request.query.get("stream")})

    # -- workers ---------------------------------------------------------------------------

    async def workers(self, request: web.Request) -> web.StreamResponse:
        beats = await self.heartbeats.latest()
        by_worker: dict[str, dict[str, Any]] = {}
        for beat in beats:
            w = by_worker.setdefault(beat.worker_id, {
                "worker": beat.worker_id, "partitions": [], "agents": 0, "last_at": beat.at,
                "interval_ms": beat.interval_ms})
            w["partitions"].append(beat.partition)
            w["agents"] += len(beat.agents)
            w["last_at"] = max(w["last_at"], beat.at)
        projected: list[dict[str, Any]] = []
        offsets: list[dict[str, Any]] = []
        projection_error = None
        try:
            if self.api.store is None:
                raise ProjectionUnavailableError("no projection store")
            projected = await data.workers_summary(self.api.store)
            ends = await self.heartbeats.end_offsets(self.api.reader.topic)
            for r in await self.api.store.offsets():
                end = ends.get(r["partition"]) if r["topic"] == self.api.reader.topic else None
                offsets.append({"topic": r["topic"], "partition": r["partition"],
                                "next_offset": r["next_offset"], "end_offset": end,
                                "lag": None if end is None else max(0, end - r["next_offset"]),
                                "updated_at": r["updated_at"]})
        except ProjectionUnavailableError as exc:
            projection_error = str(exc)
        return self.render(request, "workers.html", {
            "workers": sorted(by_worker.values(), key=lambda w: w["worker"]),
            "projected": projected, "offsets": offsets, "projection_error": projection_error,
            "heartbeats_error": self.heartbeats.error, "arena": self.api.settings.arena})

    # -- login -----------------------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        return self.render(request, "login.html", {"next": _next(request.query.get("next"))})

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        given = form.get("next")
        target = _next(given if isinstance(given, str) else None)
        token = form.get("token")
        redirect = web.Response(status=303, headers={"Location": target})
        principal = self.auth.login(redirect, token if isinstance(token, str) else "")
        if principal is None:
            log.warning("dashboard login refused from %s", request.remote)
            response = self.render(request, "login.html", {
                "next": target, "flash": {"ok": False, "text": "401: this token is not valid"}})
            response.set_status(401)
            return response
        return redirect

    async def logout(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        redirect = web.Response(status=303, headers={"Location": "/ui/login"})
        csrf = form.get("csrf")
        if self.auth.principal(request) is not None:
            self.auth.check_csrf(request, csrf if isinstance(csrf, str) else None)
        self.auth.logout(redirect)
        return redirect

    # -- live ------------------------------------------------------------------------------

    async def live(self, request: web.Request) -> web.StreamResponse:
        """SSE: ``event: agent`` for every event of the agents named by ``?agent=ID``
        (repeated; at most ``MAX_LIVE_AGENTS``), with the agent's row after it (the
        projection's row, folded forward with the projection's own ``AgentRow.fold``) and
        the event itself."""
        from ares.replay_reader.http_api import _id
        ids = [_id(a, "agent") for a in request.query.getall("agent", [])]
        if not ids or len(ids) > MAX_LIVE_AGENTS:
            raise ApiError(400, f"name 1-{MAX_LIVE_AGENTS} agents: ?agent=ID&agent=ID...")
        wanted = set(ids)
        after = _after(request) if len(wanted) == 1 else None
        listener = await self.api.feed.subscribe(
            EventFilter(stream_id=ids[0] if len(wanted) == 1 else None))
        try:
            rows = await self._rows(ids)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                   "Cache-Control": "no-cache"})
            await response.prepare(request)
            await response.write(b": subscribed\n\n")
            sent = 0  # one agent resumed: the last version sent (its id), nothing twice
            if after is not None:
                sent = after
                for event in await self._since(ids[0], after):
                    await self._send(response, rows, event, str(event.version))
                    sent = event.version
            while True:
                try:
                    live = await wait_for(listener.next(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if live is None:
                    reason = json.dumps({"reason": listener.dropped})
                    await response.write(f"event: ares.closed\ndata: {reason}\n\n".encode())
                    return response
                event = live.event
                if event.stream_id not in wanted:
                    continue
                if after is not None:
                    if event.version <= sent:
                        continue  # read from the log already
                    await self._send(response, rows, event, str(event.version))
                    sent = event.version
                else:
                    await self._send(response, rows, event, live.id)
        except ConnectionError:
            return web.Response()  # the client went away
        finally:
            self.api.feed.unsubscribe(listener)

    async def _send(self, response: web.StreamResponse, rows: dict[str, AgentRow],
                    event: Event, event_id: str) -> None:
        row = await self._advance(rows, event)
        message = json.dumps({"agent": None if row is None else row.to_json(),
                              "event": _event_row(event)}, default=str)
        await response.write(f"id: {event_id}\nevent: agent\ndata: {message}\n\n".encode())

    async def _since(self, agent_id: str, after: int) -> list[Event]:
        """The agent's events after version ``after`` as the log has them now (the page
        rendered up to ``after``; the live feed, subscribed before this read, has the rest):
        the latest ``MAX_CATCH_UP`` of them at most."""
        head = await self.api.reader.head(agent_id)
        start = max(after + 1, head - MAX_CATCH_UP + 1)
        events: list[Event] = []
        while start <= head:
            page = await self.api.reader.read(agent_id, start, min(500, head - start + 1))
            if not page:
                break
            events.extend(e for e in page if e.version <= head)
            start = page[-1].version + 1
        return events

    async def _rows(self, ids: list[str]) -> dict[str, AgentRow]:
        """The agents' rows as projected, subscribed first: later events fold onto them."""
        if self.api.store is None:
            return {}
        try:
            return await self.api.store.load_agents(ids)
        except ProjectionUnavailableError:
            return {}

    async def _advance(self, rows: dict[str, AgentRow], event: Event) -> AgentRow | None:
        """The row of ``event``'s agent after it: the event folded on, after the events
        between the row's version and it (read from the log) when the row lags."""
        agent_id = event.stream_id
        row = rows.get(agent_id)
        version = 0 if row is None else row.lifecycle.version
        if event.version <= version:
            return row
        events = [event] if event.version == version + 1 else [
            e for e in await self.api.reader.read(agent_id, version + 1, event.version - version)
            if e.version <= event.version]
        if not events or events[-1].version != event.version:
            events.append(event)
        if row is None:
            start = next((i for i, e in enumerate(events) if e.type == lc.AGENT_STARTED), None)
            if start is None:
                return None
            row, events = AgentRow(lc.AgentLifecycle(agent_id)), events[start:]
        rows[agent_id] = row = row.fold(events)
        return row


# -- helpers -----------------------------------------------------------------------------


def _body(response: web.StreamResponse) -> dict[str, Any]:
    """The JSON document of one of the API's own handlers."""
    text = cast(web.Response, response).text or "{}"
    body: dict[str, Any] = json.loads(text)
    return body


def _after(request: web.Request) -> int | None:
    """Where a one-agent live stream resumes: the browser's ``Last-Event-ID`` (the last
    version it got, on an automatic reconnection), else ``?after=N`` (the version the page
    was rendered up to); None: live events only."""
    for value in (request.headers.get("Last-Event-ID"), request.query.get("after")):
        if value is not None and value.isdigit() and len(value) <= 18:
            return int(value)
    if request.query.get("after") not in (None, ""):
        raise ApiError(400, "after must be a version (a non-negative integer)")
    return None


def _next(value: str | None) -> str:
    """Where to go after logging in: a path of the dashboard only (no open redirect)."""
    if value and value.startswith("/ui/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/"


def _event_row(event: Event) -> dict[str, Any]:
    return {"version": event.version, "type": event.type, "module": event.module,
            "timestamp": event.timestamp.isoformat(), "payload": dict(event.payload),
            "metadata": dict(event.metadata), "hash": event.hash}


def journal_rows(events: list[Event]) -> list[dict[str, Any]]:
    """The task journal as the page shows it: per task, its recorded calls in position
    order (steps, LLM calls with tokens, tool calls with effect and outcome)."""
    out = []
    for task_id, journal in task_journals(events).items():
        calls = []
        for position in sorted(journal.calls):
            call = journal.calls[position]
            llm = dict(call.llm or {})
            calls.append({
                "position": position, "kind": call.kind, "name": call.name,
                "occurrence": call.occurrence, "completed": call.completed,
                "failure": None if call.failure is None else dict(call.failure),
                "model": llm.get("model"), "prompt_tokens": llm.get("prompt_tokens"),
                "completion_tokens": llm.get("completion_tokens"),
                "attempts": [{"call_id": a.call_id, "effect": a.effect,
                              "outcome": a.outcome or ("in doubt" if a.in_doubt else None),
                              "resolution": None if a.resolution is None
                              else a.resolution.as_} for a in call.attempts]})
        outcome = None if journal.outcome is None else journal.outcome.type
        out.append({"task_id": task_id, "outcome": outcome, "calls": calls,
                    "resumed": len(journal.resumed)})
    return out


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path == "/ui" or request.path.startswith("/ui/"):
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
