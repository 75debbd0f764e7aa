"""Tool effects, reconcile verdicts and the registry of reconcile hooks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, ClassVar


class Effect(StrEnum):
    """What re-running a tool call does, which decides how it is recorded and replayed.

    * ``IDEMPOTENT``: safe to repeat (a read, a PUT of the same value). Recorded after it
      ran, like a step; an interrupted call simply runs again.
    * ``KEYED``: the tool receives ``idempotency_key=`` — stable across re-runs — and the
      remote side deduplicates on it. The intent is recorded before the call; an
      interrupted call is re-executed with the same key.
    * ``AT_MOST_ONCE`` (default): the intent is durably recorded before the call; an
      interrupted call (intent, no outcome) is never re-executed blindly: ``reconcile``
      decides, or the task pauses in doubt until an operator resolves it.
    """

    IDEMPOTENT = "idempotent"
    KEYED = "keyed"
    AT_MOST_ONCE = "at_most_once"


class ReconcileStatus(Enum):
    DONE = "done"
    NOT_DONE = "not_done"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A reconcile hook's verdict on an interrupted call:
    ``Reconciled.DONE(result)``, ``Reconciled.NOT_DONE`` or ``Reconciled.UNKNOWN``."""

    status: ReconcileStatus
    result: Any = None
    reason: str = ""

    NOT_DONE: ClassVar[Reconciled]
    UNKNOWN: ClassVar[Reconciled]

    @staticmethod
    def DONE(result: Any = None) -> Reconciled:  # reads like the constants
        """The call happened; ``result`` is recorded as its outcome (JSON-able)."""
        return Reconciled(ReconcileStatus.DONE, result)

    @staticmethod
    def unknown(reason: str) -> Reconciled:
        return Reconciled(ReconcileStatus.UNKNOWN, reason=reason)


Reconciled.NOT_DONE = Reconciled(ReconcileStatus.NOT_DONE)
Reconciled.UNKNOWN = Reconciled(ReconcileStatus.UNKNOWN)

# reconcile(idempotency_key) -> Reconciled, sync or async.
Reconciler = Callable[[str], "Reconciled | Awaitable[Reconciled]"]


class ReconcileRegistry(Mapping[str, Reconciler]):
    """Reconcile hooks by tool name, for tools whose call site does not pass ``reconcile``
    (a deployment knows how to ask its mail server whether a message went out)."""

    def __init__(self, hooks: Mapping[str, Reconciler] | None = None) -> None:
        self._hooks: dict[str, Reconciler] = dict(hooks or {})

    def register(self, tool: str, hook: Reconciler) -> None:
        self._hooks[tool] = hook

    def __getitem__(self, tool: str) -> Reconciler:
        return self._hooks[tool]

    def __iter__(self) -> Iterator[str]:
        return iter(self._hooks)

    def __len__(self) -> int:
        return len(self._hooks)


@dataclass(frozen=True, slots=True)
class InDoubtCall:
    """A tool call the task is paused on: what the runtime puts in its alert."""

    task_id: str
    call_id: str
    tool: str
    idempotency_key: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "call_id": self.call_id, "tool": self.tool,
                "idempotency_key": self.idempotency_key, "reason": self.reason}
