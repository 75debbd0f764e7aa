"""The fault schedule is a pure function of its seed: replayable, covering every kind."""

from __future__ import annotations

import pytest

from ares.chaos.faults import BROKER, CLUSTER, DURATIONS, FaultKind, Targets, by_kind, schedule

TARGETS = Targets(services=["runtime-manager-1", "runtime-manager-2", "health-checker"],
                  proxied=["runtime-manager-1", "runtime-manager-2"], broker=True,
                  postgres=True)
ON_CLUSTER = Targets(services=TARGETS.services, proxied=TARGETS.proxied, broker=True,
                     postgres=True, brokers=3)


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert schedule(42, 60, 150, TARGETS) == schedule(42, 60, 150, TARGETS)
    assert schedule(42, 60, 150, TARGETS) != schedule(43, 60, 150, TARGETS)


def test_every_kind_is_drawn_when_the_count_allows() -> None:
    one_broker = set(FaultKind) - set(CLUSTER)
    faults = schedule(1, 7, 30, TARGETS)
    assert {f.kind for f in faults} == one_broker
    counts = by_kind(schedule(1, 50, 120, TARGETS))
    assert set(counts) == {str(k) for k in FaultKind}  # stable JSON keys
    assert sum(counts.values()) == 50
    assert {k for k, n in counts.items() if n > 0} == {str(k) for k in one_broker}


def test_a_cluster_gets_its_own_broker_faults_instead_of_broker_kill() -> None:
    kinds = set(FaultKind) - {FaultKind.BROKER_KILL}
    assert {f.kind for f in schedule(5, 11, 30, ON_CLUSTER)} == kinds
    for fault in schedule(5, 300, 100, ON_CLUSTER):
        if fault.kind in (FaultKind.BROKER_PARTITION, FaultKind.BROKER_SLOW):
            assert fault.target in {"node-1", "node-2", "node-3"}
        elif fault.kind in CLUSTER:
            assert fault.target == "kafka"  # aimed when it strikes
        # Broker faults never overlap: they share one lock, every other fault its target's.
        assert fault.lock == ("kafka" if fault.kind in BROKER else fault.target)
        assert (fault.latency_ms > 0) == (fault.kind in (FaultKind.NET_LATENCY,
                                                         FaultKind.BROKER_SLOW))


def test_faults_fit_the_span_and_their_kind() -> None:
    faults = schedule(7, 200, 100, TARGETS)
    assert [f.index for f in faults] == list(range(1, 201))
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
    for fault in faults:
        assert 0 <= fault.at_s <= 100
        low, high = DURATIONS[fault.kind]
        assert low <= fault.duration_s <= high
        if fault.kind is FaultKind.BROKER_KILL:
            assert fault.target == "kafka"
        elif fault.kind is FaultKind.POSTGRES_STOP:
            assert fault.target == "postgres"
        elif fault.kind in (FaultKind.NET_LATENCY, FaultKind.NET_RESET,
                            FaultKind.NET_PARTITION):
            assert fault.target in TARGETS.proxied
        else:
            assert fault.target in TARGETS.services
        assert (fault.latency_ms > 0) == (fault.kind is FaultKind.NET_LATENCY)


def test_only_the_kinds_the_targets_allow() -> None:
    bare = Targets(services=["runtime-manager-1"], proxied=[], broker=False, postgres=False)
    assert {f.kind for f in schedule(3, 30, 60, bare)} == {FaultKind.SIGKILL,
                                                            FaultKind.SIGSTOP}
    assert schedule(3, 0, 60, bare) == []


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="count"):
        schedule(1, -1, 10, TARGETS)
    with pytest.raises(ValueError, match="span"):
        schedule(1, 5, 0, TARGETS)
