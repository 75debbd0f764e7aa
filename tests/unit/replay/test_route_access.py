"""Every route of the replay reader's HTTP API has its access decided in docs/operations.md
("API access"): a route added without a row there fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

from ares.agents import AgentRegistry
from ares.config import Settings
from ares.replay_reader.http_api import ReplayApi

DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
PARAMETER = re.compile(r"\{[^}]*\}")


def documented() -> list[tuple[str, str, str, str]]:
    """(method, path pattern, open-reads access, token-reads access) per route in the
    table; a path without a method takes the one before it in the same cell."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| route | `ARES_API_READS=open` (default)"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        route, when_open, when_token = (c.strip() for c in line.strip("|").split("|"))
        method = ""
        for item in re.findall(r"`([^`]+)`", route):
            path = item
            if " " in item:
                method, path = item.split(" ", 1)
            if path.startswith("/"):
                rows.append((method, PARAMETER.sub("{}", path), when_open, when_token))
    return rows


def served(probes: bool = True) -> set[tuple[str, str]]:
    api = ReplayApi(Settings.from_env({}), cast(Any, None), None, cast(Any, None),
                    AgentRegistry([]), snapshots_topic=None, ready=lambda: True)
    return {(r.method, PARAMETER.sub("{}", r.resource.canonical))
            for r in api.app(probes=probes).router.routes()
            if r.method != "HEAD" and r.resource is not None}


def matches(route: tuple[str, str], row: tuple[str, str, str, str]) -> bool:
    method, path = route
    if row[0] != method:
        return False
    pattern = row[1]
    return path == pattern or (pattern.endswith("/...") and path.startswith(pattern[:-3]))


def test_every_served_route_has_its_access_documented_for_both_read_modes() -> None:
    rows = documented()
    assert len(rows) >= 20
    for method, path, when_open, when_token in rows:
        assert method in ("GET", "POST"), (method, path)
        assert when_open, path
        assert when_token, path
    missing = sorted(r for r in served() if not any(matches(r, row) for row in rows))
    assert missing == []


def test_every_write_needs_an_operator_except_signing_in_and_out() -> None:
    public = {("POST", "/ui/login"), ("POST", "/ui/logout")}
    for route in served():
        if route[0] != "POST" or route in public:
            continue
        row = next(row for row in documented() if matches(route, row))
        assert "**operator**" in row[2], route
        assert "**operator**" in row[3], route


def test_a_metrics_port_takes_the_probes_off_the_api() -> None:
    moved = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
    assert moved <= served(probes=True)
    assert not moved & served(probes=False)
