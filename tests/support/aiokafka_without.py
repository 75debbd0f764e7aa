"""``python tests/support/aiokafka_without.py MODULE:CLASS.ATTRIBUTE ARES-ARGS...``: the ares
CLI on an aiokafka that lacks one attribute, as an upgrade that renamed it would leave it.

The attribute is deleted from the class before the CLI is imported, so the product code
carries no test hook: what runs is the real ``ares`` entry point.
"""

from __future__ import annotations

import importlib
import sys


def remove(spec: str) -> None:
    """Delete ``CLASS.ATTRIBUTE`` of ``MODULE`` (``aiokafka.x.y:Class.attr``)."""
    module, _, path = spec.partition(":")
    owner_name, _, attribute = path.rpartition(".")
    delattr(getattr(importlib.import_module(module), owner_name), attribute)


if __name__ == "__main__":
    remove(sys.argv[1])
    sys.argv = ["ares", *sys.argv[2:]]
    from ares.cli import main

    main()
