"""The command line on a user's own data (issue 37): their variable and dim names, a NetCDF file,
periods for a finer grid, hints given as the command's options, and ``--version`` without the
heavy imports."""

import re
import subprocess
import sys
import time
from pathlib import Path

import dask
import numpy as np
import pytest
import xarray as xr

from rfol_dask import progress
from rfol_dask.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _burgers(n_points, cases):
    """Burgers-like pairs ``u0`` -> ``uT`` over ``case`` on ``n_points`` of [0, 2 pi)."""
    x = np.linspace(0, 2 * np.pi, n_points, endpoint=False)
    c = np.random.default_rng(len(cases)).normal(size=(len(cases), 3))
    u0 = c @ np.sin(np.outer(np.arange(1, 4), x))
    uT = 0.8 * (c @ np.sin(np.outer(np.arange(1, 4), x - 0.5))) + 0.1 * u0**2
    return xr.Dataset(
        {"u0": (("case", "x"), u0), "uT": (("case", "x"), uT)}, coords={"case": cases, "x": x}
    )


def _run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_fit_with_the_user_s_names_and_periods_predicts_a_finer_grid(tmp_path, capsys):
    _burgers(32, np.arange(1000, 1200)).to_netcdf(tmp_path / "b.nc")
    _burgers(64, np.arange(5000, 5040)).to_zarr(tmp_path / "fine.zarr")
    names = ["--input", "u0", "--output", "uT", "--sample-dim", "case"]
    model, pred = tmp_path / "m.zarr", tmp_path / "p.zarr"
    fit = ["fit", str(tmp_path / "b.nc"), *names, "--periods", "x=6.283185307179586", "--tune"]
    code, out, err = _run([*fit, "--train", "160", "--n-features", "100", "--out", str(model)],
                          capsys)  # fmt: skip
    assert code == 0, err
    assert "running on dask's threads in this process" in err  # what it runs on
    assert "relative L2 error on the 40 remaining samples" in out
    code, out, err = _run(["predict", str(model), str(tmp_path / "fine.zarr"), "--out", str(pred)],
                          capsys)  # fmt: skip
    assert code == 0, err
    written = xr.open_zarr(pred)["prediction"]
    assert written.sizes == {"case": 40, "x": 64} and written.case[0] == 5000
    error = float(out.split("relative L2 error on the 40 predicted samples: ")[1].split()[0])
    assert error < 0.05


def test_the_hints_of_a_store_without_the_default_names_are_options(tmp_path, capsys):
    _burgers(8, np.arange(1000, 1030)).to_zarr(tmp_path / "b.zarr")
    code, _, err = _run(["fit", str(tmp_path / "b.zarr"), "--n-features", "20"], capsys)
    assert code == 2 and "e.g. --input u0 --output uT --sample-dim case\n" in err, err
    code, _, err = _run(["fit", str(tmp_path / "b.zarr"), "--input", "u0", "--output", "uT"],
                        capsys)  # fmt: skip
    assert code == 2 and "pass --sample-dim case (the dim" in err, err


@pytest.mark.slow
def test_a_failure_while_tasks_run_does_not_speak_of_a_second_interrupt(capsys):
    def fail():
        time.sleep(0.2)
        raise ValueError("bad chunk")

    slow, bad = dask.delayed(time.sleep)(2), dask.delayed(fail)()
    with dask.config.set(scheduler="threads", num_workers=2), pytest.raises(ValueError):
        progress.compute(slow, bad, settle=True, desc="predict")
    err = capsys.readouterr().err
    assert re.search(r"predict: stopping; waiting for the \d running tasks? to end", err), err
    assert "again" not in err


def test_version_imports_none_of_the_heavy_packages():
    code = (
        "import sys\nfrom rfol_dask import cli\ntry:\n    cli.main(['--version'])\n"
        "except SystemExit:\n    pass\nheavy = {'numpy', 'dask', 'xarray', 'sklearn', 'zarr'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert res.stdout.splitlines()[-1] == "[]", res.stdout + res.stderr
