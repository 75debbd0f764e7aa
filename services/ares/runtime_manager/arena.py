"""The arena: ``worker.crash``, a runtime manager exiting abruptly on request, so that a
dashboard (its Crash worker button) shows a real failover rather than a graceful hand-off.

Off by default: only a runtime manager run with ``--arena`` (``ARES_ARENA=1``) honours it;
any other dead-letters it (``arena_disabled``) and answers REJECTED. The Helm chart's
production values refuse the setting.

**Addressing.** A command reaches the owner of its stream's partition, so a crash for worker
W must be keyed by a stream of a partition W owns. ``ares.arena.crash_stream`` picks one:
``worker:W``, or ``worker:W#n`` for the first ``n`` that hashes onto one of W's partitions
(``ares.arena.owned_partitions`` reads them from the runtime group's description; its
heartbeats say the same, one heartbeat record per partition). The payload names W again and the
owner honours the command only when it *is* W: after a rebalance moved that partition, the
new owner answers REJECTED and nothing crashes. Keying by a worker-level stream rather than
by an agent W hosts lets a worker hosting no agent be crashed too, and never touches an
agent's stream (the command appends nothing).

**Exactly once.** The exit happens after the owner's transaction that consumed the command
has committed (the reply, when one was asked for, is in it): the command is never read
again, so neither W restarted with the same id nor the next owner of the partition crashes
on a redelivery. A transaction that fails forgets the crash (the batch is redone, and the
command with it). Then ``os._exit``: no drain, no hand-off snapshot, no leaving the group; the
partitions move when W's session expires, and its agents are declared dead and resurrected
on another worker as after a SIGKILL.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from ares.arena import CRASH
from ares.commands.model import Command, InvalidCommandError, Reply, ReplyStatus

log = logging.getLogger(__name__)

# The exit status of a runtime manager crashed by the arena (EX_SOFTWARE): non-zero, and
# told apart from a signal's 128+n in a supervisor's log.
CRASH_EXIT_CODE = 70


class Arena:
    """The owner's side of ``worker.crash``: the verdict inside the transaction, the exit
    after its commit."""

    def __init__(self, worker_id: str, enabled: bool,
                 exit: Callable[[int], object] = os._exit) -> None:
        self.worker_id = worker_id
        self.enabled = enabled
        self._exit = exit
        self._pending: dict[int, Command] = {}  # partition -> the crash its open tx consumed

    @staticmethod
    def handles(command_type: str) -> bool:
        return command_type == CRASH

    def handle(self, command: Command, partition: int) -> Reply:
        """The verdict, inside the transaction; ``InvalidCommandError`` (dead-lettered) when
        the arena is off."""
        target = str(command.payload.get("worker_id") or "")
        if not self.enabled:
            raise InvalidCommandError(
                "arena_disabled", f"worker.crash for {target!r} refused by {self.worker_id!r}: "
                "the arena is off on this runtime manager (run it with --arena or "
                "ARES_ARENA=1; never in production)")
        if target != self.worker_id:
            return Reply(command.id, ReplyStatus.REJECTED, command.stream_id, message=(
                f"worker.crash for {target!r} reached {self.worker_id!r} (partition "
                f"{partition} moved?): nothing crashed"))
        self._pending[partition] = command
        log.warning("arena: worker.crash %s from %r accepted: %s exits once this "
                    "transaction commits", command.id, command.issuer, self.worker_id)
        return Reply(command.id, ReplyStatus.OK, command.stream_id,
                     message=f"worker {self.worker_id} exits now (arena)")

    def committed(self, partition: int) -> None:
        """The transaction of ``partition`` committed: exit if it consumed a crash."""
        command = self._pending.pop(partition, None)
        if command is None:
            return
        reason = str(command.payload.get("reason") or "")
        log.critical("arena: worker %s exits abruptly (os._exit(%d)) on worker.crash %s%s",
                     self.worker_id, CRASH_EXIT_CODE, command.id,
                     f": {reason}" if reason else "")
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(CRASH_EXIT_CODE)

    def forget(self, partition: int) -> None:
        """The transaction of ``partition`` did not commit: its crash is redone with it."""
        self._pending.pop(partition, None)
