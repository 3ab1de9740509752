"""Recovery maps (R_U, R_V) and training / predicting across resolutions."""

import warnings

import dask.array as da
import numpy as np
import pytest
import xarray as xr

from rfol_dask import RandomFeatureOperator
from rfol_dask.metrics import relative_l2_error
from rfol_dask.recovery import KINDS, as_grid, make_recovery

# the heat model reads its periodic grid spectrally without a given period (n h); the warning
# that this asks for is tested in test_periodic.py
pytestmark = pytest.mark.filterwarnings("ignore:recovery 'spectral' reads")


def bandlimited(x, y=None):
    """A periodic function on [0, 1) (or [0, 1)^2) with modes |k| <= 5."""
    f = np.cos(2 * np.pi * 3 * x) + 0.5 * np.sin(2 * np.pi * 5 * x) + 0.2
    if y is None:
        return f
    return f[:, None] * (np.sin(2 * np.pi * 2 * y) + 1.0)[None, :]


def smooth(x):
    return np.sin(3 * x) + np.exp(-x) * np.cos(7 * x)


def periodic(n):
    return np.arange(n) / n


# ---------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("n", [16, 17])
@pytest.mark.parametrize("out", ["finer", "coarser", "shifted", "scattered"])
def test_spectral_reproduces_bandlimited_functions(n, out):
    x = periodic(n)
    y = {
        "finer": periodic(64),
        "coarser": periodic(12),
        "shifted": periodic(20) + 0.013,
        "scattered": np.sort(np.random.default_rng(0).uniform(0, 0.99, 30)),
    }[out]
    R = make_recovery("spectral", x)
    np.testing.assert_allclose(R.resample(bandlimited(x)[None], y)[0], bandlimited(y), atol=1e-10)


def test_spectral_2d_reproduces_bandlimited_functions():
    x1, x2 = periodic(12), periodic(9)
    y1, y2 = periodic(40), np.linspace(0, 0.9, 7)
    values = np.stack([bandlimited(x1, x2), 2 * bandlimited(x1, x2)])
    out = make_recovery("spectral", (x1, x2)).resample(values, (y1, y2))
    np.testing.assert_allclose(
        out, np.stack([bandlimited(y1, y2), 2 * bandlimited(y1, y2)]), atol=1e-10
    )


def test_grid_interpolation_is_exact_on_polynomials():
    x = np.array([0.0, 0.1, 0.25, 0.3, 0.55, 0.8, 1.0])  # non-uniform
    y = np.linspace(0, 1, 50)
    cubic = lambda t: 1 - 2 * t + 3 * t**2 - 4 * t**3  # noqa: E731
    line = lambda t: 0.5 - 2 * t  # noqa: E731
    np.testing.assert_allclose(
        make_recovery("cubic", x).resample(cubic(x)[None], y)[0], cubic(y), atol=1e-12
    )
    np.testing.assert_allclose(
        make_recovery("linear", x).resample(line(x)[None], y)[0], line(y), atol=1e-12
    )
    near = make_recovery("nearest", x).resample(x[None], x[:-1] + 0.01)[0]
    np.testing.assert_array_equal(near, x[:-1])


@pytest.mark.parametrize("separable", [True, False])
def test_rf_interpolant_reproduces_grid_nodes(separable):
    """With a small ridge and a well-conditioned Gram the min-norm interpolant matches the data
    at the nodes (evaluated at a subset of them, so no shortcut applies)."""
    x1, x2 = np.linspace(0, 1, 15), np.linspace(0, 2, 12)
    values = np.stack([bandlimited(x1, x2), -(bandlimited(x1, x2) ** 2)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no jitter needed
        R = make_recovery("rf", (x1, x2), gamma=2.0, ridge=1e-12, separable=separable)
    out = R.resample(values, (x1[::2], x2[1::3]))
    np.testing.assert_allclose(out, values[:, ::2, 1::3], atol=1e-8)
    x = np.linspace(0, 1, 41)
    R1 = make_recovery({"kind": "rf", "distribution": "cauchy"}, x, gamma=2.0, ridge=0.0)
    np.testing.assert_allclose(R1.resample(smooth(x)[None], x[1::3])[0], smooth(x[1::3]), atol=1e-8)


# ---------------------------------------------------------------------------- convergence


def _max_error(kind, n, **options):
    x, y = np.linspace(0, 1, n), np.linspace(0, 1, 1001)
    return np.abs(
        make_recovery(kind, x, **options).resample(smooth(x)[None], y)[0] - smooth(y)
    ).max()


@pytest.mark.parametrize("kind,rate", [("cubic", 4.0), ("linear", 2.0)])
@pytest.mark.slow
def test_grid_interpolation_converges_at_its_order(kind, rate):
    ns = [21, 41, 81, 161]
    errors = [_max_error(kind, n) for n in ns]
    rates = np.diff(np.log(errors)) / np.diff(np.log([1 / (n - 1) for n in ns]))
    assert np.all(np.abs(rates - rate) < 0.5), rates


def test_spectral_converges_exponentially_on_analytic_periodic_function():
    f = lambda t: np.exp(np.sin(2 * np.pi * t))  # noqa: E731
    y = np.linspace(0, 0.999, 777)
    errors = [
        np.abs(
            make_recovery("spectral", periodic(n)).resample(f(periodic(n))[None], y)[0] - f(y)
        ).max()
        for n in (8, 16, 32)
    ]
    assert errors[0] > 1e-3 and errors[1] < 1e-5 and errors[2] < 1e-12, errors


@pytest.mark.slow
def test_rf_interpolant_converges_and_cubic_is_better_default():
    """The RF interpolant (defaults) improves with the grid, but less than cubic: the measured
    reason why cubic is the default."""
    rf = [_max_error("rf", n) for n in (13, 26, 51, 101)]
    cubic = [_max_error("cubic", n) for n in (13, 26, 51, 101)]
    assert rf[-1] < rf[0] / 3 and rf[-1] < 1e-3, rf
    assert all(c <= r for c, r in zip(cubic, rf))


# ---------------------------------------------------------------------------- chunking, dtype


@pytest.mark.parametrize("kind", KINDS)
def test_resample_is_invariant_to_sample_chunking(kind):
    x1, x2 = periodic(10), periodic(8)
    rng = np.random.default_rng(0)
    values = rng.standard_normal((9, 10, 8))
    R = make_recovery(kind, (x1, x2))
    grid_out = (
        periodic(15) if kind == "spectral" else np.linspace(0, 0.9, 15),
        np.linspace(0.05, 0.8, 6),
    )
    ref = R.resample(values, grid_out)
    assert ref.shape == (9, 15, 6)
    for chunks in (9, 3, 1):
        lazy = R.resample(da.from_array(values, chunks=(chunks, -1, -1)), grid_out)
        assert (
            isinstance(lazy, da.Array)
            and lazy.chunks[0] == da.from_array(values, chunks=chunks).chunks[0]
        )
        np.testing.assert_allclose(lazy.compute(), ref, rtol=1e-12, atol=1e-12)
    # one sample at a time gives the same values too
    np.testing.assert_allclose(
        np.stack([R.resample(v, grid_out) for v in values]), ref, rtol=1e-12, atol=1e-12
    )


def test_float32_in_float32_out_and_flat_values():
    x = np.linspace(0, 1, 9)
    R = make_recovery("cubic", (x, x))
    values = np.ones((2, 9, 9), dtype=np.float32)
    out = R.resample(values, (x[:4], x))
    assert out.dtype == np.float32 and out.shape == (2, 4, 9)
    np.testing.assert_allclose(R.resample(values.reshape(2, -1), (x[:4], x)), out)


# ---------------------------------------------------------------------------- operator across grids


def heat_data(n_samples, x, t=0.002, seed=0):
    """Periodic inputs with modes 1..6 and their heat-semigroup evolution exp(t Lap) u (exact)."""
    rng = np.random.default_rng(seed)
    k = np.arange(1, 7)
    a, b = (rng.standard_normal((n_samples, k.size)) / k for _ in range(2))
    S, C = np.sin(2 * np.pi * np.outer(k, x)), np.cos(2 * np.pi * np.outer(k, x))
    d = np.exp(-4 * np.pi**2 * k**2 * t)
    return a @ S + b @ C, (a * d) @ S + (b * d) @ C


@pytest.fixture(scope="module")
def heat_model():
    x = periodic(32)
    U, V = heat_data(300, x)
    model = RandomFeatureOperator(
        n_features=1500,
        distribution="gaussian",
        gamma=1e-3,
        alpha=1e-10,
        random_state=0,
        recovery="spectral",
    )
    return model.fit(U, V, input_grid=x, output_grid=x), x


@pytest.mark.parametrize("n_test", [48, 64, 128])
@pytest.mark.slow
def test_model_trained_on_coarse_grid_predicts_on_finer_grids(heat_model, n_test):
    """Heat semigroup learned at 32 points: read at 48 / 64 / 128 points through R_U, written
    there through R_V, with the same accuracy as at the training resolution."""
    model, x = heat_model
    Ut, Vt = heat_data(100, x, seed=1)
    same = relative_l2_error(Vt, model.predict(Ut))
    assert same < 1e-2
    y = periodic(n_test)
    Uf, Vf = heat_data(100, y, seed=1)
    cross = relative_l2_error(Vf, model.predict(Uf, input_grid=y, output_grid=y))
    assert cross < 1.05 * same + 1e-9, (same, cross)
    # the xarray route: coordinates in, coordinates out
    X = xr.DataArray(Uf, dims=("sample", "x"), coords={"x": y, "sample": np.arange(100)})
    pred = model.predict(X, output_grid=y)
    assert pred.dims == ("sample", "dim_0") and np.array_equal(
        pred["dim_0"].values, y
    )  # fitted on numpy
    assert relative_l2_error(Vf, pred) == pytest.approx(cross, rel=1e-10)
    lazy = model.predict(X.chunk({"sample": 33}), output_grid=y)
    assert isinstance(lazy.data, da.Array)
    np.testing.assert_allclose(lazy.values, pred.values, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_cubic_recovery_on_non_periodic_grids():
    """Endpoint-including grids of [0, 1] with the default cubic maps: train at 33 points,
    test at 65 and 50 points."""
    x = np.linspace(0, 1, 33)
    U, V = heat_data(300, x)
    Ut, Vt = heat_data(100, x, seed=1)
    da_in = lambda A, g: xr.DataArray(A, dims=("sample", "x"), coords={"x": g})  # noqa: E731
    model = RandomFeatureOperator(
        n_features=1500, distribution="gaussian", gamma=1e-3, random_state=0
    )
    model.fit(da_in(U, x), da_in(V, x))
    assert model.recovery == "cubic" and np.array_equal(model.input_grid_[0], x)
    same = relative_l2_error(Vt, model.predict(Ut))
    for n in (65, 50):
        y = np.linspace(0, 1, n)
        Uf, Vf = heat_data(100, y, seed=1)
        pred = model.predict(da_in(Uf, y), output_grid={"x": y})
        assert pred.shape == (100, n)
        cross = relative_l2_error(Vf, pred)
        assert cross < 1.5 * same, (same, cross)


@pytest.mark.slow
def test_save_load_keeps_grids_and_recovery(tmp_path, heat_model):
    model, x = heat_model
    model2 = RandomFeatureOperator(
        **{**model.get_params(), "recovery": ("linear", {"kind": "rf", "ridge": 1e-8})}
    )
    model2.fit(*heat_data(50, x), input_grid=x, output_grid={"x": x})
    for m in (model, model2):
        loaded = RandomFeatureOperator.load(m.save(tmp_path / f"m{id(m)}.zarr"))
        assert loaded.recovery == m.recovery
        np.testing.assert_array_equal(loaded.input_grid_[0], m.input_grid_[0])
        y = np.linspace(0, 31 / 32, 40)  # inside the domain of the non-periodic maps too
        Uf, _ = heat_data(5, y, seed=2)
        np.testing.assert_array_equal(
            loaded.predict(Uf, input_grid=y, output_grid=y),
            m.predict(Uf, input_grid=y, output_grid=y),
        )


def test_same_grid_keeps_old_behaviour(heat_model):
    model, x = heat_model
    Ut, _ = heat_data(10, x, seed=3)
    ref = model.predict(Ut)
    np.testing.assert_array_equal(model.predict(Ut, input_grid=x, output_grid=x), ref)
    # a model fitted without grids still predicts on its own grid
    plain = RandomFeatureOperator(n_features=100, random_state=0).fit(*heat_data(20, x))
    assert plain.input_grid_ is None and plain.output_grid_ is None
    assert plain.predict(Ut).shape == (10, 32)


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("kind", ["numpy", "xarray", "dask"])
def test_predict_validates_its_output_grid_once(heat_model, kind, monkeypatch):
    """A numpy predict with output_grid validated the grid before its memory check and again when
    the prediction was resampled to it; every predict now validates it once (the errors are
    test_grid_errors')."""
    from rfol_dask.resampling import ResamplingMixin

    model, x = heat_model
    Ut, _ = heat_data(4, x)
    y = periodic(64)
    ref = model.predict(Ut, output_grid=y)
    X = {
        "numpy": Ut,
        "dask": da.from_array(Ut, chunks=2),
        "xarray": xr.DataArray(Ut, dims=("sample", "dim_0"), coords={"dim_0": x}),
    }[kind]
    calls, validate = [], ResamplingMixin._new_output_grid

    def counted(self, output_grid):
        calls.append(output_grid)
        return validate(self, output_grid)

    monkeypatch.setattr(ResamplingMixin, "_new_output_grid", counted)
    pred = model.predict(X, output_grid=y)
    assert len(calls) == 1
    np.testing.assert_array_equal(np.asarray(pred), ref)


def test_grid_errors(heat_model):
    model, x = heat_model
    Ut, _ = heat_data(4, x)
    y = periodic(64)
    Uf, _ = heat_data(4, y)
    with pytest.raises(
        ValueError, match="output_grid has 2 axes but the model was trained on a 1-D"
    ):
        model.predict(Ut, output_grid=(y, y))
    with pytest.raises(ValueError, match="input_grid has 2 axes"):
        model.predict(Uf, input_grid=(y, y))
    with pytest.raises(
        ValueError, match=r"output_grid spans \[0, 2\] along axis 0, outside the domain"
    ):
        model.predict(Ut, output_grid=np.linspace(0, 2, 10))
    with pytest.raises(ValueError, match="must cover the training domain"):
        model.predict(Uf[:, :32], input_grid=y[:32])
    with pytest.raises(ValueError, match="outside the training domain"):
        model.predict(Uf, input_grid=2 * y)
    with pytest.raises(ValueError, match=r"X has shape \(4, 64\) but input_grid has shape \(50,\)"):
        model.predict(Uf, input_grid=periodic(50))
    plain = RandomFeatureOperator(n_features=50, random_state=0).fit(*heat_data(20, x))
    with pytest.raises(
        ValueError, match="fitted without input grid coordinates.*fit\\(input_grid=...\\)"
    ):
        plain.predict(Uf, input_grid=y)
    with pytest.raises(ValueError, match="fitted without output grid"):
        plain.predict(Ut, output_grid=y)
    with pytest.raises(
        ValueError, match=r"input_grid has shape \(31,\) but the input functions have grid shape"
    ):
        RandomFeatureOperator(n_features=50).fit(*heat_data(20, x), input_grid=periodic(31))
    with pytest.raises(ValueError, match="unknown recovery kind 'bicubic'"):
        RandomFeatureOperator(n_features=50, recovery=("cubic", "bicubic")).fit(*heat_data(20, x))


def test_recovery_errors():
    x = np.linspace(0, 1, 8)
    with pytest.raises(ValueError, match="unknown recovery kind 'spline'"):
        make_recovery("spline", x)
    with pytest.raises(ValueError, match="spectral resampling needs uniform periodic axes; axis 0"):
        make_recovery("spectral", x**2)
    with pytest.raises(ValueError, match="axis 0 must be strictly increasing"):
        as_grid(x[::-1])
    with pytest.raises(TypeError, match="takes no options"):
        make_recovery("cubic", x, gamma=1.0)
    R = make_recovery("cubic", (x, x))
    with pytest.raises(ValueError, match="grid_out has 1 axes but the recovery grid has 2"):
        R.resample(np.zeros((2, 8, 8)), x)
    with pytest.raises(
        ValueError, match=r"values have shape \(2, 8, 7\) but the recovery grid has shape \(8, 8\)"
    ):
        R.resample(np.zeros((2, 8, 7)), (x, x))
    with pytest.raises(ValueError, match="NaN or Inf"):
        R.resample(np.full((1, 8, 8), np.nan), (x, x[:3]))
    with pytest.raises(ValueError, match=r"outside the domain \[0, 1\]"):
        R.resample(np.zeros((1, 8, 8)), (x, x - 0.1))
    with pytest.raises(ValueError, match="Gram of grid axes .* is singular with ridge=0"):
        make_recovery("rf", np.linspace(0, 1, 41), ridge=0.0)


@pytest.mark.slow
def test_joint_rf_recovery_checks_its_features_and_maps_before_making_them(monkeypatch):
    """The non-separable "rf" map holds its features (n x 16 n, 16 x its Gram) beside its Gram,
    and per output grid the output points' features: only the Gram was checked, and predicting
    from a 100 x 100 grid ran out of memory on the 10000 x 160000 features (11.9 GiB). Both
    are refused before they are made (a 100 MB machine here: a 60 MB budget)."""
    import collections

    import psutil

    g16 = np.linspace(0, 1, 16)
    U = bandlimited(g16, g16)[None] * np.linspace(0.5, 1.5, 12)[:, None, None]
    model = RandomFeatureOperator(
        n_features=50, random_state=0, recovery={"kind": "rf", "separable": False}
    )
    model.fit(U, U, input_grid=[g16, g16], output_grid=[g16, g16])
    memory = collections.namedtuple("memory", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory(100e6, 100e6))
    g = np.linspace(0, 1, 40)  # 1600 points, 25600 features
    with pytest.raises(
        ValueError,
        match=r"1600 x 1600 Gram matrix needs 20,480,000 bytes .*and 348,774,400 more "
        r"bytes for the 1600 x 25600 features .* held with it, .*\(separable=True",
    ):
        model.predict(np.zeros((1, 40, 40)), input_grid=[g, g])
    g = np.linspace(0, 1, 60)  # the training grid's map to 3600 output points
    with pytest.raises(
        ValueError, match=r"the 3600 x 4096 features of the output points \(117,964,800 bytes\)"
    ):
        model.predict(U[:1], output_grid=[g, g])
