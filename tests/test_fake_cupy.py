"""The CuPy code paths on a CPU: ``tests/test_gpu.py`` run against the stand-in CuPy of
``tests/fakecupy`` (arrays that refuse implicit conversion to numpy and numpy operands, as
CuPy's do), in a subprocess so that the stand-in never meets the other tests. On a GPU machine
``tests/test_gpu.py`` itself runs against the real CuPy."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _stand_in_env():
    """The environment of a subprocess that imports the stand-in as ``cupy``."""
    path = os.pathsep.join(
        p for p in (str(TESTS / "fakecupy"), os.environ.get("PYTHONPATH", "")) if p
    )
    return {**os.environ, "PYTHONPATH": path, "OPENBLAS_NUM_THREADS": "1"}


@pytest.mark.slow  # a subprocess running tests/test_gpu.py: about 25 s
def test_gpu_tests_pass_on_the_stand_in_cupy():
    env = _stand_in_env()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(TESTS / "test_gpu.py"),
        ],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "passed" in summary and "skipped" not in summary, (
        summary
    )  # the stand-in was used, nothing skipped


@pytest.mark.slow
@pytest.mark.cluster
def test_gpu_benchmark_stages_run_on_the_stand_in_cupy(tmp_path):
    """A dry run of ``benchmarks/gpu.py`` with ``--device cuda`` before a GPU session: every stage
    runs on the stand-in without an error, the Zarr fit on a one-worker LocalCluster (the script's
    fallback without dask-cuda; the worker process imports the stand-in too)."""
    import json

    env = _stand_in_env()
    out = tmp_path / "gpu.json"
    run = subprocess.run(
        [
            sys.executable,
            str(TESTS.parent / "benchmarks" / "gpu.py"),
            "--size",
            "tiny",
            "--device",
            "cuda",
            "--dask",
            "--select",
            "300",
            "--zarr",
            "--zarr-codecs",
            "none",
            "--zarr-modes",
            "auto,slabs",
            "--out",
            str(out),
        ],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    stages = json.loads(out.read_text())["stages"]
    assert {
        "in_memory_N200",
        "numpy_input_device_cuda",
        "dask_threads_streamed",
        "equality_small",
        "selection",
        "zarr_one_gpu_worker",
        "zarr_one_gpu_worker_slabs",
    } <= set(stages)
    failed = {
        k: v["error"][-500:] for k, v in stages.items() if isinstance(v, dict) and "error" in v
    }
    assert not failed, failed
