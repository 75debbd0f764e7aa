"""``ares chaos --without KIND``: a kind left out of the schedule, still listed at 0."""

from __future__ import annotations

from click.testing import CliRunner

from ares.chaos.faults import CLUSTER, FaultKind, Targets, by_kind, schedule
from ares.cli.chaos import chaos

ONE_NODE = Targets(services=["runtime-manager-1", "health-checker"],
                   proxied=["runtime-manager-1"], broker=True, postgres=True)


def test_a_kind_left_out_is_never_drawn_and_still_listed() -> None:
    without = Targets(services=ONE_NODE.services, proxied=ONE_NODE.proxied, broker=True,
                      postgres=True, without=frozenset({FaultKind.BROKER_KILL}))
    faults = schedule(7, 200, 500, without)
    kinds = {f.kind for f in faults}
    assert kinds == set(FaultKind) - set(CLUSTER) - {FaultKind.BROKER_KILL}
    counts = by_kind(faults)
    assert counts[str(FaultKind.BROKER_KILL)] == 0
    assert set(counts) == {str(k) for k in FaultKind}
    assert FaultKind.BROKER_KILL in {f.kind for f in schedule(7, 200, 500, ONE_NODE)}


def test_an_unknown_kind_is_refused_with_the_valid_ones() -> None:
    result = CliRunner().invoke(chaos, ["--without", "broker_kil", "--faults", "1"])
    assert result.exit_code == 2
    assert "'broker_kil' is not one of" in result.output
    for kind in FaultKind:
        assert f"'{kind}'" in result.output
