"""Compiles the append path with mypyc; everything else about the package is pyproject.toml.

Why mypyc (a part of mypy, as well kept as the type checker we already run): it compiles
the modules as they are, type-annotated Python, so there is no second implementation to
keep equal to the first. Which modules, and why, is ``services/ares/native.py``.

* ``ARES_PURE_PYTHON=1``: build no extension (the modules run as Python).
* Without a working C compiler the extensions are skipped with a warning (they are
  ``optional``): an install never fails for want of them, it is only slower.
* ``ARES_REQUIRE_NATIVE=1``: a failed compilation fails the build instead (the image).

A build that compiled every extension records the SHA-256 of each compiled source in
``ares/_native_build.json`` beside them; ``ares.native`` calls a compiled module whose
source differs from its record stale.
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = runpy.run_path(str(HERE / "services" / "ares" / "native.py"))
SOURCES: list[Path] = NATIVE["source_paths"](HERE / "services")


def native_extensions() -> list[Extension]:
    if os.environ.get("ARES_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    # An isolated build environment has only the build requirements, so the third-party
    # packages the modules import are unknown to mypy there. --no-site-packages makes that
    # so everywhere (a build in the virtualenv compiles the same code as the wheel's): they
    # are typed as Any, and stay Python objects, as mypyc would keep them anyway. A class of
    # ours that subclasses one of theirs (topics.loader's yaml.SafeLoader, reached through
    # the package's imports) subclasses Any there: allowed here, checked by `make typecheck`.
    extensions: list[Extension] = mypycify(
        ["--no-site-packages", "--ignore-missing-imports", "--no-warn-return-any",
         "--no-warn-unused-ignores", "--allow-subclassing-any",
         *(str(p.relative_to(HERE)) for p in SOURCES)],
        opt_level="3", group_name="ares_native")
    required = bool(os.environ.get("ARES_REQUIRE_NATIVE"))
    for extension in extensions:
        extension.optional = not required
    return extensions


class RecordingBuildExt(build_ext):  # type: ignore[misc]  # setuptools is untyped here
    """``build_ext`` that writes the build record once every extension is built."""

    def run(self) -> None:
        self._failed: list[str] = []
        super().run()
        if not self.extensions:
            return
        # ares/<package>/.../<module>.<abi>.so -> the ``ares`` package directory of this build
        first: str = NATIVE["NATIVE_MODULES"][0]
        package_dir = Path(self.get_ext_fullpath(first)).parents[first.count(".") - 1]
        record = package_dir / NATIVE["BUILD_RECORD"]
        if self._failed:
            record.unlink(missing_ok=True)  # what is left from before must not look fresh
            return
        hashes = {name: NATIVE["source_hash"](source)
                  for name, source in zip(NATIVE["NATIVE_MODULES"], SOURCES, strict=True)}
        package_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception:
            self._failed.append(ext.name)
            raise


setup(ext_modules=native_extensions(), cmdclass={"build_ext": RecordingBuildExt})
