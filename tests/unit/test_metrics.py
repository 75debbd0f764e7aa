"""The append path's histogram exposes exactly what prometheus_client's Histogram would for
the same observations (bar the ``_created`` sample), and refuses buckets out of order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ares import metrics
from ares.metrics import HotPathHistogram

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in registry.collect()
            for s in family.samples if not s.name.endswith("_created")]


@given(st.lists(st.one_of(st.sampled_from(BUCKETS),  # exactly on a bound: "le" includes it
                          st.floats(min_value=0, max_value=60, allow_nan=False)),
                max_size=200))
def test_exposes_what_prometheus_clients_histogram_would(amounts: list[float]) -> None:
    ours_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    ours = HotPathHistogram("t_seconds", "doc", BUCKETS, registry=ours_registry)
    reference = Histogram("t_seconds", "doc", buckets=BUCKETS, registry=reference_registry)
    for amount in amounts:
        ours.observe(amount)
        reference.observe(amount)
    assert _samples(ours_registry) == _samples(reference_registry)  # same sums, same order
    text = generate_latest(ours_registry).decode()
    assert "# TYPE t_seconds histogram" in text
    assert f't_seconds_bucket{{le="+Inf"}} {float(len(amounts))}' in text
    # observe_each (the partition writer's, once per transaction) is observe in a loop.
    each_registry = CollectorRegistry()
    half = len(amounts) // 2
    each = HotPathHistogram("t_seconds", "doc", BUCKETS, registry=each_registry)
    each.observe_each(amounts[:half])
    each.observe_each(iter(amounts[half:]))
    assert _samples(each_registry) == _samples(reference_registry)


@pytest.mark.parametrize("buckets", [(), (0.5, 0.1), (0.1, 0.1, 1.0)])
def test_buckets_must_be_distinct_and_increasing(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="distinct and increasing"):
        HotPathHistogram("t_seconds", "doc", buckets, registry=None)


def test_the_append_latency_is_served_by_the_default_registry() -> None:
    assert isinstance(metrics.APPEND_LATENCY, HotPathHistogram)
    assert "# TYPE ares_append_latency_seconds histogram" in generate_latest().decode()
