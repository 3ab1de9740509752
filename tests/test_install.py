"""A non-editable install runs on its own: no source tree, no benchmarks/ folder."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_installed_package_reproduces_from_another_directory(tmp_path):
    # what an sdist holds: the package and its build files; no benchmarks/, no tests/
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "rfol_dask", src / "rfol_dask", ignore=shutil.ignore_patterns("__pycache__")
    )
    # the dependencies come from the running interpreter; the package itself only from the venv
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python, cli = venv / "bin" / "python", venv / "bin" / "rfol-dask"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)],
        check=True,
        env=env,
        cwd=tmp_path,
    )
    shutil.rmtree(src)  # the installed package must not need its source

    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import rfol_dask; print(rfol_dask.__file__)"],
        check=True,
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), f"imported {where}, not the installed copy"

    run = subprocess.run(
        [str(cli), "reproduce", "advection1", "--quick", "--workers", "0"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = (
        work / "reproduce_output" / "quick"
    )  # the default results folder, under the working directory
    res = json.loads((out / "advection1.json").read_text())
    assert all(m["passed"] for m in res["fits"]["methods"].values())
    assert (out / "advection1.png").stat().st_size > 10_000
    assert (work / "reproduce_output" / "data" / "subsets" / "advection1_300.zarr").is_dir()
    assert (out / "table.md").read_text().count(
        "| advection1 | 200 / 100 |"
    ) == 7  # 5 methods + 2 tuned
