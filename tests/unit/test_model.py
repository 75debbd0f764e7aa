"""``event_from_fields`` (in the codec), the hot paths' Event constructor, builds exactly
what ``Event(...)`` does; ``writer.named_tuple_of`` exactly what a named tuple's class does."""

from __future__ import annotations

import copy
import inspect
import pickle
from dataclasses import FrozenInstanceError, fields

import pytest

from ares.events import writer
from ares.events.model import Event, StreamHead, utc_now
from ares.events.wire import codec
from ares.events.wire.codec import event_from_fields


def test_event_from_fields_takes_every_field_in_order() -> None:
    # A field added to Event must be added to event_from_fields, or its slot stays unset.
    assert list(inspect.signature(event_from_fields).parameters) == [
        f.name for f in fields(Event)]


def test_event_from_fields_equals_the_dataclass_constructor() -> None:
    now = utc_now()
    values = ("id-1", "agent-1", "task.assigned", "m", 3, now, {"a": [1, 2]}, {"k": "v"},
              "0" * 64, "f" * 64)
    made = event_from_fields(*values, wire_body=b"\x01\x02")
    built = Event(*values)
    assert made == built
    assert repr(made) == repr(built)
    assert hash(made.id) == hash(built.id)
    assert made.wire_body == b"\x01\x02"
    assert event_from_fields(*values).wire_body is None
    assert type(made) is Event


def test_a_made_event_is_an_ordinary_frozen_event() -> None:
    # event_from_fields fills a twin of Event's slots and switches its class: the result
    # must behave like any Event (frozen, copyable, picklable), and the layouts must match.
    assert codec._EVENT_SLOTS.__slots__ == Event.__slots__
    assert codec._EVENT_SLOTS.__bases__ == Event.__bases__ == (object,)
    made = event_from_fields("id-1", "agent-1", "task.assigned", "m", 1, utc_now(), {"a": 1},
                             {}, "0" * 64, "f" * 64)
    with pytest.raises(FrozenInstanceError):
        made.version = 2  # type: ignore[misc]
    assert copy.copy(made) == made
    assert pickle.loads(pickle.dumps(made)) == made


def test_named_tuple_of_equals_the_class_call() -> None:
    head = writer.named_tuple_of(StreamHead, (3, "f" * 64))
    assert head == StreamHead(3, "f" * 64)
    assert type(head) is StreamHead
    assert (head.version, head.hash) == (3, "f" * 64)
    plan = writer.named_tuple_of(writer.AppendPlan, ("s", (), 2, ()))
    assert plan == writer.AppendPlan("s", (), 2)
    assert type(plan) is writer.AppendPlan
    assert plan.is_noop

