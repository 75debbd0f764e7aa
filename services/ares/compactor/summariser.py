"""The rule-based summariser: pure functions from events to a ``Summary``, no LLM call.

A pass may hold the unsummarised events of thousands of streams, so it keeps an
``EventFact`` per event (the few fields a summary reads) instead of the event itself.
``summarise`` folds a contiguous run of facts into one ``Summary``; ``merge`` joins two
adjacent summaries (the cap on summaries per stream). Both are deterministic: the same
events always give the same summary, byte for byte, which is what makes a rewrite after a
restart harmless.

The text reads::

    Agent agent-1 ran 3 task(s) [task-42, task-43, task-44], called 5 tool(s)
    [search x2, book, weather, email], made 4 LLM call(s) (1830 tokens), emitted 23 events
    over 3m12s, bound to user request: "Plan a trip to Tokyo", result: completed
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ares.events.model import Event
from ares.lifecycle import transitions as tr
from ares.summaries.record import Summary, SummaryFacts, to_micros

MAX_TASK_IDS = 50  # task ids kept in the facts; the count stays exact
SHOWN_TASKS = 5
SHOWN_TOOLS = 8
REQUEST_CHARS = 120
# Keys of a task input that hold the user's request, in order of preference.
REQUEST_KEYS = ("request", "prompt", "text", "query", "question", "message", "goal", "task")

_TASKS = (tr.TaskAssigned, *tr.TASK_ENDS)
TransitionKind: TypeAlias = type[tr.Transition]  # (a name: EventFact.type shadows type)
_WORK_TYPES = frozenset({"step.completed", "llm.call", "tool.call.intent",
                         "tool.call.completed", "tool.call.failed"})


@dataclass(frozen=True, slots=True)
class EventFact:
    """What a summary needs of one event, and where the event is."""

    version: int
    offset: int
    hash: str
    prev_hash: str
    timestamp_us: int
    type: str
    task_id: str | None = None
    tool: str | None = None  # tool.call.intent (or an outcome without its intent)
    call_id: str | None = None
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    request: str | None = None  # task.assigned: the user request of its input
    # What the event is to the agent's lifecycle (``ares.lifecycle.transitions``): its
    # class only, the few fields a summary needs are copied above.
    transition: TransitionKind | None = None

    @classmethod
    def of(cls, event: Event, offset: int) -> EventFact:
        p = event.payload
        kind = event.type
        transition = tr.read(event)
        task_id = tool = call_id = model = request = None
        prompt = completion = 0
        if isinstance(transition, _TASKS):
            task_id = transition.task_id
            if isinstance(transition, tr.TaskAssigned):
                request = user_request(transition.input_json)
        elif kind in _WORK_TYPES:
            task_id = _str(p.get("task_id"))
        if kind.startswith("tool.call."):
            tool, call_id = _str(p.get("tool")), _str(p.get("call_id"))
        elif kind == "llm.call":
            model = _str(p.get("model"))
            prompt, completion = _int(p.get("prompt_tokens")), _int(p.get("completion_tokens"))
        return cls(event.version, offset, event.hash, event.prev_hash,
                   to_micros(event.timestamp), kind, task_id, tool, call_id, model, prompt,
                   completion, request, None if transition is None else type(transition))


def user_request(input_json: Any) -> str | None:
    """The user request a task was bound to: its input's text, cut to one short line."""
    if not isinstance(input_json, str):
        return None
    try:
        value = json.loads(input_json)
    except ValueError:
        return None
    if isinstance(value, Mapping):
        value = next((value[k] for k in REQUEST_KEYS
                      if isinstance(value.get(k), str) and value[k].strip()), None)
    if not isinstance(value, str) or not value.strip():
        return None
    line = " ".join(value.split())
    return line if len(line) <= REQUEST_CHARS else line[:REQUEST_CHARS - 3] + "..."


class FactsBuilder:
    """Folds facts, in version order, into ``SummaryFacts``."""

    def __init__(self) -> None:
        self.count = 0
        self.tasks: dict[str, None] = {}
        self.completed = self.failed = 0
        self.tools: Counter[str] = Counter()
        self.intents: set[str] = set()
        self.llm = self.prompt = self.completion = 0
        self.models: dict[str, None] = {}
        self.deaths = self.resurrections = self.snapshots = 0
        self.types: Counter[str] = Counter()
        self.request: str | None = None
        self.task_outcome: str | None = None
        self.life: str | None = None  # stopped | quarantined | dead, until a restart
        self.first_us = self.last_us = 0

    def add(self, fact: EventFact) -> None:
        if self.count == 0:
            self.first_us = fact.timestamp_us
        self.count += 1
        self.last_us = max(self.last_us, fact.timestamp_us)
        self.types[fact.type] += 1
        if fact.transition is None:
            _WORK_RULES.get(fact.type, _work)(self, fact)
            return
        if fact.task_id is not None and fact.transition in _TASKS:
            self.tasks.setdefault(fact.task_id)
        rule = _LIFE_RULES.get(fact.transition)
        if rule is not None:
            rule(self, fact)

    def build(self) -> SummaryFacts:
        outcome = self.life or self.task_outcome or "idle"
        tasks = tuple(self.tasks)
        return SummaryFacts(
            event_count=self.count, tasks=tasks[:MAX_TASK_IDS], task_count=len(tasks),
            tasks_completed=self.completed, tasks_failed=self.failed,
            tool_calls=dict(sorted(self.tools.items())), llm_calls=self.llm,
            prompt_tokens=self.prompt, completion_tokens=self.completion,
            models=tuple(self.models), deaths=self.deaths, resurrections=self.resurrections,
            snapshots=self.snapshots, types=dict(sorted(self.types.items())),
            request=self.request, outcome=outcome, first_at_us=self.first_us,
            last_at_us=self.last_us)


def _work(b: FactsBuilder, fact: EventFact) -> None:
    if fact.type in _WORK_TYPES and b.task_outcome is None:
        b.task_outcome = "in_progress"  # the range begins inside a task


def _assigned(b: FactsBuilder, fact: EventFact) -> None:
    b.task_outcome = "in_progress"
    if b.request is None:
        b.request = fact.request


def _completed(b: FactsBuilder, fact: EventFact) -> None:
    b.completed += 1
    b.task_outcome = "completed"


def _failed(b: FactsBuilder, fact: EventFact) -> None:
    b.failed += 1
    b.task_outcome = "failed"


def _intent(b: FactsBuilder, fact: EventFact) -> None:
    _work(b, fact)
    b.tools[fact.tool or "unknown"] += 1
    if fact.call_id is not None:
        b.intents.add(fact.call_id)


def _tool_outcome(b: FactsBuilder, fact: EventFact) -> None:
    _work(b, fact)
    if fact.call_id is None or fact.call_id not in b.intents:
        b.tools[fact.tool or "unknown"] += 1  # its intent lies before the range


def _llm(b: FactsBuilder, fact: EventFact) -> None:
    _work(b, fact)
    b.llm += 1
    b.prompt += fact.prompt_tokens
    b.completion += fact.completion_tokens
    if fact.model:
        b.models.setdefault(fact.model)


def _ended(b: FactsBuilder, fact: EventFact) -> None:
    # stopped | quarantined | dead: the status the lifecycle says the event leads to.
    status = None if fact.transition is None else fact.transition.status
    b.life = None if status is None else status.value
    if fact.transition is tr.Died:
        b.deaths += 1


def _restarted(b: FactsBuilder, fact: EventFact) -> None:
    b.life = None
    if fact.transition is tr.Resurrected:
        b.resurrections += 1


def _snapshot(b: FactsBuilder, fact: EventFact) -> None:
    b.snapshots += 1


_WORK_RULES = {
    "tool.call.intent": _intent, "tool.call.completed": _tool_outcome,
    "tool.call.failed": _tool_outcome, "llm.call": _llm,
}
# What each lifecycle transition adds to the facts (resurrecting, handed-off: nothing).
_LIFE_RULES: dict[TransitionKind, Callable[[FactsBuilder, EventFact], None]] = {
    tr.TaskAssigned: _assigned, tr.TaskCompleted: _completed, tr.TaskFailed: _failed,
    **dict.fromkeys(tr.ENDINGS, _ended), **dict.fromkeys(tr.RESTARTS, _restarted),
    tr.SnapshotTaken: _snapshot,
}


def summarise(stream_id: str, facts: Sequence[EventFact]) -> Summary:
    """One summary of ``facts``: consecutive versions of ``stream_id``, oldest first."""
    if not facts:
        raise ValueError("nothing to summarise")
    builder = FactsBuilder()
    previous: EventFact | None = None
    for fact in facts:
        if previous is not None and (fact.version != previous.version + 1
                                     or fact.prev_hash != previous.hash):
            raise ValueError(f"stream {stream_id!r}: version {fact.version} does not follow "
                             f"version {previous.version} in the chain")
        builder.add(fact)
        previous = fact
    first, last = facts[0], facts[-1]
    summary_facts = builder.build()
    return Summary(stream_id, first.version, last.version, first.offset, last.offset,
                   first.prev_hash, last.hash, summary_facts,
                   render_text(stream_id, summary_facts))


def summarise_events(stream_id: str, events: Iterable[Event],
                     offsets: Iterable[int] | None = None) -> Summary:
    """``summarise`` for events (offsets default to 0, 1, 2...: unit tests, tools)."""
    events = list(events)
    positions = list(offsets) if offsets is not None else list(range(len(events)))
    return summarise(stream_id, [EventFact.of(e, o)
                                 for e, o in zip(events, positions, strict=True)])


def merge(first: Summary, second: Summary) -> Summary:
    """One summary for two adjacent ones of the same stream (``first`` ends where
    ``second`` begins, chain-wise)."""
    if (first.stream_id != second.stream_id or second.from_version != first.to_version + 1
            or second.prev_hash != first.anchor_hash):
        raise ValueError(f"summaries {first.key} and {second.key} are not adjacent links of "
                         "one chain")
    a, b = first.facts, second.facts
    tasks = dict.fromkeys((*a.tasks, *b.tasks))
    overlap = len(set(a.tasks) & set(b.tasks))
    tools = Counter(a.tool_calls)
    tools.update(b.tool_calls)
    types = Counter(a.types)
    types.update(b.types)
    facts = SummaryFacts(
        event_count=a.event_count + b.event_count, tasks=tuple(tasks)[:MAX_TASK_IDS],
        task_count=a.task_count + b.task_count - overlap,
        tasks_completed=a.tasks_completed + b.tasks_completed,
        tasks_failed=a.tasks_failed + b.tasks_failed, tool_calls=dict(sorted(tools.items())),
        llm_calls=a.llm_calls + b.llm_calls, prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        models=tuple(dict.fromkeys((*a.models, *b.models))), deaths=a.deaths + b.deaths,
        resurrections=a.resurrections + b.resurrections, snapshots=a.snapshots + b.snapshots,
        types=dict(sorted(types.items())), request=a.request or b.request,
        outcome=b.outcome if b.outcome != "idle" else a.outcome,
        first_at_us=min(a.first_at_us, b.first_at_us),
        last_at_us=max(a.last_at_us, b.last_at_us))
    return Summary(first.stream_id, first.from_version, second.to_version, first.from_offset,
                   second.to_offset, first.prev_hash, second.anchor_hash, facts,
                   render_text(first.stream_id, facts))


def merge_oldest(summaries: Sequence[Summary], limit: int) -> tuple[list[Summary],
                                                                     list[Summary]]:
    """Merge the oldest adjacent summaries until at most ``limit`` remain.

    ``summaries``: one stream's, in version order. Returns (the kept list, the replaced
    ones). Summaries that are not adjacent links (a gap in the coverage) are left alone.
    """
    kept = list(summaries)
    replaced: list[Summary] = []
    i = 0
    while len(kept) > limit and i < len(kept) - 1:
        first, second = kept[i], kept[i + 1]
        if second.from_version != first.to_version + 1 or second.prev_hash != first.anchor_hash:
            i += 1
            continue
        kept[i:i + 2] = [merge(first, second)]
        replaced.extend(s for s in (first, second) if s not in replaced)
    return kept, replaced


def render_text(stream_id: str, facts: SummaryFacts) -> str:
    parts = [f"Agent {stream_id} ran {facts.task_count} task(s)"
             + _listing(list(facts.tasks), facts.task_count, SHOWN_TASKS)]
    tools = [f"{name} x{n}" if n > 1 else name
             for name, n in sorted(facts.tool_calls.items(), key=lambda kv: (-kv[1], kv[0]))]
    parts.append(f"called {facts.tool_call_count} tool(s)"
                 + _listing(tools, len(tools), SHOWN_TOOLS))
    if facts.llm_calls:
        parts.append(f"made {facts.llm_calls} LLM call(s) ({facts.tokens} tokens)")
    parts.append(f"emitted {facts.event_count} events over {format_span(facts.span_s)}")
    if facts.request:
        parts.append(f"bound to user request: {json.dumps(facts.request, ensure_ascii=False)}")
    parts.append(f"result: {facts.outcome}")
    return ", ".join(parts)


def _listing(items: list[str], total: int, shown: int) -> str:
    if not items:
        return ""
    more = total - min(len(items), shown)
    return " [" + ", ".join(items[:shown]) + (f", +{more} more" if more > 0 else "") + "]"


def format_span(seconds: float) -> str:
    """3m12s, 2h05m, 1d03h; below a second in ms."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    total = int(seconds)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


__all__ = ["EventFact", "FactsBuilder", "format_span", "merge", "merge_oldest",
           "render_text", "summarise", "summarise_events", "user_request"]
