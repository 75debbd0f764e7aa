"""``make_event`` (in the codec), the hot paths' Event constructor, builds exactly what
``Event(...)`` does."""

from __future__ import annotations

import inspect
from dataclasses import fields

from ares.events.codec import make_event
from ares.events.model import Event, utc_now


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
