"""The CuPy code paths on a CPU: ``tests/test_gpu.py`` run against the stand-in CuPy of
``tests/fakecupy`` (arrays that refuse implicit conversion to numpy and numpy operands, as
CuPy's do), in a subprocess so that the stand-in never meets the other tests. On a GPU machine
``tests/test_gpu.py`` itself runs against the real CuPy."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_gpu_tests_pass_on_the_stand_in_cupy():
    path = os.pathsep.join(p for p in (str(TESTS / "fakecupy"), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OPENBLAS_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS / "test_gpu.py")],
                         cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=900)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "passed" in summary and "skipped" not in summary, summary  # the stand-in was used, nothing skipped
