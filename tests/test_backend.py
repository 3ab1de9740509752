"""The array-namespace layer (rfol_dask.backend) and every path it selects, on the CPU.

Three ways through the same numerics are compared to 1e-10: numpy on its fast LAPACK path,
numpy through the generic array API path (``backend.generic_numpy``) and array_api_strict
arrays (a strict stand-in for CuPy: no numpy methods, no implicit conversion). The CUDA device
is exercised by pointing the ``"cuda"`` loader at array_api_strict, so the plumbing of
``device="cuda"`` (numpy in, moved, numpy out) runs without a GPU.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import rel, same_scores

from rfol_dask import RandomFeatureOperator, backend
from rfol_dask.baselines import KernelOperator
from rfol_dask.baselines.kernels import KERNELS, kernel_tile
from rfol_dask.features import draw_frequencies, feature_map
from rfol_dask.solve.in_memory import fit_numpy

xs = pytest.importorskip("array_api_strict")

TOL = 1e-10


def strict(*arrays):
    return tuple(xs.asarray(a) for a in arrays)


@pytest.fixture(autouse=True)
def no_implicit_numpy(monkeypatch):
    """array_api_strict arrays refuse ``np.asarray``, as CuPy arrays do (numpy would silently copy
    them to the host): what runs "on the device" must use the namespace or ``backend.to_numpy``."""

    def refuse(self, *args, **kwargs):
        raise TypeError("implicit conversion to a NumPy array is not allowed (as for CuPy)")

    monkeypatch.setattr(type(xs.asarray(0.0)), "__array__", refuse)


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    U = rng.standard_normal((70, 9))
    V = np.sin(U[:, :4]) + 0.1 * rng.standard_normal((70, 4))
    return U, V


# ------------------------------------------------------------------ namespaces


def test_namespace_selection():
    a = np.ones((2, 2))
    assert backend.namespace(a, None, 1.0) is np and backend.is_fast(np)
    with backend.generic_numpy():
        xp = backend.namespace(a)
        assert xp is not np and not backend.is_fast(xp)
    assert backend.namespace(a) is np  # the context is left
    (s,) = strict(a)
    assert backend.namespace(s).__name__ == "array_api_strict"
    assert backend.is_array_api(s) and not backend.is_array_api(a)
    with pytest.raises(TypeError):
        backend.namespace(a, s)  # numpy mixed with another library is not guessed
    assert isinstance(backend.to_numpy(s), np.ndarray)
    assert backend.to_namespace(a, backend.namespace(s)).__class__ is s.__class__
    assert backend.itemsize(xs.float32) == 4 and backend.itemsize(np.float64) == 8
    assert backend.is_real_dtype(xs.int64) and not backend.is_real_dtype(xs.bool)


@pytest.mark.parametrize("trans", [False, True])
def test_syrk_symmetrize_paths(trans):
    A = np.random.default_rng(0).standard_normal((30, 12))
    want = A.T @ A if trans else A @ A.T
    fast = backend.symmetrize(backend.syrk(A, trans), "lower")
    with backend.generic_numpy():
        gen = backend.symmetrize(backend.syrk(A, trans), "lower")
    (As,) = strict(A)
    st = backend.symmetrize(backend.syrk(As, trans), "lower")
    for got in (fast, gen, st):
        assert rel(got, want) < TOL
    # accumulation into C (in place on numpy, returned elsewhere)
    C = backend.syrk(A, trans)
    C = backend.syrk(A, trans, C)
    assert rel(backend.symmetrize(C, "lower"), 2 * want) < TOL
    Cs = backend.syrk(As, trans, backend.syrk(As, trans))
    assert rel(backend.symmetrize(Cs, "upper"), 2 * want) < TOL


def test_cholesky_and_solve_paths():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((40, 25))
    G = A @ A.T  # rank 25 < 40: needs the ridge
    B = rng.standard_normal((40, 3))
    alpha = 1e-3
    L0, r0 = backend.cholesky(np.asfortranarray(G.copy()), alpha)
    X0 = backend.cho_solve(L0, B.copy())
    want = np.linalg.solve(G + alpha * np.eye(40), B)
    assert r0 == alpha and rel(X0, want) < TOL
    with backend.generic_numpy():
        L1, r1 = backend.cholesky(G.copy(), alpha)
        X1 = backend.cho_solve(L1, B)
    Gs, Bs = strict(G, B)
    L2, r2 = backend.cholesky(Gs, alpha)
    X2 = backend.cho_solve(L2, Bs)
    assert r1 == r2 == alpha
    assert rel(X1, want) < TOL and rel(X2, want) < TOL
    assert rel(np.tril(backend.to_numpy(L2)), np.tril(L0)) < TOL


def test_cholesky_jitter_policy_same_on_every_path():
    A = np.random.default_rng(2).standard_normal((30, 10))
    G = A @ A.T  # singular
    with pytest.warns(RuntimeWarning, match="used ridge") as fast:
        _, r_fast = backend.cholesky(np.asfortranarray(G.copy()), 1e-300)
    with pytest.warns(RuntimeWarning, match="used ridge") as gen:
        _, r_gen = backend.cholesky(*strict(G), 1e-300)
    assert r_fast == r_gen > 1e-300
    assert str(fast[0].message) == str(gen[0].message)
    for G0 in (np.asfortranarray(G.copy()), *strict(G)):
        with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular"):
            backend.cholesky(G0, 0.0)


def test_feature_map_paths():
    rng = np.random.default_rng(4)
    U = rng.standard_normal((50, 6))
    om, b = draw_frequencies(6, 40, gamma=0.5, random_state=0)
    shift = rng.standard_normal(40)
    want = feature_map(U, om, b, shift=shift, n_features=80)
    with backend.generic_numpy():
        gen = feature_map(U, om, b, shift=shift, n_features=80)
    st = feature_map(*strict(U, om, b), shift=xs.asarray(shift), n_features=80)
    assert rel(gen, want) < TOL and rel(st, want) < TOL
    assert backend.namespace(st).__name__ == "array_api_strict"


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_tiles_paths(kernel):
    rng = np.random.default_rng(5)
    X, Y = rng.standard_normal((20, 5)), rng.standard_normal((15, 5))
    for diagonal, Yk in ((False, Y), (True, X)):
        want = kernel_tile(X, Yk, diagonal, kernel=kernel, length_scale=1.7)
        with backend.generic_numpy():
            gen = kernel_tile(X, Yk, diagonal, kernel=kernel, length_scale=1.7)
        st = kernel_tile(*strict(X, Yk), diagonal, kernel=kernel, length_scale=1.7)
        assert rel(gen, want) < TOL and rel(st, want) < TOL


@pytest.mark.parametrize("solver, N", [("dual", 120), ("primal", 30)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_fit_numpy_paths(data, solver, N, fit_intercept):
    """features -> Gram -> factor -> solves -> coefficients: one code path, three namespaces."""
    U, V = data
    om, b = draw_frequencies(U.shape[1], N, gamma=0.4, random_state=7)
    kw = dict(alpha=1e-6, fit_intercept=fit_intercept, solver=solver)
    C0, c0 = fit_numpy(U, V, om, b, **kw)
    with backend.generic_numpy():
        C1, c1 = fit_numpy(U, V, om, b, **kw)
    C2, c2 = fit_numpy(*strict(U, V, om, b), **kw)
    assert backend.namespace(C2).__name__ == "array_api_strict"
    for C, c in ((C1, c1), (C2, c2)):
        assert rel(C, C0) < TOL
        assert np.abs(backend.to_numpy(c) - c0).max() < TOL * max(1.0, np.abs(c0).max())


def _ridge_problem(M_t=40, M_v=9, m=5, seed=11):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M_t + M_v, 25))
    A -= A[:M_t].mean(axis=0)
    G, K = A[:M_t] @ A[:M_t].T, A[M_t:] @ A[:M_t].T  # rank 25 < M_t: small alphas need the ridge
    V, V_valid = rng.standard_normal((M_t, m)), rng.standard_normal((M_v, m))
    V_valid[2] = 0.0  # a zero output: left out of every score
    return G, K, V, V_valid


@pytest.mark.parametrize("m", [5, 30])  # M_v < m: the solves run against the validation rows
def test_ridge_path_kernels_on_every_path(m):
    """The validation errors of the ridge path (eigh, one Cholesky per alpha, the window) and
    the ridge factorisations behind them: numpy (in place), generic numpy and array_api_strict
    agree to 1e-10, and a Gram solved in place is given back as it came."""
    from rfol_dask import tuning

    G, K, V, V_valid = _ridge_problem(m=m)
    alphas = np.array([-5.0, 1e-3, 1e-2, 1e-1, 1.0])  # -5: not positive definite, scores inf
    want = tuning.cholesky_errors(np.asfortranarray(G.copy()), K, V, V_valid, alphas)
    assert np.isinf(want[0]) and np.isfinite(want[1:]).all()
    eig = tuning.EigenPath(G.copy(), K, V).errors(alphas[1:], V_valid)
    assert rel(eig, want[1:]) < 1e-6  # two exact methods, different rounding
    Gf = np.asfortranarray(G.copy())
    win = tuning.window_errors(Gf, K, V, V_valid, alphas, center=3, half_width=1)
    assert np.array_equal(Gf, G)  # solved in place, given back
    for run in (lambda f: f(), lambda f: _generic(f)):
        got = run(lambda: tuning.cholesky_errors(G.copy(), K, V, V_valid, alphas))
        assert np.isinf(got[0]) and rel(got[1:], want[1:]) < TOL
        got = run(lambda: tuning.EigenPath(G.copy(), K, V).errors(alphas[1:], V_valid))
        assert rel(got, eig) < TOL
    Gs, Ks, Vs, Vvs = strict(G, K, V, V_valid)
    got = tuning.cholesky_errors(Gs, Ks, Vs, Vvs, alphas)
    assert isinstance(got, np.ndarray) and np.isinf(got[0]) and rel(got[1:], want[1:]) < TOL
    assert rel(tuning.EigenPath(Gs, Ks, Vs).errors(alphas[1:], Vvs), eig) < TOL
    got = tuning.window_errors(Gs, Ks, Vs, Vvs, alphas, center=3, half_width=1)
    assert (
        np.array_equal(np.isnan(got), np.isnan(win))
        and rel(got[~np.isnan(win)], win[~np.isnan(win)]) < TOL
    )
    assert np.array_equal(backend.to_numpy(Gs), G)
    for method in ("eigh", "cholesky", "auto"):
        got = tuning.path_errors(Gs, Ks, Vs, Vvs, alphas[1:], method=method)
        assert rel(got, want[1:]) < 1e-6
    with pytest.raises(ValueError, match="identically zero"):
        tuning.path_errors(
            Gs, Ks, Vs, xs.zeros((9, m), dtype=xs.float64), alphas, method="cholesky"
        )


def _generic(f):
    with backend.generic_numpy():
        return f()


def test_ridge_factor_paths():
    """``ridge_factor``: in place on numpy (the Gram given back by ``restore``), a new factor
    elsewhere; None where the ridge leaves the matrix indefinite."""
    G = _ridge_problem()[0]
    for Gx in (np.asfortranarray(G.copy()), *strict(G)):
        factor, restore = backend.ridge_factor(Gx)
        assert factor(-5.0, False) is None
        L = factor(1e-3, True)
        want = np.linalg.cholesky(G + 1e-3 * np.eye(len(G)))
        assert rel(np.tril(backend.to_numpy(L)), want) < TOL
        restore()
        assert np.array_equal(backend.to_numpy(Gx), G)


@pytest.mark.parametrize("rows, n_train", [(50, 40), (600, 560)])  # the dual; the primal (N < 560)
def test_validation_grams_on_every_path(rows, n_train):
    """The validation Grams of random features (the sums the search solves): one slab at a time,
    two accumulators summed, nested segments; numpy, generic numpy and array_api_strict agree."""
    import functools

    from rfol_dask import tuning

    rng = np.random.default_rng(12)
    X = rng.standard_normal((rows, 7))
    N, Ns, scales = 512, [256, 512], [0.3, 1.1]
    freq = functools.partial(draw_frequencies, 7, N, "cauchy", 1.0, random_state=3)

    def grams(X):
        accs = [None, None]
        for i, (f0, f1) in enumerate(
            tuning.slab_bounds(
                N, len(X) if isinstance(X, np.ndarray) else X.shape[0], Ns, slab_bytes=50 * 8 * 128
            )
        ):
            accs[i % 2] = tuning.validation_slab(
                accs[i % 2], X, n_train, freq, N, f0, f1, scales, Ns
            )
        total = tuning.sum_validation(*accs)
        out = [
            tuning.validation_grams(total, k, Ns, g, True, n_train) for k in (0, 1) for g in (0, 1)
        ]
        tuning.add_validation(accs[0], accs[1])
        out += [tuning.validation_grams(accs[0], 1, Ns, 1, False, n_train)]
        return [(backend.to_numpy(G), backend.to_numpy(K), f) for G, K, f, _ in out]

    want = grams(X)
    # the reference: the centred features of all N columns at once
    om, b = freq()
    for k, s in enumerate(scales):
        A = np.sqrt(2.0 / N) * np.cos(s * X @ om + b)
        A -= A[:n_train].mean(axis=0)
        for g, Ng in enumerate(Ns):
            G, K, f = want[2 * k + g]
            At, Av = A[:n_train, :Ng], A[n_train:, :Ng]
            Gw, Kw = (At.T @ At, Av) if n_train > N else (At @ At.T, Av @ At.T)
            assert f == N / Ng and rel(G, Gw) < TOL and rel(K, Kw) < TOL
    assert rel(want[-1][0], want[3][0]) < TOL
    for got in (_generic(lambda: grams(X)), grams(xs.asarray(X))):
        for (G, K, f), (G0, K0, f0) in zip(got, want, strict=False):
            assert f == f0 and rel(G, G0) < TOL and rel(K, K0) < TOL


def test_nan_named_on_generic_path(data):
    U, V = data
    U = U.copy()
    U[11, 2] = np.nan
    with pytest.raises(ValueError, match=r"\(rows 11\)"):
        RandomFeatureOperator(n_features=50, random_state=0).fit(*strict(U, V))


# ------------------------------------------------------------------ estimators: follow the input


@pytest.mark.parametrize("solver", ["dual", "primal"])
def test_operator_follows_array_api_input(tmp_path, data, solver):
    U, V = data
    U3 = U.reshape(70, 3, 3)
    kw = dict(
        n_features=150 if solver == "dual" else 40,
        gamma=0.4,
        alpha=1e-6,
        random_state=5,
        solver=solver,
    )
    cpu = RandomFeatureOperator(**kw).fit(U3, V)
    want = cpu.predict(U3[:9])
    model = RandomFeatureOperator(**kw).fit(*strict(U3, V))
    assert backend.namespace(model.coef_).__name__ == "array_api_strict"
    assert model.input_shape_ == (3, 3) and model.n_features_in_ == 9
    pred = model.predict(xs.asarray(U3[:9]))
    assert backend.is_array_api(pred) and pred.shape == (9, 4)
    assert rel(pred, want) < TOL
    host = model.predict(U3[:9])  # numpy in, numpy out, from the same fitted model
    assert isinstance(host, np.ndarray) and rel(host, want) < TOL
    model.save(tmp_path / "m")
    loaded = RandomFeatureOperator.load(tmp_path / "m")
    assert isinstance(loaded.coef_, np.ndarray)
    assert rel(loaded.predict(U3[:9]), want) < TOL


def test_operator_fits_array_api_input_of_fewer_samples_than_the_centre_rows(data):
    """An array API fit of fewer than CENTRE_ROWS (64) samples checked its first rows by a slice
    past the end, which the standard leaves unspecified and array_api_strict refuses."""
    U, V = data[0][:40], data[1][:40]
    kw = dict(n_features=50, gamma=0.4, alpha=1e-6, random_state=5)
    want = RandomFeatureOperator(**kw).fit(U, V).predict(U[:5])
    model = RandomFeatureOperator(**kw).fit(*strict(U, V))
    assert rel(model.predict(xs.asarray(U[:5])), want) < TOL


@pytest.mark.parametrize(
    "kw",
    [dict(kernel="matern52", length_scale=2.0, nugget=1e-4), dict(kernel="linear", nugget=1e-8)],
)  # the linear kernel's primal (9 < 70 inputs)
def test_kernel_operator_follows_array_api_input(tmp_path, data, kw):
    U, V = data
    want = KernelOperator(**kw).fit(U, V).predict(U[:8])
    model = KernelOperator(**kw).fit(*strict(U, V))
    assert backend.is_array_api(model.dual_coef_ if model.coef_ is None else model.coef_)
    assert rel(model.predict(xs.asarray(U[:8])), want) < TOL
    model.save(tmp_path / "k")
    assert rel(KernelOperator.load(tmp_path / "k").predict(U[:8]), want) < TOL


@pytest.fixture
def fake_cuda(monkeypatch):
    """device="cuda" served by array_api_strict: the device plumbing without a GPU (its arrays
    refuse implicit conversion to numpy, as CuPy's do: :func:`no_implicit_numpy`)."""
    monkeypatch.setitem(
        backend._DEVICE_NAMESPACES, "cuda", lambda: backend.namespace(xs.asarray(0.0))
    )


def test_metrics_and_score_of_device_arrays(data):
    """The error measures and ``score`` take arrays of another namespace (CuPy) where they live,
    also mixed with numpy, and give the numpy values."""
    from rfol_dask.metrics import r2_score, relative_l2_error

    U, V = data
    model = RandomFeatureOperator(n_features=120, gamma=0.4, random_state=2).fit(*strict(U, V))
    P = model.predict(xs.asarray(U))
    P_np = backend.to_numpy(P)
    for true, pred in ((xs.asarray(V), P), (V, P), (xs.asarray(V), P_np)):
        assert relative_l2_error(true, pred) == pytest.approx(relative_l2_error(V, P_np), rel=1e-12)
        assert r2_score(true, pred) == pytest.approx(r2_score(V, P_np), rel=1e-12)
    assert model.score(*strict(U, V)) == pytest.approx(r2_score(V, P_np), rel=1e-12)


@pytest.mark.slow
def test_figures_of_device_arrays():
    """The figures take predictions on a device (CuPy) as they take numpy ones."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    import xarray as xr

    from rfol_dask.plotting import example_figure, prediction_figure

    rng = np.random.default_rng(9)
    for shape in ((12, 7), (15,)):
        T = rng.standard_normal(shape)
        P = T + 0.1 * rng.standard_normal(shape)
        figs = [
            prediction_figure(T, {"m": P}),
            prediction_figure(xs.asarray(T), {"m": xs.asarray(P)}),
            prediction_figure(xr.DataArray(xs.asarray(T)), {"m": P}),
            example_figure(T, T, T, P),
            example_figure(*strict(T, T, T, P)),
        ]
        for a, b in ((figs[0], figs[1]), (figs[0], figs[2]), (figs[3], figs[4])):
            for ax_a, ax_b in zip(a.axes, b.axes, strict=False):
                drawn = [
                    (c.get_array() if hasattr(c, "get_array") else None) for c in ax_a.collections
                ]
                again = [
                    (c.get_array() if hasattr(c, "get_array") else None) for c in ax_b.collections
                ]
                lines = [ln.get_ydata() for ln in ax_a.lines], [ln.get_ydata() for ln in ax_b.lines]
                assert all(
                    np.array_equal(x, y)
                    for x, y in zip(drawn, again, strict=False)
                    if x is not None
                )
                assert all(np.array_equal(x, y) for x, y in zip(*lines, strict=False))
        for f in figs:
            plt.close(f)


@pytest.mark.parametrize(
    "est, kw",
    [
        (RandomFeatureOperator, dict(n_features=150, gamma=0.4, random_state=2)),
        (KernelOperator, dict(kernel="rbf", length_scale=2.0, nugget=1e-4)),
        (KernelOperator, dict(kernel="linear", nugget=1e-8)),
    ],
)
def test_device_cuda_moves_numpy_input_and_returns_numpy(fake_cuda, tmp_path, data, est, kw):
    U, V = data
    want = est(**kw).fit(U, V).predict(U[:6])
    model = est(device="cuda", **kw).fit(U, V)
    fitted = (
        model.dual_coef_ if model.coef_ is None else model.coef_
    )  # coef_: RF, the linear kernel's primal
    assert backend.is_array_api(fitted)  # computed and kept on the device
    pred = model.predict(U[:6])
    assert isinstance(pred, np.ndarray) and rel(pred, want) < TOL  # returned in the input's kind
    model.save(tmp_path / "m")
    assert isinstance(est.load(tmp_path / "m").predict(U[:6]), np.ndarray)


_CV = [
    (
        "RandomFeatureOperatorCV",
        dict(
            n_features=120,
            distributions=("gaussian",),
            gammas=(0.5, 2.0),
            alphas=(1e-6, 1e-2),
            random_state=0,
        ),
    ),
    (
        "RandomFeatureOperatorCV",
        dict(
            n_features=(64, 128),
            max_features=256,
            distributions=("cauchy",),
            gammas=(0.5, 1.0, 2.0),
            alphas=(1e-6, 1e-4, 1e-2),
            pca_power=1.0,
            stages={"score_outputs": 3},
            random_state=1,
        ),
    ),
    ("KernelOperatorCV", dict(kernels=("rbf",), length_scales=(0.5, 2.0), nuggets=(1e-6, 1e-2))),
    (
        "KernelOperatorCV",
        dict(
            kernels=("matern52", "linear"),
            length_scales=(0.5, 2.0),
            nuggets=(1e-4, 1e-2),
            pca_power=1.0,
        ),
    ),
]


def _cv_class(name):
    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperatorCV

    return {
        "RandomFeatureOperatorCV": RandomFeatureOperatorCV,
        "KernelOperatorCV": KernelOperatorCV,
    }[name]


@pytest.fixture
def scored_in(monkeypatch):
    """The namespaces the ridge paths of a search were computed in (a spy on the scoring)."""
    from rfol_dask import tuning

    seen, real = set(), tuning.scored_rows

    def spy(V_valid):
        seen.add(backend.namespace(V_valid).__name__)
        return real(V_valid)

    monkeypatch.setattr(tuning, "scored_rows", spy)
    return seen


@pytest.mark.parametrize("est, kw", _CV)
@pytest.mark.slow
def test_cv_search_runs_on_the_device(fake_cuda, scored_in, data, est, kw):
    """The CV estimators search where the fit runs: with ``device="cuda"`` (numpy in) and with
    array API input, every Gram, ridge path and score is computed in that namespace, and the
    validation errors equal the CPU search's to 1e-10; the winner is refitted there."""
    cls = _cv_class(est)
    U, V = data
    on_cpu = cls(**kw).fit(U, V)
    assert scored_in == {"numpy"}
    for make in (lambda: cls(device="cuda", **kw).fit(U, V), lambda: cls(**kw).fit(*strict(U, V))):
        scored_in.clear()
        model = make()
        assert scored_in == {"array_api_strict"}
        assert model.best_params_ == on_cpu.best_params_
        same_scores(model, on_cpu, TOL)
    on_device = cls(device="cuda", **kw).fit(U, V)
    assert on_device.best_estimator_.device == "cuda"
    assert isinstance(on_device.predict(U[:5]), np.ndarray)
    assert rel(on_device.predict(U[:5]), on_cpu.predict(U[:5])) < 1e-8


def test_cv_search_groups_its_grams_by_the_device_memory(fake_cuda, data, monkeypatch):
    """A search on a device holds as many gammas' Grams at once as the device has room for (a
    share of its free memory, not the host's); fewer at a time give the same errors. Its check
    before the search measures against the same share: a device with room for its least peak
    (one gamma's Grams, the solve's copy and two slabs: 163,968 bytes) runs, 2 gammas at a time."""
    from rfol_dask import RandomFeatureOperatorCV, memory, selection

    U, V = data
    kw = dict(
        n_features=96,
        distributions=("gaussian",),
        gammas=(0.5, 1.0, 2.0),
        alphas=(1e-6, 1e-2),
        random_state=0,
    )
    want = RandomFeatureOperatorCV(**kw).fit(U, V)
    groups = []
    real = RandomFeatureOperatorCV._gram_group
    monkeypatch.setattr(
        RandomFeatureOperatorCV,
        "_gram_group",
        lambda self, *a: groups.append(real(self, *a)) or groups[-1],
    )
    monkeypatch.setattr(memory, "free_bytes", lambda xp: 164_000 / selection.DEVICE_SHARE)
    model = RandomFeatureOperatorCV(device="cuda", **kw).fit(U, V)
    assert groups and max(groups) == 2  # 0.5 x 164,000 bytes over 8 x 70 x 56 a gamma
    assert model._search_budget(None).bytes == pytest.approx(164_000)
    same_scores(model, want, TOL)
    RandomFeatureOperatorCV(**kw).fit(U, V)
    assert max(groups[-2:]) > 2  # on the host: the host's budget


@pytest.mark.cluster
@pytest.mark.slow
def test_cv_search_on_the_device_through_a_distributed_worker(fake_cuda, scored_in, data):
    """Dask input on a cluster: the training rows are stacked on the worker's device and the
    search runs there, with the CPU search's errors."""
    import dask.array as da
    from dask.utils import key_split
    from distributed import Client, LocalCluster, get_task_stream

    cls, kw = _cv_class(_CV[1][0]), _CV[1][1]
    U, V = data
    on_cpu = cls(**kw).fit(U, V)
    scored_in.clear()
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        with get_task_stream(client) as ts:
            model = cls(device="cuda", **kw).fit(
                da.from_array(U, chunks=25), da.from_array(V, chunks=25)
            )
        assert not client.futures
    ran = {key_split(t["key"]) for t in ts.data}
    assert {"stack_rows", "validation_slab", "path_errors"} <= ran  # searched on the worker
    assert model._grams_on == "cuda"  # its Grams grouped by the workers' device memory
    assert scored_in == {"array_api_strict"}
    assert model.best_params_ == on_cpu.best_params_
    same_scores(model, on_cpu, TOL)


# ------------------------------------------------------------------ validation and imports


def test_device_validation(data):
    U, V = data
    with pytest.raises(ValueError, match="device"):
        RandomFeatureOperator(device="gpu").fit(U, V)
    with pytest.raises(ValueError, match="device"):
        KernelOperator(device="tpu").fit(U, V)
    with pytest.raises(ValueError, match="device must be one of"):
        backend.check_device("gpu")


@pytest.mark.skipif(
    "cupy" in sys.modules or __import__("importlib").util.find_spec("cupy") is not None,
    reason="CuPy is installed here",
)
def test_device_cuda_without_cupy_says_what_to_install(tmp_path, data):
    U, V = data
    for est in (RandomFeatureOperator(device="cuda", n_features=20), KernelOperator(device="cuda")):
        with pytest.raises(ImportError, match=r"pip install 'rfol-dask\[gpu\]'"):
            est.fit(U, V)
    # a model saved with device="cuda" (here: fitted on the CPU, then re-labelled) loads and
    # predicts
    model = RandomFeatureOperator(n_features=20, random_state=0).fit(U, V)
    want = model.predict(U[:3])
    model.set_params(device="cuda").save(tmp_path / "m")
    with pytest.warns(UserWarning, match="predicts on the CPU"):
        loaded = RandomFeatureOperator.load(tmp_path / "m")
    assert loaded.device == "cpu" and rel(loaded.predict(U[:3]), want) < TOL


@pytest.mark.slow
def test_cpu_fit_imports_nothing_gpu_related():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import rfol_dask
        from rfol_dask.baselines import KernelOperator
        U = np.random.default_rng(0).standard_normal((40, 5)); V = U[:, :2] ** 2
        for m in (rfol_dask.RandomFeatureOperator(n_features=60, random_state=0), KernelOperator()):
            m.fit(U, V).predict(U)
        bad = [name for name in ("cupy", "cupyx", "dask_cuda") if name in sys.modules]
        assert not bad, bad
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ the streamed dask dual on a
# device


def test_streamed_dual_on_the_device_equals_the_cpu_fit(fake_cuda, data):
    """device="cuda" with dask input: each worker stacks U on the device, makes its slabs and
    Gram there, the factor and solves run there, the coefficients come back as numpy."""
    da = pytest.importorskip("dask.array")
    U, V = data
    kw = dict(n_features=700, gamma=0.4, alpha=1e-6, random_state=4, solver="dual")
    want = RandomFeatureOperator(**kw).fit(U, V)
    Ud, Vd = da.from_array(U, chunks=25), da.from_array(V, chunks=25)
    model = RandomFeatureOperator(device="cuda", **kw).fit(Ud, Vd)
    assert isinstance(model.coef_, np.ndarray)
    assert rel(model.coef_, want.coef_) < TOL and rel(model.intercept_, want.intercept_) < TOL
    pred = model.predict(Ud[:10])  # lazy; each block computed on the device, returned as numpy
    assert rel(pred.compute(), want.predict(U[:10])) < TOL
    with pytest.raises(NotImplementedError, match="streamed dual only"):
        RandomFeatureOperator(device="cuda", n_features=20, solver="primal").fit(Ud, Vd)
    for kernel in ("rbf", "linear"):  # the linear kernel's primal too
        with pytest.raises(
            NotImplementedError, match="KernelOperator fits dask input on the CPU only"
        ):
            KernelOperator(device="cuda", kernel=kernel).fit(Ud, Vd)


@pytest.mark.parametrize("room", [True, False])
def test_streamed_device_slabs_draw_their_frequencies_once_while_the_device_has_room(
    fake_cuda, data, monkeypatch, room
):
    """On a device each slab's frequencies are drawn ahead of the Gram pass, by tasks that need
    no data (``draw-slab``), and both passes use them (one draw per slab, not two) while the
    device has room; without room nothing is drawn ahead and the passes draw them, with the same
    fit either way; nothing stays kept after the fit."""
    import threading

    import dask
    import dask.array as da

    from rfol_dask import rf_operator
    from rfol_dask.features import draw_frequencies
    from rfol_dask.solve import streamed

    U, V = data
    slab_draws = []

    def counting(*args, columns=None, **kw):
        if columns is not None:
            slab_draws.append(tuple(columns))
            if getattr(inside, "on", False):
                ahead.append(tuple(columns))
        return draw_frequencies(*args, columns=columns, **kw)

    monkeypatch.setattr(rf_operator, "draw_frequencies", counting)
    monkeypatch.setattr(streamed, "free_bytes", lambda X: 2**40 if room else 0)
    ahead, inside = [], threading.local()  # the draws made inside draw_slab, on any thread
    draw_slab = streamed.draw_slab

    def counting_ahead(*args):
        inside.on = True
        try:
            return draw_slab(*args)
        finally:
            inside.on = False

    monkeypatch.setattr(streamed, "draw_slab", counting_ahead)
    kw = dict(n_features=700, gamma=0.4, alpha=1e-6, random_state=4, solver="dual")
    want = RandomFeatureOperator(**kw).fit(U, V)
    with dask.config.set(
        {
            "rfol_dask.slab-bytes": 70 * 8 * 256,  # slabs of 256 columns: 3
            "rfol_dask.device-features": "slabs",
        }
    ):
        model = RandomFeatureOperator(device="cuda", **kw).fit(
            da.from_array(U, chunks=25), da.from_array(V, chunks=25)
        )
    slabs = sorted(set(slab_draws))
    assert slabs == [(0, 256), (256, 512), (512, 700)]
    assert len(slab_draws) == (3 if room else 6)
    assert sorted(ahead) == (slabs if room else [])  # with room: every draw was made ahead
    assert rel(model.coef_, want.coef_) < TOL and rel(model.intercept_, want.intercept_) < TOL
    assert streamed._KEPT_FREQUENCIES == {}


def test_frequencies_kept_after_their_fit_ended_are_dropped():
    """A slab task that keeps frequencies while (or after) its fit's cache is removed keeps
    nothing: the directory goes first, and keeping checks it after storing."""
    from rfol_dask.solve import streamed

    token = "test-keep"
    streamed.open_cache(token)
    streamed._keep(token, 0, ("omega", "b"))
    assert streamed._KEPT_FREQUENCIES[(token, 0)] == ("omega", "b")
    streamed.remove_cache(token)
    assert (token, 0) not in streamed._KEPT_FREQUENCIES
    streamed._keep(token, 256, ("omega", "b"))  # a task finishing after the fit
    assert not any(k[0] == token for k in streamed._KEPT_FREQUENCIES)


@pytest.mark.cluster
@pytest.mark.parametrize("room", [True, False])
@pytest.mark.slow
def test_streamed_dual_on_the_device_through_a_distributed_worker(
    fake_cuda, data, monkeypatch, room
):
    """The device path on a distributed worker (in-process, so that it sees the fake device):
    the frequencies drawn ahead on the worker, the coefficient rows gathered slab by slab into
    the client's array; the fit equals the CPU fit. Where the device has room for the features
    the Gram grows row block by row block as the blocks come and the features are kept for
    ``C`` (rows mode); else they are made in slabs of the stacked rows, twice."""
    from collections import Counter

    import dask
    import dask.array as da
    from dask.utils import key_split
    from distributed import Client, LocalCluster, get_task_stream

    from rfol_dask.solve import streamed

    monkeypatch.setattr(streamed, "free_bytes", lambda X: 2**40)
    monkeypatch.setattr(streamed, "ROW_STEP", 1)  # rows mode: a Gram strip per row block
    need = streamed.rows_need(70, 700, 4, 9, 8)
    monkeypatch.setattr(streamed, "device_free_bytes", lambda device: need + 1 if room else need)
    U, V = data
    kw = dict(n_features=700, gamma=0.4, alpha=1e-6, random_state=4, solver="dual")
    want = RandomFeatureOperator(**kw).fit(U, V)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
        dask.config.set({"rfol_dask.slab-bytes": 70 * 8 * 256}),
    ):
        with get_task_stream(client) as ts:
            model = RandomFeatureOperator(device="cuda", **kw).fit(
                da.from_array(U, chunks=25), da.from_array(V, chunks=25)
            )
        assert not client.futures  # nothing of the fit is left on the cluster
    ran = Counter(key_split(t["key"]) for t in ts.data)
    assert (
        ran["device-inputs"] == ran["device-outputs"] == 3
    )  # 3 row blocks (70 samples), each moved as read
    if room:  # a Gram strip per row block as it comes, C from the kept features of each slab
        assert ran["draw-slab"] == ran["gram-rows"] == ran["check-inputs"] == ran["coef-rows"] == 3
        assert ran["stack-inputs"] == ran["gram-slab"] == ran["coef-slab"] == 0
    else:
        assert (
            ran["draw-slab"] == ran["gram-slab"] == ran["coef-slab"] == ran["stack-inputs"] * 3 == 3
        )
    assert isinstance(model.coef_, np.ndarray) and model.coef_.flags.c_contiguous
    assert rel(model.coef_, want.coef_) < TOL and rel(model.intercept_, want.intercept_) < TOL
    assert streamed._KEPT_FREQUENCIES == {}


def test_gpu_slab_tasks_draw_on_the_host_cores_per_gpu(monkeypatch):
    """A slab task whose inputs live on a GPU gets the host cores per GPU for its draw (the
    worker's BLAS threads on the CPU); the GPUs are counted by CuPy, one where it cannot."""
    import types

    xs = pytest.importorskip("array_api_strict")
    from rfol_dask import linalg
    from rfol_dask.solve import streamed

    cores = linalg.host_cores()
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 4))
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert backend.host_threads_per_gpu() == max(1, cores // 4)
    assert streamed._slab_threads(xs.asarray(np.ones((3, 2)))) == max(1, cores // 4)
    monkeypatch.setattr(streamed, "worker_threads", lambda: 7)
    assert streamed._slab_threads(np.ones((3, 2))) == 7
    monkeypatch.setitem(sys.modules, "cupy", None)  # no CuPy: one GPU
    assert backend.host_threads_per_gpu() == cores


def test_array_api_input_of_the_working_dtype_is_not_copied():
    """``fit`` on array API operands already in the working dtype keeps their buffers (CuPy: no
    second U and V on the GPU); another dtype is converted."""
    xs = pytest.importorskip("array_api_strict")
    from rfol_dask import inputs

    U = xs.asarray(np.random.default_rng(0).normal(size=(40, 6)))
    V = xs.asarray(np.random.default_rng(1).normal(size=(40, 3)))
    U2, V2, _, _ = inputs.check_arrays(RandomFeatureOperator(n_features=30), U, V)
    assert np.shares_memory(U2._array, U._array) and np.shares_memory(V2._array, V._array)
    U3, _, _, _ = inputs.check_arrays(RandomFeatureOperator(n_features=30, dtype=np.float32), U, V)
    assert U3.dtype == xs.float32


def test_a_dask_operand_beside_an_array_api_one(data):
    """dask cannot hold array_api_strict chunks: the in-memory operand is moved to numpy (CuPy
    ones stay on their GPU: tests/test_gpu.py)."""
    import dask.array as da

    U, V = data
    kw = dict(n_features=60, gamma=0.4, random_state=4)
    want = RandomFeatureOperator(**kw).fit(U, V).predict(U[:5])
    for Uin, Vin in (
        (da.from_array(U, chunks=20), xs.asarray(V)),
        (xs.asarray(U), da.from_array(V, chunks=20)),
    ):
        got = RandomFeatureOperator(**kw).fit(Uin, Vin).predict(U[:5])
        assert rel(backend.to_numpy(got), want) < TOL


def test_the_rows_mode_counts_the_second_gram_of_a_worker_that_sums_them(monkeypatch):
    """With several workers, one that sums two Grams holds the second beside its kept features:
    a device with room for one Gram and the features, not two, takes the slabs mode."""
    from rfol_dask.solve import streamed

    M, N, m, n, workers = 3000, 20000, 64, 100, 2
    alone = streamed.rows_need(M, N // workers, m, n, 8)
    monkeypatch.setattr(streamed, "device_free_bytes", lambda device: alone + 1)
    assert streamed.rows_need(M, N // workers, m, n, 8, workers) >= alone + 8 * M * M
    assert (
        streamed.feature_mode(None, "cuda", M, N // workers, m, n, 8, 1) == "rows"
    )  # as many features, one Gram
    assert streamed.feature_mode(None, "cuda", M, N, m, n, 8, workers) == "slabs"
