"""The dashboard in a real browser: headless Chromium from Debian's packages
(``/usr/bin/chromium``, installed by scripts/install-prereqs.sh) driven by Playwright for
Python, against the real services on the real broker and PostgreSQL: two
``ares run runtime-manager --arena`` processes and ``ares run replay-reader --arena`` with
an operator's and a viewer's token (``ARES_API_TOKENS``).

A browser that cannot start FAILS the tests (never a skip). No Playwright browser download
is used or needed (never ``playwright install``): ``ARES_CHROMIUM`` names another binary.
Screenshots of every page go to ``build/browser-screenshots/`` (``ARES_BROWSER_SCREENSHOTS``
to move them); the path is printed at the end of the run. ``ARES_DOCS_SCREENSHOTS=docs/img``
also writes the set docs/dashboard.md embeds (``DOCS``: ``dashboard-<name>.png``, the
viewport or one element, not the full page, to keep them small).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, Error, Page, async_playwright

from ares.client import Client
from ares.config import Settings
from ares.replay_reader.wiring import ENV_SCHEMA
from ares.topics import TopicPlan
from tests.support.kafka import applied_topics
from tests.support.processes import ares_env, service
from tests.support.workers import Worker, wait_group, workers

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("ARES_CHROMIUM", "/usr/bin/chromium")
# No sandbox (root in CI), no GPU, and nothing that phones home or updates itself.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
SCREENSHOTS = Path(os.environ.get("ARES_BROWSER_SCREENSHOTS",
                                  REPO / "build" / "browser-screenshots"))
DOCS_SCREENSHOTS = os.environ.get("ARES_DOCS_SCREENSHOTS")
# The screenshots docs/dashboard.md embeds: name -> the element to take (None: the viewport).
DOCS: dict[str, str | None] = {
    "fleet": None, "agent-killed": None, "replay": "#replay", "alerts": None,
    "workers-after-crash": None, "login": None, "write-refused": None,
}
PARTITIONS = 4
SESSION_TIMEOUT_MS = 4000
WORKERS = ("arena-w1", "arena-w2")
OPERATOR = f"op-{uuid.uuid4().hex}"
VIEWER = f"view-{uuid.uuid4().hex}"
# A task that keeps a pipeline agent busy for ~20 s: a kill lands mid-task.
BUSY_TASK = {"steps": 40, "step_ms": 500, "email": True}
_shots: list[Path] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/browser/" in str(item.path):
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _shots:
        terminalreporter.write_line(f"browser screenshots ({len(_shots)}): {SCREENSHOTS}")


async def screenshot(page: Page, name: str) -> Path:
    """A full-page PNG of ``page`` as ``<name>.png`` under the screenshots directory."""
    path = SCREENSHOTS / f"{name}.png"
    await asyncio.to_thread(SCREENSHOTS.mkdir, parents=True, exist_ok=True)
    await page.screenshot(path=str(path), full_page=True)
    _shots.append(path)
    print(f"screenshot: {path}")
    if DOCS_SCREENSHOTS and name in DOCS:
        docs = Path(DOCS_SCREENSHOTS)
        if not docs.is_absolute():
            docs = REPO / docs
        await asyncio.to_thread(docs.mkdir, parents=True, exist_ok=True)
        target = docs / f"dashboard-{name}.png"
        element = DOCS[name]
        if element is None:
            await page.screenshot(path=str(target))
        else:
            await page.locator(element).screenshot(path=str(target))
        _shots.append(target)
        print(f"screenshot for the docs: {target}")
    return path


# -- the browser -------------------------------------------------------------------------


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium; a failure to start is a test failure that says what to do."""
    if not shutil.which(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/install-prereqs.sh as root "
                    "(Debian: apt-get install chromium chromium-driver), or set ARES_CHROMIUM",
                    pytrace=False)
    async with async_playwright() as playwright:
        try:
            started = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                       args=CHROMIUM_ARGS, headless=True)
        except Error as exc:
            pytest.fail(f"Chromium ({CHROMIUM}) did not start: {exc}", pytrace=False)
        try:
            yield started
        finally:
            await started.close()


# -- the services ------------------------------------------------------------------------


@dataclass
class Arena:
    """The running services and what a test needs of them."""

    base: str  # the replay reader's URL
    settings: Settings
    plan: TopicPlan
    workers: dict[str, Worker]
    ledger: Path

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: Any, log_dir: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            logs = "\n".join(p.read_text(errors="replace")[-3000:]
                             for p in log_dir.glob("replay-reader-*.log"))
            raise AssertionError(f"the replay reader exited ({proc.returncode}):\n{logs}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"the replay reader at {url} was not ready in {timeout_s}s")


@pytest.fixture(scope="module")
async def arena(kafka_bootstrap: str, postgres_dsn: str,
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Arena]:
    """Two arena runtime managers and a replay reader (arena on, tokens set), on topics and
    a projections schema of their own."""
    settings = Settings(kafka_bootstrap=kafka_bootstrap, postgres_dsn=postgres_dsn,
                        topic_prefix=f"br-{uuid.uuid4().hex[:8]}.", request_timeout_s=30.0)
    schema = f"br_{uuid.uuid4().hex[:10]}"
    logs = tmp_path_factory.mktemp("browser-logs")
    ledger = tmp_path_factory.mktemp("browser-ledger")
    port = free_port()
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        with ExitStack() as stack:
            procs = stack.enter_context(workers(
                settings, PARTITIONS, logs, WORKERS, session_timeout_ms=SESSION_TIMEOUT_MS,
                extra_args=("--arena",), ARES_EXAMPLE_LEDGER_DIR=str(ledger)))
            env = ares_env(settings, PARTITIONS, ARES_POSTGRES_DSN=postgres_dsn,
                           **{ENV_SCHEMA: schema},
                           ARES_API_TOKENS=f"operator:{OPERATOR},viewer:{VIEWER}",
                           ARES_ARENA="1", ARES_REQUEST_TIMEOUT_S="30")
            reader = stack.enter_context(service("replay-reader", env, logs, "--http-port",
                                                 str(port), "--arena"))
            base = f"http://127.0.0.1:{port}"
            await asyncio.to_thread(wait_ready, base, reader, logs)
            await wait_group(settings, plan, members=len(WORKERS))
            print(f"services: {base}/ui/ (logs: {logs})")
            try:
                yield Arena(base, settings, plan, procs, ledger)
            finally:
                stack.close()
                await drop_schema(postgres_dsn, schema)


async def drop_schema(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def start_busy(arena: Arena, agents: Sequence[str], task: dict[str, Any] | None = None,
                     task_id: str = "t1") -> None:
    """Start ``agents`` (example.pipeline) and give each a long task."""
    async with Client(arena.settings, arena.plan, issuer="test-browser") as client:
        for agent in agents:
            await client.start_agent(agent, "example.pipeline")
            await client.assign_task(agent, task_id, task or BUSY_TASK)


# -- pages -------------------------------------------------------------------------------


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A page in a fresh context (no cookies, no session)."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def log_in(page: Page, arena: Arena, token: str = OPERATOR) -> None:
    await page.goto(arena.url("/ui/login"))
    await page.get_by_test_id("login-token").fill(token)
    await page.get_by_test_id("login-submit").click()
    await page.wait_for_load_state()
    role = "operator" if token == OPERATOR else "viewer"
    await page.locator(f'[data-testid="who"][data-role="{role}"]').wait_for()


def tid(name: str, **attrs: str | int) -> str:
    """A CSS selector for ``data-testid=name`` with ``data-<attr>=value`` conditions."""
    conditions = "".join(f'[data-{k.replace("_", "-")}="{v}"]' for k, v in attrs.items())
    return f'[data-testid="{name}"]{conditions}'
