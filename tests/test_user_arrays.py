"""Users' xarray data read by name: sample labels, grid labels that are not numbers, scalar
coordinates, stores and Datasets of inputs, a lone sample, '~' paths, training arrays kept."""

import dask.array as da  # noqa: F401
import numpy as np
import pytest
import xarray as xr
from conftest import stations

from rfol_dask import RandomFeatureOperator
from rfol_dask.baselines import KernelOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
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
    with pytest.raises(ValueError, match="no variable 'input'"):
        model.predict(xr.Dataset({"output": XV[:10]}))


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


def test_a_zero_dimensional_dataarray_is_refused_with_its_fix(grid2d):
    U, V = grid2d
    with pytest.raises(ValueError, match=r"X holds one sample without a 'sample' dim: add it"):
        _rf().fit(xr.DataArray(1.0), V)
    with pytest.raises(ValueError, match=r"X holds one sample .*X\.expand_dims\('sample'\)"):
        _rf().fit(U, V).predict(xr.DataArray(1.0))


def test_a_dataarray_without_samples_is_told_what_fits_the_models_dims(grid2d):
    """``predict(X[0])`` of a DataArray without a 'sample' coordinate (dims the model's grid) was
    told to rename a grid dim to 'sample', as was an array with the samples along its last dim
    (the first named); a rename is advised only where one dim is left over for the samples."""
    XU, XV = grid2d
    U = XU.drop_vars("sample")
    by_name, by_position = _rf().fit(XU, XV), _rf().fit(XU.values, XV.values)
    one = r"X\.expand_dims\('sample'\)"
    for model in (by_name, by_position):
        with pytest.raises(ValueError, match=one.format("'x', 'y'")):
            model.predict(U[0])
    with pytest.raises(ValueError, match=r"X has dims \('y', 'x'\) but the model reads"):
        by_name.predict(U[0].transpose())
    with pytest.raises(ValueError, match=r"X\.rename\(\) its dims \['t'\] to \['sample'\]"):
        by_name.predict(U.rename(sample="t").transpose("x", "y", "t"))
    with pytest.raises(ValueError, match=r"X has dims \('z', 'y'\) but the model reads"):
        by_name.predict(U[0].rename(x="z"))
    with pytest.raises(ValueError, match=r"X has dims \('y',\) and none named 'sample'"):
        by_position.predict(U[0, 0])
    np.testing.assert_allclose(
        by_name.predict(U[0].expand_dims("sample")).values, by_name.predict(XU[:1]).values
    )


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("estimator", [_rf, lambda: KernelOperator(length_scale=2.0)])
def test_grid_points_with_labels_that_are_not_numbers_are_matched_by_label(
    estimator, lazy, tmp_path
):
    """A model fitted on stations named by strings read a DataArray of the same stations in
    another order by position (predictions off by 6 where the outputs are of size 2), and one of
    other stations without a word; operands are matched by label, grid points by coordinate."""
    U, V = stations()
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
