"""Periodic grids: the period is part of the grid (coordinate attribute ``period`` or
``fit(periods=)``); recovery then wraps, so any grid of the period is valid."""

import warnings

import numpy as np
import pytest
import xarray as xr

from rfol_dask import RandomFeatureOperator, datasets
from rfol_dask.datasets.registry import get, names, resolve_params
from rfol_dask.recovery import make_recovery

K = np.arange(1, 4)


def functions(a, x):
    """Smooth 1-periodic inputs u (M, len(x)) with modes 1-3 and outputs v = u + 0.3 u^2."""
    u = a @ np.sin(2 * np.pi * np.outer(K, x)) + (a**2) @ np.cos(2 * np.pi * np.outer(K, x))
    return u, u + 0.3 * u**2


def as_xarray(values, x, period=1.0):
    out = xr.DataArray(values, dims=("sample", "x"), coords={"x": x})
    if period is not None:
        out["x"].attrs["period"] = period
    return out


@pytest.fixture(scope="module")
def trained():
    a = np.random.default_rng(0).standard_normal((400, K.size)) / K
    x = np.arange(64) / 64
    U, V = functions(a, x)
    model = RandomFeatureOperator(
        n_features=600, distribution="gaussian", gamma=1e-4, alpha=1e-10, random_state=0
    )
    return model.fit(as_xarray(U, x), as_xarray(V, x)), x


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b))


@pytest.mark.slow
def test_model_trained_at_64_points_predicts_at_96(trained):
    model, x = trained
    assert model.input_periods_ == (1.0,) and model.output_periods_ == (1.0,)
    a = np.random.default_rng(1).standard_normal((30, K.size)) / K
    U64, V64 = functions(a, x)
    x96 = np.arange(96) / 96
    U96, V96 = functions(a, x96)
    base = rel(model.predict(as_xarray(U64, x)), V64)
    assert base < 1e-2
    out = model.predict(as_xarray(U64, x), output_grid=x96)  # refused before: outside [0, 0.984375]
    assert out.shape == (30, 96) and np.allclose(out["x"], x96)
    assert rel(out, V96) < 2 * base
    # inputs on the finer grid are read through the periodic R_U
    assert rel(model.predict(as_xarray(U96, x96)), V64) < 2 * base
    # any grid in [0, period) is valid, also one past the last training point only
    tail = np.array([0.99, 0.995])
    assert rel(model.predict(U64, output_grid=tail), functions(a, tail)[1]) < 2 * base


@pytest.mark.slow
def test_spectral_option_and_numpy_periods():
    a = np.random.default_rng(2).standard_normal((200, K.size)) / K
    x, x96 = np.arange(32) / 32, np.arange(96) / 96
    U, V = functions(a, x)
    for recovery in ("spectral", "cubic"):
        model = RandomFeatureOperator(
            n_features=400, distribution="gaussian", gamma=1e-4, random_state=0, recovery=recovery
        )
        model.fit(U, V, input_grid=x, output_grid=x, periods=1.0)
        assert model.output_periods_ == (1.0,)
        fine = model.predict(U[:20], output_grid=x96)
        # the output grid map alone (prediction on x, then R_V) is what differs between the kinds
        on_x = model.predict(U[:20])
        exact = make_recovery("spectral", x).resample(on_x, x96)
        err = np.abs(fine - exact).max() / np.abs(exact).max()
        assert err < (1e-12 if recovery == "spectral" else 2e-3), (recovery, err)


def test_spectral_recovery_warns_on_axes_without_a_period():
    """Non-periodic data (a ramp) on a closed grid: the spectral map takes n h as the period and
    is wrong near the ends; it says so unless the model knows the period."""
    a = np.random.default_rng(4).standard_normal((80, K.size)) / K
    x, y = np.linspace(0, 1, 33), np.linspace(0, 1, 65)
    U, V = functions(a, x)
    U, V = U + x, V + x
    model = RandomFeatureOperator(
        n_features=300, distribution="gaussian", gamma=1e-3, random_state=0, recovery="spectral"
    ).fit(U, V, input_grid=x, output_grid=x)
    with pytest.warns(
        UserWarning,
        match=r"reads the output axes dim_0 \(period 1\.03125\) as periodic.*"
        r"recovery='cubic'",
    ):
        model.predict(U[:5], output_grid=y)
    with pytest.warns(UserWarning, match="reads the input axes dim_0"):
        model.predict(functions(a[:5], y)[0] + y, input_grid=y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.predict(U[:5])  # the training grid: no recovery, no warning
        model.set_params(recovery="cubic").predict(U[:5], output_grid=y)
        model.set_params(recovery="spectral").fit(U, V, input_grid=x, output_grid=x, periods=1.0)
        model.predict(U[:5], output_grid=y)


def test_non_periodic_grids_still_refuse_outside_points():
    a = np.random.default_rng(3).standard_normal((60, K.size)) / K
    x = np.arange(64) / 64
    U, V = functions(a, x)
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(
        as_xarray(U, x, None), as_xarray(V, x, None)
    )
    assert model.input_periods_ == (None,)
    with pytest.raises(ValueError, match=r"outside the domain \[0, 0.984375\].*give its period"):
        model.predict(U, output_grid=np.arange(96) / 96)
    with pytest.raises(ValueError, match="the input must cover the training domain"):
        model.predict(as_xarray(U, x + 0.5, None))


def test_period_survives_save_and_load(trained, tmp_path):
    model, x = trained
    model.save(tmp_path / "m.zarr")
    again = RandomFeatureOperator.load(tmp_path / "m.zarr")
    assert again.input_periods_ == (1.0,) and again.output_periods_ == (1.0,)
    U = functions(np.ones((2, K.size)), x)[0]
    np.testing.assert_array_equal(
        again.predict(U, output_grid=np.arange(96) / 96),
        model.predict(U, output_grid=np.arange(96) / 96),
    )


def test_period_errors():
    x = np.linspace(0, 1, 11)
    U, V = functions(np.ones((12, K.size)), x)
    with pytest.raises(ValueError, match=r"spans \[0, 1\], more than its period 0.5"):
        RandomFeatureOperator(n_features=20).fit(U, V, input_grid=x, output_grid=x, periods=0.5)
    with pytest.raises(ValueError, match=r"periods= needs the input grid coordinates"):
        RandomFeatureOperator(n_features=20).fit(U, V, periods=1.0)
    with pytest.raises(ValueError, match="input grid has 2 entries but the grid has 1 axes"):
        RandomFeatureOperator(n_features=20).fit(
            U, V, input_grid=x, output_grid=x, periods=(1.0, 1.0)
        )
    with pytest.raises(ValueError, match=r"periods names dims \['t'\]"):
        RandomFeatureOperator(n_features=20).fit(
            as_xarray(U, x), as_xarray(V, x), periods={"t": 1.0}
        )
    with pytest.raises(ValueError, match="must be a positive number"):
        RandomFeatureOperator(n_features=20).fit(U, V, input_grid=x, output_grid=x, periods=-1.0)


def test_closed_periodic_grid_wraps():
    """A grid with both end points (linspace(0, 1, n), as the advection sets): the last value
    repeats the first; points anywhere on the circle are valid."""
    f = lambda x: np.sin(2 * np.pi * x) + 0.3 * np.cos(4 * np.pi * x)  # noqa: E731
    x = np.linspace(0, 1, 41)
    y = np.linspace(-0.3, 1.7, 57)
    for kind, tol in (("cubic", 1e-4), ("spectral", 1e-12), ("linear", 1e-2)):
        got = make_recovery(kind, x, periods=1.0).resample(f(x)[None], y)[0]
        assert np.abs(got - f(y)).max() < tol, kind
    with pytest.raises(ValueError, match="outside the domain"):
        make_recovery("cubic", x).resample(f(x)[None], y)


def test_generators_write_units_and_period():
    periodic = {
        "advection1": 1.0,
        "advection2": 1.0,
        "advection3": 1.0,
        "burgers": 1.0,
        "navier_stokes_high": 2 * np.pi,
        "navier_stokes_low": 2 * np.pi,
    }
    for name in names():
        spec = get(name)
        gin, gout = spec.grids(**resolve_params(spec, {}))
        for dim, coord in {**gin, **gout}.items():
            attrs = spec.coord_attrs(dim)
            assert attrs["units"] == "m", (name, dim)
            assert attrs.get("period") == periodic.get(name), (name, dim)
            if "period" in attrs:  # the grid lies in one period: open, or closed at x[0] + period
                assert coord[-1] - coord[0] <= attrs["period"] * (1 + 1e-12)
    ds = datasets.generate("advection1", 60, seed=0)
    assert ds["x"].attrs == {"units": "m", "period": 1.0}
    model = RandomFeatureOperator(n_features=100, random_state=0).fit(ds.isel(sample=slice(0, 50)))
    assert model.input_periods_ == (1.0,)
    test = ds["input"].isel(sample=slice(50, None))
    assert model.predict(test, output_grid=np.arange(60) / 60).shape == (10, 60)


def test_arrays_name_periodic_axes_by_the_keys_of_grid_mappings():
    # input and output grids of different axis counts: a list of periods cannot serve both sides
    rng = np.random.default_rng(0)
    U, V = rng.random((40, 20, 12)), rng.random((40, 15))
    grids = dict(
        input_grid={"x": np.arange(20) / 20, "y": np.linspace(0, 2, 12)},
        output_grid={"z": np.arange(15.0)},
    )
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(
        U, V, periods={"x": 1.0}, **grids
    )
    assert model.input_periods_ == (1.0, None) and model.output_periods_ == (None,)
    with pytest.raises(
        ValueError, match=r"periods names dims \['q'\].*input \('x', 'y'\), output \('z',\)"
    ):
        RandomFeatureOperator(n_features=50).fit(U, V, periods={"q": 1.0}, **grids)


def test_rf_recovery_on_a_periodic_axis_says_why_it_cannot_cover_it():
    rng = np.random.default_rng(0)
    x128, x64 = np.arange(128) / 128, np.arange(64) / 64
    U = np.sin(2 * np.pi * (x128[None, :] + rng.random((30, 1))))
    model = RandomFeatureOperator(n_features=40, recovery="rf", random_state=0).fit(
        U, U, input_grid=[x128], output_grid=[x128], periods=1.0
    )
    with pytest.raises(
        ValueError, match="period 1, but recovery 'rf' does not wrap periodic axes: use 'cubic'"
    ):
        model.predict(U[:, ::2], input_grid=[x64])
