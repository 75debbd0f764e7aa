"""A record outside Kafka of what really ran: JSON lines, fsynced one by one.

When ``ARES_EXAMPLE_LEDGER_DIR`` is set, the example agents append every REAL LLM execution
to ``llm_calls.jsonl`` and every REAL e-mail to ``side_effects.jsonl``. Workers are killed
with SIGKILL, so each line is one ``O_APPEND`` write followed by ``fsync``: a line is either
on disk whole or not at all, and processes appending concurrently never interleave.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ares.agents.errors import AgentConfigError
from ares.agents.tools import Reconciled

LEDGER_DIR_ENV = "ARES_EXAMPLE_LEDGER_DIR"
LLM_CALLS = "llm_calls.jsonl"
SIDE_EFFECTS = "side_effects.jsonl"


def ledger_dir(env: Mapping[str, str] | None = None) -> Path | None:
    value = (os.environ if env is None else env).get(LEDGER_DIR_ENV)
    return Path(value) if value else None


def append_line(path: Path, record: Mapping[str, Any]) -> None:
    """One JSON line, durably (blocking: call through ``asyncio.to_thread``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


async def record(path: Path, entry: Mapping[str, Any]) -> None:
    await asyncio.to_thread(append_line, path, entry)


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a ledger file; a torn last line (killed mid-write) is skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def email_sent(idempotency_key: str) -> Reconciled:
    """The reconcile hook of the examples' ``send_email``: was the e-mail with this key
    sent? The side-effects ledger is the mail server's log."""
    directory = ledger_dir()
    if directory is None:
        return Reconciled.unknown("no ARES_EXAMPLE_LEDGER_DIR: no record of sent e-mails")
    for line in read_lines(directory / SIDE_EFFECTS):
        if line.get("key") == idempotency_key:
            return Reconciled.DONE({"sent": True, "to": line.get("to"),
                                    "message_id": idempotency_key[:16]})
    return Reconciled.NOT_DONE


async def send_email(agent_id: str, to: str, subject: str, task_id: str, incarnation: int,
                     idempotency_key: str) -> dict[str, Any]:
    """The examples' e-mail, as a mail server would see it: a line of the side-effects
    ledger (when there is one). A real mailer would tag the message with the key."""
    directory = ledger_dir()
    if directory is not None:
        await record(directory / SIDE_EFFECTS, {
            "agent_id": agent_id, "key": idempotency_key, "to": to, "subject": subject,
            "incarnation": incarnation, "task_id": task_id})
    return {"sent": True, "to": to, "message_id": idempotency_key[:16]}


def positive_number(config: Mapping[str, Any], key: str, default: float) -> float:
    """A positive number setting of an example's config, or ``AgentConfigError``."""
    value = config.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise AgentConfigError(f"{key!r} must be a positive number, got {value!r}")
    return float(value)
