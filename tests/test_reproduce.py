"""The reproduction benchmark (benchmarks/reproduce.py) in --quick mode, on every data set."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reproduce():
    spec = importlib.util.spec_from_file_location("reproduce_under_test", ROOT / "benchmarks" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_mode_through_the_cli(tmp_path, reproduce):
    from rfol_dask.cli import main

    out, data = tmp_path / "out", tmp_path / "data"
    # every data set from scratch (generated here): fits, equal time and curves, each error
    # checked against its stated bound (the CI check of the issue; a few minutes)
    assert main(["reproduce", "all", "--quick", "--out", str(out), "--data", str(data), "--workers", "0"]) == 0
    for name in reproduce.NAMES:
        res = json.loads((out / f"{name}.json").read_text())
        assert res["quick"] and res["train"] == reproduce.QUICK_TRAIN.get(name, 200) and res["test"] == 100
        methods = res["fits"]["methods"]
        assert set(methods) == set(reproduce.METHODS)
        for label, m in methods.items():
            assert m["passed"] and m["error"] < m["bound"] == reproduce.QUICK_BOUNDS[name][label]
            assert m["fit_s"] > 0 and m["predict_s"] > 0 and m["peak_mib"] > 0
        assert methods["rf_cauchy"]["n_features"] == 2000 and methods["rbf"]["length_scale"] > 0
        assert (out / res["fits"]["figure"]).stat().st_size > 10_000
    res = json.loads((out / "burgers.json").read_text())
    eq = res["equal_time"]["methods"]
    assert set(eq) == {"rbf", "matern52", "rf_cauchy", "rf_gaussian"}
    assert eq["rf_cauchy"]["n_features"] in reproduce.curves.doubling(250, 2000)
    curve = res["curves"]
    assert curve["n_features"] == [250, 500, 1000, 2000] and np.shape(curve["error"]) == (2, 4)
    assert (out / "curves.png").stat().st_size > 10_000
    table = (out / "table.md").read_text()
    fits, equal, curve = table.split("\n\n")
    assert fits.count("| burgers | 200 / 100 |") == 5 and equal.count("| burgers |") == 4
    assert all(f"| {name} |" in fits for name in reproduce.NAMES)
    assert curve.startswith("| curve (Cauchy) |") and "| burgers | 200 / 100 | 250-2000 | 2 |" in curve


def test_subset_of_a_larger_store_is_the_same_data(tmp_path, reproduce):
    from rfol_dask import datasets

    big, small = tmp_path / "big", tmp_path / "small"
    big.mkdir()
    datasets.generate("advection1", 40, store=big / "advection1.zarr", seed=0)
    a_train, a_test = reproduce.load_subset("advection1", 12, 6, big)  # sliced from the big store
    b_train, b_test = reproduce.load_subset("advection1", 12, 6, small)  # generated afresh
    assert (small / "subsets" / "advection1_18.zarr").is_dir() and not (big / "subsets").exists()
    np.testing.assert_array_equal(a_train["input"].values, b_train["input"].values)
    np.testing.assert_array_equal(a_test["output"].values, b_test["output"].values)
    assert a_test.sizes["sample"] == 6


def test_unknown_name_and_part(tmp_path):
    from rfol_dask.cli import main

    assert main(["reproduce", "nope", "--quick", "--out", str(tmp_path)]) == 2
    assert main(["reproduce", "advection1", "--quick", "--parts", "tables", "--out", str(tmp_path)]) == 2


def test_plot_example_mixed_dimensions(tmp_path):
    from rfol_dask.plotting import plot_curves, plot_example

    x = np.linspace(0, 1, 41)
    g2 = (np.linspace(0, 1, 21), np.linspace(0, 1, 21))
    truth = np.outer(np.sin(np.pi * g2[0]), np.sin(np.pi * g2[1]))
    plot_example(tmp_path / "a.png", np.cos(x), truth, truth, truth + 0.01, input_grid=(x,), output_grid=g2)
    plot_example(tmp_path / "b.png", np.cos(x), np.sin(x), np.sin(x), np.sin(x) + 1e-3)
    N = np.array([250, 500, 1000])
    plot_curves(tmp_path / "c.png", {"toy": {"n_features": N, "error": [N ** -0.5, 1.1 * N ** -0.5],
                                             "fit_time": [N * 1e-3, N * 1.2e-3]}})
    assert all((tmp_path / f).stat().st_size > 5_000 for f in ("a.png", "b.png", "c.png"))
