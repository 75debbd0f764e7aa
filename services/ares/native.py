"""The append path's modules compiled to C by mypyc, and whether this process runs them so.

Sealing and staging an append is CPython bytecode end to end (varints, canonical JSON,
hash chain, group-commit bookkeeping): about a third of the CPU a fleet of agents spends
per durable append. mypyc compiles these modules, unchanged and type-annotated as they are,
into C extensions that run the same code at half that cost (docs/development.md). The
source stays the only truth: without a C compiler, or with ``ARES_PURE_PYTHON=1`` at build
time, the same modules run as Python, with the same behaviour.

``ARES_PURE_PYTHON=1`` means the same at run time: the modules are then imported from their
source even where a build compiled them (``run_from_source``, installed by ``ares``'s
``__init__``), to compare the two or to rule the compiled build out of a problem.

One trap comes with compiled modules built in place (an editable install): Python imports
the extension before the ``.py`` next to it, so an edit to the source does nothing until
the next build. Every build records the SHA-256 of each source it compiled
(``_native_build.json`` in the package, written by ``setup.py``); a compiled module whose
source no longer has that hash, or that no build recorded, is *stale*. ``make`` rebuilds
them, the test suite refuses to run with them, and ``ares --version`` names them. (File
times cannot tell: installing a wheel gives every file the time of the install.)

Standard library only: ``setup.py`` reads ``NATIVE_MODULES`` from this file before any
dependency is installed.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# Compiled together (one shared library: calls between them are C calls).
NATIVE_MODULES: tuple[str, ...] = (
    "ares.events.wire.envelope",
    "ares.events.wire.canonical",
    "ares.events.chain",
    "ares.events.wire.codec",
    "ares.events.writer",
    "ares.events.kafka.batch_future",
    "ares.events.kafka.partition_writer",
)

_SERVICES = Path(__file__).resolve().parent.parent  # the directory that holds ``ares``
# Written by setup.py beside this module: {module name: SHA-256 of the source compiled}.
BUILD_RECORD = "_native_build.json"


def source_hash(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``NATIVE_MODULES`` as their ``.py`` source, ahead of any compiled file."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in NATIVE_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = Path(directory) / f"{leaf}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


_SOURCE_FINDER = _SourceFinder()


def run_from_source() -> None:
    """Import ``NATIVE_MODULES`` from source from now on (those not imported yet)."""
    if _SOURCE_FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _SOURCE_FINDER)


def source_paths(root: Path = _SERVICES) -> list[Path]:
    """The ``.py`` files of ``NATIVE_MODULES`` under ``root`` (what mypyc compiles)."""
    return [root.joinpath(*name.split(".")).with_suffix(".py") for name in NATIVE_MODULES]


@dataclass(frozen=True, slots=True)
class ModuleBuild:
    """How one module of ``NATIVE_MODULES`` is found by the import system."""

    name: str
    origin: Path | None  # what ``import`` loads
    source: Path | None  # the ``.py`` beside it
    built_from: str | None = None  # the SHA-256 of the source the build compiled

    @property
    def compiled(self) -> bool:
        return self.origin is not None and self.origin.name.endswith(
            tuple(importlib.machinery.EXTENSION_SUFFIXES))

    @property
    def stale(self) -> bool:
        """Compiled, but not from the source beside it (changed since, or unrecorded)."""
        if not self.compiled or self.source is None:
            return False
        try:
            return self.built_from != source_hash(self.source)
        except OSError:
            return True


def read_build_record(package_dir: Path) -> dict[str, str]:
    try:
        record = json.loads((package_dir / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}


def builds() -> list[ModuleBuild]:
    """Where each native module would be imported from, without importing it."""
    record = read_build_record(Path(__file__).resolve().parent)
    found: list[ModuleBuild] = []
    for name in NATIVE_MODULES:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        source = origin.parent / f"{name.rpartition('.')[2]}.py" if origin else None
        found.append(ModuleBuild(name, origin, source if source and source.exists() else None,
                                 record.get(name)))
    return found


def _stale_names(found: list[ModuleBuild]) -> list[str]:
    return [b.name for b in found if b.stale]


def problem(*, expect_compiled: bool) -> str | None:
    """Why this process must not be trusted to run (tests, benchmarks), or None.

    Stale modules always are a problem; pure-Python ones only when ``expect_compiled``
    (``make`` sets ``ARES_EXPECT_NATIVE`` unless ``ARES_PURE_PYTHON`` is set).
    """
    found = builds()
    if old := _stale_names(found):
        return (f"compiled modules not built from their current source: {', '.join(old)}. "
                "Python imports the compiled one, so the edit is not running: rebuild with "
                "`make native` (or delete the .so files to run the source)")
    pure = [b.name for b in found if not b.compiled]
    if expect_compiled and pure:
        return (f"not compiled: {', '.join(pure)}. The build skipped them (is a C compiler "
                "installed? see `make native`); set ARES_PURE_PYTHON=1 to test the pure "
                "Python build on purpose")
    return None


def summary() -> str:
    """One line for ``ares --version``: compiled, pure Python, or stale."""
    found = builds()
    if old := _stale_names(found):
        return (f"append path: STALE compiled modules ({', '.join(old)}): their source "
                "changed after the build; rebuild with `make native`")
    count = sum(b.compiled for b in found)
    if count == len(found):
        return f"append path: compiled (mypyc, {count} of {count} modules)"
    if count == 0:
        return "append path: pure Python (no compiled modules)"
    return f"append path: partly compiled ({count} of {len(found)} modules)"


def main(argv: list[str]) -> int:
    """``python services/ares/native.py``: the sources to compile (the Makefile's list);
    ``python -m ares.native --check``: exit 1, saying why, unless every module is compiled
    and fresh (the image build)."""
    if argv == ["--check"]:
        found = problem(expect_compiled=True)
        sys.stdout.write(f"{found or summary()}\n")
        return 1 if found else 0
    if argv:
        sys.stderr.write("usage: native.py [--check]\n")
        return 2
    sys.stdout.write("\n".join(str(p) for p in source_paths()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
