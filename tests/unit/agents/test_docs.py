"""docs/sdk.md's worked example is real: under 30 lines, and it runs."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "sdk.md"


def test_the_worked_example_runs_in_under_30_lines(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[0]
    assert len(code.strip().splitlines()) < 30
    (tmp_path / "greeter.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    runpy.run_path(str(tmp_path / "greeter.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "card for Ada" in out
    assert "completed {'text':" in out

    from ares.agents import load_registry

    sys.modules.pop("greeter", None)
    assert load_registry("greeter:REGISTRY").kinds() == ["demo.greeter"]
