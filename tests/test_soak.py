"""A short run of the soak benchmark (benchmarks/soak.py): a few fault rounds, no violation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.cluster
def test_a_few_soak_rounds_end_without_violations(tmp_path):
    out = tmp_path / "soak"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--rounds", "3", "--seed", "2", "--kinds", "fit,damage,search", "--out", str(out)]
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    rounds = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert len(rounds) == 3, run.stderr[-2000:]
    assert [r["violations"] for r in rounds] == [[], [], []], rounds
    assert run.returncode == 0, run.stderr[-2000:]
    assert "3 rounds, 0 with violations" in out.with_suffix(".md").read_text()
