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
    assert script in capsys.readouterr().out  # argparse's usage line or the docstring's command


def test_too_few_arguments_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pca_power.py", "5000"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(BENCHMARKS / "pca_power.py"), run_name="__main__")
    assert exit_.value.code == 2
    assert "expected at least 4 positional arguments" in capsys.readouterr().err


def test_scaling_keeps_the_rows_it_finished_and_records_its_settings(tmp_path, monkeypatch):
    """scaling.py wrote its JSON once, at the end: a run that failed (or was stopped) at its last
    row lost every row before it; the file held no model settings or cluster; and --quick wrote
    over the committed results/scaling.json."""
    import json

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import scaling

    class Client:
        def nthreads(self):
            return {"a": 1}

        def close(self):
            pass

        cluster = type("Cluster", (), {"close": lambda self: None})()

    def run(client, M, n, N, m, chunk):
        if M == 1000:  # the quick M sweep, the last row
            raise KeyboardInterrupt
        return {
            "M": M,
            "N": N,
            "solver": "dual",
            "fit_s": 1.0,
            "predict_s": 0.1,
            "flops": 1e9,
            "phases": {},
        }

    monkeypatch.setattr(scaling, "local_client", lambda n_workers: Client())
    monkeypatch.setattr(scaling, "matmul_rate", lambda: 1e10)
    monkeypatch.setattr(scaling, "run", run)
    out = tmp_path / "scaling.json"
    with pytest.raises(KeyboardInterrupt):
        scaling.main(["--quick", "--workers", "1", "--out", str(out)])
    res = json.loads(out.read_text())
    assert [(r["study"], r["M"], r["threads"]) for r in res["rows"]] == [
        ("strong", 600, [1]),
        ("N sweep", 400, [1]),
    ]
    assert res["settings"]["model"] == {
        "distribution": "cauchy",
        "gamma_times_n": 2.0,
        "alpha": 1e-4,
        "random_state": 0,
    }
    assert res["settings"]["cluster"] == "LocalCluster" and res["settings"]["quick"] is True
    written = []
    monkeypatch.setattr(scaling, "write", lambda path, results: written.append(Path(path).name))
    with pytest.raises(KeyboardInterrupt):
        scaling.main(["--quick", "--workers", "1"])
    assert set(written) == {"scaling_quick.json"}
