"""Grids: mappings matched by dim name, shapes checked, coordinates that are no grid refused,
periodic axes sampled whole, recovery options checked at fit."""

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


def _periodic_data(n=64, M=80):
    x = np.arange(n) / n
    rng = np.random.default_rng(1)
    c = rng.standard_normal((M, 3))
    U = c[:, :1] * np.sin(2 * np.pi * x) + c[:, 1:2] * np.cos(4 * np.pi * x) + c[:, 2:]
    return x, U, np.roll(U, 5, axis=1) + 0.1 * U**2


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

    def field(X, Y):
        return np.einsum("mij,ia,jb->mab", c, np.array([X**0, X, X**2]), np.array([Y**0, Y, Y**2]))

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


def test_numeric_coordinates_that_are_no_grid_are_refused():
    """A repeated or NaN coordinate value was taken for "no grid", the values read by position."""
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


def test_recovery_options_are_checked_at_fit_and_rf_needs_an_int_seed():
    """Options of ``recovery`` were read only by the first predict on another grid (a typo fitted
    fine); a Generator seed of the 'rf' map drew other features at each predict."""
    x, U, V = _periodic_data(32, 40)
    for recovery, match in [
        ({"kind": "rf", "n_feature": 64}, "unexpected keyword argument 'n_feature'"),
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
