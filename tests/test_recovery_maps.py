"""The per-axis recovery maps: equal to interpolating the identity (the dense construction they
replace) in every kind, periodic or not, and built in O(n_in n_out) memory on fine grids."""

import time
import tracemalloc

import numpy as np
import pytest

from rfol_dask.recovery import make_recovery
from rfol_dask.recovery.grids import is_closed


def dense_periodic(x, P, y, method):
    """The periodic map from the node values of the n cardinal functions (n x n), as before."""
    from scipy.interpolate import make_interp_spline

    closed = is_closed(x, P)
    xu = x[:-1] if closed else x
    n = xu.size
    yw = np.clip(x[0] + np.mod(y - x[0], P), x[0], x[0] + P)
    if n == 1:
        W = np.ones((y.size, 1))
    elif method == "nearest":
        d = np.abs(np.mod(yw[:, None] - xu[None, :] + P / 2, P) - P / 2)
        W = np.zeros((y.size, n))
        W[np.arange(y.size), d.argmin(axis=1)] = 1.0
    else:
        k = 3 if method == "cubic" and n >= 3 else 1
        basis = np.vstack([np.eye(n), np.eye(n)[:1]])
        W = make_interp_spline(
            np.append(xu, x[0] + P), basis, k=k, bc_type="periodic" if k > 1 else None
        )(yw)
    if closed:
        W = np.concatenate([W, W[:, :1] / 2], axis=1)
        W[:, 0] /= 2
    return W


def dense_matrix(x, y, method, P=None):
    """The map as before: ``RegularGridInterpolator`` (direct spline solve) of ``eye(n)``."""
    from scipy.interpolate import RegularGridInterpolator
    from scipy.sparse.linalg import spsolve

    if P is not None:
        return dense_periodic(x, P, y, method)
    n = x.size
    if n == 1:
        return np.ones((y.size, 1))
    method = "linear" if method == "cubic" and n < 4 else method
    kw = {"solver": spsolve} if method == "cubic" else {}
    return RegularGridInterpolator((x,), np.eye(n), method=method, **kw)(
        np.clip(y, x[0], x[-1])[:, None]
    )


def dense_spectral(x, y, P):
    """The trigonometric evaluation matrix from the coefficients of ``eye(n)``, as before."""
    n = x.size
    C = np.fft.fft(np.eye(n), axis=-1) / n
    k = np.rint(np.fft.fftfreq(n) * n).astype(np.int64)
    if n % 2 == 0:
        C[:, n // 2] *= 0.5
        C = np.concatenate([C, C[:, n // 2 : n // 2 + 1]], axis=-1)
        k = np.concatenate([k, [n // 2]])
    return (np.exp(2j * np.pi * np.outer(y - x[0], k) / P) @ C.T).real


def axis(n, rng):
    """``n`` strictly increasing random points of [0, 1], both ends included (0 alone for n = 1)."""
    return np.array([0.0]) if n == 1 else np.sort(np.r_[0.0, 1.0, rng.uniform(0, 1, n - 2)])


@pytest.mark.parametrize("method", ["cubic", "linear", "nearest"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9, 40])
def test_grid_maps_equal_the_dense_construction(method, n):
    rng = np.random.default_rng(n)
    x = axis(n, rng)
    y = np.r_[0.0, np.sort(rng.uniform(0, 1, 23)), x[1:-1] if n > 2 else [], 1.0]
    y = np.unique(y)
    R = make_recovery(method, x)
    W = R._matrix(0, y)
    assert W.shape == (y.size, n)
    np.testing.assert_allclose(W, dense_matrix(x, y, method), rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["cubic", "linear", "nearest"])
@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9, 40])
@pytest.mark.slow
def test_periodic_maps_equal_the_dense_construction(method, closed, n):
    rng = np.random.default_rng(100 + n)
    P = 2.0
    x = np.sort(np.r_[0.5, rng.uniform(0.5, 0.5 + P, n - 1)])
    if closed and n > 1:
        x = np.r_[x[:-1], 0.5 + P]
    y = np.unique(np.r_[rng.uniform(-3, 4, 31), x, 0.5 + P])  # wraps, nodes and the period's end
    R = make_recovery(method, x, periods=P)
    np.testing.assert_allclose(R._matrix(0, y), dense_matrix(x, y, method, P), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9, 40, 41])
@pytest.mark.parametrize("closed", [False, True])
def test_spectral_map_equals_the_dense_construction(n, closed):
    P = 1.5
    x = 0.25 + P * np.arange(n + closed) / n
    y = np.sort(
        np.random.default_rng(n).uniform(0.25, 0.25 + P, 17)
    )  # not uniform: the matrix path
    R = make_recovery("spectral", x, periods=P)
    values = np.random.default_rng(1).standard_normal((3, x.size))
    out = R.resample(values, y)
    v = values[:, :n].copy()
    if closed:
        v[:, 0] = (v[:, 0] + values[:, -1]) / 2
    np.testing.assert_allclose(out, v @ dense_spectral(x[:n], y, P).T, rtol=0, atol=1e-12)


FINE = [
    ("cubic", None),
    ("cubic", 1.0),
    ("linear", None),
    ("linear", 1.0),
    ("nearest", None),
    ("nearest", 1.0),
    ("spectral", 1.0),
]


@pytest.mark.parametrize("kind, period", FINE)
@pytest.mark.slow
def test_fine_input_grid_builds_its_map_in_bounded_memory(kind, period):
    """A fine input axis (n_in = 40000) read on 64 points: peak memory a few maps (the dense
    construction needed n_in^2 doubles, 12.8 GB), time well under the seconds of a fit."""
    n_in = 40000
    x = np.arange(n_in) / n_in
    y = np.sort(
        np.random.default_rng(0).uniform(0, x[-1], 64)
    )  # not uniform: spectral builds its matrix
    R = make_recovery(kind, x, periods=period)
    f = np.sin(2 * np.pi * x)[None]
    tracemalloc.start()
    t = time.perf_counter()
    out = R.resample(f, y)
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    map_bytes = 8 * n_in * y.size
    assert peak < 10 * map_bytes, f"{kind}: peak {peak:,} bytes for a map of {map_bytes:,}"
    assert seconds < 10, f"{kind}: {seconds:.1f} s"
    tol = {"nearest": 2e-4, "linear": 1e-8}.get(kind, 1e-12)
    np.testing.assert_allclose(out[0], np.sin(2 * np.pi * y), rtol=0, atol=tol)


def test_rf_refuses_a_fine_grid_before_allocating():
    """The random-feature map needs its n x n Gram and n x 16 n features: a 100000-point axis
    (1.4 TB) is refused up front, naming the bytes and the kinds that scale, not a MemoryError."""
    from rfol_dask import RandomFeatureOperator

    with pytest.raises(
        ValueError,
        match=r"recovery 'rf' on 100000 grid points \(1600000 features\): the 100000 x 100000 "
        r"Gram matrix needs 80,000,000,000 bytes .* the 100000 x "
        r"1600000 features .*budget.*use recovery 'cubic'",
    ):
        make_recovery("rf", np.arange(100000) / 100000)
    x = np.arange(16) / 16
    U = np.random.default_rng(0).standard_normal((12, 16))
    model = RandomFeatureOperator(n_features=20, recovery="rf", random_state=0).fit(
        U, U, input_grid=[x], output_grid=[x]
    )
    g = np.linspace(0, 15 / 16, 100000)
    with pytest.raises(ValueError, match=r"recovery 'rf' .* needs .* bytes"):
        model.predict(np.zeros((1, g.size)), input_grid=[g])
