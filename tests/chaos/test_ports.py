"""A chaos cluster's ports are distinct: two listeners on one port stop the broker."""

from __future__ import annotations

from ares.chaos.toxiproxy import free_port


def test_free_ports_are_never_handed_out_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
