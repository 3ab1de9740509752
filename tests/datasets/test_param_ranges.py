"""Generator parameters are checked against their ranges before anything is made or written."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rfol_dask import datasets
from rfol_dask.datasets import DatasetSpec, get, names, register, resolve_params

# per data set: parameter -> [(bad value, what the message says after "must")]
_ADVECTION = {
    "n_points": [(1, "be at least 2")],
    "t_index": [(0, "be at least 1"), (-3, "be at least 1")],
}
_HELMHOLTZ = {
    "n_cells": [(0, "be at least 1")],
    "stride": [(3, "divide n_cells = 100 (valid: [1, 2, 4, 5, 10, 20, 25, 50, 100])")],
    "omega": [(0, "be > 0"), (-1000.0, "be > 0")],
    "c0": [(1.0, "be > 1"), (-20.0, "be > 1")],
    "n_modes": [(0, "be at least 1")],
    "tau": [(-3.0, "be at least 0")],
    "power": [(0, "be > 0")],
    "flux_lo": [(-0.1, "be in [0, 1)"), (1.0, "be in [0, 1)")],
    "flux_hi": [(0.35, "be in (flux_lo = 0.35, 1]"), (1.5, "be in (flux_lo = 0.35, 1]")],
}
_NAVIER_STOKES = {
    "nu": [(0, "be > 0"), (-0.01, "be > 0")],
    "T": [(0, "be > 0")],
    "n_grid": [(6, "be at least 8"), (63, "be even")],
    "stride": [
        (3, "divide n_grid = 64 into >= 2 parts (valid: [1, 2, 4, 8, 16, 32])"),
        (64, "divide n_grid = 64 into >= 2 parts"),
    ],
    "n_steps": [(0, "be at least 1")],
    "w0_seed": [(-1, "be at least 0")],
    "n_modes": [(0, "be at least 1")],
    "tau": [(-1.0, "be at least 0")],
    "power": [(-2.0, "be > 0")],
}
_STRUCTURAL = {
    "radius": [(0, "be in (0, 0.5)"), (0.5, "be in (0, 0.5)")],
    "E_fibre": [(0, "be > 0")],
    "nu_fibre": [(-1, "be in (-1, 0.5]"), (0.6, "be in (-1, 0.5]")],
    "mu_matrix": [(-0.39e6, "be > 0")],
    "nu_matrix": [(0.51, "be in (-1, 0.5]")],
    "load_scale": [(-400, "be at least 0")],
    "n_modes": [(0, "be at least 1")],
    "tau": [(-3, "be at least 0")],
    "mesh_n": [(2, "be at least 4"), (47, "be even")],
    "n_input": [(1, "be at least 2")],
    "input_interp": [
        ("cubic3", "be 'exact' or 'cubicN' with N >= 4"),
        ("linear", "be 'exact' or 'cubicN' with N >= 4"),
    ],
    "bottom_bc": [
        ("free", "be one of ('clamped', 'roller')"),
        (3, "be one of ('clamped', 'roller')"),
    ],
    "n_output": [(1, "be at least 2")],
}
BAD = {
    "advection1": _ADVECTION,
    "advection2": _ADVECTION,
    "advection3": {
        "n_points": [(1, "be at least 2")],
        "n_modes": [(0, "be at least 1")],
        "tau": [(-1.0, "be at least 0")],
        "alpha": [(0, "be > 0")],
        "shift": [(0, "be > 0"), (-0.5, "be > 0")],
    },
    "burgers": {
        "nu": [(0, "be > 0"), (-0.1, "be > 0")],
        "T": [(0, "be > 0")],
        "n_out": [(1, "be at least 2"), (2.5, "be an integer")],
        "n_solve": [
            (4, "be at least 6"),
            (1023, "be even"),
            (1000, "be a multiple of n_out = 128"),
        ],
        "n_steps": [(0, "be at least 1")],
        "grading": [(0, "be > 0")],
        "n_modes": [(0, "be in [1, 511]"), (512, "be in [1, 511] (below n_solve / 2 = 512)")],
        "sigma": [(0, "be > 0")],
        "tau": [(-5, "be at least 0")],
    },
    "darcy": {
        "n_solve": [(3, "be at least 4")],
        "stride": [
            (
                16,
                "divide n_solve - 1 = 420 (valid: [1, 2, 3, 4, 5, 6, 7, 10, 12, 14, 15, 20, 21, "
                "28, "
                "30, 35, 42, 60, 70, 84, 105, 140, 210, 420])",
            ),
            (1.5, "be an integer"),
        ],
        "a_low": [(-3, "be > 0"), (0, "be > 0")],
        "a_high": [(2.0, "be at least a_low = 3.0")],
        "alpha": [(0, "be > 0")],
        "tau": [(0, "be > 0")],
        "rtol": [(0, "be in (0, 1)"), (1, "be in (0, 1)")],
    },
    "helmholtz_high": _HELMHOLTZ,
    "helmholtz_low": {**_HELMHOLTZ, "stride": [(3, "divide n_cells = 100")]},
    "navier_stokes_high": _NAVIER_STOKES,
    "navier_stokes_low": _NAVIER_STOKES,
    "structural_mechanics_high": _STRUCTURAL,
    "structural_mechanics_low": _STRUCTURAL,
}
CASES = [
    (name, key, value, says)
    for name, table in BAD.items()
    for key, rows in table.items()
    for value, says in rows
]


def _shown(spec, key, value):
    """``value`` as the message shows it: converted to a float parameter's type."""
    default = spec.defaults[key]
    return float(value) if isinstance(default, float) and not isinstance(value, str) else value


def test_every_data_set_and_every_ranged_parameter_has_bad_values_here():
    assert set(BAD) == set(names())
    for name in names():
        assert set(get(name).ranges) <= set(BAD[name]), name
        assert set(BAD[name]) <= set(get(name).defaults), name


@pytest.mark.parametrize("name, key, value, says", CASES)
def test_bad_value_names_data_set_parameter_value_and_range(name, key, value, says):
    spec = get(name)
    with pytest.raises(ValueError) as info:
        resolve_params(spec, {key: value})
    message = str(info.value)
    assert message.startswith(f"parameter {key!r} of data set {name!r} must {says}"), message
    assert message.endswith(f", got {_shown(spec, key, value)!r}"), message


@pytest.mark.parametrize("name", sorted(BAD))
def test_defaults_are_in_range(name):
    spec = get(name)
    assert resolve_params(spec, {}) == dict(spec.defaults)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_parameter_writes_nothing(name, tmp_path):
    key, [(value, says), *_] = next(iter(BAD[name].items()))
    store = tmp_path / "sub" / "x.zarr"
    with pytest.raises(ValueError, match=f"parameter {key!r} of data set {name!r} must"):
        datasets.generate(name, 2, store=store, **{key: value})
    assert not store.exists() and not store.parent.exists()


@pytest.mark.slow
def test_a_refused_parameter_leaves_the_path_free_for_the_corrected_run(tmp_path):
    store = tmp_path / "x.zarr"
    good = {"n_solve": 256, "n_out": 64, "n_modes": 100}
    for bad in ({"nu": 0}, {"n_solve": 1000}, {"n_modes": 512}):
        with pytest.raises(ValueError):
            datasets.generate("burgers", 2, store=store, **{**good, **bad})
        assert not store.exists()
    ds = datasets.generate("burgers", 2, store=store, **good)  # no overwrite=True needed
    assert ds["output"].shape == (2, 64) and np.isfinite(ds["output"].values).all()


_SLOW = {"structural_mechanics_high", "structural_mechanics_low"}  # first model build: about 10 s


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in sorted(BAD)]
)
@pytest.mark.slow
def test_defaults_generate(name, tmp_path):
    ds = datasets.generate(name, 1, store=tmp_path / "x.zarr")
    assert ds.sizes["sample"] == 1
    assert np.isfinite(ds["input"].values).all() and np.isfinite(ds["output"].values).all()
    assert {k: ds.attrs[f"param_{k}"] for k in get(name).defaults} == dict(get(name).defaults)


@pytest.mark.parametrize(
    "call, says",
    [
        (
            lambda: get("darcy").make_block(0, 0, 1, n_solve=421, stride=16),
            "stride must divide n_solve - 1 = 420",
        ),
        (
            lambda: get("navier_stokes_high").make_block(0, 0, 1, stride=3),
            "stride must divide n_grid = 64",
        ),
        (
            lambda: get("burgers").make_block(0, 0, 1, n_solve=1000),
            "n_solve must be a multiple of n_out = 128, got 1000",
        ),
        (
            lambda: get("helmholtz_low").grids(n_cells=30, stride=4),
            "stride must divide n_cells = 30",
        ),
    ],
)
def test_direct_calls_check_the_same_rules_without_a_data_set_name(call, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        call()


def test_register_refuses_a_default_out_of_range_or_a_rule_on_an_unknown_parameter():
    from rfol_dask.datasets.registry import greater

    spec = dict(name="_range_probe", make_block=None, grids=None)
    with pytest.raises(
        ValueError, match="parameter 'nu' of data set '_range_probe' must be > 0, got 0.0"
    ):
        register(DatasetSpec(**spec, defaults={"nu": 0.0}, ranges={"nu": greater(0)}))
    with pytest.raises(ValueError, match=r"ranges name unknown parameter\(s\) \['mu'\]"):
        register(DatasetSpec(**spec, defaults={"nu": 1.0}, ranges={"mu": greater(0)}))
    assert "_range_probe" not in names()


@pytest.mark.slow
def test_cli_bad_parameter_exits_2_with_an_error_line(tmp_path):
    out = tmp_path / "b.zarr"
    script = Path(sys.executable).with_name("rfol-dask")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "rfol_dask.cli"]
    res = subprocess.run(
        [*command, "generate", "burgers", "--samples", "2", "--out", str(out), "--param", "nu=0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    line = "rfol-dask generate: error: parameter 'nu' of data set 'burgers' must be > 0, got 0.0"
    assert line in res.stderr.splitlines(), res.stderr
    assert "Traceback" not in res.stderr and not out.exists()
