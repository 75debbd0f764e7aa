"""The agent lifecycle as a domain: pure, no I/O, no Kafka.

What every service reads of an agent's life, in one place:

    events       the lifecycle's event types, defined once
    transitions  what each event means, decided once: a typed Transition (Started, Died,
                 Resurrected, Quarantined, TaskAssigned...) and the Status it leads to
    state        AgentLifecycle and the one fold of an agent's transitions (status,
                 incarnation, restarts, the task queue); ``step`` reports each transition
    genealogy    every incarnation of an agent: parent, start, end, cause of death
    recovery     recovery plans and records, snapshot checks, state hashes, checkpoints
    verification the stream verifier a replay runs each event through
    backoff      the resurrection back-off policy (exponential, with jitter)

The runtime manager, health checker, compactor, replay reader, views and demo import these
modules; none of them imports a service. ``tests/unit/test_lifecycle_imports.py`` checks that
importing them loads no Kafka module.
"""
