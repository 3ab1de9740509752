"""A non-editable install runs on its own: no source tree, no benchmarks/ folder.

The package is installed with the running interpreter into a folder of its own (``pip install
--target``), beside the dependencies this interpreter sees: the same inside a virtual environment
(whose packages a second venv would not see) and outside one.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _builds_here():
    """Whether this interpreter builds the wheel itself: setuptools with ``bdist_wheel`` (its own
    from 70.1, else the ``wheel`` package); otherwise pip builds in isolation, as ``pip install .``
    did."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    import setuptools

    return Version(setuptools.__version__) >= Version("70.1") or bool(
        importlib.util.find_spec("wheel")
    )


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
    site = tmp_path / "site"
    isolation = ["--no-build-isolation"] if _builds_here() else []
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([*install, *isolation, str(src)], check=True, env=env, cwd=tmp_path)
    shutil.rmtree(src)  # the installed package must not need its source

    env["PYTHONPATH"] = str(site)  # ahead of an editable install of the source tree
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [sys.executable, "-c", "import rfol_dask; print(rfol_dask.__file__)"],
        **dict(check=True, env=env, cwd=work, capture_output=True, text=True),
    ).stdout.strip()
    assert Path(where).is_relative_to(site), f"imported {where}, not the installed copy"

    run = subprocess.run(
        [str(site / "bin" / "rfol-dask"), "reproduce", "advection1", "--quick", "--workers", "0"],
        **dict(env=env, cwd=work, capture_output=True, text=True, timeout=600),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = work / "reproduce_output" / "quick"  # the default results folder, under the work dir
    res = json.loads((out / "advection1.json").read_text())
    assert all(m["passed"] for m in res["fits"]["methods"].values())
    assert (out / "advection1.png").stat().st_size > 10_000
    assert (work / "reproduce_output" / "data" / "subsets" / "advection1_300.zarr").is_dir()
    assert (out / "table.md").read_text().count("| advection1 | 200 / 100 |") == 7  # 5 + 2 tuned
