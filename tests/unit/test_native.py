"""ares.native: which append-path modules run compiled, and the stale-build guard."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ares import native
from ares.native import ModuleBuild

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _pair(tmp_path: Path, *, recorded: str | None) -> ModuleBuild:
    """A compiled module ``m`` whose build record says it was compiled from ``recorded``
    (``"same"``: from the source beside it)."""
    source = tmp_path / "m.py"
    compiled = tmp_path / f"m{SUFFIX}"
    source.write_text("x = 1\n")
    compiled.write_bytes(b"\x7fELF")
    built_from = native.source_hash(source) if recorded == "same" else recorded
    return ModuleBuild("pkg.m", compiled, source, built_from)


def test_every_native_module_exists_as_source() -> None:
    paths = native.source_paths()
    assert [p.stem for p in paths] == [n.rpartition(".")[2] for n in native.NATIVE_MODULES]
    assert all(p.is_file() for p in paths)


def test_builds_say_what_import_loads() -> None:
    for build in native.builds():
        module = importlib.import_module(build.name)
        assert build.origin == Path(module.__file__ or "")
        assert build.compiled == (module.__file__ or "").endswith(SUFFIX)
        assert build.source is not None
        assert build.source.name == f"{build.name.rpartition('.')[2]}.py"


def test_a_source_edited_after_the_build_makes_the_module_stale(tmp_path: Path) -> None:
    assert not _pair(tmp_path, recorded="same").stale
    assert _pair(tmp_path, recorded="0" * 64).stale
    assert _pair(tmp_path, recorded=None).stale  # compiled by a build that recorded nothing


def test_file_times_do_not_matter(tmp_path: Path) -> None:
    """A wheel install gives every file the time of the install, in any order."""
    build = _pair(tmp_path, recorded="same")
    assert build.source is not None
    assert build.origin is not None
    os.utime(build.origin, (0, 0))
    assert not build.stale


def test_the_build_record_is_read_from_the_package(tmp_path: Path) -> None:
    (tmp_path / native.BUILD_RECORD).write_text('{"pkg.m": "abc"}')
    assert native.read_build_record(tmp_path) == {"pkg.m": "abc"}
    (tmp_path / native.BUILD_RECORD).write_text("not json")
    assert native.read_build_record(tmp_path) == {}
    assert native.read_build_record(tmp_path / "missing") == {}


def test_a_module_run_from_source_is_never_stale(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")
    build = ModuleBuild("pkg.m", source, source)
    assert not build.compiled
    assert not build.stale


def test_a_stale_build_is_a_problem_whatever_is_expected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = _pair(tmp_path, recorded="0" * 64)
    monkeypatch.setattr(native, "builds", lambda: [stale])
    for expect in (True, False):
        problem = native.problem(expect_compiled=expect)
        assert problem is not None
        assert "pkg.m" in problem
        assert "make native" in problem
    assert "STALE" in native.summary()


def test_pure_python_is_a_problem_only_when_compiled_was_expected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(native, "builds", lambda: [ModuleBuild("pkg.m", source, source)])
    assert native.problem(expect_compiled=False) is None
    problem = native.problem(expect_compiled=True)
    assert problem is not None
    assert "not compiled: pkg.m" in problem
    assert "ARES_PURE_PYTHON=1" in problem
    assert native.summary() == "append path: pure Python (no compiled modules)"


def test_summary_counts_compiled_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = _pair(tmp_path, recorded="same")
    source_only = ModuleBuild("pkg.n", tmp_path / "m.py", tmp_path / "m.py")
    monkeypatch.setattr(native, "builds", lambda: [fresh, fresh])
    assert native.summary() == "append path: compiled (mypyc, 2 of 2 modules)"
    monkeypatch.setattr(native, "builds", lambda: [fresh, source_only])
    assert native.summary() == "append path: partly compiled (1 of 2 modules)"


def test_check_exits_1_naming_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(native, "builds", lambda: [ModuleBuild("pkg.m", source, source)])
    assert native.main(["--check"]) == 1
    assert "not compiled: pkg.m" in capsys.readouterr().out
    fresh = _pair(tmp_path, recorded="same")
    monkeypatch.setattr(native, "builds", lambda: [fresh])
    assert native.main(["--check"]) == 0
    assert capsys.readouterr().out == "append path: compiled (mypyc, 1 of 1 modules)\n"


def test_without_arguments_it_lists_the_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert native.main([]) == 0
    assert capsys.readouterr().out.split() == [str(p) for p in native.source_paths()]
    assert native.main(["--bogus"]) == 2


def test_pure_python_at_run_time_imports_every_module_from_source() -> None:
    script = ("import ares, importlib\n"
              "from ares import native\n"
              "print('\\n'.join(importlib.import_module(n).__file__ for n in "
              "native.NATIVE_MODULES))\n")
    env = {**os.environ, "ARES_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(p) for p in native.source_paths()]
