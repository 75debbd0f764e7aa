"""The lifecycle's event types, defined once (``schemas/ares.v1.Event.avsc`` has their
payloads). Every fold of an agent's life reads these names, never its own literals."""

from __future__ import annotations

AGENT_STARTED = "agent.started"
AGENT_STOPPED = "agent.stopped"
AGENT_DEAD = "agent.dead"
AGENT_RESURRECTING = "agent.resurrecting"
AGENT_RESURRECTED = "agent.resurrected"
AGENT_QUARANTINED = "agent.quarantined"
# Not in EVENT_PAYLOADS: written with the JSON payload {"reason": str}.
AGENT_RESUMED = "agent.resumed"
# A graceful shutdown handed the agent to the next owner (no death, no restart counted).
AGENT_HANDED_OFF = "agent.handed_off"
TASK_ASSIGNED = "task.assigned"
TASK_COMPLETED = "task.completed"
TASK_FAILED = "task.failed"
SNAPSHOT_TAKEN = "snapshot.taken"
# Durable waits (JSON payloads; docs/sdk.md "Waiting"): the owner appends signal.received
# for an agent.signal command; the SDK appends wait.started when a handler begins to wait
# and wait.completed when the wait ends (a signal consumed, a timeout, a timer elapsed).
SIGNAL_RECEIVED = "signal.received"
WAIT_STARTED = "wait.started"
WAIT_COMPLETED = "wait.completed"

LIFECYCLE_TYPES = frozenset({AGENT_STARTED, AGENT_STOPPED, AGENT_DEAD, AGENT_RESURRECTING,
                             AGENT_RESURRECTED, AGENT_QUARANTINED, AGENT_RESUMED})
TASK_TYPES = frozenset({TASK_ASSIGNED, TASK_COMPLETED, TASK_FAILED})
WAIT_TYPES = frozenset({SIGNAL_RECEIVED, WAIT_STARTED, WAIT_COMPLETED})
