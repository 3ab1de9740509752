"""Found by testing as a user (2026-11-27): silent wrong results at predict time, data lost or
made unloadable by save, and unclear errors. Each test fails on the code before its fix."""

import json
import os
import re
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import rel, smooth_operator_data

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


@pytest.fixture(scope="module")
def grid2d():
    """Inputs and outputs on a 4 x 5 grid (x, y) as DataArrays with coordinates."""
    rng = np.random.default_rng(0)
    U = rng.standard_normal((40, 4, 5))
    V = np.cumsum(U, axis=1) + 0.2 * U**2
    coords = {"sample": np.arange(40), "x": np.linspace(0, 1, 4), "y": np.linspace(0, 2, 5)}
    return (
        xr.DataArray(U, dims=("sample", "x", "y"), coords=coords),
        xr.DataArray(V, dims=("sample", "x", "y"), coords=coords),
    )


def test_predict_reads_a_store_or_dataset_of_inputs_alone(tmp_path, grid2d):
    XU, XV = grid2d
    model = _rf().fit(XU, XV)
    want = model.predict(XU[:10])
    inputs = xr.Dataset({"input": XU[:10]})
    xr.testing.assert_allclose(model.predict(inputs), want)
    inputs.to_zarr(tmp_path / "inputs.zarr")
    for path in (tmp_path / "inputs.zarr", str(tmp_path / "inputs.zarr")):
        np.testing.assert_allclose(model.predict(path).values, want.values, rtol=1e-12)
    with pytest.raises(ValueError, match="needs variable 'input'; missing"):
        model.predict(xr.Dataset({"output": XV[:10]}))


def test_grid_mappings_are_matched_by_dim_name(grid2d):
    XU, XV = grid2d
    model = _rf(recovery="linear").fit(XU, XV)
    x2, y2 = np.linspace(0, 1, 7), np.linspace(0, 2, 9)
    a = model.predict(XU, output_grid={"x": x2, "y": y2})
    b = model.predict(XU, output_grid={"y": y2, "x": x2})
    assert a.dims == b.dims == ("sample", "x", "y") and a.shape == b.shape == (40, 7, 9)
    xr.testing.assert_identical(a, b)
    U = XU.values
    same = model.predict(U, input_grid={"y": XU.y.values, "x": XU.x.values})
    np.testing.assert_allclose(same, model.predict(U), rtol=1e-12)
    with pytest.raises(
        ValueError, match=r"output_grid names dims \['p', 'q'\].*unknown \['p', 'q'\]"
    ):
        model.predict(XU, output_grid={"p": x2, "q": y2})
    with pytest.raises(ValueError, match=r"input_grid names dims \['x'\].*missing \['y'\]"):
        model.predict(U, input_grid={"x": XU.x.values})


def test_model_fitted_on_arrays_reads_a_dataarray_by_position():
    rng = np.random.default_rng(0)
    U = rng.standard_normal((40, 7))
    V = U**2 + 0.5 * U[:, :1]
    lat = np.linspace(60, -60, 7)  # descending, as latitudes often are
    XU = xr.DataArray(U, dims=("sample", "lat"), coords={"lat": lat})
    model = _rf().fit(U, V)
    np.testing.assert_allclose(model.predict(XU).values, model.predict(U), rtol=1e-12)
    XV = xr.DataArray(V, dims=("sample", "lat"), coords={"lat": lat})
    assert model.score(XU, XV) == pytest.approx(model.score(U, V), rel=1e-12)
    # a model fitted on the DataArrays matches coordinates (reads and writes increasing latitudes)
    labelled = _rf().fit(XU, XV)
    np.testing.assert_allclose(
        labelled.predict(XU[:, ::-1]).values, labelled.predict(XU).values, rtol=1e-12
    )


@pytest.mark.parametrize("estimator", [_rf, lambda: KernelOperator(kernel="rbf", length_scale=1.0)])
def test_complex_dask_input_to_predict_is_refused(estimator):
    U, V = smooth_operator_data(30, 8)
    model = estimator().fit(U, V)
    with pytest.raises(TypeError, match="real numbers.*complex128"):
        model.predict(da.from_array(U + 1j * U, chunks=10))
    with pytest.raises(TypeError, match="real numbers"):
        model.predict(xr.DataArray(da.from_array(U + 1j * U, chunks=10), dims=("sample", "x")))
    # numpy and xarray as well, with a short message (scikit-learn's printed the whole array)
    for complex_input in (U + 1j * U, xr.DataArray(U + 1j * U, dims=("sample", "x"))):
        with pytest.raises(TypeError, match="real numbers.*complex128") as raised:
            model.predict(complex_input)
        assert len(str(raised.value)) < 200
    with pytest.raises(TypeError, match="V must hold real numbers"):
        estimator().fit(U, V + 1j)


@pytest.mark.parametrize("estimator", [_rf, lambda: KernelOperator(kernel="rbf", length_scale=1.0)])
def test_timedelta_dask_operands_are_refused_as_datetimes_are(estimator):
    """numpy counts timedelta64 among the integers: dask operands of it passed the check for real
    numbers and then failed in the arithmetic (UFuncTypeError: ufunc 'subtract' cannot use
    operands ...), or were fitted as counts of their unit, by estimator and side."""
    U, V = smooth_operator_data(30, 8)
    model = estimator().fit(U, V)
    steps = da.from_array((U * 100).astype("m8[s]"), chunks=10)
    with pytest.raises(TypeError, match=r"X must hold real numbers, got dtype timedelta64\[s\]"):
        model.predict(steps)
    with pytest.raises(TypeError, match=r"U must hold real numbers, got dtype timedelta64\[s\]"):
        estimator().fit(steps, V)
    with pytest.raises(TypeError, match=r"V must hold real numbers, got dtype timedelta64\[s\]"):
        estimator().fit(
            da.from_array(U, chunks=10), da.from_array((V * 100).astype("m8[s]"), chunks=10)
        )


@pytest.mark.parametrize("estimator", [_rf, lambda: KernelOperator(kernel="rbf", length_scale=1.0)])
@pytest.mark.parametrize("unit", ["m8[s]", "M8[s]"])
def test_numpy_datetimes_and_timedeltas_are_refused_as_dask_ones_are(estimator, unit):
    """In memory, scikit-learn's validation cast datetime64 / timedelta64 operands to float (counts
    of their unit) and the model fitted and predicted them, where the same data as dask arrays
    are refused as not real numbers."""
    U, V = smooth_operator_data(30, 8)
    model = estimator().fit(U, V)
    dtype = re.escape(np.dtype(unit).name)  # datetime64[s], timedelta64[s]
    with pytest.raises(TypeError, match=rf"X must hold real numbers, got dtype {dtype}"):
        model.predict((U * 100).astype(unit))
    with pytest.raises(TypeError, match=rf"U must hold real numbers, got dtype {dtype}"):
        estimator().fit((U * 100).astype(unit), V)
    with pytest.raises(TypeError, match=rf"V must hold real numbers, got dtype {dtype}"):
        estimator().fit(U, (V * 100).astype(unit))


def test_a_value_that_overflows_float32_is_named_in_dask_fits():
    U, V = smooth_operator_data(30, 8)
    V[4, 1] = 1e300
    for model in (
        _rf(dtype="float32"),
        KernelOperator(kernel="rbf", length_scale=1.0, dtype="float32"),
    ):
        with pytest.raises(ValueError, match="V contains NaN or infinity.*first bad sample: 4"):
            model.fit(da.from_array(U, chunks=10), da.from_array(V, chunks=10))


@pytest.mark.parametrize("lazy", [False, True])
def test_a_grid_of_another_shape_but_the_same_size_is_refused(grid2d, lazy):
    XU, XV = grid2d
    U, V = XU.values, XV.values
    model = _rf().fit(U, V)
    wrap = (lambda a: da.from_array(a, chunks=10)) if lazy else (lambda a: a)
    for bad in (U.transpose(0, 2, 1), U.reshape(40, 2, 10)):
        with pytest.raises(
            ValueError,
            match=r"input grid \(\d+, \d+\) but the model was trained on the grid \(4, 5\)",
        ):
            model.predict(wrap(bad))
    np.testing.assert_allclose(
        np.asarray(model.predict(wrap(U.reshape(40, 20)))), model.predict(U), rtol=1e-12
    )
    with pytest.raises(ValueError, match="input grid"):
        model.predict(xr.DataArray(U.reshape(40, 2, 10), dims=("sample", "dim_0", "dim_1")))


def test_a_known_1d_grid_refuses_a_2d_grid_of_the_same_size():
    U, V = smooth_operator_data(30, 8)
    known = _rf().fit(xr.DataArray(U, dims=("sample", "x"), coords={"x": np.linspace(0, 1, 8)}), V)
    with pytest.raises(
        ValueError, match=r"input grid \(2, 4\) but the model was trained on the grid \(8,\)"
    ):
        known.predict(U.reshape(30, 2, 4))
    np.testing.assert_allclose(
        known.predict(U), known.predict(xr.DataArray(U, dims=("sample", "x")))
    )
    # fitted on flattened rows without a grid: another shape of the same size is read by position
    flat = _rf().fit(U, V)
    np.testing.assert_allclose(flat.predict(U.reshape(30, 2, 4)), flat.predict(U), rtol=1e-12)


def test_save_keeps_coordinates_of_strings_and_names_with_a_slash(tmp_path):
    U, V = smooth_operator_data(30, 4)
    XU = xr.DataArray(U, dims=("sample", "u/v"), coords={"u/v": np.arange(4.0)})
    names = np.array(["a", "bb", "c", "d"], dtype=object)  # pandas / netCDF labels
    XV = xr.DataArray(V, dims=("sample", "variable"), coords={"variable": names})
    model = _rf().fit(XU, XV)
    loaded = RandomFeatureOperator.load(model.save(tmp_path / "m.zarr"))
    assert list(loaded.predict(XU)["variable"].values) == list(names)
    np.testing.assert_array_equal(loaded.predict(XU).values, model.predict(XU).values)
    np.testing.assert_array_equal(loaded.input_coords_["u/v"], np.arange(4.0))
    objects = xr.DataArray(
        V, dims=("sample", "variable"), coords={"variable": np.array([1, "b", 2.0, None])}
    )
    with pytest.raises(ValueError, match="output coordinate 'variable' holds Python objects"):
        _rf().fit(XU, objects).save(tmp_path / "o.zarr")
    assert not (tmp_path / "o.zarr").exists()


def test_damaged_metadata_is_named_as_damage(tmp_path):
    U, V = smooth_operator_data(30, 4)
    model = _rf().fit(U, V)
    meta = Path(model.save(tmp_path / "a.zarr")) / "omega_" / "zarr.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(
        ValueError, match="array metadata of the model at .* cannot be read.*damaged"
    ):
        RandomFeatureOperator.load(tmp_path / "a.zarr")
    root = Path(model.save(tmp_path / "b.zarr")) / "zarr.json"
    doc = json.loads(root.read_text())
    doc["attributes"]["rfol_dask_model"] = doc["attributes"]["rfol_dask_model"][:50]
    root.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match="attribute 'rfol_dask_model' of the model at .* cannot be read.*damaged"
    ):
        RandomFeatureOperator.load(tmp_path / "b.zarr")


def test_an_array_without_its_checksum_is_damage(tmp_path):
    U, V = smooth_operator_data(30, 4)
    root = Path(_rf().fit(U, V).save(tmp_path / "m.zarr")) / "zarr.json"
    doc = json.loads(root.read_text())
    del doc["attributes"]["rfol_dask_checksums"]["coef_"]
    root.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match=r"checksums of arrays \['coef_'\] .* are missing.*damaged"
    ):
        RandomFeatureOperator.load(tmp_path / "m.zarr")


def test_saving_over_a_model_never_deletes_the_users_files_beside_it(tmp_path):
    U, V = smooth_operator_data(30, 4)
    a, b = _rf().fit(U, V), _rf(random_state=1).fit(U, V)
    path = Path(a.save(tmp_path / "m.zarr"))
    (path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"also holds other files \(notes.txt\).*delete"):
        b.save(path)
    assert (path / "notes.txt").read_text() == "mine"
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, a.coef_)  # it still loads
    (path / "notes.txt").unlink()
    np.testing.assert_array_equal(RandomFeatureOperator.load(b.save(path)).coef_, b.coef_)


def test_cv_splits_as_masks_and_bad_indices():
    U, V = smooth_operator_data(60, 8)
    kw = dict(
        n_features=40, distributions=("gaussian",), gammas=(1.0,), alphas=(1e-8,), random_state=0
    )
    rows = np.arange(60)
    by_index = RandomFeatureOperatorCV(cv=[(rows[:45], rows[45:])], **kw).fit(U, V)
    by_mask = RandomFeatureOperatorCV(cv=[(rows < 45, rows >= 45)], **kw).fit(U, V)
    assert by_mask.best_score_ == by_index.best_score_
    with pytest.raises(ValueError, match=r"validation rows hold indices outside \[0, 60\)"):
        RandomFeatureOperatorCV(cv=[(rows[:45], np.arange(45, 70))], **kw).fit(U, V)
    with pytest.raises(ValueError, match=r"training mask has shape \(50,\), expected \(60,\)"):
        RandomFeatureOperatorCV(cv=[(rows[:50] < 45, rows >= 45)], **kw).fit(U, V)


def test_rf_recovery_on_a_periodic_axis_says_it_does_not_wrap():
    U, V = smooth_operator_data(30, 64)
    x = np.arange(64) / 64
    model = _rf(recovery="rf").fit(U, V, input_grid=x, output_grid=x, periods=1.0)
    with pytest.raises(
        ValueError, match="recovery 'rf' does not wrap periodic axes: use 'cubic' or 'spectral'"
    ):
        model.predict(U, output_grid=np.arange(96) / 96)
    wraps = _rf(recovery="cubic").fit(U, V, input_grid=x, output_grid=x, periods=1.0)
    assert wraps.predict(U, output_grid=np.arange(96) / 96).shape == (30, 96)


def test_metrics_and_figures_match_dataarrays_by_label(tmp_path):
    from rfol_dask.metrics import r2_score, relative_l2_error
    from rfol_dask.plotting import prediction_figure

    rng = np.random.default_rng(0)
    y = np.linspace(0, 1, 9)
    truth = xr.DataArray(
        rng.standard_normal((20, 9)), dims=("sample", "y"), coords={"sample": np.arange(20), "y": y}
    )
    pred = truth + 0.1 * rng.standard_normal((20, 9))
    want = relative_l2_error(truth.values, pred.values)
    shuffled = pred.isel(sample=rng.permutation(20))
    flipped = truth.isel(y=slice(None, None, -1))  # a descending axis, as data often come
    assert relative_l2_error(truth, shuffled) == pytest.approx(want, rel=1e-12)
    assert relative_l2_error(flipped, pred) == pytest.approx(want, rel=1e-12)
    assert r2_score(flipped, shuffled) == pytest.approx(
        r2_score(truth.values, pred.values), rel=1e-12
    )
    with pytest.raises(
        ValueError, match="true and pred have different 'sample' labels: 20 only in true"
    ):
        relative_l2_error(truth, pred.assign_coords(sample=np.arange(100, 120)))
    unnamed = xr.DataArray(pred.values, dims=("sample", "dim_0"))  # other dim names: by position
    assert relative_l2_error(truth, unnamed) == pytest.approx(want, rel=1e-12)
    fig = prediction_figure(flipped[0], {"model": pred[0]})
    drawn = fig.axes[0].lines[1].get_ydata()  # the prediction, on the truth's (descending) axis
    np.testing.assert_array_equal(drawn, pred[0].values[::-1])


def test_cv_search_with_dtype_float32_is_the_same_for_numpy_and_dask():
    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(80, 8)
    Ud, Vd = da.from_array(U, chunks=20), da.from_array(V, chunks=20)
    for make in (
        lambda: RandomFeatureOperatorCV(
            n_features=60, distributions=("gaussian",), random_state=0, dtype="float32"
        ),
        lambda: KernelOperatorCV(kernels=("rbf",), dtype="float32"),
    ):
        a, b = make().fit(U, V), make().fit(Ud, Vd)
        assert a.best_params_ == b.best_params_
        np.testing.assert_allclose(
            a.cv_results_["mean_test_score"], b.cv_results_["mean_test_score"], rtol=1e-9
        )
        assert a.best_estimator_.intercept_.dtype == np.float32  # the refit works in dtype


def test_error_curve_takes_the_pca_power_of_a_search_and_checks_its_inputs():
    from rfol_dask import curves
    from rfol_dask.metrics import relative_l2_error

    U, V = smooth_operator_data(120, 16)
    Ut, Vt = smooth_operator_data(30, 16, seed=1)
    kw = dict(distribution="gaussian", gamma=0.05, alpha=1e-8)
    model = RandomFeatureOperator(
        n_features=150, pca_power=1.0, solver="dual", random_state=3, **kw
    ).fit(U, V)
    curve = curves.error_curve(U, V, Ut, Vt, [150], pca_power=1.0, random_state=3, **kw)
    assert curve["error"][0] == pytest.approx(relative_l2_error(Vt, model.predict(Ut)), rel=1e-8)
    plain = curves.error_curve(U, V, Ut, Vt, [150], random_state=3, **kw)
    assert abs(plain["error"][0] - curve["error"][0]) > 1e-6  # the metric changes the model
    for bad, match in (
        ((U, V[:10], Ut, Vt), "samples differ"),
        ((U, V, Ut[:, :5], Vt), "widths differ"),
        ((U.reshape(120, 4, 4), V, Ut, Vt), "U must be 2-D"),
    ):
        with pytest.raises(ValueError, match=match):
            curves.error_curve(*bad, [10], **kw)
    with pytest.raises(ValueError, match="gamma must be a number > 0"):
        curves.error_curve(U, V, Ut, Vt, [10], distribution="gaussian", gamma=-1.0)
    with pytest.raises(ValueError, match="alpha must be a number >= 0, got None"):
        curves.error_curve(U, V, Ut, Vt, [10], distribution="gaussian", gamma=1.0, alpha=None)
    assert curves.error_curve(U, V, Ut, Vt, [10], distribution="gaussian", gamma=np.int64(1))[
        "error"
    ].shape == (1,)


def test_empty_law_lists_and_the_load_hint_of_a_search():
    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(30, 4)
    with pytest.raises(ValueError, match="distributions is empty"):
        RandomFeatureOperatorCV(distributions=[]).fit(U, V)
    with pytest.raises(ValueError, match="kernels is empty"):
        KernelOperatorCV(kernels=[]).fit(U, V)
    with pytest.raises(TypeError, match=r"KernelOperator\.load\(path\)"):
        KernelOperatorCV.load("m.zarr")


def test_a_figure_path_without_suffix_returns_the_file_written(tmp_path):
    from rfol_dask.plotting import plot_prediction

    for path in (tmp_path / "fig", str(tmp_path / "fig2")):
        written = plot_prediction(path, np.arange(5.0), {"model": np.arange(5.0)})
        assert os.path.exists(written) and str(written).endswith(".png")
    assert (
        plot_prediction(tmp_path / "f.pdf", np.arange(5.0), {"m": np.arange(5.0)})
        == tmp_path / "f.pdf"
    )


def test_label_matching_takes_rounded_grids_as_equal_and_the_samples_first(grid2d):
    from rfol_dask.metrics import relative_l2_error

    XU, XV = grid2d
    model = _rf().fit(XU, XV)
    # the test grid differs from the training grid by rounding (another formula, a float32 copy)
    other = XV.assign_coords(x=np.arange(4) / 3, y=XV.y.astype(np.float32))
    pred = model.predict(XU)
    want = relative_l2_error(XV.values, pred.values)
    assert relative_l2_error(other, pred) == pytest.approx(want, rel=1e-12)
    assert model.score(XU, other) == pytest.approx(model.score(XU, XV), rel=1e-12)
    # a truth whose sample dim is not the first is read by its samples, not by position
    assert relative_l2_error(XV.transpose("x", "y", "sample"), pred) == pytest.approx(
        want, rel=1e-12
    )


def test_saving_over_a_model_refuses_a_users_store_or_file_inside_it(tmp_path):
    U, V = smooth_operator_data(30, 4)
    a = _rf().fit(U, V)
    for what in ("store", "in-array"):
        path = Path(a.save(tmp_path / f"{what}.zarr"))
        if what == "store":  # a Zarr group of the user's inside the model folder
            xr.Dataset({"r": ("k", np.arange(3.0))}).to_zarr(path / "my_results")
        else:
            (path / "coef_" / "README").write_text("mine")
        with pytest.raises(ValueError, match="also holds other files"):
            a.save(path)
        assert (
            (path / "my_results").exists()
            if what == "store"
            else (path / "coef_" / "README").exists()
        )
    np.testing.assert_array_equal(
        RandomFeatureOperator.load(a.save(tmp_path / "fresh.zarr")).coef_, a.coef_
    )
    a.save(tmp_path / "fresh.zarr")  # a model folder of nothing but the model is replaced


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize(
    "n_features, solver",
    [(99, "dual"), (100, "dual"), (101, "auto"), (99, "primal"), (99, "auto"), (60, "auto")],
)
def test_alpha_zero_is_the_min_norm_interpolant_on_every_path(n_features, solver, lazy):
    # the centred features have rank min(N, M - 1): the dual's ones direction is lifted, so the
    # fit no longer factorises (or fails) by rounding; compared with pinv of the centred features
    rng = np.random.default_rng(4)
    U, Ut = rng.normal(size=(100, 10)), rng.normal(size=(50, 10))
    V = np.tanh(U[:, :3]) + 1.5
    X, Y = (da.from_array(U, chunks=30), da.from_array(V, chunks=30)) if lazy else (U, V)
    model = _rf(n_features=n_features, gamma=0.3, alpha=0.0, solver=solver).fit(X, Y)
    if lazy and model.solver_ == "dual":  # and factorised blocked across the workers
        with pytest.warns(RuntimeWarning, match="blocked"):
            blocked = _rf(
                n_features=n_features, gamma=0.3, alpha=0.0, solver=solver, max_gram_bytes=1000
            ).fit(X, Y)
        np.testing.assert_allclose(blocked.predict(Ut), model.predict(Ut), rtol=1e-9, atol=1e-9)
    A, At = (
        np.sqrt(2 / n_features) * np.cos((W - model.input_centre_) @ model.omega_ + model.b_)
        for W in (U, Ut)
    )
    mu, vbar = A.mean(0), V.mean(0)
    expected = (At - mu) @ (np.linalg.pinv(A - mu) @ (V - vbar)) + vbar
    np.testing.assert_allclose(
        np.asarray(model.predict(Ut)), expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max()
    )


def test_alpha_zero_where_the_gram_is_singular_whatever_the_data_is_refused():
    U, V = smooth_operator_data(100, 6)
    with pytest.raises(ValueError, match="in the primal needs n_features <= 99"):
        _rf(n_features=100, alpha=0.0, solver="primal").fit(U, V)
    with pytest.raises(ValueError, match="in the dual needs n_features >= 99"):
        _rf(n_features=98, alpha=0.0, solver="dual").fit(da.from_array(U, chunks=30), V)


def test_inputs_of_extreme_scale_give_an_error_not_nan_coefficients():
    U, V = smooth_operator_data(60, 8)
    # the median heuristic measures rescaled rows: any representable input scale gets its gamma
    tiny = RandomFeatureOperator(distribution="gaussian", n_features=80, random_state=0).fit(
        U * 1e-150, V
    )
    plain = RandomFeatureOperator(distribution="gaussian", n_features=80, random_state=0).fit(U, V)
    np.testing.assert_allclose(tiny.predict(U * 1e-150), plain.predict(U), rtol=1e-6, atol=1e-6)
    # a median whose gamma is not a float64 is an error, not a silent gamma = 1
    for scale in (1e-170, 1e200):
        with pytest.raises(
            ValueError, match="median squared distance of the inputs is .* rescale the inputs"
        ):
            RandomFeatureOperator(distribution="gaussian", n_features=80).fit(U * scale, V)
    for kw in ({}, {"fit_intercept": False}):  # NaN coefficients used to be returned silently
        with pytest.raises(ValueError, match=r"NaN or infinite coefficients \(gamma_=1e\+308\)"):
            RandomFeatureOperator(gamma=1e308, n_features=80, random_state=0, **kw).fit(U, V)
    with pytest.raises(
        ValueError, match="length scale .* its square is beyond the range of float64"
    ):
        KernelOperator().fit(U * 1e160, V)
    with pytest.raises(ValueError, match="length scale 1e-200"):
        KernelOperator(length_scale=1e-200).fit(U, V)


def test_a_lazy_prediction_pickles():
    import pickle

    U, V = smooth_operator_data(30, 8)
    for model in (_rf().fit(U, V), KernelOperator(kernel="rbf", length_scale=1.0).fit(U, V)):
        lazy = model.predict(da.from_array(U, chunks=10))
        np.testing.assert_allclose(
            pickle.loads(pickle.dumps(lazy)).compute(), model.predict(U), rtol=1e-12
        )


# --- found 2026-11-27 (eighth session): grids and recovery options -----------------------------


def _periodic_data(n=64, M=80):
    x = np.arange(n) / n
    rng = np.random.default_rng(1)
    c = rng.standard_normal((M, 3))
    U = c[:, :1] * np.sin(2 * np.pi * x) + c[:, 1:2] * np.cos(4 * np.pi * x) + c[:, 2:]
    return x, U, np.roll(U, 5, axis=1) + 0.1 * U**2


def test_a_periodic_input_grid_must_sample_the_whole_period():
    """The coverage check skipped periodic axes, so input on half the period was filled in by
    interpolating across the gap: relative error 0.79, no warning."""
    x, U, V = _periodic_data()
    model = _rf(n_features=200).fit(U, V, input_grid=[x], output_grid=[x], periods=1.0)
    half = np.linspace(0, 0.5, 48)
    f = lambda y: np.sin(2 * np.pi * y)[None]  # noqa: E731
    with pytest.raises(
        ValueError, match=r"leaves a gap of 0\.5 in the period 1 of axis 0 \(from 0\.5 to 1"
    ):
        model.predict(f(half), input_grid=[half])
    for y in (
        np.arange(32) / 32,
        np.arange(96) / 96 + 0.3,
        np.sort(np.r_[np.arange(60) / 64, 0.97]),
    ):
        model.predict(
            f(y), input_grid=[y]
        )  # coarser, finer, shifted, uneven: the period is sampled


def test_recovery_options_are_checked_at_fit_and_rf_needs_an_int_seed():
    """Options of ``recovery`` were read only by the first predict on another grid (a typo fitted
    fine); a Generator seed of the 'rf' map drew other features at each predict."""
    x, U, V = _periodic_data(32, 40)
    for recovery, match in [
        ({"kind": "rf", "n_feature": 64}, "did you mean 'n_features'"),
        ({"kind": "cubic", "periodic": True}, "takes no options"),
        ({"kind": "rf", "ridge": -1}, "ridge must be >= 0"),
        ({"kind": "rf", "random_state": np.random.default_rng(0)}, "needs an int random_state"),
        (("cubic", {"kind": "rf", "random_state": None}), "needs an int random_state"),
    ]:
        with pytest.raises(ValueError, match=match):
            _rf(recovery=recovery).fit(U, V, input_grid=[x], output_grid=[x])
    model = _rf(recovery={"kind": "rf", "random_state": np.int64(3), "n_features": 64}).fit(
        U, V, input_grid=[x], output_grid=[x]
    )
    y = np.linspace(0, x[-1], 45)
    np.testing.assert_array_equal(
        model.predict(U, output_grid=[y]), model.predict(U, output_grid=[y])
    )


def test_numeric_coordinates_that_are_no_grid_are_refused():
    """A repeated or NaN coordinate value was taken for "no grid", and the values read by position."""
    x, U, V = _periodic_data(32, 40)
    wrap = lambda A, c: xr.DataArray(A, dims=("sample", "x"), coords={"x": c})  # noqa: E731
    model = _rf().fit(wrap(U, x), wrap(V, x))
    for bad, match in [
        (np.r_[x[:10], x[9], x[11:]], "strictly increasing"),
        (np.r_[x[:31], np.nan], "NaN"),
    ]:
        with pytest.raises(ValueError, match=f"not a grid .*{match}.*drop them"):
            model.predict(wrap(U, bad))
        with pytest.raises(ValueError, match="not a grid"):
            _rf().fit(wrap(U, bad), wrap(V, x))
    labels = wrap(
        U, [f"p{k}" for k in range(32)]
    )  # labels that are not numbers: positional, as before
    np.testing.assert_allclose(model.predict(labels).values, model.predict(U), rtol=1e-12)


def test_the_searches_take_periods_as_the_models_do():
    from rfol_dask.baselines import KernelOperatorCV

    x, U, V = _periodic_data(32, 60)
    y = np.arange(48) / 48
    for search in (
        RandomFeatureOperatorCV(n_features=100, gammas=(1.0,), alphas=(1e-6,), random_state=0),
        KernelOperatorCV(kernels=("rbf",), length_scales=(1.0,), nuggets=(1e-6,)),
    ):
        search.fit(U, V, input_grid=[x], output_grid=[x], periods=1.0)
        assert search.input_periods_ == (1.0,) and search.best_estimator_.output_periods_ == (1.0,)
        assert search.predict(U, output_grid=[y]).shape == (
            60,
            48,
        )  # past the last training point: wraps


def test_a_grid_mapping_of_an_array_model_is_read_by_name_and_the_shape_checked():
    """A model fitted on arrays with ``input_grid={"x": ..., "y": ...}`` read a later mapping by its
    order (``{"y": ..., "x": ...}``: relative error 5.2), and only compared the data's size with
    the grid's, so (M, 17, 13) data went through a (13, 17) grid."""
    rng = np.random.default_rng(0)
    x, y, xf, yf = (
        np.linspace(0, 1, 9),
        np.linspace(0, 1, 7),
        np.linspace(0, 1, 17),
        np.linspace(0, 1, 13),
    )
    c = rng.standard_normal((120, 3, 3))
    field = lambda X, Y: np.einsum(
        "mij,ia,jb->mab", c, np.array([X**0, X, X**2]), np.array([Y**0, Y, Y**2])
    )  # noqa: E731
    U, Uf = field(x, y), field(xf, yf)
    V = np.einsum("m,i,j->mij", U.sum((1, 2)), x[:6], y[:5] ** 2)
    model = _rf(n_features=300, distribution="gaussian", alpha=1e-4).fit(
        U, V, input_grid={"x": x, "y": y}, output_grid={"a": x[:6], "b": y[:5]}
    )
    assert model.input_dims_ == ("x", "y") and model.output_dims_ == ("a", "b")
    P = model.predict(U[:10])
    for grid in ({"x": xf, "y": yf}, {"y": yf, "x": xf}):
        np.testing.assert_allclose(model.predict(Uf[:10], input_grid=grid), P, rtol=1e-10)
    with pytest.raises(
        ValueError, match=r"X has shape \(10, 17, 13\) but input_grid has shape \(13, 17\)"
    ):
        model.predict(Uf[:10], input_grid=[yf, xf])
    af, bf = np.linspace(0, x[5], 11), np.linspace(0, y[4], 9)
    R = model.predict(U[:10], output_grid={"a": af, "b": bf})
    np.testing.assert_array_equal(model.predict(U[:10], output_grid={"b": bf, "a": af}), R)
    assert R.shape == (10, 11, 9)


def _repeated_inputs(case):
    """Training data with 3 inputs repeated and outputs moved by 1: an exactly singular dual Gram."""
    rng = np.random.default_rng(0 if case == "cauchy" else 3)
    if case == "cauchy":
        x = np.linspace(0, 1, 10)
        U = rng.standard_normal((100, 5)) @ np.sin(np.outer(np.arange(1, 6), np.pi * x))
        V = (
            np.tanh(2 * U[:, :1]) * np.cos(np.pi * np.linspace(0, 1, 4))[None]
            + 0.3 * (U**2).mean(1, keepdims=True)
            + 0.01 * rng.standard_normal((100, 4))
        )
    else:
        U = rng.standard_normal((100, 5)) @ rng.standard_normal((5, 10))
        V = np.sin(U[:, :4])
    return np.vstack([U, U[:3]]), np.vstack([V, V[:3] + 1.0])


@pytest.mark.parametrize("case, blocked", [("cauchy", True), ("gaussian", False)])
def test_alpha_zero_on_a_singular_gram_is_refused_whatever_the_rounding(case, blocked):
    """With alpha = 0 the factorisation of an exactly singular Gram succeeded or failed by
    rounding; where it succeeded (these two cases) the model predicted 2.22 at a repeated input
    whose outputs are 0.13 and 1.13 (in memory), or 0.17 for 0.11 and 1.11 (blocked)."""
    import warnings

    U, V = _repeated_inputs(case)
    model = RandomFeatureOperator(n_features=500, alpha=0.0, random_state=0, distribution=case)
    data = (U, V)
    if blocked:  # the Gram just above the budget: factorised blocked over dask tiles
        model.set_params(max_gram_bytes=len(U) ** 2 * 8 * 1.05)
        data = (da.from_array(U, chunks=40), da.from_array(V, chunks=40))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular"):
            model.fit(*data)
        model.set_params(alpha=1e-8).fit(*data)  # a ridge fits it


def test_a_killed_run_not_yet_reaped_is_dead_to_the_locks():
    """A ``generate`` killed under a parent that has not reaped it (a zombie) held its store's lock:
    the documented rerun was refused with 'is being written by ... wait for it to finish'."""
    import socket
    import subprocess
    import sys
    import time

    from rfol_dask.solve.owners import process_alive

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # exited, not reaped (no wait() yet)
        import psutil

        if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)
    try:
        assert not process_alive(socket.gethostname(), child.pid)
        assert process_alive(socket.gethostname(), os.getpid())
    finally:
        child.wait()


def test_burgers_refuses_a_finite_blow_up():
    """Viscous Burgers cannot grow in max norm; nu=1e-4 with one step gave max|u(T)| = 8.4e14 for
    max|u0| = 1.7, finite, and was written as data."""
    from rfol_dask.datasets import burgers

    with pytest.raises(FloatingPointError, match="blew up .*n_steps=1 too small for nu=0.0001"):
        burgers.make_block(0, 0, 8, nu=1e-4, n_steps=1)


def test_one_selected_sample_is_told_to_keep_its_dimension(grid2d):
    """``predict(X.sel(sample=5))`` was told to rename a grid dim to 'sample' (turning grid points
    into samples), and called X 'U'."""
    U, V = grid2d
    model = _rf().fit(U, V)
    with pytest.raises(ValueError, match=r"X holds one sample .*X\.expand_dims\('sample'\)"):
        model.predict(U.sel(sample=5))
    np.testing.assert_allclose(
        model.predict(U.sel(sample=5).expand_dims("sample")).values,
        model.predict(U.sel(sample=[5])).values,
    )


# --- found 2026-11-27 (eighth session): data sets ----------------------------------------------


@pytest.mark.parametrize("n_points, t_index", [(40, 20), (39, 13), (7, 5), (57, 19)])
def test_advection_outputs_are_exact_translations(n_points, t_index):
    """At some grid sizes x_j - t rounded to -5.6e-17, the modulo made it 1 - 1e-16, and Advection
    II's bump (not periodic) was read at the far end: 31 of 200 samples wrong at one point by 1.5."""
    from rfol_dask import datasets

    for name in ("advection1", "advection2"):
        ds = datasets.generate(name, 60, seed=0, n_points=n_points, t_index=t_index)
        U, V = ds["input"].values, ds["output"].values
        np.testing.assert_allclose(
            V, U[:, (np.arange(n_points) - t_index) % (n_points - 1)], atol=1e-12
        )


def test_helmholtz_top_flux_is_exact_where_its_ends_cut_a_cell():
    """3 Gauss points on a facet that the indicator's end cuts gave a total flux 4.9 % high at 30
    cells; the default mesh, whose nodes hold both ends, is unchanged."""
    from rfol_dask.datasets import helmholtz

    for n_cells, lo, hi in [
        (30, 0.35, 0.65),
        (64, 0.35, 0.65),
        (100, 0.355, 0.645),
        (100, 0.3449, 0.65),
    ]:
        b = helmholtz.get_fe(n_cells).load(flux_interval=(lo, hi))
        assert b.sum() == pytest.approx(hi - lo, rel=1e-12)
        top = np.linspace(
            0, 1, n_cells + 1
        )  # the first moment too: the load's shape, not just its total
        x = np.repeat(top, n_cells + 1)
        assert (b * x).sum() == pytest.approx((hi**2 - lo**2) / 2, rel=1e-12)


def test_helmholtz_refuses_an_omega_lost_to_rounding():
    """At omega = 1e-5 the mass term of K - k^2 M fell below rounding: the mean of v came out
    +1.5e11 where the exact -flux / k^2 is -1.2e12."""
    from rfol_dask.datasets import helmholtz

    with pytest.raises(ValueError, match=r"omega=1e-05 is too small .*take omega >= 0\.0"):
        helmholtz.make_block(0, 0, 1, n_cells=20, omega=1e-5)
    _, v = helmholtz.make_block(0, 0, 1, n_cells=20, omega=1.0, c0=20.0)
    assert np.isfinite(v).all()


def test_reuse_or_generate_checks_the_count(tmp_path):
    """On an existing store a count of -3 returned 7 samples (a negative slice)."""
    from rfol_dask import datasets

    path = tmp_path / "b.zarr"
    datasets.reuse_or_generate("advection1", 10, path, seed=1)
    for bad in (-3, 0, True, 2.5):
        with pytest.raises(ValueError, match="n_samples must be a positive integer"):
            datasets.reuse_or_generate("advection1", bad, path, seed=1)
    datasets.reuse_or_generate("advection1", 20, path, seed=1)  # made again, larger
    assert datasets.open(path).sizes["sample"] == 20


@pytest.mark.parametrize("lazy", [False, True])
def test_nan_inputs_with_an_input_pca_are_named_as_without_one(lazy):
    """With pca_power (or the kernels' n_components) a NaN in U failed inside the SVD / eigensolver
    ('SVD did not converge'), not with the documented error naming the samples."""
    from rfol_dask.baselines import KernelOperator

    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((300, 20)), rng.standard_normal((300, 3))
    U[1, 7] = np.nan
    data = (da.from_array(U, chunks=100), da.from_array(V, chunks=100)) if lazy else (U, V)
    for model in (
        _rf(n_features=200, pca_power=1.0),
        KernelOperator(pca_power=1.0),
        KernelOperator(n_components=5),
    ):
        with pytest.raises(ValueError, match=r"U contains NaN or infinity .*first bad sample: 1\b"):
            model.fit(*data)


def test_slabs_count_their_frequencies_and_a_cache_typo_is_refused():
    """A streamed slab was sized from its M features alone; at n = 6250 inputs for M = 3000 its
    frequencies were twice that, and the worker of a plan that fitted on paper was killed. A typo
    in rfol_dask.feature-cache ('dsik') turned the cache off without a word."""
    import dask

    from rfol_dask.memory import dual_plan

    client = __import__("conftest").FakeClient(700 * 2**20)
    M, n = 3000, 6250
    plain = dual_plan(M, np.float64, client=client, n_features=20000)
    counted = dual_plan(M, np.float64, client=client, n_features=20000, n_inputs=n)
    assert not counted.blocked and counted.slab_bytes == pytest.approx(
        plain.slab_bytes * M / (M + n + 1), rel=1e-6
    )
    U, V = smooth_operator_data(60, 8)
    with dask.config.set({"rfol_dask.feature-cache": "dsik"}):
        with pytest.raises(ValueError, match="feature-cache must be 'disk' or 'none', got 'dsik'"):
            _rf(solver="dual").fit(da.from_array(U, chunks=20), da.from_array(V, chunks=20))


# --- found 2026-11-27 (ninth session): the searches' cv and refit, store errors, dims, curves -----


@pytest.mark.parametrize("search", ["rf", "kernel"])
def test_a_cv_without_splits_or_with_an_empty_side_is_named(search):
    """A generator cv used up by the first fit, and cv=[], failed with 'min() arg is an empty
    sequence'; a split with no validation rows was told to 'pass more samples'."""
    from sklearn.model_selection import KFold

    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(60, 8)
    make = {
        "rf": lambda cv: RandomFeatureOperatorCV(
            n_features=20, distributions=("gaussian",), gammas=(1.0,), random_state=0, cv=cv
        ),
        "kernel": lambda cv: KernelOperatorCV(kernels=("rbf",), length_scales=(1.0,), cv=cv),
    }[search]
    model = make(KFold(3).split(U)).fit(U, V)
    assert model.n_splits_ == 3
    for again in (model, make([])):
        with pytest.raises(
            ValueError,
            match=r"cv gave no splits \(a generator is used up by one fit\): pass a list",
        ):
            again.fit(U, V)
    rows = np.arange(60)
    with pytest.raises(
        ValueError, match=r"split 1 has 50 / 0 of n_samples = 60: pass more samples or another cv"
    ):
        make([(rows[:50], rows[50:]), (rows[:50], rows[:0])]).fit(U, V)
    with pytest.raises(ValueError, match=r"split 0 has 0 / 10 of n_samples = 60"):
        make([(np.array([], dtype=int), rows[50:])]).fit(U, V)


@pytest.mark.parametrize("search", ["rf", "kernel"])
def test_a_search_without_refit_says_so_and_keeps_no_earlier_winner(tmp_path, search):
    """refit=False: predict said 'not fitted yet. Call fit' though best_params_ was set; and a
    refit=True fit's best_estimator_ stayed on after a refit=False fit, predicting for other
    parameters than best_params_."""
    from sklearn.exceptions import NotFittedError

    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(60, 8)
    make = lambda **kw: (
        RandomFeatureOperatorCV(n_features=20, distributions=("gaussian",), random_state=0, **kw)
        if search == "rf"
        else KernelOperatorCV(kernels=("rbf",), **kw)
    )
    name = type(make()).__name__
    model = make(refit=False).fit(U, V)
    for call, method in (
        (lambda: model.predict(U), "predict"),
        (lambda: model.score(U, V), "score"),
        (lambda: model.save(tmp_path / "m"), "save"),
    ):
        with pytest.raises(
            NotFittedError,
            match=rf"This {name} instance was initialized with refit=False: {method} "
            rf"is available only after refitting on the best parameters; fit "
            rf"again with refit=True, or fit {name[:-2]} with best_params_",
        ):
            call()
    model = make().fit(U, V)
    model.set_params(refit=False).fit(U[:40], V[:40])
    assert (
        model.best_params_
        and not hasattr(model, "best_estimator_")
        and not hasattr(model, "refit_time_")
    )
    with pytest.raises(NotFittedError, match="initialized with refit=False"):
        model.predict(U)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        type(model)().predict(U)


def test_a_users_store_with_samples_last_names_the_samples_of_a_bad_chunk(tmp_path):
    """A store laid out (x, sample) named a missing chunk's samples along x ('samples 8-15', not
    40-59), checked the chunks of other samples than the first ``samples``, and told the user to
    regenerate it with 'rfol-dask generate NAME', which never wrote it."""
    import zarr

    from rfol_dask.io import open_dataset

    U, V = smooth_operator_data(60, 16)
    path = tmp_path / "mine.zarr"
    xr.Dataset(
        {"input": (("x", "sample"), U.T), "output": (("x", "sample"), V.T)},
        coords={"x": np.linspace(0, 1, 16), "sample": np.arange(60)},
    ).chunk({"x": 8, "sample": 20}).to_zarr(path)
    key = zarr.open_array(str(path / "input"), mode="r").metadata.encode_chunk_key
    (path / "input" / key((1, 2))).unlink()
    missing = (
        r"1 chunk\(s\) of variable 'input' are missing from the store \(first: chunk \(1, 2\), samples 40-59, "
        r"file .*\); the store is damaged: restore the files or write the store again$"
    )
    with pytest.raises(ValueError, match=missing):
        _rf().fit(path)
    assert (
        open_dataset(path, samples=40).sizes["sample"] == 40
    )  # the chunk is not among the first 40 samples
    (path / "input" / key((1, 2))).write_bytes((path / "input" / key((1, 1))).read_bytes())
    (path / "output" / key((0, 1))).write_bytes(b"not zstd data" * 8)
    with pytest.raises((ValueError, RuntimeError)):  # the codec's error: it cannot decode it
        _rf().fit(path)


def test_a_dataarray_without_samples_is_told_what_fits_the_models_dims(grid2d):
    """``predict(X[0])`` of a DataArray without a 'sample' coordinate (dims the model's grid) was
    told to rename a grid dim to 'sample', as was an array with the samples along its last dim
    (the first named); a rename is advised only where one dim is left over for the samples."""
    XU, XV = grid2d
    U = XU.drop_vars("sample")
    by_name, by_position = _rf().fit(XU, XV), _rf().fit(XU.values, XV.values)
    one = (
        r"got dims \({}\); it holds one sample on the model's grid: add the dimension, e\.g\. "
        r"X\.expand_dims\('sample'\)$"
    )
    for model in (by_name, by_position):
        with pytest.raises(ValueError, match=one.format("'x', 'y'")):
            model.predict(U[0])
    with pytest.raises(ValueError, match=one.format("'y', 'x'")):
        by_name.predict(U[0].transpose())
    with pytest.raises(
        ValueError, match=r"got dims \('x', 'y', 't'\); .* X\.rename\(\{'t': 'sample'\}\)$"
    ):
        by_name.predict(U.rename(sample="t").transpose("x", "y", "t"))
    with pytest.raises(
        ValueError,
        match=r"got dims \('z', 'y'\); the model was trained on \('sample', 'x', 'y'\): "
        r"rename X's dims to those$",
    ):
        by_name.predict(U[0].rename(x="z"))
    with pytest.raises(
        ValueError,
        match=r"got dims \('y',\); the model was trained on functions of shape \(4, 5\): "
        r"pass X with dims \('sample', \.\.\.\) of that shape$",
    ):
        by_position.predict(U[0, 0])
    np.testing.assert_allclose(
        by_name.predict(U[0].expand_dims("sample")).values, by_name.predict(XU[:1]).values
    )


def test_error_curves_keep_each_seeds_predictions_when_asked():
    """error_curves(..., return_predictions=True) passed the option on to each seed's curve and
    dropped the predictions."""
    from rfol_dask.curves import curve_dataset, error_curve, error_curves

    U, V = smooth_operator_data(80, 8)
    args, kw = (U[:60], V[:60], U[60:], V[60:], [20, 40]), dict(gamma=0.3, alpha=1e-6)
    res = error_curves(*args, seeds=(0, 1), return_predictions=True, **kw)
    assert len(res["predictions"]) == 2
    for seed, preds in zip((0, 1), res["predictions"]):
        single = error_curve(*args, random_state=seed, return_predictions=True, **kw)["predictions"]
        assert len(preds) == 2 and all(p.shape == (20, 8) for p in preds)
        for p, q in zip(preds, single):
            np.testing.assert_array_equal(p, q)
    assert curve_dataset(res)["error"].dims == (
        "seed",
        "n_features",
    )  # predictions left out, as for one seed
    assert "predictions" not in error_curves(*args, seeds=(0,), **kw)


# --- found 2026-11-27 (ninth session, second round): grids read to the coordinates' precision ------


def test_coordinates_rounded_to_float32_are_the_training_grid():
    """x = 1000 + 0.02 k in float32 is the training grid; it was refused with 'spans [1000, 1000.98]
    ... trained on [1000, 1000.98]' (a tolerance of 1e-6 of the span, below float32's rounding)."""
    rng = np.random.default_rng(0)
    x = 1000 + np.arange(50) * 0.02
    U = rng.standard_normal((60, 50))

    def on(A, xx):
        return xr.DataArray(A, dims=("sample", "x"), coords={"x": xx})

    model = RandomFeatureOperator(n_features=200, random_state=0).fit(
        on(U, x), on(np.cumsum(U, 1) * 0.02, x)
    )
    ref = model.predict(on(U[:5], x))
    for xx in (x.astype(np.float32), x + 1e-5):
        np.testing.assert_array_equal(model.predict(on(U[:5], xx)).values, ref.values)
    # a grid that truly leaves the domain is refused, naming what the user gave, in enough digits
    with pytest.raises(
        ValueError,
        match=r"X's coordinates span \[1000\.01, 1000\.99\] along axis 0 but the model "
        r"was trained on \[1000, 1000\.98\]",
    ):
        model.predict(on(U[:5], x + 0.01))


def test_a_periodic_input_grid_of_one_point_or_of_two_periods_is_refused_naming_input_grid():
    """One point on a periodic axis was read as a constant (error 1.1, no refusal); two periods
    were refused naming 'periods', which the user had not passed."""
    rng = np.random.default_rng(0)
    x = np.arange(64) / 64
    U = np.sin(2 * np.pi * (x + rng.random((40, 1))))
    model = RandomFeatureOperator(n_features=100, random_state=0).fit(
        U, U, input_grid=[x], output_grid=[x], periods=1.0
    )
    with pytest.raises(
        ValueError,
        match=r"input_grid has one point on the periodic axis 0 \(period 1\): the input "
        r"must sample the whole period",
    ):
        model.predict(U[:3, :1], input_grid=[np.array([0.3])])
    with pytest.raises(
        ValueError, match=r"input_grid: axis 0 spans \[0, 1\.98438\], more than its period 1"
    ):
        model.predict(np.zeros((3, 128)), input_grid=[np.arange(128) / 64])


def test_an_infinite_input_among_the_first_samples_is_named_before_any_warning():
    """Inf in the first samples reached the input centre and the fold of its phases ('invalid
    value encountered in remainder', four times) before the ValueError naming the sample."""
    import warnings

    X = np.random.default_rng(0).standard_normal((40, 5))
    Y = X[:, :2] ** 2
    X[0, 1] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"U contains NaN or infinity .*first bad sample: 0"):
            RandomFeatureOperator(n_features=50).fit(X, Y)


# --- found 2026-11-28 (tenth session): a search's winning ridge at the rounding level -------------


def _kernel_cv_case(name):
    from rfol_dask import datasets
    from rfol_dask.baselines import KernelOperatorCV

    ds = datasets.generate(name, 120, seed=0)
    return KernelOperatorCV(), ds.isel(sample=slice(0, 90)), ds.isel(sample=slice(90, 120))


def _rf_float32_case(name):
    from rfol_dask import datasets

    ds = datasets.generate(name, 120, seed=0).astype("float32")
    return (
        RandomFeatureOperatorCV(n_features=200, random_state=0),
        ds.isel(sample=slice(0, 90)),
        ds.isel(sample=slice(90, 120)),
    )


@pytest.mark.parametrize(
    "case", [(_kernel_cv_case, "advection1"), (_rf_float32_case, "advection1")]
)
def test_a_search_refits_the_ridge_it_reports_without_warning(case):
    """KernelOperatorCV picked nugget=1e-16, which the refit's Gram could not factorise: the refit
    warned as if the user had passed it (an error under -W error) and used 1e-14, which nothing
    recorded (RandomFeatureOperatorCV on float32 data: alpha=1e-16, used 2.9e-9)."""
    import warnings

    make, name = case
    search, train, test = make(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        search.fit(train)
    best = search.best_estimator_
    by_hand = type(best)(**best.get_params()).set_params(**search.best_params_)
    assert by_hand.get_params() == best.get_params()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        by_hand.fit(train)
    np.testing.assert_array_equal(
        np.asarray(by_hand.predict(test)), np.asarray(search.predict(test))
    )


def test_a_well_conditioned_winner_is_kept():
    """The recorded ridge is the winner's own where the refit factorises it (no change on normal data)."""
    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(80, 8)
    search = KernelOperatorCV(kernels=("rbf",), nuggets=(1e-6, 1e-4, 1e-2)).fit(U, V)
    row = {k: v[search.best_index_] for k, v in search.cv_results_.items()}
    assert search.best_params_["nugget"] == row["nugget"] == search.best_estimator_.nugget


# --------------------------------------------------------------------- third user round (h3)


def _stations():
    """Inputs on 5 named stations (string coordinates), outputs on two named components."""
    rng = np.random.default_rng(0)
    st = ["BER", "PAR", "ROM", "MAD", "OSL"]
    U = xr.DataArray(
        rng.standard_normal((50, 5)),
        dims=("sample", "station"),
        coords={"sample": np.arange(50), "station": st},
    )
    V = xr.DataArray(
        np.c_[U.values.sum(1), U.values[:, 0] - U.values[:, 3]],
        dims=("sample", "out"),
        coords={"sample": np.arange(50), "out": ["sum", "diff"]},
    )
    return U, V


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("estimator", [_rf, lambda: KernelOperator(length_scale=2.0)])
def test_grid_points_with_labels_that_are_not_numbers_are_matched_by_label(
    estimator, lazy, tmp_path
):
    """A model fitted on stations named by strings read a DataArray of the same stations in
    another order by position (predictions off by 6 where the outputs are of size 2), and one of
    other stations without a word; xarray operands are matched by label, grid points by coordinate."""
    U, V = _stations()
    model = estimator().fit(U, V)
    want = model.predict(U)
    X = U.isel(station=[3, 1, 4, 0, 2])
    X = X.chunk({"sample": 20}) if lazy else X
    np.testing.assert_allclose(model.predict(X).values, want.values, rtol=1e-12, atol=1e-12)
    model.save(tmp_path / "m.zarr")
    again = type(model).load(tmp_path / "m.zarr")
    np.testing.assert_allclose(again.predict(X).values, want.values, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="different 'station' labels.*'OSL'.*'XXX'"):
        model.predict(U.assign_coords(station=["BER", "PAR", "ROM", "MAD", "XXX"]))
    # without coordinates along the dim, a DataArray is read by position, as before
    np.testing.assert_allclose(
        model.predict(U.drop_vars("station")).values, want.values, rtol=1e-12
    )


def test_numeric_labels_beside_a_dim_of_names_are_matched_too():
    """A model whose grid is not all numbers has no grid to resample: numeric coordinates beside
    the names were read by position too, whatever their values."""
    rng = np.random.default_rng(1)
    U = xr.DataArray(
        rng.standard_normal((40, 3, 4)),
        dims=("sample", "station", "depth"),
        coords={"station": ["a", "b", "c"], "depth": [1.0, 2.0, 5.0, 10.0]},
    )
    V = U.sum("depth")
    model = _rf().fit(U, V)
    want = model.predict(U)
    np.testing.assert_allclose(
        model.predict(U.isel(depth=[3, 2, 1, 0], station=[2, 0, 1])).values, want.values, rtol=1e-12
    )
    with pytest.raises(ValueError, match="different 'depth' labels"):
        model.predict(U.assign_coords(depth=[1.0, 2.0, 5.0, 20.0]))


def test_plot_curves_reads_the_slope_of_a_saved_curve_dataset(tmp_path, monkeypatch):
    """The README saves error curves with ``curve_dataset(c).to_netcdf`` "to save, plot"; plotting
    the file read back dropped the fitted slope from the legend (plot_curves read only the
    ``slope`` dict of a result, not the dataset's ``slope_slope`` attribute)."""
    from rfol_dask import plotting
    from rfol_dask.curves import curve_dataset, error_curves

    U, V = smooth_operator_data(150, 8)
    c = error_curves(
        U[:100], V[:100], U[100:], V[100:], [8, 16, 32, 64], seeds=(0, 1), gamma=0.05, alpha=1e-3
    )
    assert np.isfinite(c["slope"]["slope"])
    curve_dataset(c).to_netcdf(tmp_path / "c.nc")
    figures = []
    monkeypatch.setattr(plotting, "_save", lambda fig, path, dpi=100: figures.append(fig) or path)
    with xr.open_dataset(tmp_path / "c.nc") as back:
        plotting.plot_curves(tmp_path / "f.png", {"dict": c, "file": back})
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    want = f"(slope {c['slope']['slope']:.2f})"
    assert labels == [f"dict {want}", f"file {want}"], labels


def test_plot_curves_reads_curve_datasets_of_both_forms_and_refuses_a_combined_study(
    tmp_path, monkeypatch
):
    """curve_dataset now keeps its fits as 0-d variables (attributes were lost when the curves of
    several training sizes were combined); plot_curves reads those and the attributes of curve
    datasets saved by earlier versions, and names the way out for a combined study."""
    from rfol_dask import plotting
    from rfol_dask.curves import curve_dataset, error_curves

    U, V = smooth_operator_data(150, 8)
    c = error_curves(
        U[:100], V[:100], U[100:], V[100:], [8, 16, 32, 64], seeds=(0, 1), gamma=0.05, alpha=1e-3
    )
    new = curve_dataset(c)
    fits = [k for k in new.data_vars if k.split("_")[0] in ("slope", "time", "excess")]
    assert new["slope_slope"].dims == () and not set(fits) & set(
        new.attrs
    )  # the attributes: its settings
    # as the earlier version saved it: the fits as attributes, no n_train
    old = new.drop_vars([*fits, "n_train"]).assign_attrs({k: new[k].item() for k in fits})
    old.to_netcdf(tmp_path / "old.nc")
    new.to_netcdf(tmp_path / "new.nc")
    figures = []
    monkeypatch.setattr(plotting, "_save", lambda fig, path, dpi=100: figures.append(fig) or path)
    with xr.open_dataset(tmp_path / "old.nc") as o, xr.open_dataset(tmp_path / "new.nc") as n:
        plotting.plot_curves(tmp_path / "f.png", {"old": o, "new": n})
        study = xr.concat([n, n.assign_coords(n_train=200)], dim="n_train")
        with pytest.raises(
            ValueError, match=r"curve 'study': error has dims .*n_train.*study.sel\(n_train=M\)"
        ):
            plotting.curves_figure({"study": study})
        plotting.curves_figure({"M = 100": study.sel(n_train=100)})
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    want = f"(slope {c['slope']['slope']:.2f})"
    assert labels == [f"old {want}", f"new {want}"], labels


def test_an_input_grid_that_contradicts_the_coordinates_of_x_is_refused(grid2d):
    """predict(DataArray, input_grid=...) read the DataArray's values on input_grid, silently
    overriding its own coordinates where the two differ."""
    XU, XV = grid2d
    model = _rf(recovery="linear").fit(XU, XV)
    x2, y2 = np.linspace(0, 1, 7), np.linspace(0, 2, 9)
    X = XU.interp(x=x2, y=y2)
    want = model.predict(X)
    np.testing.assert_allclose(
        model.predict(X, input_grid={"x": x2, "y": y2}).values, want.values
    )  # the same: fine
    with pytest.raises(ValueError, match="input_grid differs from X's own coordinates"):
        model.predict(X, input_grid={"x": x2, "y": y2 * 0.9})
    np.testing.assert_allclose(
        model.predict(X.drop_vars(["x", "y"]), input_grid={"x": x2, "y": y2}).values, want.values
    )


def test_figures_of_functions_on_named_grid_points(tmp_path):
    """Plotting the predictions of a model on named stations failed with 'could not convert string
    to float'; the stations are now drawn at their positions, named on the ticks."""
    from rfol_dask.plotting import example_figure, plot_prediction, prediction_figure

    U, V = _stations()
    model = _rf().fit(U, V)
    pred = model.predict(U)
    fig = prediction_figure(U[0], {"scaled": U[0] * 1.1})
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "BER",
        "PAR",
        "ROM",
        "MAD",
        "OSL",
    ]
    assert plot_prediction(tmp_path / "p.png", V[0], {"rf": pred[0]}) == tmp_path / "p.png"
    two = xr.DataArray(
        np.arange(15.0).reshape(5, 3),
        dims=("station", "level"),
        coords={"station": U.station.values, "level": ["low", "mid", "top"]},
    )
    fig = example_figure(U[0], V[0], two, two * 1.1)
    assert [t.get_text() for t in fig.axes[2].get_yticklabels()] == ["low", "mid", "top"]


def test_predictions_keep_the_scalar_coordinates_of_x():
    """A prediction of X lost its scalar coordinates (a time stamp common to all its samples, the
    member of an ensemble picked with sel); those along 'sample' were kept. A scalar coordinate
    named as an output dim gives way to the output grid."""
    import xarray as xr

    from rfol_dask import RandomFeatureOperator

    x = np.linspace(0, 1, 12)
    U = np.random.default_rng(0).standard_normal((30, 12))
    X = xr.DataArray(U, dims=("sample", "x"), coords={"x": x, "sample": np.arange(30)})
    model = RandomFeatureOperator(n_features=40, random_state=0).fit(X, np.sin(X))
    stamped = X.assign_coords(time=np.datetime64("2026-11-27T12:00"), member=3)
    pred = model.predict(stamped)
    assert (
        pred.coords["time"].values == np.datetime64("2026-11-27T12:00")
        and int(pred.coords["member"]) == 3
    )
    np.testing.assert_array_equal(pred.values, model.predict(X).values)
    y = np.linspace(0, 1, 7)
    Y = xr.DataArray(
        np.sin(U[:, :7]), dims=("sample", "y"), coords={"y": y, "sample": np.arange(30)}
    )
    other = RandomFeatureOperator(n_features=40, random_state=0).fit(X, Y)
    pred = other.predict(X.assign_coords(y=0.5))  # a scalar 'y' on the input, the output's dim 'y'
    assert pred.dims == ("sample", "y") and np.array_equal(pred["y"].values, y)


# ---------------------------------------------------------------- interrupted fits (notebook use)
def _interrupt(monkeypatch, module, name):
    """``module.name`` raises KeyboardInterrupt (a Ctrl-C at that step of a fit, deterministically)."""

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, stop)


@pytest.mark.parametrize("lazy", [False, True])
def test_interrupted_refit_leaves_the_previous_model(monkeypatch, lazy):
    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(60, 8)
    Ut = smooth_operator_data(10, 8, seed=1)[0]
    data = (da.from_array(U, chunks=20), da.from_array(V, chunks=20)) if lazy else (U, V)
    model = _rf().fit(*data)
    want, state = model.predict(Ut), dict(vars(model))
    model.set_params(random_state=1)  # re-run with another seed, Ctrl-C during the solve
    with monkeypatch.context() as mp:
        _interrupt(mp, rfo, "fit_dask" if lazy else "fit_numpy")
        with pytest.raises(KeyboardInterrupt):
            model.fit(*data)
    # the previous model, whole: not its coefficients with the new frequencies (predicted 30x off)
    assert set(vars(model)) == set(state) and all(
        vars(model)[k] is v for k, v in state.items() if k != "random_state"
    )
    np.testing.assert_array_equal(model.predict(Ut), want)
    again = np.asarray(
        model.fit(*data).predict(Ut)
    )  # a re-run in the same process fits the new seed
    assert rel(again, _rf(random_state=1).fit(U, V).predict(Ut)) < 1e-6 and rel(again, want) > 1e-3


@pytest.mark.parametrize("case", ["numpy", "dask", "kernel"])
def test_a_prediction_in_another_thread_during_a_refit_is_the_previous_models(monkeypatch, case):
    """A refit set its attributes as it went: a predict from another thread (a notebook serving the
    model while it is refitted) read the new frequencies (numpy; for dask the new input centre,
    while the client drew Omega; the kernel's new PCA and length scale) beside the old coefficients
    and returned silently wrong values. The refit is now published whole at its end."""
    import threading

    import rfol_dask.baselines.kernel as kmod
    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(60, 8)
    Ut = smooth_operator_data(10, 8, seed=1)[0]
    data, other = (
        (da.from_array(X, chunks=20), da.from_array(V, chunks=20)) if case == "dask" else (X, V)
        for X in (U, U + 0.5)
    )  # the refit's data: another input centre too
    if case == "kernel":
        model, change, (module, name) = (
            KernelOperator(length_scale=1.0),
            {"length_scale": 2.0},
            (kmod, "dual_numpy"),
        )
    else:
        model, change = _rf(), {"random_state": 1}
        module, name = rfo, "fit_numpy" if case == "numpy" else "_timed_draw"
    want = np.asarray(model.fit(*data).predict(Ut))
    step, seen = getattr(module, name), []

    def paused(*args, **kwargs):  # the refit is half done: another thread predicts now
        reader = threading.Thread(target=lambda: seen.append(np.asarray(model.predict(Ut))))
        reader.start()
        reader.join()
        return step(*args, **kwargs)

    monkeypatch.setattr(module, name, paused)
    model.set_params(**change).fit(*other)
    np.testing.assert_array_equal(seen[0], want)
    assert rel(np.asarray(model.predict(Ut)), want) > 1e-3  # the refit, in place once it ended


def test_interrupted_first_fit_leaves_an_unfitted_model(monkeypatch):
    from sklearn.exceptions import NotFittedError

    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(60, 8)
    model = _rf()
    with monkeypatch.context() as mp:
        _interrupt(mp, rfo, "fit_numpy")
        with pytest.raises(KeyboardInterrupt):
            model.fit(U, V)
    assert not [k for k in vars(model) if k.endswith("_")]
    with pytest.raises(NotFittedError):
        model.predict(U)


def test_failed_kernel_refit_leaves_the_previous_model(monkeypatch):
    import rfol_dask.baselines.kernel as kmod

    U, V = smooth_operator_data(60, 8)
    model = KernelOperator(kernel="rbf", length_scale=1.0, n_components=4).fit(U, V)
    want = model.predict(U[:5])
    model.set_params(n_components=6, length_scale=2.0)
    with monkeypatch.context() as mp:
        _interrupt(mp, kmod, "dual_numpy")  # after the new PCA and length scale were set
        with pytest.raises(KeyboardInterrupt):
            model.fit(U, V)
    np.testing.assert_array_equal(model.predict(U[:5]), want)


def test_interrupted_search_refit_leaves_the_previous_search(monkeypatch):
    U, V = smooth_operator_data(80, 8)
    search = RandomFeatureOperatorCV(
        n_features=40, distributions=("gaussian",), random_state=0
    ).fit(U, V)
    want, params, best = search.predict(U[:5]), dict(search.best_params_), search.best_estimator_
    search.set_params(random_state=3, distributions=("cauchy",))
    with monkeypatch.context() as mp:
        # the search is done, the refit of its winner is interrupted
        _interrupt(mp, RandomFeatureOperatorCV, "_refit_best")
        with pytest.raises(KeyboardInterrupt):
            search.fit(U, V)
    assert search.best_params_ == params and search.best_estimator_ is best
    np.testing.assert_array_equal(search.predict(U[:5]), want)


@pytest.mark.cluster
def test_interrupted_cluster_fit_keeps_the_users_persisted_data(cluster_client, monkeypatch):
    import time

    from distributed import wait

    import rfol_dask.progress as prog

    rng = np.random.default_rng(0)
    U = rng.standard_normal((1200, 64))
    V = np.cumsum(U, 1)

    def tasks():
        return cluster_client.run_on_scheduler(
            lambda dask_scheduler: {
                str(k): sorted(c.client_key for c in t.who_wants or ())
                for k, t in dask_scheduler.tasks.items()
            }
        )

    with cluster_client.as_current():
        dU, dV = (
            da.from_array(U, chunks=(300, -1)).persist(),
            da.from_array(V, chunks=(300, -1)).persist(),
        )
        wait([dU, dV])
        held = tasks()
        assert len(held) == 8

        def stop(*args, **kwargs):  # Ctrl-C while the fit graph runs (its centre task still ahead)
            raise KeyboardInterrupt

        with monkeypatch.context() as mp:
            mp.setattr(prog, "_collect", stop)
            with pytest.raises(KeyboardInterrupt):
                RandomFeatureOperator(n_features=1500, gamma=0.01, random_state=0).fit(dU, dV)
        # the scheduler forgets the fit's tasks, and keeps the client with what it holds: client.cancel
        # of the fit's futures failed an assertion in the scheduler, which then dropped the client and
        # every future of it (FutureCancelledError: lost dependencies)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and tasks() != held:
            time.sleep(0.05)
        assert tasks() == held
        assert float(dU.sum().compute()) == pytest.approx(U.sum())
        model = RandomFeatureOperator(n_features=100, gamma=0.01, random_state=0).fit(dU, dV)
        assert (
            rel(
                model.predict(U[:5]),
                RandomFeatureOperator(n_features=100, gamma=0.01, random_state=0)
                .fit(U, V)
                .predict(U[:5]),
            )
            < 1e-6
        )


def test_paths_starting_with_a_tilde_are_in_the_home_folder(tmp_path, monkeypatch):
    """``save("~/m.zarr")`` made a folder named '~' in the working directory, and
    ``open_dataset("~/d.zarr")`` said there was no data set, where xarray and zarr read '~' as
    the home folder (``to_zarr("~/d.zarr")`` writes there)."""
    from rfol_dask import RandomFeatureOperator, datasets
    from rfol_dask.io import open_dataset

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    ds = datasets.generate("advection1", 24, store="~/d.zarr", block_size=12)
    assert (home / "d.zarr").is_dir() and ds.sizes["sample"] == 24
    opened = open_dataset("~/d.zarr")
    model = RandomFeatureOperator(n_features=30, random_state=0).fit("~/d.zarr")
    assert model.save("~/m.zarr") == "~/m.zarr" and (home / "m.zarr").is_dir()
    loaded = RandomFeatureOperator.load("~/m.zarr")
    np.testing.assert_array_equal(
        loaded.predict(opened["input"]).values, model.predict(opened["input"]).values
    )
    assert not list(work.iterdir())  # nothing named '~' here


@pytest.mark.cluster
def test_a_fit_on_a_cluster_without_workers_waits_for_one_then_says_so(monkeypatch):
    """A dual fit of dask arrays on a client whose cluster had no workers (not yet scaled up, or
    workers restarted again and again by their nannies) raised ZeroDivisionError from the slab
    layout; now it waits a little for a first worker, which it then uses, and else says what is
    wrong, leaving the model unfitted."""
    from distributed import Client, LocalCluster

    from rfol_dask import placement
    from rfol_dask.progress import NoWorkersError

    U, V = smooth_operator_data(80, 8)
    dU, dV = da.from_array(U, chunks=40), da.from_array(V, chunks=40)
    model = RandomFeatureOperator(n_features=200, gamma=0.05, random_state=0, solver="dual")
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        monkeypatch.setattr(placement, "WORKER_WAIT_S", 0.5)
        with pytest.raises(
            NoWorkersError, match=r"no workers \(none arrived within 0.5 s\): start some"
        ):
            model.fit(dU, dV)
        assert not hasattr(model, "coef_")
        monkeypatch.setattr(placement, "WORKER_WAIT_S", 60)
        cluster.scale(1)  # not there yet when the fit starts: waited for
        model.fit(dU, dV)
        assert len(client.scheduler_info()["workers"]) == 1
    ref = RandomFeatureOperator(n_features=200, gamma=0.05, random_state=0, solver="dual").fit(U, V)
    assert (
        rel(model.predict(U[:5]), ref.predict(U[:5])) < 1e-6
    )  # alpha 1e-10: the dask and numpy fits round apart


@pytest.mark.cluster
def test_a_median_gamma_fit_on_a_cluster_without_workers_says_so(monkeypatch):
    """``gamma="median"`` samples the inputs before the fit's graph, in a compute that waited for
    ever on a cluster without workers: the check for workers comes first."""
    from distributed import Client, LocalCluster

    from rfol_dask import placement
    from rfol_dask.progress import NoWorkersError

    U, V = smooth_operator_data(80, 8)
    monkeypatch.setattr(placement, "WORKER_WAIT_S", 0.5)
    model = RandomFeatureOperator(n_features=50, gamma="median", random_state=0)
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster),
    ):
        with pytest.raises(NoWorkersError, match=r"no workers \(none arrived within 0.5 s\)"):
            model.fit(da.from_array(U, chunks=40), da.from_array(V, chunks=40))
    assert not hasattr(model, "coef_")


def test_kernel_fits_of_masked_dask_rows_with_empty_chunks_warn_nothing():
    """Rows picked by a boolean mask, with ``compute_chunk_sizes()`` as the error for unknown chunk
    sizes advises, leave empty chunks where a block kept no row: the kernel fits took the mean
    of each empty block for the centre of its distances and warned 'Mean of empty slice' and
    'invalid value encountered in divide' a dozen times (the fit was right)."""
    import warnings

    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(60, 8)
    keep = np.ones(60, bool)
    keep[10:20] = keep[40:50] = False
    dU, dV = (
        da.from_array(A, chunks=(10, -1))[da.from_array(keep, chunks=10)].compute_chunk_sizes()
        for A in (U, V)
    )
    assert 0 in dU.chunks[0]
    for make in (lambda: KernelOperator(nugget=1e-6), lambda: KernelOperatorCV()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = make().fit(dU, dV)
            got = model.predict(dU).compute()
        ref = make().fit(U[keep], V[keep])
        assert getattr(model, "best_params_", None) == getattr(ref, "best_params_", None)
        assert (
            rel(got, ref.predict(U[keep])) < 1e-8
        )  # the sums' order: rounding under nuggets down to 1e-7


@pytest.mark.parametrize("cv", [False, True])
def test_a_kernel_model_does_not_change_when_the_caller_changes_its_training_array(cv):
    """The kernel model keeps its training inputs; changing the caller's array after the fit (in
    place) changed its predictions, and a save wrote the changed inputs. It keeps a copy, as
    scikit-learn's GaussianProcessRegressor does by default."""
    from rfol_dask.baselines import KernelOperator, KernelOperatorCV

    rng = np.random.default_rng(0)
    U = rng.standard_normal((40, 6))
    V = np.sin(U)
    model = (
        KernelOperatorCV(kernels=("rbf",), cv=3) if cv else KernelOperator(length_scale=2.0)
    ).fit(U, V)
    before = model.predict(U[:5].copy())
    U *= 2.0
    np.testing.assert_array_equal(model.predict(U[:5] / 2.0), before)
    assert not np.shares_memory((model.best_estimator_ if cv else model).X_train_, U)


def test_boolean_operands_are_refused_in_memory_as_on_dask():
    """numpy booleans were fitted as 0 and 1 where dask and array API ones are refused; refused
    alike now, saying how to give them as numbers."""
    U, V = smooth_operator_data(30, 8)
    mask = U > 0
    for data in (mask, da.from_array(mask, chunks=10)):
        with pytest.raises(TypeError, match="U must hold real numbers, got dtype bool"):
            _rf().fit(data, V)
    with pytest.raises(
        TypeError,
        match=r"U must hold real numbers, got dtype bool \(as 0 and 1: U.astype\(float\)\)",
    ):
        _rf().fit(mask, V)
    _rf().fit(mask.astype(float), V)
