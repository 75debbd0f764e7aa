"""The dashboard: HTML pages under ``/ui/`` served by the replay reader (docs/dashboard.md).

Server-rendered Jinja2 templates (aiohttp-jinja2, autoescape on) with progressive
enhancement: every page works as plain HTML (links and forms), and ``static/ui.js`` (a
hand-written file, no build chain) adds the live parts over SSE and submits the write forms
with ``fetch``. The Content-Security-Policy allows scripts from this origin's files only.

The data is the JSON API's: pages call the same functions its handlers call
(``ReplayApi._agent``, ``get_genealogy``, ``get_tree``, ``list_alerts``, ``ReplaySession``,
``run_audit``, the projection's ``AgentRow`` fold for live rows). ``setup(app, api)`` is
the one line ``ReplayApi.app()`` adds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from ares.replay_reader.ui.pages import Dashboard

if TYPE_CHECKING:
    from ares.replay_reader.http_api import ReplayApi

__all__ = ["Dashboard", "setup"]


def setup(app: web.Application, api: ReplayApi) -> Dashboard:
    """Mount the dashboard's routes (``/ui/...``) on the API's application."""
    dashboard = Dashboard(api)
    dashboard.mount(app)
    return dashboard
