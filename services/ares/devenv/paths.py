"""Where the dev environment keeps its data, logs and cached jars."""

from __future__ import annotations

import os
from pathlib import Path


def is_root() -> bool:
    return os.geteuid() == 0


def dev_home() -> Path:
    """Data and logs of the local broker and database (``ARES_DEV_HOME`` overrides).

    As root the default lives under /var/lib so that the ``postgres`` user, which runs the
    database, can reach its data directory (root's home is not traversable by others).
    """
    if override := os.environ.get("ARES_DEV_HOME"):
        return Path(override).expanduser().resolve()
    if is_root():
        return Path("/var/lib/ares-mesh/dev")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ares-mesh" / "dev"


def cache_dir() -> Path:
    """Cached broker jars (``ARES_CACHE_DIR`` overrides); Maven's own cache stays in ~/.m2."""
    if override := os.environ.get("ARES_CACHE_DIR"):
        return Path(override).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ares-mesh"
