"""The token ledger of a stream: what was paid, what was re-used, what was paid twice.

Pure, over events: ``ares agents status --json`` and the replay reader compute it from the
same stream, and it survives every restart because it is derived, not stored.

* spent: every ``llm.call`` is one paid call (its prompt and completion tokens).
* reused: every ``task.resumed`` states what a re-run took from the journal instead of
  paying again (appended with the re-run's first new record; see ``Context``).
* spent twice: two ``llm.call`` records with the same (task_id, name, occurrence) — a step
  paid again although its result was durable. Must be 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ares.agents import records as r
from ares.events.model import Event

CallKey = tuple[str | None, str, int]


@dataclass(frozen=True, slots=True)
class TokenLedger:
    spent_prompt: int = 0
    spent_completion: int = 0
    calls: int = 0
    reused_calls: int = 0
    reused_prompt: int = 0
    reused_completion: int = 0
    resumes: int = 0
    spent_twice: int = 0  # extra paid calls beyond the first for a (task, name, occurrence)
    spent_twice_tokens: int = 0
    twice: tuple[CallKey, ...] = field(default=())

    @property
    def spent_tokens(self) -> int:
        return self.spent_prompt + self.spent_completion

    @property
    def reused_tokens(self) -> int:
        return self.reused_prompt + self.reused_completion

    def to_json(self) -> dict[str, Any]:
        return {"spent_prompt": self.spent_prompt, "spent_completion": self.spent_completion,
                "spent_tokens": self.spent_tokens, "calls": self.calls,
                "reused_calls": self.reused_calls, "reused_prompt": self.reused_prompt,
                "reused_completion": self.reused_completion,
                "reused_tokens": self.reused_tokens, "resumes": self.resumes,
                "spent_twice": self.spent_twice, "spent_twice_tokens": self.spent_twice_tokens,
                "twice": [list(k) for k in self.twice]}


def token_ledger(events: Iterable[Event], task_id: str | None = None) -> TokenLedger:
    """The ledger of a stream's events (of one task when ``task_id`` is given)."""
    prompt = completion = calls = 0
    reused_calls = reused_prompt = reused_completion = resumes = 0
    twice_calls = twice_tokens = 0
    seen: set[CallKey] = set()
    twice: list[CallKey] = []
    for event in events:
        p = event.payload
        if task_id is not None and p.get("task_id") != task_id:
            continue
        if event.type == r.LLM_CALL:
            tokens = (r.int_field(p, "prompt_tokens"), r.int_field(p, "completion_tokens"))
            prompt += tokens[0]
            completion += tokens[1]
            calls += 1
            key: CallKey = (p.get("task_id"), str(p.get("name")), r.int_field(p, "occurrence"))
            if key in seen:
                twice_calls += 1
                twice_tokens += sum(tokens)
                if key not in twice:
                    twice.append(key)
            seen.add(key)
        elif event.type == r.TASK_RESUMED:
            resumes += 1
            reused_calls += r.int_field(p, "reused_llm_calls")
            reused_prompt += r.int_field(p, "reused_prompt_tokens")
            reused_completion += r.int_field(p, "reused_completion_tokens")
    return TokenLedger(prompt, completion, calls, reused_calls, reused_prompt,
                       reused_completion, resumes, twice_calls, twice_tokens, tuple(twice))
