"""The dev broker's KRaft cluster id: valid for ``kafka-storage format -t``."""

from __future__ import annotations

import base64

from ares.devenv.kafka import _cluster_id


def test_cluster_ids_are_16_byte_base64url_never_starting_with_a_dash() -> None:
    # a dash-first id comes once in 64 draws: 4,000 draws all but prove it is avoided
    ids = [_cluster_id() for _ in range(4000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
