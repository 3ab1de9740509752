"""The input centre: features ``cos((u - c) @ Omega + b)`` with ``c @ Omega`` folded into ``b``, so
that a large common offset of the inputs (pressures in Pa, temperatures in K) does not round
away the varying part of the phase in float32."""

import contextlib

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from rfol_dask import RandomFeatureOperator
from rfol_dask.features import draw_frequencies, feature_map, input_centre


def _data(M, n=128, seed=0):
    """Smooth inputs of spread about 0.5 and a nonlinear operator of them."""
    rng = np.random.default_rng(seed)
    x, k = np.linspace(0, 1, n), np.arange(1, 6)
    a = rng.standard_normal((M, k.size)) / k**2
    U = a @ np.sin(np.pi * np.outer(k, x))
    V = (a * k) @ np.cos(np.pi * np.outer(k, x[::4])) + np.sin(2 * U[:, n // 3 : n // 3 + 1])
    return U, V


def _rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b))


@pytest.mark.parametrize(
    "as_float32", [False, True]
)  # float64 data cast by the model, or float32 data
@pytest.mark.slow
def test_float32_with_a_large_offset_is_as_accurate_as_float64(as_float32):
    # at 1e4 x the spread the uncentred phase u @ Omega rounded away its varying part in float32:
    # predictions 1.2e-2 away from float64's, test error 10 % off (5e-5 and 0.03 % at no offset)
    U, V = _data(600)
    off = 1e4 * U[:400].std()
    X, Xt = U[:400] + off, U[400:] + off
    if as_float32:
        X, Xt = X.astype(np.float32), Xt.astype(np.float32)
    kw = dict(n_features=400, alpha=1e-4, random_state=1)
    p64 = RandomFeatureOperator(dtype="float64", **kw).fit(X, V[:400]).predict(Xt)
    m32 = RandomFeatureOperator(dtype="float32", **kw).fit(X, V[:400])
    p32 = m32.predict(Xt)
    assert _rel(p32, p64) < 1e-3
    assert abs(_rel(p32, V[400:]) / _rel(p64, V[400:]) - 1) < 0.02
    assert p32.dtype == np.float32 and m32.input_centre_.dtype == np.float32


def test_the_centre_and_the_median_gamma_do_not_depend_on_the_offset():
    U, V = _data(300)
    models = [
        RandomFeatureOperator(n_features=200, dtype="float32", random_state=0).fit(U + off, V)
        for off in (0.0, 1e4)
    ]
    # the median heuristic measures distances: the same scale (float64 data, measured before the
    # cast)
    assert models[0].gamma_ == pytest.approx(models[1].gamma_, rel=1e-12)
    np.testing.assert_allclose(
        models[1].input_centre_, (U[:64] + 1e4).mean(0).astype(np.float32), rtol=0
    )
    np.testing.assert_allclose(models[1].input_centre_ - 1e4, models[0].input_centre_, atol=2e-3)


@pytest.mark.slow
def test_float64_predictions_are_those_of_the_uncentred_features():
    # the centre changes how the phase is rounded, not the model: with the drawn phases b0,
    # cos((u - c) @ Omega + (b0 + c @ Omega)) = cos(u @ Omega + b0)
    U, V = _data(300)
    U = U + 3.0  # an offset of a few spreads: the uncentred reference rounds as finely as the model
    Ut = _data(100, seed=1)[0] + 3.0
    model = RandomFeatureOperator(
        n_features=250, gamma=0.05, alpha=1e-4, solver="dual", random_state=2
    ).fit(U, V)
    omega, b0 = draw_frequencies(U.shape[1], 250, "cauchy", 0.05, None, 2)
    np.testing.assert_array_equal(model.omega_, omega)
    c = model.input_centre_
    np.testing.assert_array_equal(c, U[:64].mean(0))
    np.testing.assert_allclose(np.exp(1j * model.b_), np.exp(1j * (b0 + c @ omega)), atol=1e-13)
    A, At = (np.sqrt(2 / 250) * np.cos(W @ omega + b0) for W in (U, Ut))
    mu, vbar = A.mean(0), V.mean(0)
    C = (A - mu).T @ np.linalg.solve((A - mu) @ (A - mu).T + 1e-4 * np.eye(len(A)), V - vbar)
    np.testing.assert_allclose(model.predict(Ut), (At - mu) @ C + vbar, rtol=1e-10, atol=1e-10)


def test_feature_map_centres_in_blocks_and_before_the_cast(monkeypatch):
    from rfol_dask import features

    rng = np.random.default_rng(3)
    U = rng.standard_normal((700, 9)) + 1e5
    c = input_centre(np.float64, U[:50], U[50:])  # the first 64 rows, across blocks
    np.testing.assert_array_equal(c, U[:64].mean(0))
    omega, b = draw_frequencies(9, 40, "gaussian", 0.5, None, 0, input_centre=c)
    want = np.sqrt(2 / 40) * np.cos((U - c) @ omega + b)
    monkeypatch.setattr(features, "CENTRE_BLOCK_ROWS", 256)
    monkeypatch.setattr(features, "CENTRE_BLOCK_BYTES", 1)  # blocks of 256 rows: 3, the last ragged
    np.testing.assert_allclose(feature_map(U, omega, b, input_centre=c), want, rtol=0, atol=1e-12)
    # float64 rows of a float32 model (its centre rounded to float32 before the fold): centred,
    # then cast, so the offset is not rounded into them
    c32 = c.astype(np.float32)
    omega, b = draw_frequencies(9, 40, "gaussian", 0.5, None, 0, input_centre=c32)
    want = np.sqrt(2 / 40) * np.cos((U - c32) @ omega + b)
    A32 = feature_map(U, omega.astype(np.float32), b.astype(np.float32), input_centre=c32)
    assert A32.dtype == np.float32
    np.testing.assert_allclose(A32, want, atol=2e-6)
    # cast first, the rows of a float32 model lose 1e5 x 6e-8 of their spread of 1
    assert (
        np.abs(
            feature_map(
                U.astype(np.float32),
                omega.astype(np.float32),
                b.astype(np.float32),
                input_centre=c32,
            )
            - want
        ).max()
        > 1e-4
    )


@pytest.fixture
def offset_data():
    U, V = _data(230)
    return U[:200] + 1e4, V[:200], U[200:] + 1e4


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "solver, N, config",
    [
        ("dual", 300, {}),  # streamed, slabs
        ("dual", 300, {"rfol_dask.device-features": "rows"}),  # streamed, rows mode
        ("dual", 300, {"max_gram_bytes": 50_000}),  # tiled, factorised blocked
        ("primal", 120, {}),
    ],
)
@pytest.mark.slow
def test_dask_fit_equals_the_in_memory_fit(offset_data, dtype, solver, N, config):
    U, V, Ut = offset_data
    config = dict(config)
    budget = config.pop("max_gram_bytes", None)
    kw = dict(n_features=N, solver=solver, gamma=0.02, alpha=1e-4, dtype=dtype, random_state=5)
    want = RandomFeatureOperator(**kw).fit(U, V)
    blocked = pytest.warns(RuntimeWarning, match="blocked") if budget else contextlib.nullcontext()
    with dask.config.set(config), blocked:
        # chunks of 25 rows: the centre (the first 64 samples) comes from three blocks
        got = RandomFeatureOperator(max_gram_bytes=budget, **kw).fit(
            da.from_array(U, chunks=(25, -1)), da.from_array(V, chunks=(25, -1))
        )
    np.testing.assert_array_equal(got.input_centre_, want.input_centre_)
    np.testing.assert_array_equal(got.b_, want.b_)
    tol = 1e-9 if dtype == "float64" else 2e-4
    assert _rel(got.predict(Ut), want.predict(Ut)) < tol
    assert _rel(got.predict(da.from_array(Ut, chunks=10)).compute(), want.predict(Ut)) < tol


def test_a_model_saved_without_a_centre_loads_and_predicts_as_before(tmp_path):
    # a model saved before the centre was kept: phases of u itself, no input_centre_ array
    U, V = _data(200)
    Ut = _data(50, seed=1)[0]
    model = RandomFeatureOperator(n_features=150, gamma=0.05, alpha=1e-4, random_state=4).fit(
        U + 50.0, V
    )
    old = RandomFeatureOperator(n_features=150, gamma=0.05, alpha=1e-4, random_state=4).fit(
        U + 50.0, V
    )
    old.b_ = draw_frequencies(U.shape[1], 150, "cauchy", 0.05, None, 4)[
        1
    ]  # the drawn phases, unfolded
    old.input_centre_ = None
    path = old.save(tmp_path / "old.zarr")
    assert not (tmp_path / "old.zarr" / "input_centre_").exists()
    zarr.open_group(str(path), mode="r+").attrs["rfol_dask_format"] = 1  # as such models were saved
    loaded = RandomFeatureOperator.load(path)
    assert loaded.input_centre_ is None
    want = np.sqrt(2 / 150) * np.cos((Ut + 50.0) @ old.omega_ + old.b_) @ old.coef_ + old.intercept_
    np.testing.assert_allclose(loaded.predict(Ut + 50.0), want, rtol=1e-12, atol=1e-12)
    assert _rel(loaded.predict(Ut + 50.0), model.predict(Ut + 50.0)) < 1e-10  # the same function
    # and a model with its centre saves and loads it
    again = RandomFeatureOperator.load(model.save(tmp_path / "new.zarr"))
    np.testing.assert_array_equal(again.input_centre_, model.input_centre_)
    np.testing.assert_array_equal(again.predict(Ut + 50.0), model.predict(Ut + 50.0))
