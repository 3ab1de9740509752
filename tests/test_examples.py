"""The example script and the notebook run as a new user runs them."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.cluster
def test_example_script(tmp_path):
    res = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    err = float(res.stdout.split("relative L2 test error:")[1].split()[0])
    assert err < 1e-4
    assert (tmp_path / "advection2.png").exists() and (tmp_path / "advection2_model.zarr").is_dir()


@pytest.mark.slow
@pytest.mark.cluster
def test_example_notebook(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert (tmp_path / "notebook_advection1.zarr").is_dir()
