"""``POST /workers/{worker_id}/crash``: the arena's Crash worker (the dashboard's button).

Only with ``--arena`` (``ARES_ARENA=1``) on the replay reader: else 403 and nothing sent. An
operator's write like every other (``ReplayApi.authorize_write``: bearer token, or session
and CSRF token). The worker's partitions come from the runtime group's description; the
``worker.crash`` command is keyed onto one of them (``ares.runtime_manager.arena``) and the
worker's owner answers before it exits: 202 once it accepted, 422 when it refused (a
runtime manager without ``--arena`` dead-letters it), 404 when no such worker is in the
group, 503 when no owner answered in time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from ares.arena import CRASH, crash_command, owned_partitions
from ares.client import NotAnsweredError
from ares.commands.deadlines import is_expired
from ares.commands.model import ReplyStatus
from ares.errors import TransientError
from ares.replay_reader.auth import ApiError

if TYPE_CHECKING:
    from ares.replay_reader.http_api import ReplayApi

log = logging.getLogger(__name__)
ARENA_OFF = ("the arena is off: run the replay reader and the runtime managers with --arena "
             "(ARES_ARENA=1) to crash workers; never in production")
_RETRY_AFTER = {"Retry-After": "2"}


async def crash_worker(api: ReplayApi, request: web.Request) -> web.Response:
    principal = api.authorize_write(request)  # first: a refused write learns nothing
    worker_id = request.match_info["worker_id"]
    if not api.settings.arena:
        log.warning("worker.crash for %r from %s refused: the arena is off", worker_id[:80],
                    request.remote)
        raise ApiError(403, ARENA_OFF)
    if not worker_id or len(worker_id) > 255 or not worker_id.isprintable():
        raise ApiError(400, "worker_id must be 1-255 printable characters")
    from ares.replay_reader.http_api import _deadline_s, _json_object  # the API's rules

    await _json_object(request, frozenset(), "empty (or {})")
    deadline_s = _deadline_s(request)  # by default the wait: a late crash is nobody's wish
    try:
        client = await api._commands()
        partitions = await owned_partitions(api.settings, client.plan, worker_id)
        if not partitions:
            raise ApiError(404, f"no runtime manager {worker_id!r} holds partitions in the "
                                "runtime group now (gone already, or still joining)")
        command = crash_command(worker_id, partitions, client.plan.partitions,
                                issuer="http-api", reason=f"arena: {principal.via} operator")
        reply = await client.send(command, deadline_s=deadline_s)
    except NotAnsweredError as exc:
        again = ": check the workers page before sending it again" if exc.kept else ""
        raise ApiError(503, f"{exc}{again}", headers=_RETRY_AFTER) from None
    except TransientError as exc:
        raise ApiError(503, str(exc), headers=_RETRY_AFTER) from None
    if reply.status is not ReplyStatus.OK:
        raise ApiError(409 if is_expired(reply.message) else 422,
                       reply.message or f"the owner answered {reply.status}")
    log.warning("worker.crash for %r from %s: %s", worker_id, request.remote, reply.message)
    return web.json_response({"worker_id": worker_id, "command": CRASH, "status": "ok",
                              "message": reply.message}, status=202)
