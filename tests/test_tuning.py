"""Median heuristics (rfol_dask.tuning) and the estimators' "median" defaults."""

import dask.array as da
import numpy as np
import pytest
from scipy.spatial.distance import pdist

from rfol_dask import RandomFeatureOperator
from rfol_dask.baselines import KernelOperator
from rfol_dask.features import DISTRIBUTIONS, draw_frequencies
from rfol_dask.tuning import frequency_scale, median_gamma, median_length_scale, sample_rows


def _data(M=300, n=12, seed=0):
    rng = np.random.default_rng(seed)
    U = rng.uniform(-1, 1, size=(M, n)) * np.linspace(0.5, 3, n)
    V = np.sin(U @ rng.normal(size=(n, 4)) / 3)
    return U, V


@pytest.mark.parametrize(
    "law, metric, power",
    [
        ("gaussian", "sqeuclidean", 1),
        ("cauchy", "cityblock", 1),
        ("student_t", "euclidean", 1),
        ("rational_quadratic", "sqeuclidean", 1),
    ],
)
def test_median_gamma_is_inverse_median_distance_of_the_law(law, metric, power):
    U, _ = _data()
    # the sample is all rows when M <= max_rows: the exact median over all pairs
    assert median_gamma(U, law, random_state=0) == pytest.approx(
        1 / np.median(pdist(U, metric)), rel=1e-12
    )
    assert median_length_scale(U) == pytest.approx(np.median(pdist(U)), rel=1e-12)


@pytest.mark.parametrize(
    "law, nu",
    [
        ("cauchy", None),
        ("gaussian", None),
        ("student_t", 3.0),
        ("rational_quadratic", None),
        ("rational_quadratic", 2.5),
    ],
)
def test_every_law_is_a_scale_family(law, nu):
    # the search draws gamma = 1 once and scales it for every gamma
    # (rfol_dask.tuning.validation_slab)
    base, b = draw_frequencies(5, 600, law, 1.0, nu, 9)
    for gamma in (0.01, 0.7, 30.0):
        omega, b_gamma = draw_frequencies(5, 600, law, gamma, nu, 9)
        np.testing.assert_allclose(omega, frequency_scale(law, gamma) * base, rtol=1e-13)
        np.testing.assert_array_equal(b_gamma, b)
    expected = {"cauchy": 30.0, "student_t": 30.0}.get(law, np.sqrt(30.0))
    assert frequency_scale(law, 30.0) == pytest.approx(expected, rel=1e-15)


def test_sample_is_seeded_and_independent_of_chunks():
    U, _ = _data(M=900)
    a = sample_rows(U, 100, random_state=3)
    b = sample_rows(da.from_array(U, chunks=(77, -1)), 100, random_state=3)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a, axis=0)) == 100
    assert not np.array_equal(a, sample_rows(U, 100, random_state=4))
    # a wide sample is cut so the pair distances stay cheap, and the estimate stays close
    assert median_gamma(U, "gaussian", max_rows=200, random_state=0) == pytest.approx(
        median_gamma(U, "gaussian", random_state=0), rel=0.1
    )


def test_constant_inputs_fall_back_to_one():
    assert median_gamma(np.ones((10, 3)), "cauchy") == 1.0
    assert median_length_scale(np.ones((10, 3))) == 1.0


@pytest.mark.parametrize("law", DISTRIBUTIONS)
@pytest.mark.slow
def test_default_gamma_is_the_median_heuristic(law):
    U, V = _data()
    model = RandomFeatureOperator(
        n_features=200, distribution=law, nu=3 if law == "student_t" else None, random_state=0
    ).fit(U, V)
    assert model.gamma == "median"
    assert model.gamma_ == pytest.approx(median_gamma(U, law, random_state=0))
    same = RandomFeatureOperator(
        n_features=200, distribution=law, nu=model.nu, gamma=model.gamma_, random_state=0
    ).fit(U, V)
    np.testing.assert_array_equal(model.omega_, same.omega_)
    np.testing.assert_allclose(model.predict(U), same.predict(U))
    lazy = RandomFeatureOperator(n_features=200, distribution=law, nu=model.nu, random_state=0).fit(
        da.from_array(U, chunks=(70, -1)), da.from_array(V, chunks=(70, -1))
    )
    assert lazy.gamma_ == model.gamma_


@pytest.mark.slow
def test_default_gamma_beats_the_old_default_on_wide_inputs():
    # functions on a 200-point grid: pairwise distances ~ 10, where gamma=1 is far too narrow
    rng = np.random.default_rng(0)
    x = np.linspace(0, np.pi, 200)
    a = rng.normal(size=(300, 3))
    U = a @ np.sin(np.outer([1, 2, 3], x))
    V = np.tanh(a) @ np.cos(np.outer([1, 2, 3], x[::10]))
    Ut, Vt = U[240:], V[240:]
    from rfol_dask.metrics import relative_l2_error

    err = {
        g: relative_l2_error(
            Vt,
            RandomFeatureOperator(n_features=400, gamma=g, alpha=1e-6, random_state=0)
            .fit(U[:240], V[:240])
            .predict(Ut),
        )
        for g in ("median", 1.0)
    }
    assert err["median"] < 0.5 * err[1.0]


@pytest.mark.slow
def test_kernel_default_length_scale_is_the_median(tmp_path):
    U, V = _data()
    model = KernelOperator().fit(U, V)
    assert model.length_scale_ == pytest.approx(np.median(pdist(U)), rel=1e-12)
    fixed = KernelOperator(length_scale=model.length_scale_).fit(U, V)
    np.testing.assert_allclose(model.predict(U[:20]), fixed.predict(U[:20]), rtol=1e-10)
    lazy = KernelOperator().fit(
        da.from_array(U, chunks=(70, -1)), da.from_array(V, chunks=(70, -1))
    )
    assert lazy.length_scale_ == model.length_scale_
    loaded = KernelOperator.load(model.save(tmp_path / "k.zarr"))
    assert loaded.length_scale_ == model.length_scale_
    np.testing.assert_allclose(loaded.predict(U[:5]), model.predict(U[:5]))
    pca = KernelOperator(n_components=4).fit(U, V)
    assert pca.length_scale_ == pytest.approx(
        np.median(pdist((U - pca.pca_mean_) @ pca.pca_components_))
    )


def test_median_on_dask_reads_only_the_sample_window_in_one_extra_compute():
    import dask

    U, V = _data(M=180)
    reads = []

    def load(block, block_info=None):
        reads.append(block_info[0]["chunk-location"][0])
        return block

    Ud = da.from_array(U, chunks=(45, -1)).map_blocks(load, dtype=U.dtype)
    sample_rows(Ud, 20, random_state=0, window=5)  # rows drawn from the first 100 samples
    assert sorted(set(reads)) == [0, 1, 2]
    calls = []

    def counting(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.get(dsk, keys, **kwargs)

    with dask.config.set(scheduler=counting):
        model = RandomFeatureOperator(n_features=300, random_state=0).fit(
            Ud, da.from_array(V, chunks=(45, -1))
        )
    assert len(calls) == 2  # the sample, then the fit
    assert model.gamma_ == pytest.approx(median_gamma(U, "cauchy", random_state=0))


def test_ridge_paths_agree_and_the_cheaper_is_chosen():
    from rfol_dask.tuning import EigenPath, eigh_pays, path_errors

    rng = np.random.default_rng(0)
    A = rng.normal(size=(90, 200))
    A -= A[:70].mean(axis=0)
    G, K, V = A[:70] @ A[:70].T, A[70:] @ A[:70].T, rng.normal(size=(90, 3))
    alphas = [1e-3, 1e-1, 10.0]
    e = path_errors(np.asfortranarray(G), K, V[:70], V[70:], alphas, method="eigh")
    c = path_errors(G.copy(), K, V[:70], V[70:], alphas, method="cholesky")
    np.testing.assert_allclose(e, c, rtol=1e-10)
    # the eigen path's prediction is the ridge solution
    beta = np.linalg.solve(G + 0.1 * np.eye(70), V[:70] - V[:70].mean(axis=0))
    np.testing.assert_allclose(
        EigenPath(G.copy(), K, V[:70]).predict(0.1), K @ beta + V[:70].mean(axis=0), rtol=1e-10
    )
    assert eigh_pays(14, 1000) and not eigh_pays(14, 4000)
    # alpha = 0 on a singular Gram: the Cholesky path says inf, never a jittered value
    assert np.isinf(path_errors(np.zeros((70, 70)), K, V[:70], V[70:], [0.0], method="cholesky")[0])
    with pytest.raises(ValueError, match="unknown ridge path method"):
        path_errors(G, K, V[:70], V[70:], alphas, method="qr")


def test_the_eigen_path_scores_alphas_in_blocks_as_one_by_one(monkeypatch):
    """Every alpha's predictions at once (numpy), or one alpha at a time where one alone fills a
    block: the same errors, each the plain numpy ridge solution's; zero outputs left out."""
    from rfol_dask import tuning

    rng = np.random.default_rng(2)
    A = rng.normal(size=(90, 40))
    A -= A[:70].mean(axis=0)
    G, K, V = A[:70] @ A[:70].T, A[70:] @ A[:70].T, rng.normal(size=(90, 3))
    V[85] = 0.0  # a validation output of zeros: no relative error
    alphas = [-1e3, 1e-3, 1e-1, 10.0]  # -1e3: G + alpha I not positive definite, scores inf
    scored = np.arange(20) != 15
    want, norms = [], np.linalg.norm(V[70:][scored], axis=1)
    for alpha in alphas[1:]:
        beta = np.linalg.solve(G + alpha * np.eye(70), V[:70] - V[:70].mean(axis=0))
        miss = K @ beta + V[:70].mean(axis=0) - V[70:]
        want.append(np.mean(np.linalg.norm(miss[scored], axis=1) / norms))
    batched = tuning.EigenPath(G.copy(), K, V[:70]).errors(alphas, V[70:])
    monkeypatch.setattr(tuning, "BLOCK_BYTES", 8)
    single = tuning.EigenPath(G.copy(), K, V[:70]).errors(alphas, V[70:])
    assert np.isinf(batched[0]) and np.isinf(single[0])
    np.testing.assert_allclose(batched[1:], want, rtol=1e-10)
    np.testing.assert_allclose(single[1:], batched[1:], rtol=1e-14)


def test_window_errors_solve_only_around_the_center_and_widen_at_an_edge():
    from rfol_dask.tuning import path_errors, window_errors

    rng = np.random.default_rng(1)
    A = rng.normal(size=(400, 300))
    A -= A[:320].mean(axis=0)
    G, K = A[:320] @ A[:320].T, A[320:] @ A[:320].T
    V = A @ rng.normal(size=(300, 3)) / 10 + 0.5 * rng.normal(
        size=(400, 3)
    )  # noisy: an interior best alpha
    alphas = 10.0 ** np.arange(-8, 8)
    full = path_errors(G.copy(), K, V[:320], V[320:], alphas, method="cholesky")
    best = int(np.argmin(full))
    assert 2 < best < len(alphas) - 3
    # centred at the best: exactly the 5 alphas around it, equal to the full path there
    win = window_errors(G, K, V[:320], V[320:], alphas, best)
    solved = np.flatnonzero(np.isfinite(win))
    np.testing.assert_array_equal(solved, np.arange(best - 2, best + 3))
    np.testing.assert_allclose(win[solved], full[solved], rtol=1e-12)
    # centred far below the best: widened until the best is inside, and found
    win = window_errors(G, K, V[:320], V[320:], alphas, 0)
    assert int(np.nanargmin(win)) == best and np.isnan(win[best + 2 :]).all()
    # path_errors uses the window when one Cholesky per alpha of it beats an eigh (M = 320 > 225)
    auto = path_errors(G.copy(), K, V[:320], V[320:], alphas, center=best)
    np.testing.assert_array_equal(
        np.isnan(auto), np.isnan(window_errors(G, K, V[:320], V[320:], alphas, best))
    )
    small = path_errors(G[:100, :100].copy(), K[:, :100], V[:100], V[320:], alphas, center=best)
    assert np.isfinite(small).all()  # M = 100: the eigh path gives every alpha


@pytest.mark.parametrize("m", [2, 300])
@pytest.mark.slow
def test_cholesky_path_factors_in_place_and_gives_the_gram_back(m):
    """One Cholesky per alpha in the Gram's own buffer (restored from its upper triangle after
    each): the errors equal plain solves, the Gram comes back unchanged (a failed alpha
    included), and no second Gram is allocated; with more outputs (m = 300) than validation
    rows (100) the solve runs against the validation rows, with the same errors."""
    import tracemalloc

    from rfol_dask.tuning import cholesky_errors, relative_errors

    rng = np.random.default_rng(2)
    # the Gram (18 MB) dwarfs the fixed-size temporaries of mirroring a triangle (about 3 MB)
    M = 1500
    A = rng.normal(size=(M + 100, 400))
    A -= A[:M].mean(axis=0)
    G, K = np.asfortranarray(A[:M] @ A[:M].T), A[M:] @ A[:M].T
    V = A @ rng.normal(size=(400, m)) / 10 + 0.3 * rng.normal(size=(M + 100, m))
    G0 = G.copy()
    alphas = [-1e9, 1e-2, 1.0, 100.0]  # the first: not positive definite
    tracemalloc.start()
    errs = cholesky_errors(G, K, V[:M], V[M:], alphas)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 0.5 * G.nbytes
    np.testing.assert_array_equal(G, G0)
    assert np.isinf(errs[0])
    vbar = V[:M].mean(axis=0)
    for alpha, e in zip(alphas[1:], errs[1:]):
        pred = K @ np.linalg.solve(G0 + alpha * np.eye(M), V[:M] - vbar) + vbar
        np.testing.assert_allclose(e, np.mean(relative_errors(V[M:], pred)), rtol=1e-10)


@pytest.mark.parametrize("n_used", [1200, 2400])
@pytest.mark.slow
def test_growth_solves_in_the_accumulator_and_leaves_it_as_it_was(n_used):
    """The search's Cholesky paths solve in a running accumulator's own Gram (no M_t^2 copy),
    for the model of all its features or of fewer (the ridge rescaled instead of the Gram), and
    give the errors of a fresh copy; the accumulator's lower triangle and cross-Gram are kept."""
    import tracemalloc

    from rfol_dask.feature_passes import _path_errors
    from rfol_dask.tuning import validation_grams, validation_slab

    U, V = _data(M=1400, n=12)
    n_train, N = 1100, 2400
    freq = lambda columns: draw_frequencies(12, N, "gaussian", 1.0, None, 0, columns=columns)  # noqa: E731
    acc = validation_slab(None, U, n_train, freq, N, 0, N, [frequency_scale("gaussian", 0.05)], [N])
    G0, K0 = np.tril(acc[0][0][0]).copy(), acc[0][0][1].copy()
    alphas = np.array([1e-8, 1e-6, 1e-4, 1e-2])
    args = ((n_used, N), 0, V[:n_train], V[n_train:], alphas, True, "auto", 2, 1)
    G, K, factor, _ = validation_grams(acc, 0, (n_used, N), 0)  # a copy
    np.testing.assert_allclose(G, G0 + np.tril(G0, -1).T, rtol=1e-13)
    assert factor == N / n_used
    tracemalloc.start()
    errs = _path_errors(acc, 0, *args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 0.5 * G0.nbytes  # no Gram copy
    assert np.isfinite(errs[1:4]).all() and np.isnan(errs[0])  # the window around index 2
    np.testing.assert_array_equal(np.tril(acc[0][0][0]), G0)
    np.testing.assert_array_equal(acc[0][0][1], K0)
    # the reference: the rescaled model's own Gram and cross-Gram, solved afresh
    from rfol_dask.tuning import relative_errors

    Gs, Ks = factor * (G0 + np.tril(G0, -1).T), factor * K0
    vbar = V[:n_train].mean(axis=0)
    for a in (1, 2, 3):
        pred = Ks @ np.linalg.solve(Gs + alphas[a] * np.eye(n_train), V[:n_train] - vbar) + vbar
        np.testing.assert_allclose(errs[a], np.mean(relative_errors(V[n_train:], pred)), rtol=1e-8)


@pytest.mark.parametrize("method", ["eigh", "cholesky"])
def test_features_fewer_than_training_rows_are_scored_in_the_primal(method):
    """With N < M_t the search keeps the features (no M_t x M_t Gram) and scores each nested N by
    the N x N Gram; accumulators of alternate slabs summed (a cluster's workers) give the same;
    the errors equal a plain numpy ridge on the centred features of that N."""
    import functools

    from rfol_dask.feature_passes import _path_errors
    from rfol_dask.tuning import relative_errors, slab_bounds, sum_validation, validation_slab

    U, V = _data(M=500, n=12)
    n_train, N, Ns, s = 400, 256, [128, 256], frequency_scale("gaussian", 0.05)
    freq = functools.partial(draw_frequencies, 12, N, "gaussian", 1.0, None, 0)
    accs = [None, None]
    for i, (f0, f1) in enumerate(slab_bounds(N, 500, Ns, slab_bytes=500 * 8 * 64)):
        accs[i % 2] = validation_slab(accs[i % 2], U, n_train, freq, N, f0, f1, [s], Ns)
    acc = sum_validation(*accs)
    om, b = freq()
    A = np.sqrt(2.0 / N) * np.cos(s * U @ om + b)
    A -= A[:n_train].mean(axis=0)
    np.testing.assert_allclose(acc[0][0], A, rtol=1e-12, atol=1e-15)
    alphas = np.array([1e-6, 1e-4, 1e-2])
    vbar = V[:n_train].mean(axis=0)
    for g, Ng in enumerate(Ns):
        args = (Ns, g, V[:n_train], V[n_train:], alphas, True, method)
        errs = _path_errors(acc, 0, *args)
        At, Av = np.sqrt(N / Ng) * A[:n_train, :Ng], np.sqrt(N / Ng) * A[n_train:, :Ng]
        for a, alpha in enumerate(alphas):
            C = np.linalg.solve(At.T @ At + alpha * np.eye(Ng), At.T @ (V[:n_train] - vbar))
            want = np.mean(relative_errors(V[n_train:], Av @ C + vbar))
            np.testing.assert_allclose(errs[a], want, rtol=1e-7)


def test_alphas_below_the_rounding_floor_of_the_gram_are_not_scored():
    """The centred Gram of 100 random features on 300 rows has rank 100: its other eigenvalues
    are rounding, and a ridge below the Gram's own rounding (2 eps trace / sqrt(M)) is amplified
    from it. Every path leaves those alphas unscored (NaN) and agrees above them, where a
    perturbation of the Gram at the rounding level moves the scores by far less than the
    search's margins; the eigen path says inf where G + alpha I is not positive definite, as
    Cholesky does."""
    from rfol_dask.tuning import EigenPath, path_errors, rounding_floor

    rng = np.random.default_rng(0)
    M, N = 300, 100
    A = np.cos(
        rng.normal(size=(M + 60, 8)) @ rng.normal(size=(8, N)) + rng.uniform(0, 2 * np.pi, N)
    ) * np.sqrt(2 / N)
    A -= A[:M].mean(axis=0)
    V = A @ rng.normal(size=(N, 3)) + 0.01 * rng.normal(
        size=(M + 60, 3)
    )  # outputs partly outside the span
    G, K = A[:M] @ A[:M].T, A[M:] @ A[:M].T
    floor = rounding_floor(G)
    assert floor == pytest.approx(2 * np.finfo(float).eps * np.trace(G) / np.sqrt(M))
    alphas = 10.0 ** np.arange(-17, -9)
    below = alphas < floor
    assert below.sum() == 3
    paths = {
        m: path_errors(np.asfortranarray(G), K, V[:M], V[M:], alphas, method=m)
        for m in ("eigh", "cholesky")
    }
    paths["window"] = path_errors(
        np.asfortranarray(G), K, V[:M], V[M:], alphas, method="auto", center=0, half_width=1
    )
    for errs in paths.values():
        assert np.isnan(errs[below]).all()
    assert np.isfinite(
        paths["window"][~below][:3]
    ).all()  # the window starts at the first alpha above the floor
    # at least 10x above the floor the scores are resolved: the paths agree, and rounding-level
    # changes
    # of the Gram move them by less than 0.5 %
    resolved = alphas >= 10 * floor
    np.testing.assert_allclose(paths["eigh"][resolved], paths["cholesky"][resolved], rtol=5e-3)
    E = rng.uniform(-1, 1, G.shape) * np.finfo(float).eps * np.abs(G)
    moved = path_errors(
        np.asfortranarray(G + (E + E.T) / 2), K, V[:M], V[M:], alphas, method="eigh"
    )
    np.testing.assert_allclose(moved[resolved], paths["eigh"][resolved], rtol=5e-3)
    # the eigen path scores no alpha at which G + alpha I is not positive definite
    path = EigenPath(np.asfortranarray(G), K, V[:M])
    assert path.lam_min < 0 and np.isinf(path.errors([-path.lam_min / 2], V[M:])).all()
