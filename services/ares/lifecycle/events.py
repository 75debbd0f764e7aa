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

# Teams (JSON payloads; docs/sdk.md "Teams"). On the parent's stream: the SDK appends
# delegation.dispatched when a handler delegates (the child's agent.start and task.assign go
# out in the same transaction); the runtime manager appends delegation.stopped when the
# parent's stop stops its children. On the child's stream: the runtime manager appends
# task.delegated after a delegated task.assigned (the link back to the parent), and
# delegation.reported once the child's outcome is on its way to the parent (an
# agent.signal in the same transaction).
DELEGATION_DISPATCHED = "delegation.dispatched"
DELEGATION_STOPPED = "delegation.stopped"
TASK_DELEGATED = "task.delegated"
DELEGATION_REPORTED = "delegation.reported"

LIFECYCLE_TYPES = frozenset({AGENT_STARTED, AGENT_STOPPED, AGENT_DEAD, AGENT_RESURRECTING,
                             AGENT_RESURRECTED, AGENT_QUARANTINED, AGENT_RESUMED})
TASK_TYPES = frozenset({TASK_ASSIGNED, TASK_COMPLETED, TASK_FAILED})
WAIT_TYPES = frozenset({SIGNAL_RECEIVED, WAIT_STARTED, WAIT_COMPLETED})
DELEGATION_TYPES = frozenset({DELEGATION_DISPATCHED, DELEGATION_STOPPED, TASK_DELEGATED,
                              DELEGATION_REPORTED})
