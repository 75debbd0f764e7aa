"""The demo scenario: real services as processes, a fleet, faults, and the report.

1. topics under a fresh prefix (``demo-<time>.``), so every run starts clean;
2. two runtime managers, the health checker, the compactor and the replay reader as real
   ``ares run`` processes;
3. a fleet of ``example.pipeline`` agents (multi-step tasks ending in one e-mail each) and
   ``example.chat`` agents (a three-turn conversation);
   and, beside them, a team (``example.team``: a leader delegating 8 sub-tasks to
   ``example.researcher`` sub-agents, then one e-mail);
4. mid-task, SIGKILL of the runtime manager that hosts the team's leader, once the leader is
   mid-dispatch (its 3rd ``delegation.dispatched``, its task open; the fleet's busy agents
   on that worker die with it); then a busy sub-agent killed with ``agent.kill`` (with two
   runtime managers only one is left: a second worker death would stop the runtime); later
   one busy pipeline agent killed with ``agent.kill``, and one hung for the health checker;
5. a second team with the same question and no fault, to compare the answers;
6. wait for every task, then check every promise from outside: the log (chains, outcomes,
   tokens, the team's dispatches), the ledgers the example agents wrote of what really
   ran (LLM steps, e-mails), and that each fault hit busy work (``demo.faults``: its
   victim mid-task at the death it caused, a later incarnation finishing the task).

With ``ui`` (``ares demo --ui``) the replay reader serves the dashboard (``/ui/``) on a free
port of its own, with ``--arena`` (the runtime managers too: Crash worker is honoured), an
operator token generated for this run (``ARES_API_TOKENS``, in that process's environment
only) and a projections schema of the run's own; the services keep running after the
report (``keep_running``) for the caller to stop (``stop_services``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from ares.client import Client, CommandRejectedError
from ares.config import Settings
from ares.demo.faults import AGENT_KILL, HANG, WORKER_SIGKILL, Fault
from ares.demo.fleet import AgentProgress, FleetState
from ares.demo.processes import ServiceProcess
from ares.demo.report import DemoReport, build_report
from ares.errors import AresError, UnavailableError
from ares.events.kafka.groups import runtime_group, until_group_settled
from ares.events.kafka.retry import connect
from ares.events.kafka.store import KafkaEventStore
from ares.events.model import Event, EventFilter, utc_now
from ares.events.subscription import Subscription
from ares.examples import evidence
from ares.service import SUPPORTING_SERVICES
from ares.tasks import cancel_and_wait
from ares.topics import EVENTS, TopicPlan, apply_topics, load_topics

HANG_TIMEOUT_S = 3  # the hung agent's declared step timeout
CHAT_MESSAGES = ("Hello! Who are you?", "What did I just ask you?",
                 "Summarise our conversation.")
TEAM_LEADER = "team-1"  # the team the faults hit
CALM_LEADER = "team-calm"  # the same question, no fault: the answer to compare with
TEAM_QUESTION = "How do durable agents survive a crash?"
TEAM_SUBTASKS = 8
TEAM_KILL_AFTER = 3  # the leader's worker dies after this many dispatches
TEAM_LEADER_STEPS = 3  # parse, plan, aggregate


@dataclass(frozen=True, slots=True)
class DemoOptions:
    agents: int = 20
    chats: int = 2
    steps: int = 8
    step_ms: int = 250
    kill_at: float = 0.35  # fraction of all steps done when the worker is SIGKILLed
    partitions: int = 6
    timeout_s: float = 300.0
    keep_running: bool = False
    ui: bool = False  # the dashboard with the arena, kept running after the report
    # "service": the chat agents talk to the runtime's configured provider (a real model);
    # the pipelines and the teams stay offline, so the ledgers they are checked against hold
    chat_llm: str = "offline"
    workdir: Path = field(default_factory=lambda: Path.cwd() / ".ares" / "demo")


@dataclass(slots=True)
class DemoRun:
    settings: Settings
    plan: TopicPlan
    state: FleetState
    report: DemoReport | None = None
    phase: str = "starting"
    services: list[ServiceProcess] = field(default_factory=list)
    fault_times: dict[str, list[datetime]] = field(default_factory=dict)  # agent -> faults
    faults: list[Fault] = field(default_factory=list)  # with their victims, for the proof
    emails_expected: int = 0
    killed_worker: str | None = None
    ui: DashboardAccess | None = None


@dataclass(frozen=True, slots=True)
class DashboardAccess:
    """Where the demo's dashboard listens, and the operator token its writes need (never
    logged: the caller prints it once)."""

    port: int
    token: str = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ui/"


Progress = Callable[[DemoRun], None]


async def run_demo(base: Settings, options: DemoOptions, progress: Progress) -> DemoRun:
    prefix = f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}."
    settings = base.with_overrides(topic_prefix=prefix, request_timeout_s=30.0)
    plan = load_topics(settings, env={**os.environ,
                                      "ARES_TOPIC_PARTITIONS": str(options.partitions)})
    run = DemoRun(settings, plan, FleetState())
    workdir = options.workdir / prefix.rstrip(".")
    ledger = workdir / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)

    def phase(text: str) -> None:
        run.phase = text
        progress(run)

    phase(f"creating topics {prefix}*")
    await apply_topics(plan, settings)
    env = _service_env(settings, options, ledger)
    arena = ["--arena"] if options.ui else []
    for index in (1, 2):
        run.services.append(ServiceProcess(
            f"runtime-manager-{index}",
            # `ares run`'s own failover settings, as a user gets them (docs/health.md)
            ["runtime-manager", "--instance-id", f"worker-{index}", *arena],
            env, workdir / "logs" / f"runtime-manager-{index}.log"))
    run.services += [ServiceProcess(name, [name], env, workdir / "logs" / f"{name}.log")
                     for name in SUPPORTING_SERVICES]
    if options.ui:
        run.ui = _with_dashboard(run, env, prefix)
    phase(f"starting {len(run.services)} services")
    for service in run.services:
        service.start()
    try:
        await _drive(run, options, phase, progress)
        phase("checking every promise")
        run.report = await _report(run, options, ledger)
        phase("done")
    finally:
        if not options.keep_running or (options.ui and run.report is None):
            stop_services(run)  # --ui: kept for the caller only once the report is made
    return run


def stop_services(run: DemoRun) -> None:
    for service in run.services:
        service.stop()


def _with_dashboard(run: DemoRun, env: dict[str, str], prefix: str) -> DashboardAccess:
    """The replay reader as the dashboard: a free port, ``--arena``, an operator token of
    this run's own, a projections schema of the run's own (the demo's agent ids recur from
    run to run)."""
    access = DashboardAccess(_free_port(), secrets.token_urlsafe(24))
    reader = next(s for s in run.services if s.name == "replay-reader")
    reader.args += ["--http-port", str(access.port), "--arena"]
    reader.env = {**env, "ARES_API_TOKENS": f"operator:{access.token}",
                  "ARES_PROJECTIONS_SCHEMA": prefix.rstrip(".").replace("-", "_")}
    reader.env.pop("ARES_API_TOKEN", None)
    reader.env.pop("ARES_API_TOKENS_FILE", None)
    return access


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _drive(run: DemoRun, options: DemoOptions, phase: Callable[[str], None],
                 progress: Progress) -> None:
    settings, plan, state = run.settings, run.plan, run.state
    pipelines = [f"pipeline-{i:02d}" for i in range(1, options.agents + 1)]
    run.emails_expected = len(pipelines)
    chats = [f"chat-{i}" for i in range(1, options.chats + 1)]
    for agent_id in pipelines + chats:
        state.agents[agent_id] = AgentProgress(agent_id)
    state.total_steps = options.agents * options.steps + options.chats * len(CHAT_MESSAGES)
    state.total_tasks = options.agents + options.chats * len(CHAT_MESSAGES)
    state.leaders = [TEAM_LEADER, CALM_LEADER]
    _add_leader(run, TEAM_LEADER)
    store = await KafkaEventStore.open(settings, owned=[], topic=plan.name(EVENTS))
    subscription = store.subscribe(EventFilter())
    watcher = asyncio.create_task(_watch(subscription, state, lambda: progress(run)))
    try:
        async with Client(settings, plan, issuer="ares-demo") as client:
            phase("waiting for the runtime managers")
            await _until_members(run, 2)
            await _until_served(client)
            phase(f"starting {len(pipelines)} pipeline and {len(chats)} chat agents and "
                  f"a team")
            await asyncio.gather(*(client.start_agent(a, "example.pipeline") for a in pipelines),
                                 *(client.start_agent(a, "example.chat", {"llm": options.chat_llm})
                                   for a in chats),
                                 client.start_agent(TEAM_LEADER, "example.team"))
            task = {"steps": options.steps, "step_ms": options.step_ms, "email": True}
            await asyncio.gather(*(client.assign_task(a, "analysis-1", task) for a in pipelines),
                                 client.assign_task(TEAM_LEADER, "question-1",
                                                    _team_task(options)))
            for n, message in enumerate(CHAT_MESSAGES, start=1):
                await asyncio.gather(*(client.assign_task(a, f"turn-{n}", {"message": message})
                                       for a in chats))
            phase("fleet and team at work")
            await _kill_leaders_worker(run, options)
            phase("worker killed: a busy sub-agent next")
            await _kill_busy_child(run, client, options)
            phase("waiting for the fleet to be resurrected")
            await _until(lambda: _resurrected(run) and (
                state.steps_done >= 0.7 * state.total_steps
                or state.tasks_done >= state.total_tasks - 1), options.timeout_s)
            await _kill_busy_pipeline(run, client)
            phase("the same question to a team without faults")
            _add_leader(run, CALM_LEADER)
            await client.start_agent(CALM_LEADER, "example.team")
            await client.assign_task(CALM_LEADER, "question-1", _team_task(options))
            if "health-checker" in _names(run):
                await _hang_one(run, client, options)
            phase("waiting for every task")
            await _until(lambda: state.tasks_done >= state.total_tasks, options.timeout_s)
    finally:
        await cancel_and_wait(watcher, ignore_errors=True)
        await subscription.aclose()
        await store.close()


async def _hang_one(run: DemoRun, client: Client, options: DemoOptions) -> None:
    """One more agent whose task hangs mid-way (no progress, no crash): only the health
    checker's "stalled" verdict can bring it back."""
    agent_id, hang_at = "pipeline-hung", max(1, options.steps // 2)
    run.state.agents[agent_id] = agent = AgentProgress(agent_id)
    run.state.total_steps += options.steps
    run.state.total_tasks += 1
    run.emails_expected += 1
    await client.start_agent(agent_id, "example.pipeline", {"step_timeout_s": HANG_TIMEOUT_S})
    await client.assign_task(agent_id, "analysis-1", {
        "steps": options.steps, "step_ms": options.step_ms, "email": True, "hang_at": hang_at})
    await _until(lambda: agent.steps >= hang_at, options.timeout_s)
    hung_at = utc_now()
    run.fault_times.setdefault(agent_id, []).append(hung_at)
    _record(run, Fault(HANG, f"agent {agent_id} hung at step {hang_at} (no progress; its "
                             f"step timeout is {HANG_TIMEOUT_S}s) at {_clock()}",
                       hung_at, "stalled", (agent_id,)))


def _names(run: DemoRun) -> set[str]:
    return {service.name for service in run.services}


def _team_task(options: DemoOptions) -> dict[str, object]:
    return {"question": TEAM_QUESTION, "subtasks": TEAM_SUBTASKS, "step_ms": options.step_ms,
            "email": True}


def _add_leader(run: DemoRun, leader: str) -> None:
    run.state.agents[leader] = AgentProgress(leader)
    run.state.total_tasks += 1
    run.state.total_steps += TEAM_LEADER_STEPS
    run.emails_expected += 1


async def _kill_leaders_worker(run: DemoRun, options: DemoOptions) -> None:
    """SIGKILL of the worker that hosts the team's leader, once it is mid-dispatch (its 3rd
    sub-task dispatched, its task open) and the fleet is ``kill_at`` done (or the leader is
    about to leave the window: its 5th dispatch); its busy fleet agents die with it. Should
    the leader finish first, the busiest worker dies instead (and the faults say so)."""
    state = run.state
    leader = state.agents[TEAM_LEADER]

    def mid_dispatch() -> bool:
        return (len(leader.dispatched) >= TEAM_KILL_AFTER and leader.tasks_done == 0
                and leader.status == "running" and bool(leader.worker))

    await _until(lambda: leader.tasks_done > 0 or (mid_dispatch() and (
        state.steps_done >= options.kill_at * state.total_steps
        or len(leader.dispatched) >= TEAM_KILL_AFTER + 2)), options.timeout_s)
    if mid_dispatch():
        _kill_worker(run, leader.worker, TEAM_LEADER,
                     f"the team leader {TEAM_LEADER}, mid-dispatch: "
                     f"{len(leader.dispatched)}/{TEAM_SUBTASKS} sub-tasks dispatched, and")
    else:
        workers = state.workers()
        _kill_worker(run, workers.most_common(1)[0][0] if workers else "worker-1", None,
                     "NOT the team leader (it finished before being mid-dispatch at the "
                     "kill), but")


def _kill_worker(run: DemoRun, target: str, named: str | None, hosting: str) -> None:
    """SIGKILL of ``target``. Its victims: ``named`` (the agent the line names) first, then
    every agent the demo saw busy on it; the report proves from the log which of them
    really died mid-task."""
    state = run.state
    service = next((s for s in run.services if s.args[2:3] == [target]), run.services[0])
    now = utc_now()
    for agent in state.agents.values():
        if agent.worker == target:
            run.fault_times.setdefault(agent.agent_id, []).append(now)
    busy = [a for a in state.agents if a != named and state.busy(a)
            and state.agents[a].worker == target]
    service.kill()
    run.killed_worker = target
    fleet = state.workers().get(target, 0)
    _record(run, Fault(WORKER_SIGKILL, f"SIGKILL {service.name} ({target}, hosting {hosting} "
                                       f"{fleet} busy fleet agents) at {_clock()}, "
                                       f"{state.steps_done}/{state.total_steps} steps done",
                       now, "worker_lost", (*([named] if named else []), *busy)))


async def _kill_busy_child(run: DemoRun, client: Client, options: DemoOptions) -> None:
    """``agent.kill`` of a sub-agent of the team that is working now on the live worker:
    the one with the fewest steps done, so that the kill lands before it finishes. Not a
    second SIGKILL: with two runtime managers only one is left after the first, and
    restarting the killed one and waiting for the group takes longer than the team's
    remaining work."""
    state = run.state
    leader = state.agents[TEAM_LEADER]

    def busy_child() -> str | None:
        busy = [c for c in leader.dispatched if state.busy(c)
                and state.agents[c].worker not in ("", run.killed_worker)]
        return min(busy, key=lambda c: state.agents[c].steps, default=None)

    await _until(lambda: busy_child() is not None or leader.tasks_done > 0, options.timeout_s,
                 poll_s=0.02)
    child = busy_child()
    if child is None:
        _record(run, Fault(AGENT_KILL, f"no busy sub-agent of {TEAM_LEADER} found on a live "
                                       f"worker: none killed", utc_now(), "killed", (),
                           injected=False))
        return
    await _kill_agent(run, client, child,
                      f"sub-agent {child} killed mid-task on {state.agents[child].worker} "
                      f"(ares agents kill; not a second SIGKILL: one runtime manager is left)")


async def _kill_busy_pipeline(run: DemoRun, client: Client) -> None:
    """``agent.kill`` of the busy pipeline agent with the most steps left, on a live
    worker: an agent of the killed worker that is not resurrected yet would get the kill
    only after its takeover, where it meets the next incarnation or nothing."""
    busy = [a for a in run.state.agents.values()
            if a.kind == "example.pipeline" and a.status == "running" and a.tasks_done == 0
            and a.worker not in ("", run.killed_worker)]
    if not busy:
        _record(run, Fault(AGENT_KILL, "no busy pipeline agent found on a live worker: none "
                                       "killed", utc_now(), "killed", (), injected=False))
        return
    victim = min(busy, key=lambda a: a.steps).agent_id
    await _kill_agent(run, client, victim, f"agent {victim} killed (ares agents kill)")


async def _kill_agent(run: DemoRun, client: Client, victim: str, text: str) -> None:
    """Send ``agent.kill`` and record the fault once the owner answered: a refusal (or no
    answer) is kept as the fault's, and the report counts it as a fault that missed."""
    at = utc_now()
    run.fault_times.setdefault(victim, []).append(at)
    refused = None
    try:
        await client.command("agent.kill", victim)
    except AresError as exc:  # refused (CommandRejectedError), or no owner answered
        refused = str(exc)
    _record(run, Fault(AGENT_KILL, f"{text} at {_clock()}", at, "killed", (victim,),
                       refused))


def _resurrected(run: DemoRun) -> bool:
    """No agent with work left is still seen on the killed worker."""
    return not any(a.worker == run.killed_worker and a.status != "done"
                   for a in run.state.agents.values())


def _record(run: DemoRun, fault: Fault) -> None:
    """A fault injected: kept for the report's proof, and shown in the live view."""
    run.faults.append(fault)
    run.state.faults.append(fault.text if fault.refused is None
                            else f"{fault.text}: REFUSED ({fault.refused})")


async def _watch(subscription: Subscription, state: FleetState,
                 changed: Callable[[], None]) -> None:
    async for event in subscription:
        state.observe(event)
        changed()


async def _until(condition: Callable[[], bool], timeout_s: float,
                 poll_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demo did not get there within {timeout_s:.0f}s")
        await asyncio.sleep(poll_s)


async def _until_members(run: DemoRun, count: int, timeout_s: float = 120) -> None:
    """Both runtime managers in the group and the group stable: agents start on the
    partitions they will keep (no rebalance moves them mid-demo)."""
    settings = run.settings

    def managers_alive() -> None:
        exited = [s for s in run.services if not s.alive]
        if exited:
            raise AresError("exited while starting: " + ", ".join(
                f"{s.name} (log: {s.log})" for s in exited))

    admin = await connect(
        lambda: AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap,
                                    **settings.kafka_options()),
        what="waiting for the runtime managers",
        settings=settings, timeout_s=timeout_s)
    try:
        await until_group_settled(admin, runtime_group(settings), count, settings=settings,
                                  timeout_s=timeout_s, check=managers_alive)
    finally:
        await admin.close()


async def _until_served(client: Client) -> None:
    """The first command an owner answers (even with a refusal): the runtime is up."""
    deadline = time.monotonic() + 120
    while True:
        try:
            await client.command("snapshot.request", "demo-ping", timeout_s=3)
            return
        except CommandRejectedError:
            return  # "no agent demo-ping": an owner answered
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


async def _report(run: DemoRun, options: DemoOptions, ledger: Path) -> DemoReport:
    store = await KafkaEventStore.open(run.settings, owned=[], topic=run.plan.name(EVENTS))
    try:
        streams: dict[str, list[Event]] = {a: [] for a in run.state.agents}
        async for event in store.read_all():
            if event.stream_id in streams:
                streams[event.stream_id].append(event)
    finally:
        await store.close()
    return build_report(
        streams, list(evidence.read_lines(ledger / evidence.LLM_CALLS)),
        list(evidence.read_lines(ledger / evidence.SIDE_EFFECTS)),
        emails_expected=run.emails_expected, fault_times=run.fault_times,
        faults=run.faults, team=(TEAM_LEADER, CALM_LEADER, TEAM_SUBTASKS))


def _service_env(settings: Settings, options: DemoOptions, ledger: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "ARES_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ARES_TOPIC_PREFIX": settings.topic_prefix,
        "ARES_TOPIC_PARTITIONS": str(options.partitions),
        evidence.LEDGER_DIR_ENV: str(ledger),
        "ARES_HTTP_PORT": "0",
        "ARES_LOG_LEVEL": "info",
    })
    return env


def _clock() -> str:
    return datetime.now().strftime("%H:%M:%S")
