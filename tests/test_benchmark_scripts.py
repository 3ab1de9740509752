"""Every benchmark script answers ``--help`` with its usage instead of running or crashing."""

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_cleanly(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    assert exit_.value.code in (0, None)
    assert script in capsys.readouterr().out   # argparse's usage line or the docstring's command


def test_too_few_arguments_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pca_power.py", "5000"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(BENCHMARKS / "pca_power.py"), run_name="__main__")
    assert exit_.value.code == 2
    assert "expected at least 4 positional arguments" in capsys.readouterr().err
