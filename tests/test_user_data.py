"""A user's own data on the first try: their variable and dim names, NetCDF files, bad samples
named by label, small dask data fitted in memory (issue 37)."""

import logging

import dask
import numpy as np
import pytest
import xarray as xr

from rfol_dask import RandomFeatureOperator


@pytest.fixture
def burgers():
    """A 1-D Burgers-like set with the user's names: dims ``case`` and ``x``, ``u0`` -> ``uT``."""
    rng = np.random.default_rng(0)
    x = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    u0 = sum(rng.normal(size=(120, 1)) * np.sin((k + 1) * x) for k in range(3))
    cases = np.arange(1000, 1120)
    return xr.Dataset(
        {"u0": (("case", "x"), u0), "uT": (("case", "x"), 0.8 * np.roll(u0, 3, axis=1))},
        coords={"case": cases, "x": x},
    )


def _model():
    return RandomFeatureOperator(n_features=200, random_state=0)


@pytest.mark.parametrize("fmt", ["zarr", "nc"])
@pytest.mark.slow
def test_stores_fit_predict_and_score_with_the_user_s_names(burgers, tmp_path, fmt):
    path = tmp_path / f"b.{fmt}"
    burgers.to_zarr(path) if fmt == "zarr" else burgers.to_netcdf(path)
    model = _model().fit(path, input="u0", output="uT", sample_dim="case")
    assert (model.input_name_, model.output_name_, model.sample_dim_) == ("u0", "uT", "case")
    pred = model.predict(path)  # the names the model remembers
    assert pred.dims == ("case", "x") and (pred.case.values == burgers.case.values).all()
    want = _model().fit(burgers.u0.values, burgers.uT.values).predict(burgers.u0.values)
    np.testing.assert_allclose(pred.values, want, rtol=1e-8, atol=1e-10)
    assert model.score(path) == pytest.approx(model.score(burgers.u0, burgers.uT))
    loaded = type(model).load(model.save(tmp_path / "m.zarr"))
    assert loaded.sample_dim_ == "case" and loaded.predict(burgers).dims == ("case", "x")


def test_a_model_fitted_on_numpy_predicts_a_dataarray_with_another_sample_dim(burgers):
    model = _model().fit(burgers.u0.values, burgers.uT.values)
    pred = model.predict(burgers.u0, sample_dim="case")
    assert pred.dims[0] == "case" and (pred.case.values == burgers.case.values).all()
    with pytest.raises(ValueError, match="none named 'sample': pass sample_dim='case'"):
        model.predict(burgers.u0)


def test_one_message_lists_the_dims_to_rename(burgers):
    model = _model().fit(burgers, input="u0", output="uT", sample_dim="case")
    bad = burgers.u0.expand_dims(level=[0]).rename(case="n", x="xx")
    with pytest.raises(ValueError) as err:
        model.predict(bad)
    assert "u0.rename() its dims ['level', 'n', 'xx'] to ['case', 'x']" in str(err.value)
    assert "sample_dim='n'" in str(err.value)
    with pytest.raises(ValueError, match=r"has no variable 'input' or 'output'.*input='u0'"):
        _model().fit(burgers)


@pytest.mark.parametrize("lazy", [False, True])
def test_bad_samples_are_named_by_label_with_the_fix(burgers, lazy):
    bad = burgers.copy(deep=True)
    bad.u0[[3, 17, 100]] = np.nan
    bad = bad.chunk(case=40) if lazy else bad
    match = r"u0 holds NaN or infinity in 3 samples \(case 1003, 1017, 1100\).*dropna\('case'"
    with pytest.raises(ValueError, match=match):
        _model().fit(bad, input="u0", output="uT", sample_dim="case")
    model = _model().fit(burgers, input="u0", output="uT", sample_dim="case")
    with pytest.raises(ValueError, match=r"\(case 1(003|017|100).*before predicting"):
        dask.compute(model.predict(bad.u0))


def test_small_dask_data_are_fitted_in_memory_with_a_log_line(burgers, caplog):
    lazy = burgers.chunk(case=40)
    with dask.config.set({"rfol_dask.in-memory-fraction": 0.1}):
        with caplog.at_level(logging.INFO, logger="rfol_dask"):
            model = _model().fit(lazy, input="u0", output="uT", sample_dim="case")
    assert "into memory" in caplog.text
    want = _model().fit(burgers, input="u0", output="uT", sample_dim="case")
    np.testing.assert_allclose(model.coef_, want.coef_, rtol=1e-10, atol=1e-12)


def _sines(x, cases):
    """Burgers-like pairs on any grid ``x`` of [0, 2 pi): smooth ``u0`` and ``uT``, a nonlinear
    map of it (advected, squared, damped), the same functions on every grid."""
    c = np.random.default_rng(len(cases)).normal(size=(len(cases), 3))
    u0 = c @ np.sin(np.outer(np.arange(1, 4), x))
    uT = 0.8 * (c @ np.sin(np.outer(np.arange(1, 4), x - 0.5))) + 0.1 * u0**2
    return xr.Dataset(
        {"u0": (("case", "x"), u0), "uT": (("case", "x"), uT)}, coords={"case": cases, "x": x}
    )


def test_a_model_predicts_and_scores_a_store_of_a_finer_periodic_grid(tmp_path):
    x32, x64 = (np.linspace(0, 2 * np.pi, n, endpoint=False) for n in (32, 64))
    fine = _sines(x64, np.arange(5000, 5040))
    fine.to_netcdf(tmp_path / "fine.nc")
    names = dict(input="u0", output="uT", sample_dim="case")
    model = _model().fit(_sines(x32, np.arange(1000, 1200)), **names, periods={"x": 2 * np.pi})
    pred = model.predict(tmp_path / "fine.nc", output_grid={"x": x64})
    assert pred.sizes == {"case": 40, "x": 64}
    from rfol_dask.metrics import r2_score

    score = model.score(tmp_path / "fine.nc")  # predicted on the grid of the store's uT
    assert score == pytest.approx(r2_score(fine.uT, pred), rel=1e-12) and score > 0.99


@pytest.mark.parametrize("fmt", ["zarr", "nc"])
def test_a_search_fits_predicts_and_scores_a_store_with_the_user_s_names(burgers, tmp_path, fmt):
    from rfol_dask import RandomFeatureOperatorCV

    path = tmp_path / f"b.{fmt}"
    burgers.to_zarr(path) if fmt == "zarr" else burgers.to_netcdf(path)
    search = RandomFeatureOperatorCV(n_features=100, random_state=0)
    search.fit(path, input="u0", output="uT", sample_dim="case")  # the refit reads them too
    best = search.best_estimator_
    assert (best.input_name_, best.output_name_, best.sample_dim_) == ("u0", "uT", "case")
    assert search.predict(path).dims == ("case", "x")
    assert search.score(burgers, input="u0", output="uT") == pytest.approx(search.score(path))


@pytest.mark.parametrize("fmt", ["zarr", "nc"])
def test_a_store_s_bad_samples_are_named_by_label_across_its_chunks(burgers, tmp_path, fmt):
    big = xr.concat([burgers.assign_coords(case=burgers.case + 120 * i) for i in range(5)], "case")
    big.u0[[3, 17, 500]] = np.nan
    path = tmp_path / f"bad.{fmt}"
    big.chunk(case=64).to_zarr(path) if fmt == "zarr" else big.to_netcdf(path)
    match = r"u0 holds NaN or infinity in 3 samples \(case 1003, 1017, 1500\).*dropna\('case'"
    with pytest.raises(ValueError, match=match):
        _model().fit(path, input="u0", output="uT", sample_dim="case")


@pytest.mark.slow
def test_a_store_without_the_default_names_gets_every_name_in_one_message(burgers, tmp_path):
    burgers.to_zarr(tmp_path / "b.zarr")
    fix = r"fit\(ds, input='u0', output='uT', sample_dim='case'\)"
    with pytest.raises(ValueError, match=fix):
        _model().fit(tmp_path / "b.zarr")
