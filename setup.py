"""Compiles the append path with mypyc; everything else about the package is pyproject.toml.

Why mypyc (a part of mypy, as well kept as the type checker we already run): it compiles
the modules as they are, type-annotated Python, so there is no second implementation to
keep equal to the first. Which modules, and why, is ``services/ares/native.py``.

* ``ARES_PURE_PYTHON=1``: build no extension (the modules run as Python).
* Without a working C compiler the extensions are skipped with a warning (they are
  ``optional``): an install never fails for want of them, it is only slower.
* ``ARES_REQUIRE_NATIVE=1``: a failed compilation fails the build instead (the image).
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def native_extensions() -> list[Extension]:
    if os.environ.get("ARES_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    native = runpy.run_path(str(HERE / "services" / "ares" / "native.py"))
    sources = [str(p.relative_to(HERE)) for p in native["source_paths"](HERE / "services")]
    # An isolated build environment has only the build requirements, so the third-party
    # packages the modules import are unknown to mypy there. --no-site-packages makes that
    # so everywhere (a build in the virtualenv compiles the same code as the wheel's): they
    # are typed as Any, and stay Python objects, as mypyc would keep them anyway.
    extensions: list[Extension] = mypycify(
        ["--no-site-packages", "--ignore-missing-imports", "--no-warn-return-any",
         "--no-warn-unused-ignores", *sources],
        opt_level="3", group_name="ares_native")
    required = bool(os.environ.get("ARES_REQUIRE_NATIVE"))
    for extension in extensions:
        extension.optional = not required
    return extensions


setup(ext_modules=native_extensions())
