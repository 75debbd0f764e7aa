"""The dashboard in headless Chromium against the real services (tests/browser/conftest.py):
Kill on a busy agent, seen dead and then running again with a new incarnation without a
reload, its task resuming and its genealogy growing; events appended between the agent
page's render and its live stream's opening shown once each; a replay stepped through, the
rebuilt state changing; a write without a token refused and nothing appended; the arena's
Crash worker button clicked and the failover seen on the pages. Every page is screenshotted.
Waits have deadlines; nothing is timed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable

import aiohttp
from playwright.async_api import Browser, Dialog, Page, Route

from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event, NewEvent
from ares.lifecycle.genealogy import genealogy
from ares.runtime_manager.arena import CRASH_EXIT_CODE
from ares.tasks import wait_for
from ares.topics import EVENTS
from tests.browser.conftest import (
    OPERATOR,
    VIEWER,
    WORKERS,
    Arena,
    log_in,
    screenshot,
    start_busy,
    tid,
)
from tests.support.runtime import read_stream
from tests.support.workers import audit_steps, fleet_events, host_of

NO_RELOAD = "window.__aresNoReload = 'kept'"
KEPT = "window.__aresNoReload"
# Records every data-status / data-incarnation an element takes, in order.
WATCH = """([selector, key]) => {
  const el = document.querySelector(selector);
  window[key] = [el.getAttribute('data-status') + '#' + el.getAttribute('data-incarnation')];
  new MutationObserver(() => {
    const now = el.getAttribute('data-status') + '#' + el.getAttribute('data-incarnation');
    if (window[key][window[key].length - 1] !== now) { window[key].push(now); }
  }).observe(el, {attributes: true, attributeFilter: ['data-status', 'data-incarnation']});
}"""


async def wait_events(arena: Arena, agent: str, done: Callable[[list[Event]], bool],
                      what: str, timeout_s: float = 60.0) -> list[Event]:
    deadline = time.monotonic() + timeout_s
    events: list[Event] = []
    while time.monotonic() < deadline:
        events = await read_stream(arena.settings, arena.plan, agent)
        if done(events):
            return events
        await asyncio.sleep(0.3)
    raise AssertionError(f"{agent}: not {what} in {timeout_s}s: "
                         f"{[f'{e.version}:{e.type}' for e in events][-15:]}")


def count(event_type: str, n: int = 1) -> Callable[[list[Event]], bool]:
    return lambda events: sum(1 for e in events if e.type == event_type) >= n


async def open_projected(page: Page, arena: Arena, path: str, selector: str,
                         timeout_s: float = 60.0) -> None:
    """Open ``path`` until ``selector`` is on it (the projection may not have caught up on
    the first load); reloads happen only here, before anything is watched."""
    deadline = time.monotonic() + timeout_s
    while True:
        await page.goto(arena.url(path))
        if await page.locator(selector).count():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{selector} never appeared on {path}")
        await asyncio.sleep(0.5)


async def test_kill_a_busy_agent_and_watch_it_come_back_live(browser: Browser,
                                                             arena: Arena) -> None:
    agent = f"kill-{uuid.uuid4().hex[:6]}"
    await start_busy(arena, [agent], {"steps": 16, "step_ms": 500, "email": True})
    await wait_events(arena, agent, count("llm.call", 2), "busy")

    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    try:
        fleet = await context.new_page()
        await log_in(fleet, arena)
        row = tid("agent-row", agent_id=agent)
        await open_projected(fleet, arena, "/ui/", row)
        await fleet.locator(tid("live-state", live="true")).wait_for()
        await fleet.locator(f"{row}[data-status='running']").wait_for()
        before = int(await fleet.locator(row).get_attribute("data-incarnation") or 0)
        await fleet.evaluate(NO_RELOAD)
        await fleet.evaluate(WATCH, [row, "__rowSeen"])
        await screenshot(fleet, "fleet")

        # The agent's page, from its link on the fleet page (in a tab of its own, so the
        # fleet page stays open and watched).
        href = await fleet.locator(f"{row} {tid('agent-link')}").first.get_attribute("href")
        assert href
        page = await context.new_page()
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await page.goto(arena.url(href))
        summary = tid("agent-summary", agent_id=agent)
        await page.locator(tid("live-state", live="true")).wait_for()
        await page.locator(f"{summary}[data-status='running']").wait_for()
        await page.evaluate(NO_RELOAD)
        await page.evaluate(WATCH, [summary, "__summarySeen"])

        await page.get_by_test_id("kill-button").click()
        flash = page.locator(tid("flash"))
        await page.locator(tid("flash", ok="true")).wait_for()
        assert "202 accepted" in (await flash.inner_text())

        # Live: the death and the resurrection appear as new rows, the summary and the
        # fleet row show the next incarnation running, and neither page reloaded.
        await page.locator(tid("event-row", type="agent.dead")).first.wait_for()
        await page.locator(tid("event-row", type="agent.resurrected")).first.wait_for()
        await page.locator(f"{summary}[data-status='running']"
                           f"[data-incarnation='{before + 1}']").wait_for()
        await fleet.locator(f"{row}[data-status='running']"
                            f"[data-incarnation='{before + 1}']").wait_for()
        # The genealogy timeline too: the death recorded, the new incarnation running.
        await page.locator(tid("incarnation-row", incarnation=before, end="dead")).wait_for()
        await page.locator(tid("incarnation-row", incarnation=before + 1, end="")).wait_for()
        await saw_it_die_and_come_back(page, fleet, before)
        await screenshot(page, "agent-killed")
        await screenshot(fleet, "fleet-after-kill")
    finally:
        await context.close()

    events = await wait_events(arena, agent, count("task.completed"), "done", 90)
    lives = genealogy(events)
    assert [life.number for life in lives] == [before, before + 1]
    assert lives[0].cause_of_death == "killed"
    fleet_now = await fleet_events(arena.settings, arena.plan)
    audit = audit_steps(fleet_now, arena.ledger, [agent])
    assert audit.problems == [], audit.problems  # no step executed twice


async def saw_it_die_and_come_back(page: Page, fleet: Page, before: int) -> None:
    """The task resumed after the resurrection (its next steps arrive live), and both pages,
    never reloaded, went through the death to the next incarnation running."""
    resurrected = int(await page.locator(tid("event-row", type="agent.resurrected"))
                      .first.get_attribute("data-version") or 0)
    await wait_for_row_after(page, "llm.call", resurrected)
    for watched, key in ((page, "__summarySeen"), (fleet, "__rowSeen")):
        assert await watched.evaluate(KEPT) == "kept", "the page reloaded"
        seen = await watched.evaluate(f"window.{key}")
        assert f"dead#{before}" in seen, seen
        assert seen[-1] == f"running#{before + 1}", seen
        assert seen.index(f"dead#{before}") < len(seen) - 1, seen


async def wait_for_row_after(page: Page, event_type: str, version: int) -> None:
    await page.wait_for_function(
        """([type, version]) => Array.from(document.querySelectorAll(
             `[data-testid="event-row"][data-type="${type}"]`))
           .some(r => Number(r.getAttribute('data-version')) > version)""",
        arg=[event_type, version], timeout=60_000)


def chat_turn(i: int) -> list[NewEvent]:
    return [NewEvent("task.assigned", "runtime-manager", {
                "task_id": f"t{i}", "input_json": json.dumps({"message": f"question {i}"})}),
            NewEvent("llm.call", "agent.example.chat", {
                "task_id": f"t{i}", "name": "answer", "occurrence": 0, "model": "offline",
                "prompt_hash": "h", "output": "{}", "prompt_tokens": 11,
                "completion_tokens": 7}),
            NewEvent("task.completed", "agent.example.chat", {
                "task_id": f"t{i}", "output_json": json.dumps({"answer": f"answer {i}"})})]


async def test_events_appended_before_the_live_stream_opens_are_shown_once(
        page: Page, arena: Arena) -> None:
    """The agent page renders, then (held back by the test) its SSE stream opens late:
    what was appended in between arrives first, then the live events, every version once."""
    agent = f"gap-{uuid.uuid4().hex[:6]}"  # a stream written here, hosted by no worker
    store = await KafkaEventStore.open(arena.settings, topic=arena.plan.name(EVENTS))
    try:
        await store.append(agent, [NewEvent("agent.started", "runtime-manager", {
            "kind": "example.chat", "config_json": "{}", "incarnation": 1,
            "worker": "nobody"}), *chat_turn(0)])
        held = asyncio.Event()
        go = asyncio.Event()

        async def hold(route: Route) -> None:
            held.set()
            await go.wait()
            await route.continue_()

        await page.route("**/ui/live?*", hold)
        await open_projected(page, arena, f"/ui/agents/{agent}",
                             tid("event-row", version=4))
        await wait_for(held.wait(), 30)
        await store.append(agent, chat_turn(1))  # after the render, before the stream
        go.set()
        await page.locator(tid("live-state", live="true")).wait_for()
        await store.append(agent, chat_turn(2))  # live
        await page.locator(tid("event-row", version=10)).wait_for()
        await page.locator(tid("head-version")).filter(has_text="10").wait_for()
    finally:
        await store.close()
    versions = [int(v or 0) for v in await page.locator(tid("event-row")).evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-version'))")]
    assert versions == list(range(10, 0, -1)), versions  # newest first, each once


async def test_step_through_a_replay_and_see_the_state_change(page: Page,
                                                              arena: Arena) -> None:
    agent = f"replay-{uuid.uuid4().hex[:6]}"
    await start_busy(arena, [agent], {"steps": 3, "step_ms": 50, "email": False})
    events = await wait_events(arena, agent, count("task.completed"), "done")
    summary = tid("agent-summary", agent_id=agent)
    await open_projected(page, arena, f"/ui/agents/{agent}?step=0", summary)
    panel = page.locator(tid("replay"))
    state = page.locator(tid("replay-state"))
    await page.locator(tid("replay", position=0)).wait_for()
    assert int(await panel.get_attribute("data-steps") or 0) >= len(events)
    await page.evaluate(NO_RELOAD)

    await page.get_by_test_id("replay-step").click()
    await page.locator(tid("replay", position=1)).wait_for()
    await page.locator(tid("replay-event", version=1, type="agent.started")).wait_for()
    await page.locator(tid("replay-state", version=1, status="running",
                              incarnation=1)).wait_for()
    assert await page.locator(f"{tid('replay-diff')} tr[data-path]").count() > 0
    first_state = await state.inner_text()

    await page.get_by_test_id("replay-step").click()
    await page.locator(tid("replay", position=2)).wait_for()
    await page.locator(tid("replay-event", version=2, type=events[1].type)).wait_for()
    await page.locator(tid("replay-state", version=2)).wait_for()
    assert await state.inner_text() != first_state  # the rebuilt state changed
    await screenshot(page, "replay")

    await page.get_by_test_id("replay-back").click()
    await page.locator(tid("replay", position=1)).wait_for()
    assert await state.inner_text() == first_state

    last = len(events)
    await page.get_by_test_id("replay-goto-step").fill(str(last))
    await page.get_by_test_id("replay-goto").click()
    await page.locator(tid("replay", position=last)).wait_for()
    await page.locator(tid("replay-event", version=last, type=events[-1].type)).wait_for()
    await page.locator(tid("replay-state", version=last)).wait_for()
    await page.get_by_test_id("replay-reset").click()
    await page.locator(tid("replay", position=0)).wait_for()
    await page.locator(tid("replay-event", version=0)).wait_for()
    assert await page.evaluate(KEPT) == "kept", "the page reloaded"
    await screenshot(page, "agent")


async def test_a_write_without_a_token_is_refused_and_nothing_is_appended(
        browser: Browser, arena: Arena) -> None:
    agent = f"anon-{uuid.uuid4().hex[:6]}"
    await start_busy(arena, [agent], {"steps": 4, "step_ms": 50, "email": False})
    await wait_events(arena, agent, count("task.completed"), "done")
    before = await read_stream(arena.settings, arena.plan, agent)
    summary = tid("agent-summary", agent_id=agent)
    for token, status in ((None, "401"), (VIEWER, "403")):
        context = await browser.new_context()  # fresh: no session, no cookie
        context.set_default_timeout(30_000)
        try:
            page = await context.new_page()
            if token is not None:
                await log_in(page, arena, token)
            await open_projected(page, arena, f"/ui/agents/{agent}", summary)
            assert await page.locator(tid("who", role="operator")).count() == 0
            await page.get_by_test_id("kill-button").click()
            flash = page.locator(tid("flash", ok="false"))
            await flash.wait_for()
            text = await flash.inner_text()
            assert text.startswith(f"{status} refused"), text
            # The API itself, from the same browser context: refused too.
            answer = await context.request.post(arena.url(f"/agents/{agent}/kill"))
            assert str(answer.status) == status
            if token is None:
                await screenshot(page, "write-refused")
        finally:
            await context.close()
    # An operator's write right after goes through and is the first thing appended: the
    # refused ones appended nothing.
    async with aiohttp.ClientSession() as session, session.post(
            arena.url(f"/agents/{agent}/stop"),
            headers={"Authorization": f"Bearer {OPERATOR}"}) as response:
        assert response.status == 202, await response.text()
    after = await wait_events(arena, agent, count("agent.stopped"), "stopped")
    assert [e.type for e in after[len(before):]] == ["agent.stopped"]


async def test_login_alerts_and_workers_pages(page: Page, arena: Arena) -> None:
    await page.goto(arena.url("/ui/login"))
    await page.get_by_test_id("login-form").wait_for()
    await screenshot(page, "login")
    await log_in(page, arena)
    await page.goto(arena.url("/ui/alerts"))
    await page.get_by_test_id("nav-alerts").wait_for()
    await screenshot(page, "alerts")
    await open_projected(page, arena, "/ui/workers", tid("worker-row"))
    await page.get_by_test_id("workers-table").wait_for()
    for worker in WORKERS:
        await page.locator(tid("worker-row", worker_id=worker)).wait_for()
    await screenshot(page, "workers")


async def test_crash_a_worker_and_see_the_failover(page: Page, arena: Arena) -> None:
    """The arena: a runtime manager exits abruptly (worker.crash) and its agents come back
    on the other one. Runs last: it leaves one worker."""
    agents = [f"crash-{uuid.uuid4().hex[:6]}-{i}" for i in range(6)]
    await start_busy(arena, agents, {"steps": 12, "step_ms": 500, "email": True})
    fleet = {a: await wait_events(arena, a, count("llm.call"), "busy") for a in agents}
    hosts = {a: host_of(events) for a, events in fleet.items()}
    victim, survivor = WORKERS
    orphans = [a for a in agents if hosts[a] == victim]
    assert orphans, hosts
    await log_in(page, arena)
    await open_projected(page, arena, "/ui/workers", tid("worker-row", worker_id=victim))

    # The workers page's button (shown with --arena), in the victim's row; it asks first.
    dialogs: list[str] = []

    async def accept(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)
    await page.evaluate(NO_RELOAD)
    await page.locator(f"{tid('worker-row', worker_id=victim)} "
                       f"{tid('crash-worker-button')}").click()
    await page.locator(tid("flash", ok="true")).wait_for()
    text = await page.locator(tid("flash")).inner_text()
    assert text.startswith("202 accepted: Crash worker"), text
    assert dialogs, "no confirmation asked"
    assert victim in dialogs[0], dialogs
    assert await page.evaluate(KEPT) == "kept", "the page reloaded"
    code = await asyncio.to_thread(arena.workers[victim].proc.wait, 30)
    assert code == CRASH_EXIT_CODE, f"the worker did not crash: {code}"

    for agent in orphans:
        events = await wait_events(
            arena, agent, lambda es: any(e.type == "agent.resurrected"
                                         and e.payload.get("worker") == survivor for e in es),
            "resurrected on the survivor")
        assert any(e.type == "agent.dead" and e.payload.get("cause") == "worker_lost"
                   for e in events), agent
    # The agent's page shows it running on the survivor, the workers page the failover.
    await open_projected(page, arena, f"/ui/agents/{orphans[0]}",
                         tid("agent-summary", agent_id=orphans[0], status="running"))
    await page.locator(tid("event-row", type="agent.resurrected")).first.wait_for()
    await screenshot(page, "agent-after-crash")
    # The workers page: no agent runs on the victim any more, the survivor has them.
    deadline = time.monotonic() + 60
    while True:
        await page.goto(arena.url("/ui/workers"))
        on_victim = page.locator(f"{tid('hosted-row', worker_id=victim)} .s-running")
        if not await on_victim.count() and await page.locator(
                f"{tid('hosted-row', worker_id=survivor)} .s-running").count():
            break
        assert time.monotonic() < deadline, "the workers page never showed the failover"
        await asyncio.sleep(1)
    await page.locator(f"{tid('worker-row', worker_id=survivor)} "
                       f"{tid('crash-worker-button')}").wait_for()
    await screenshot(page, "workers-after-crash")
