"""``rfol-dask predict MODEL STORE --out PRED.zarr``: the saved model's predictions of a store's
inputs, written block by block to a Zarr store that is new or replaces only an earlier one of
its own."""

import os

import numpy as np
import pytest
import xarray as xr
from conftest import rel

from rfol_dask import RandomFeatureOperator, __version__, datasets, estimator
from rfol_dask.baselines import KernelOperator
from rfol_dask.cli import main
from rfol_dask.metrics import relative_l2_error


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A data set of 30 samples in blocks of 8, and a RandomFeatureOperator and a KernelOperator
    fitted on its first 20 samples and saved beside it."""
    root = tmp_path_factory.mktemp("predict")
    store = root / "d.zarr"
    ds = datasets.generate("advection2", 30, store=store, block_size=8)
    models = {}
    for name, model in (
        ("rf", RandomFeatureOperator(n_features=40, random_state=0)),
        ("kernel", KernelOperator()),
    ):
        models[name] = model.fit(ds.isel(sample=slice(0, 20)))
        model.save(root / f"{name}.zarr")
    return root, store, models


def _run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", ["rf", "kernel"])
@pytest.mark.slow
def test_predict_writes_the_model_s_predictions_block_by_block_and_prints_their_error(
    saved, tmp_path, kind, capsys, monkeypatch
):
    root, store, models = saved
    real, calls = estimator._predict_chunk, []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(estimator, "_predict_chunk", counted)
    out = tmp_path / "p.zarr"
    code, stdout, err = _run(
        [
            "predict",
            str(root / f"{kind}.zarr"),
            str(store),
            "--out",
            str(out),
            "--samples",
            "13:30",
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    assert (
        len(calls) <= 3 + 1
    )  # 17 samples in blocks of 8: one pass (and one call on dask's meta), not two
    monkeypatch.undo()

    ds = datasets.open_dataset(store).isel(sample=slice(13, 30))
    expected = models[kind].predict(ds["input"]).compute()
    written = xr.open_zarr(out)  # consolidated: a plain open_zarr reads it
    pred = written["prediction"]
    assert pred.dims == ("sample", "x") and rel(pred.values, expected.values) < 1e-12
    np.testing.assert_array_equal(pred["sample"], np.arange(13, 30))
    np.testing.assert_array_equal(pred["x"], ds["x"])
    assert (
        pred.encoding["chunks"] == (8, 40) and not pred.encoding["compressors"]
    )  # chunked along sample, raw
    assert written.attrs["model"] == str(root / f"{kind}.zarr") and written.attrs["store"] == str(
        store
    )
    assert (
        written.attrs["samples"] == [13, 30] and written.attrs["rfol_dask_version"] == __version__
    )
    error = relative_l2_error(ds["output"], expected)
    assert f"relative L2 error on the 17 predicted samples: {error:.4e}" in stdout
    assert sorted(os.listdir(tmp_path)) == ["p.zarr"]  # no temporary, no lock left


def test_predict_keeps_a_multi_dimensional_output_grid_and_needs_no_output(tmp_path, capsys):
    """A user's store (no generate bookkeeping) with a 2-D output grid; without ``output`` no error
    is printed, and only the store's ``input`` is read."""
    rng = np.random.default_rng(0)
    x, y, z = np.linspace(0, 1, 6), np.linspace(0, 2, 3), np.linspace(-1, 1, 4)
    U = rng.standard_normal((24, 6))
    V = np.einsum("mi,jk->mjk", U, np.ones((3, 4))) + U[:, :3, None] ** 2
    train = xr.Dataset(
        {"input": (("sample", "x"), U), "output": (("sample", "y", "z"), V)},
        coords={"x": x, "y": y, "z": z, "sample": np.arange(100, 124)},
    )
    model = RandomFeatureOperator(n_features=30, random_state=0).fit(train)
    model.save(tmp_path / "m.zarr")
    train[["input"]].chunk({"sample": 5}).to_zarr(tmp_path / "u.zarr")
    code, stdout, err = _run(
        [
            "predict",
            str(tmp_path / "m.zarr"),
            str(tmp_path / "u.zarr"),
            "--out",
            str(tmp_path / "p.zarr"),
            "--samples",
            "3:",
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"]
    assert pred.dims == ("sample", "y", "z") and pred.encoding["chunks"] == (5, 3, 4)
    np.testing.assert_array_equal(pred["sample"], np.arange(103, 124))
    np.testing.assert_array_equal(pred["z"], z)
    assert rel(pred.values, model.predict(train["input"][3:]).values) < 1e-12
    assert (
        "no error: the store has no output to compare with" in stdout
        and "relative L2" not in stdout
    )


def test_predict_on_a_store_of_another_resolution_predicts_on_its_output_grid(
    saved, tmp_path, capsys
):
    """The inputs are resampled to the training grid and the predictions to the store's output grid
    (the model's ``recovery``), so that the printed error compares them with the store's outputs."""
    root, _, models = saved
    fine = datasets.generate(
        "advection2", 12, store=tmp_path / "fine.zarr", n_points=60, block_size=5
    )
    code, stdout, err = _run(
        [
            "predict",
            str(root / "rf.zarr"),
            str(tmp_path / "fine.zarr"),
            "--out",
            str(tmp_path / "p.zarr"),
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"]
    expected = models["rf"].predict(fine["input"], output_grid={"x": fine["x"].values}).compute()
    assert pred.sizes["x"] == 60 and rel(pred.values, expected.values) < 1e-12
    np.testing.assert_array_equal(pred["x"], fine["x"])
    error = relative_l2_error(fine["output"], expected)
    assert f"relative L2 error on the 12 predicted samples: {error:.4e}" in stdout


def test_predict_errors_are_one_line_and_write_nothing(saved, tmp_path, capsys):
    root, store, _ = saved
    out = tmp_path / "p.zarr"
    xr.Dataset({"u": (("sample", "x"), np.ones((4, 40)))}).to_zarr(tmp_path / "u.zarr")
    xr.Dataset({"input": (("sample", "y"), np.ones((4, 40)))}).to_zarr(
        tmp_path / "y.zarr"
    )  # another grid dim
    model = str(root / "rf.zarr")
    for args, says in (
        ([str(tmp_path / "none.zarr"), str(store)], "no model at"),
        ([str(store), str(store)], "is not an rfol_dask model"),
        ([model, str(tmp_path / "u.zarr")], "'input'"),
        (
            [model, str(tmp_path / "y.zarr")],
            "input has dims ('sample', 'y') but the model reads ('sample', 'x')",
        ),
        (
            [model, str(store), "--samples", "20:10"],
            "--samples 20:10 is not a range of the 30 samples of",
        ),
        (
            [model, str(store), "--samples", "25:31"],
            "--samples 25:31 is not a range of the 30 samples",
        ),
        ([model, str(store), "--samples", "30:"], "give START < STOP <= 30"),
    ):
        code, stdout, err = _run(["predict", *args, "--out", str(out)], capsys)
        assert code == 2 and err.startswith("rfol-dask predict: error: ") and says in err, err
        assert len(err.strip().splitlines()) == 1 and not stdout
    for bad in ("10", "a:b", "1:2:3"):
        with pytest.raises(SystemExit) as info:
            main(["predict", model, str(store), "--out", str(out), "--samples", bad])
        assert info.value.code == 2 and "START:STOP" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # argparse: --workers starts a LocalCluster
        main(
            [
                "predict",
                model,
                str(store),
                "--out",
                str(out),
                "--cluster",
                "local",
                "--workers",
                "2",
            ]
        )
    assert info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["u.zarr", "y.zarr"]


def test_predict_refuses_foreign_out_paths_and_leaves_them_alone(saved, tmp_path, capsys):
    root, store, _ = saved
    model = str(root / "rf.zarr")
    notes = tmp_path / "notes.txt"
    notes.write_text("important notes")
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "plot.png").write_text("a plot")
    ours = tmp_path / "p.zarr"
    assert main(["predict", model, str(store), "--out", str(ours), "-q"]) == 0
    (ours / "mine.txt").write_text("kept")  # a prediction store holding a file of the user's
    before = {p: sorted(os.walk(p)) for p in (store, root / "rf.zarr")}
    for out, says in (
        (notes, "exists and is a file"),
        (folder, "exists and is a directory holding other files"),
        (store, "exists and is an rfol_dask data set"),
        (root / "rf.zarr", "is an rfol_dask model"),
        (store / "p.zarr", f"is inside the Zarr store {store}"),
        (root / "rf.zarr" / "p", "(an rfol_dask model)"),
        (ours, "also holds other files (mine.txt)"),
    ):
        code, _, err = _run(["predict", model, str(store), "--out", str(out)], capsys)
        assert code == 2 and says in err, (out, err)
    assert notes.read_text() == "important notes" and os.listdir(folder) == ["plot.png"]
    assert (ours / "mine.txt").read_text() == "kept"
    assert {p: sorted(os.walk(p)) for p in (store, root / "rf.zarr")} == before


@pytest.mark.slow
def test_predict_replaces_an_earlier_prediction_store_and_fills_an_empty_folder(
    saved, tmp_path, capsys
):
    """Also removes the temporary that a killed predict left beside it."""
    root, store, _ = saved
    out = tmp_path / "p.zarr"
    out.mkdir()
    leftover = tmp_path / ".p.zarr.tmp-0123abcd0123"
    (leftover / "prediction").mkdir(parents=True)
    assert (
        main(
            [
                "predict",
                str(root / "rf.zarr"),
                str(store),
                "--out",
                str(out),
                "--samples",
                ":10",
                "-q",
            ]
        )
        == 0
    )
    assert xr.open_zarr(out).sizes["sample"] == 10
    assert (
        main(
            [
                "predict",
                str(root / "kernel.zarr"),
                str(store),
                "--out",
                str(out),
                "--samples",
                "24:",
                "-q",
            ]
        )
        == 0
    )
    written = xr.open_zarr(out)
    np.testing.assert_array_equal(written["sample"], np.arange(24, 30))
    assert written.attrs["model"] == str(root / "kernel.zarr")
    assert sorted(os.listdir(tmp_path)) == ["p.zarr"]  # the earlier store, moved aside, is gone


@pytest.mark.slow
def test_a_failure_midway_leaves_no_store_and_an_earlier_one_as_it_was(
    saved, tmp_path, capsys, monkeypatch
):
    root, store, _ = saved
    real = estimator._predict_chunk
    calls = []

    def fails_at_the_second_block(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # after dask's meta call and a first block
            raise ValueError("a block failed")
        return real(*args, **kwargs)

    out = tmp_path / "p.zarr"
    monkeypatch.setattr(estimator, "_predict_chunk", fails_at_the_second_block)
    code, _, err = _run(
        ["predict", str(root / "rf.zarr"), str(store), "--out", str(out), "-q"], capsys
    )
    assert code == 2 and "a block failed" in err and len(calls) >= 3
    assert os.listdir(tmp_path) == []  # no store under the final name, no temporary, no lock

    monkeypatch.undo()
    assert (
        main(
            [
                "predict",
                str(root / "rf.zarr"),
                str(store),
                "--out",
                str(out),
                "--samples",
                "0:5",
                "-q",
            ]
        )
        == 0
    )
    calls.clear()
    monkeypatch.setattr(estimator, "_predict_chunk", fails_at_the_second_block)
    assert main(["predict", str(root / "kernel.zarr"), str(store), "--out", str(out), "-q"]) == 2
    assert os.listdir(tmp_path) == ["p.zarr"]
    kept = xr.open_zarr(out)
    assert kept.sizes["sample"] == 5 and kept.attrs["model"] == str(root / "rf.zarr")


@pytest.mark.cluster
@pytest.mark.slow
def test_predict_on_a_local_cluster_writes_from_the_workers(saved, tmp_path, capsys):
    root, store, models = saved
    code, stdout, err = _run(
        [
            "predict",
            str(root / "rf.zarr"),
            str(store),
            "--out",
            str(tmp_path / "p.zarr"),
            "--workers",
            "1",
            "--samples",
            "5:",
        ],
        capsys,
    )
    assert code == 0, err
    assert "dask dashboard:" in err and "dask dashboard" not in stdout
    expected = models["rf"].predict(datasets.open_dataset(store)["input"][5:]).compute()
    assert rel(xr.open_zarr(tmp_path / "p.zarr")["prediction"].values, expected.values) < 1e-12
    assert "relative L2 error on the 25 predicted samples" in stdout


def test_write_predictions_from_python_writes_the_same_store_and_refuses_a_data_set(
    saved, tmp_path
):
    """``rfol_dask.predictions.write_predictions``, which the command uses, from Python: the lazy
    prediction of a DataArray lands as written, and a data set is never replaced."""
    from rfol_dask.predictions import PREDICTION_KEY, write_predictions

    root, store, models = saved
    ds = xr.open_zarr(store)
    pred = models["rf"].predict(ds["input"].isel(sample=slice(20, 30)).chunk({"sample": 4}))
    path = write_predictions(pred, tmp_path / "p.zarr", attrs={"note": "mine"})
    written = xr.open_zarr(path)
    assert rel(written["prediction"].values, pred.values) < 1e-12
    assert written.attrs["note"] == "mine" and written.attrs["rfol_dask_version"] == __version__
    assert PREDICTION_KEY in written.attrs
    before = sorted(os.walk(store))
    with pytest.raises(ValueError, match="exists and is an rfol_dask data set"):
        write_predictions(pred, store)
    assert sorted(os.walk(store)) == before


def test_a_prediction_store_is_named_for_what_it_is_and_left_alone(saved, tmp_path, capsys):
    """A prediction store given by mistake where a data set or a model goes: each command says
    what it is (and how to read it), and it is left as it was."""
    root, store, models = saved
    pred = tmp_path / "p.zarr"
    assert main(["predict", str(root / "rf.zarr"), str(store), "--out", str(pred), "-q"]) == 0
    before = sorted(os.walk(pred))
    for args, says in (
        (
            ["fit", str(pred), "--n-features", "10", "--out", str(tmp_path / "m.zarr")],
            "is an rfol_dask prediction store, not a data set: read its predictions with xarray",
        ),
        (
            ["predict", str(root / "rf.zarr"), str(pred), "--out", str(tmp_path / "q.zarr")],
            "is an rfol_dask prediction store, not a data set",
        ),
        (
            ["predict", str(pred), str(store), "--out", str(tmp_path / "q.zarr")],
            "is not an rfol_dask model (no 'rfol_dask_model' attribute; it is an rfol_dask "
            "prediction store): read its predictions with xarray.open_zarr",
        ),
        (
            ["fit", str(store), "--n-features", "10", "--out", str(pred)],
            "exists and is an rfol_dask prediction store, not an rfol_dask model",
        ),
        (
            ["generate", "advection2", "--samples", "4", "--out", str(pred), "--overwrite"],
            "exists and is not an rfol_dask data set (it is an rfol_dask prediction store)",
        ),
        (
            ["generate", "advection2", "--samples", "4", "--out", str(pred / "d.zarr")],
            f"inside the Zarr store {pred} (an rfol_dask prediction store)",
        ),
    ):
        code, stdout, err = _run([*args, "-q"], capsys)
        assert code == 2 and says in err, (args, err)
    with pytest.raises(ValueError, match="is an rfol_dask prediction store, not a data set"):
        RandomFeatureOperator().fit(pred)
    with pytest.raises(
        ValueError, match="exists and is an rfol_dask prediction store, not an rfol_dask model"
    ):
        models["rf"].save(pred)
    assert sorted(os.walk(pred)) == before and sorted(os.listdir(tmp_path)) == ["p.zarr"]


def test_predict_reads_a_store_with_a_descending_grid_by_label(saved, tmp_path, capsys):
    """A store whose ``x`` runs downwards (as xarray reads it, in increasing order: the predictions
    come out that way) failed with "output_grid: axis 0 must be strictly increasing"."""
    root, store, models = saved
    ds = xr.open_zarr(store).isel(x=slice(None, None, -1))
    for var in ds.variables.values():
        var.encoding = {}
    ds.drop_attrs().to_zarr(tmp_path / "down.zarr")
    code, stdout, err = _run(
        [
            "predict",
            str(root / "rf.zarr"),
            str(tmp_path / "down.zarr"),
            "--out",
            str(tmp_path / "p.zarr"),
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"]
    expected = models["rf"].predict(xr.open_zarr(store)["input"]).compute()
    np.testing.assert_array_equal(pred["x"], expected["x"])
    assert rel(pred.values, expected.values) < 1e-12
    error = relative_l2_error(xr.open_zarr(store)["output"], expected)
    assert f"relative L2 error on the 30 predicted samples: {error:.4e}" in stdout


def test_write_predictions_takes_any_chunks_and_in_memory_predictions(saved, tmp_path):
    """The prediction of samples 3: of a store in blocks of 8 (a first chunk of 5) failed in xarray
    ("would overlap multiple Dask chunks"), an in-memory DataArray with "TypeError: 'NoneType'
    object is not iterable", a dask array with "'Array' object has no attribute 'to_dataset'"."""
    from rfol_dask.predictions import write_predictions

    root, store, models = saved
    inputs = xr.open_zarr(store)["input"]
    want = models["rf"].predict(inputs.values)
    cut = models["rf"].predict(inputs.isel(sample=slice(3, None)))
    assert cut.chunks[0][:2] == (5, 8)
    for pred, rows, name in (
        (cut, slice(3, None), "cut.zarr"),
        (models["rf"].predict(inputs[:5].compute()), slice(0, 5), "memory.zarr"),
    ):
        written = xr.open_zarr(write_predictions(pred, tmp_path / name, progress=False))[
            "prediction"
        ]
        assert rel(written.values, want[rows]) < 1e-12
        np.testing.assert_array_equal(written["sample"], inputs["sample"][rows])
    assert xr.open_zarr(tmp_path / "cut.zarr")["prediction"].encoding["chunks"] == (8, 40)
    with pytest.raises(TypeError, match="write_predictions writes a DataArray .* got a Array"):
        write_predictions(models["rf"].predict(inputs.data), tmp_path / "array.zarr")
    assert sorted(os.listdir(tmp_path)) == ["cut.zarr", "memory.zarr"]


def test_a_model_fitted_on_arrays_writes_predictions_on_the_store_s_grid(saved, tmp_path, capsys):
    """A model fitted on numpy arrays (no grid) predicts the store's inputs by position: its
    predictions were written on a grid dim ``dim_0`` without coordinates, which broadcast against
    the store's ``output`` (``ds.output - pred``: sample x x x dim_0); they now carry its dims and
    coordinates."""
    _, store, _ = saved
    ds = xr.open_zarr(store)
    model = RandomFeatureOperator(n_features=40, random_state=0).fit(
        ds["input"].values[:20], ds["output"].values[:20]
    )
    model.save(tmp_path / "m.zarr")
    code, stdout, err = _run(
        ["predict", str(tmp_path / "m.zarr"), str(store), "--out", str(tmp_path / "p.zarr"), "-q"],
        capsys,
    )
    assert code == 0, err
    pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"]
    assert pred.dims == ("sample", "x") and (ds["output"] - pred).dims == ("sample", "x")
    np.testing.assert_array_equal(pred["x"], ds["x"])
    assert rel(pred.values, model.predict(ds["input"].values)) < 1e-12
    error = relative_l2_error(ds["output"], pred)
    assert f"relative L2 error on the 30 predicted samples: {error:.4e}" in stdout


def test_an_output_of_another_grid_without_coordinates_is_not_compared(saved, tmp_path, capsys):
    """A store whose ``output`` has other grid sizes and no coordinates to predict on: the
    predictions are written, and the command says why there is no error and succeeds. (The
    model's output is on ``y``, as the store's: an output on other dims is never compared.)"""
    _, store, _ = saved
    ds = xr.open_zarr(store)
    model = RandomFeatureOperator(n_features=40, random_state=0).fit(
        ds["input"][:20], ds["output"][:20].rename(x="y").drop_vars("y")
    )
    model.save(tmp_path / "m.zarr")
    xr.Dataset(
        {
            "input": (("sample", "x"), ds["input"].values),
            "output": (("sample", "y"), np.zeros((30, 60))),
        }
    ).to_zarr(tmp_path / "other.zarr")
    code, stdout, err = _run(
        [
            "predict",
            str(tmp_path / "m.zarr"),
            str(tmp_path / "other.zarr"),
            "--out",
            str(tmp_path / "p.zarr"),
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    assert (
        "no error: the store's output (sample: 30, y: 60) is not on the predictions' grid "
        "(sample: 30, y: 40)" in stdout
    )
    pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"]
    assert rel(pred.values, model.predict(ds["input"]).values) < 1e-12


def test_a_model_that_records_no_class_loads_as_a_random_feature_operator(saved, tmp_path, capsys):
    """A model that records no class is a RandomFeatureOperator: its own errors are shown, and a
    KernelOperator's parameters say which class loads it."""
    import json

    import zarr

    root, store, models = saved
    for name, device, says in (
        ("rf", "gpu", "device must be one of ('cpu', 'cuda'), got 'gpu'"),
        ("kernel", "cpu", "that RandomFeatureOperator of rfol_dask"),
    ):
        path = models[name].save(tmp_path / f"{name}.zarr")
        group = zarr.open_group(str(path), mode="r+")
        state = json.loads(group.attrs["rfol_dask_model"])
        del state["estimator"]  # a damaged model: no class recorded
        state["params"]["device"] = device
        group.attrs["rfol_dask_model"] = json.dumps(state)
        code, _, err = _run(
            ["predict", str(path), str(store), "--out", str(tmp_path / f"p_{name}.zarr"), "-q"],
            capsys,
        )
        assert code == 2 and says in err and "Traceback" not in err, err


def test_predict_device_is_passed_to_the_model_and_cuda_without_cupy_fails_before_any_work(
    saved, tmp_path, capsys, predict_devices
):
    """``--device`` (as fit's: cpu unless a GPU cluster configuration) is the loaded model's device,
    so a model predicts where it is asked to, whatever it was fitted on; predict had no such option.
    Without CuPy, ``--device cuda`` ends before a block is predicted or a store written."""
    import importlib.util

    root, store, _ = saved
    devices = predict_devices
    code, _, err = _run(
        [
            "predict",
            str(root / "rf.zarr"),
            str(store),
            "--out",
            str(tmp_path / "p.zarr"),
            "--device",
            "cpu",
            "-q",
        ],
        capsys,
    )
    assert code == 0 and devices and set(devices) == {"cpu"}, err
    if importlib.util.find_spec("cupy") is None:
        devices.clear()
        code, stdout, err = _run(
            [
                "predict",
                str(root / "kernel.zarr"),
                str(store),
                "--out",
                str(tmp_path / "q.zarr"),
                "--device",
                "cuda",
            ],
            capsys,
        )
        assert code == 2 and "pip install 'rfol-dask[gpu]'" in err and "Traceback" not in err, err
        assert not devices and "Completed" not in err and not stdout  # no block, no progress bar
        assert sorted(os.listdir(tmp_path)) == ["p.zarr"]


def test_a_store_whose_output_has_other_dims_than_the_model_s_is_predicted_and_not_compared(
    saved, tmp_path, capsys
):
    """A model fitted on ``x`` and a store whose ``output`` is on ``y`` (grid dims match by name):
    the predictions are written on the model's grid, and stdout names both grids instead of an
    error (never a comparison by position)."""
    root, store, models = saved
    ds = xr.open_zarr(store)
    want = models["rf"].predict(ds["input"]).values
    for name, points, coords, says in (
        ("coords.zarr", slice(None), {"y": ds["x"].values}, "(sample: 30, y: 40)"),
        ("bare.zarr", slice(None), {}, "(sample: 30, y: 40)"),
        ("short.zarr", slice(0, 20), {}, "(sample: 30, y: 20)"),
    ):  # renamed, its 'x' would clash with the input's
        says = (
            f"no error: the store's output {says} is not on the predictions' grid (sample: 30, x:"
        )
        xr.Dataset(
            {
                "input": ds["input"].compute(),
                "output": (("sample", "y"), ds["output"].values[:, points]),
            },
            coords=coords,
        ).drop_attrs().to_zarr(tmp_path / name)
        out = tmp_path / f"p_{name}"
        code, stdout, err = _run(
            ["predict", str(root / "rf.zarr"), str(tmp_path / name), "--out", str(out), "-q"],
            capsys,
        )
        assert code == 0, err
        pred = xr.open_zarr(out)["prediction"]
        assert pred.dims == ("sample", "x") and rel(pred.values, want) < 1e-12
        assert "relative L2 error" not in stdout and says in stdout, stdout


def test_a_store_whose_output_grid_dims_are_in_another_order_is_compared_by_name(tmp_path, capsys):
    """The store's output on (z, y) and the model's on (y, z), with coordinates: stdout said "no
    error: the store's output (sample: 24, z: 4, y: 3) is on another grid ... without its
    coordinates", comparing the shapes in the order of their dims; they are matched by name."""
    rng = np.random.default_rng(0)
    x, y, z = np.linspace(0, 1, 6), np.linspace(0, 2, 3), np.linspace(-1, 1, 4)
    U = rng.standard_normal((24, 6))
    V = np.einsum("mi,jk->mjk", U, np.ones((3, 4))) + U[:, :3, None] ** 2
    train = xr.Dataset(
        {"input": (("sample", "x"), U), "output": (("sample", "y", "z"), V)},
        coords={"x": x, "y": y, "z": z},
    )
    model = RandomFeatureOperator(n_features=30, random_state=0).fit(train)
    model.save(tmp_path / "m.zarr")
    train.transpose("sample", "z", "y", "x").chunk({"sample": 5}).to_zarr(tmp_path / "t.zarr")
    code, stdout, err = _run(
        [
            "predict",
            str(tmp_path / "m.zarr"),
            str(tmp_path / "t.zarr"),
            "--out",
            str(tmp_path / "p.zarr"),
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"]
    assert (
        pred.dims == ("sample", "y", "z")
        and rel(pred.values, model.predict(train["input"]).values) < 1e-12
    )
    error = relative_l2_error(train["output"], pred)
    assert f"relative L2 error on the 24 predicted samples: {error:.4e}" in stdout, stdout


def test_a_gpu_model_predicted_with_device_cpu_gives_no_warning(saved, tmp_path, capsys):
    """A model saved with device="cuda", predicted with ``--device cpu`` where CuPy is missing:
    loading it warned 'not available here; it predicts on the CPU', of a device nobody asked for."""
    import warnings

    from rfol_dask.exceptions import ModelFileWarning

    root, store, models = saved
    gpu = tmp_path / "gpu.zarr"
    models["rf"].set_params(device="cuda").save(gpu)
    models["rf"].set_params(device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFileWarning)
        code, _, err = _run(
            [
                "predict",
                str(gpu),
                str(store),
                "--out",
                str(tmp_path / "p.zarr"),
                "--device",
                "cpu",
                "-q",
            ],
            capsys,
        )
    assert code == 0, err
