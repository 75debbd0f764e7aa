"""The partition index: offsets per version, facts of unsummarised events, trims."""

from __future__ import annotations

from ares.compactor.index import PartitionIndex
from tests.unit.compaction.chains import agent_stream, interleave


def test_the_index_maps_versions_to_offsets_and_keeps_facts() -> None:
    index, offsets = interleave({"a": agent_stream("a", 10), "b": agent_stream("b", 5)})
    a = index.streams["a"]
    assert (a.first_version, a.head_version) == (1, 10)
    assert a.offset_of(7) == offsets[("a", 7)]
    assert a.first_offset_after(3) == offsets[("a", 4)]
    assert a.first_offset_after(10) is None
    assert a.kind == "test.counter"
    assert [f.version for f in a.facts_between(3, 5)] == [3, 4, 5]
    a.forget_facts_through(4)
    assert a.facts[0].version == 5


def test_a_trim_drops_what_left_the_log() -> None:
    index, offsets = interleave({"a": agent_stream("a", 10), "b": agent_stream("b", 5)})
    index.forget_before(offsets[("b", 5)] + 1)
    assert "b" not in index.streams
    a = index.streams["a"]
    assert a.first_version == 6
    assert a.first_offset == offsets[("a", 6)]
    assert a.offset_of(5) is None
    assert a.first_offset_after(2) == offsets[("a", 6)]


def test_summarised_versions_keep_no_facts_and_gaps_break_a_stream() -> None:
    events = agent_stream("a", 10)
    index = PartitionIndex("ares.events", 0)
    index.summarised = {"a": 6}
    for offset, event in enumerate(events[:8]):
        index.observe(offset, event)
    a = index.streams["a"]
    assert [f.version for f in a.facts] == [7, 8]
    index.observe(8, events[9])  # version 10 after 8: a gap
    assert a.broken is not None
    assert "gap" in a.broken
    assert a.head_version == 8
    index.observe(9, events[8])  # version 9 still continues the chain it has
    assert a.head_version == 9
