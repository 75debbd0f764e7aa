"""``make_event`` (in the codec), the hot paths' Event constructor, builds exactly what
``Event(...)`` does."""

from __future__ import annotations

import copy
import inspect
import pickle
from dataclasses import FrozenInstanceError, fields

import pytest

from ares.events.model import Event, EventSlots, utc_now
from ares.events.wire.codec import make_event


def test_make_event_takes_every_field_in_order() -> None:
    # A field added to Event must be added to make_event, or its slot stays unset.
    assert list(inspect.signature(make_event).parameters) == [f.name for f in fields(Event)]


def test_make_event_equals_the_dataclass_constructor() -> None:
    now = utc_now()
    values = ("id-1", "agent-1", "task.assigned", "m", 3, now, {"a": [1, 2]}, {"k": "v"},
              "0" * 64, "f" * 64)
    made = make_event(*values, wire_body=b"\x01\x02")
    built = Event(*values)
    assert made == built
    assert repr(made) == repr(built)
    assert hash(made.id) == hash(built.id)
    assert made.wire_body == b"\x01\x02"
    assert make_event(*values).wire_body is None
    assert type(made) is Event


def test_a_made_event_is_an_ordinary_frozen_event() -> None:
    # make_event fills an EventSlots and switches its class: the result must behave like
    # any Event (frozen, copyable, picklable), and the two layouts must stay the same.
    assert EventSlots.__slots__ == Event.__slots__
    made = make_event("id-1", "agent-1", "task.assigned", "m", 1, utc_now(), {"a": 1}, {},
                      "0" * 64, "f" * 64)
    with pytest.raises(FrozenInstanceError):
        made.version = 2  # type: ignore[misc]
    assert copy.copy(made) == made
    assert pickle.loads(pickle.dumps(made)) == made
