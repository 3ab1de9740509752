import contextlib
import re
import warnings

import dask.array as da
import numpy as np
import pytest
from conftest import smooth_operator_data
from sklearn.decomposition import PCA
from sklearn.gaussian_process.kernels import RBF, Matern, RationalQuadratic
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from rfol_dask.baselines import KernelOperator

SKLEARN = {
    "rbf": RBF(1.3),
    "matern12": Matern(1.3, nu=0.5),
    "matern32": Matern(1.3, nu=1.5),
    "matern52": Matern(1.3, nu=2.5),
    "inverse_quadratic": RationalQuadratic(1.3, alpha=1.0),
}


@pytest.mark.parametrize("kernel", sorted(SKLEARN))
@pytest.mark.slow
def test_matches_sklearn_kernel_ridge(kernel):
    U, V = smooth_operator_data(150, 12)
    Ut, _ = smooth_operator_data(40, 12, seed=1)
    model = KernelOperator(kernel=kernel, length_scale=1.3, nugget=1e-4, fit_intercept=False).fit(
        U, V
    )
    ref = KernelRidge(alpha=1e-4, kernel=SKLEARN[kernel]).fit(U, V)
    np.testing.assert_allclose(model.predict(Ut), ref.predict(Ut), rtol=1e-8, atol=1e-10)


def test_intercept_is_feature_space_centring():
    U, V = smooth_operator_data(120, 10)
    Ut, _ = smooth_operator_data(30, 10, seed=2)
    model = KernelOperator(kernel="rbf", length_scale=0.9, nugget=1e-3).fit(U, V)
    K, Kt = RBF(0.9)(U), RBF(0.9)(Ut, U)
    H = np.eye(len(U)) - 1.0 / len(U)
    Beta = np.linalg.solve(H @ K @ H + 1e-3 * np.eye(len(U)), V - V.mean(0))
    Beta -= Beta.mean(0)
    ref = Kt @ Beta - K.mean(0) @ Beta + V.mean(0)
    np.testing.assert_allclose(model.predict(Ut), ref, rtol=1e-9, atol=1e-10)


def test_linear_kernel_is_ridge_on_raw_inputs():
    U, V = smooth_operator_data(100, 16)
    model = KernelOperator(kernel="linear", nugget=0.1).fit(U, V)
    np.testing.assert_allclose(
        model.predict(U), Ridge(alpha=0.1).fit(U, V).predict(U), rtol=1e-9, atol=1e-10
    )


def test_input_pca():
    U, V = smooth_operator_data(150, 24)
    model = KernelOperator(
        kernel="rbf", length_scale=1.0, nugget=1e-4, n_components=5, fit_intercept=False
    ).fit(U, V)
    scores = PCA(5).fit(U)
    ref = KernelRidge(alpha=1e-4, kernel=RBF(1.0)).fit(scores.transform(U), V)
    np.testing.assert_allclose(
        model.predict(U[:20]), ref.predict(scores.transform(U[:20])), rtol=1e-7, atol=1e-9
    )
    assert model.pca_components_.shape == (24, 5) and model.X_train_.shape == (150, 5)


@pytest.mark.parametrize("n_components", [None, 4])
@pytest.mark.slow
def test_dask_input_same_model_in_memory_and_blocked(n_components):
    U, V = smooth_operator_data(180, 12)
    ref = KernelOperator(
        kernel="matern52", length_scale=1.1, nugget=1e-4, n_components=n_components
    ).fit(U, V)
    Ud, Vd = da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
    model = KernelOperator(
        kernel="matern52", length_scale=1.1, nugget=1e-4, n_components=n_components
    ).fit(Ud, Vd)
    np.testing.assert_allclose(model.predict(U), ref.predict(U), rtol=1e-9, atol=1e-10)
    with pytest.warns(RuntimeWarning, match="blocked"):
        blocked = KernelOperator(
            kernel="matern52",
            length_scale=1.1,
            nugget=1e-4,
            n_components=n_components,
            max_gram_bytes=1000,
        ).fit(Ud, Vd)
    np.testing.assert_allclose(blocked.predict(Ud).compute(), ref.predict(U), rtol=1e-8, atol=1e-9)


def _ridges_used(X, Y, **kw):
    """The raised-ridge warnings of a linear-kernel fit with a tiny nugget."""
    with pytest.warns(RuntimeWarning, match="used ridge") as record:
        KernelOperator(kernel="linear", nugget=1e-20, **kw).fit(X, Y)
    return [str(w.message) for w in record if "used ridge" in str(w.message)]


@pytest.mark.slow
def test_blocked_linear_kernel_raises_the_ridge_by_its_mean_diagonal():
    # a singular linear Gram with a large diagonal: the raised ridges of the blocked dask fit follow
    # its mean diagonal (more inputs than samples: the linear kernel is fitted in the dual)
    rng = np.random.default_rng(0)
    U = 100 * rng.standard_normal((80, 6)) @ rng.standard_normal((6, 90))
    V = U @ rng.standard_normal((90, 3))
    blocked = _ridges_used(
        da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1)), max_gram_bytes=1000
    )
    assert (
        len(blocked) == 1 and "plus nugget=1e-20" in blocked[0] and "a larger nugget" in blocked[0]
    )
    ridge = float(re.search(r"used ridge (\S+) instead", blocked[0]).group(1))
    mean_diag = np.mean(np.sum((U - U.mean(axis=0)) ** 2, axis=1))
    steps = np.log10(ridge / (np.finfo(float).eps * mean_diag))
    assert round(steps) >= 1 and abs(steps - round(steps)) < 0.01  # 10^k times eps * mean diag
    # in memory and from dask on one worker the eigen solve needs no raised ridge: the outputs, in
    # the inputs' span, are fitted
    for X, Y in ((U, V), (da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1)))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = KernelOperator(kernel="linear", nugget=1e-20).fit(X, Y)
        assert _rel(model.predict(U), V) < 1e-10


def test_linear_kernel_primal_raises_the_ridge_in_memory_and_on_dask_alike():
    # fewer inputs than samples (the primal), of rank 3: its 6 x 6 Gram is singular
    rng = np.random.default_rng(0)
    U = 100 * rng.standard_normal((80, 3)) @ rng.standard_normal((3, 6))
    V = U @ rng.standard_normal((6, 3))
    in_memory = _ridges_used(U, V)
    on_dask = _ridges_used(da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1)))
    assert on_dask == in_memory and len(in_memory) == 1 and "plus nugget=1e-20" in in_memory[0]


def _linear_data(kind):
    """(U, V, U_test) with fewer inputs (64) than samples (200): smooth inputs of rank 5, whose
    dual Gram has rank 5, or full-rank Gaussian ones."""
    if kind == "smooth":
        U, V = smooth_operator_data(200, 64)
        return U, V, smooth_operator_data(50, 64, seed=1)[0]
    rng = np.random.default_rng(4)
    U, Ut = rng.standard_normal((200, 64)), rng.standard_normal((50, 64))
    return U, np.sin(U[:, :8]) + U[:, 8:16] ** 2, Ut


def _rel(a, b):
    return np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b)


@pytest.mark.parametrize("kind", ["smooth", "gaussian"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("nugget", [1e-6, 1e-10])
@pytest.mark.slow
def test_linear_kernel_matches_sklearn_ridge_at_small_nuggets(kind, fit_intercept, nugget):
    """With more samples than inputs the linear kernel's dual Gram is rank-deficient: the dual
    solve lost 1.2e-7 relative against Ridge(solver="svd") at nugget 1e-6 and 1e-3 at 1e-10. The
    primal gives the same ridge to rounding, in memory and for dask input."""
    U, V, Ut = _linear_data(kind)
    ref = Ridge(alpha=nugget, solver="svd", fit_intercept=fit_intercept).fit(U, V)
    want = ref.predict(Ut)
    chunks = dict(chunks=(37, -1))
    for X, Y in ((U, V), (da.from_array(U, **chunks), da.from_array(V, **chunks))):
        model = KernelOperator(kernel="linear", nugget=nugget, fit_intercept=fit_intercept).fit(
            X, Y
        )
        assert _rel(model.predict(Ut), want) < 1e-12
        assert _rel(model.predict(da.from_array(Ut, chunks=(20, -1))).compute(), want) < 1e-12
        assert (
            model.coef_.shape == (64, V.shape[1])
            and model.X_train_ is None
            and model.dual_coef_ is None
        )
        if kind == "gaussian":  # full rank: the weights themselves are determined
            np.testing.assert_allclose(model.coef_, ref.coef_.T, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(
                model.intercept_, np.broadcast_to(ref.intercept_, 8), rtol=1e-10, atol=1e-12
            )


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("nugget", [1e-6, 1e-10])
def test_linear_kernel_dual_on_rank_deficient_inputs_matches_sklearn_ridge(fit_intercept, nugget):
    """More inputs (64) than samples (50), of rank 5: the dual. Its Cholesky solve lost 2.7e-8
    relative against Ridge(solver="svd") at nugget 1e-6 and 2.8e-4 at 1e-10 (in float32 1e-3 to
    0.1); the eigen solve with the rounding directions left out gives Ridge's predictions to
    rounding."""
    U, V = smooth_operator_data(50, 64)
    Ut = smooth_operator_data(30, 64, seed=1)[0]
    model = KernelOperator(kernel="linear", nugget=nugget, fit_intercept=fit_intercept).fit(U, V)
    assert model.coef_ is None and model.dual_coef_.shape == (50, 64)  # the dual
    ref = Ridge(alpha=nugget, solver="svd", fit_intercept=fit_intercept).fit(U, V)
    assert _rel(model.predict(Ut), ref.predict(Ut)) < 1e-12
    assert _rel(model.predict(U), ref.predict(U)) < 1e-12
    f32 = KernelOperator(
        kernel="linear", nugget=nugget, fit_intercept=fit_intercept, dtype="float32"
    ).fit(U, V)
    assert (
        f32.dual_coef_.dtype == np.float32 and _rel(f32.predict(Ut), ref.predict(Ut)) < 1e-5
    )  # was 1e-3 to 0.1 off
    # through the array API too (whose eigensolver's rounding eigenvalues are others)
    xs = pytest.importorskip("array_api_strict")
    strict = KernelOperator(kernel="linear", nugget=nugget, fit_intercept=fit_intercept).fit(
        xs.asarray(U), xs.asarray(V)
    )
    assert _rel(np.asarray(strict.predict(xs.asarray(Ut))), ref.predict(Ut)) < 1e-12
    # full-rank inputs: the same ridge as before
    rng = np.random.default_rng(4)
    G, Gt = rng.standard_normal((50, 64)), rng.standard_normal((30, 64))
    W = np.sin(G[:, :8]) + G[:, 8:16] ** 2
    full = KernelOperator(kernel="linear", nugget=nugget, fit_intercept=fit_intercept).fit(G, W)
    assert (
        _rel(
            full.predict(Gt),
            Ridge(alpha=nugget, solver="svd", fit_intercept=fit_intercept).fit(G, W).predict(Gt),
        )
        < 1e-12
    )


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.slow
def test_linear_kernel_dual_from_dask_is_the_in_memory_eigen_solve(cluster_client, fit_intercept):
    """More inputs (64) than samples (50), of rank 5, from dask: the fit solved the Cholesky dual,
    2.7e-4 relative off Ridge(solver="svd") at nugget 1e-10 where the in-memory eigen solve agrees
    to 1e-15. It is now that solve (linear_dual, in one task), with the dask threads and on a
    cluster; where its worker cannot hold the Gram with the eigenvectors, inputs and outputs, the
    Gram is factorised blocked."""
    U, V = smooth_operator_data(50, 64)
    Ut = smooth_operator_data(30, 64, seed=1)[0]
    want = Ridge(alpha=1e-10, solver="svd", fit_intercept=fit_intercept).fit(U, V).predict(Ut)
    model = KernelOperator(kernel="linear", nugget=1e-10, fit_intercept=fit_intercept)
    numpy = model.fit(U, V).predict(Ut)
    assert _rel(numpy, want) < 1e-12
    Ud, Vd = da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1))
    for client in (contextlib.nullcontext(), cluster_client.as_current()):
        with client, warnings.catch_warnings():
            warnings.simplefilter("error")  # no raised ridge, no blocked plan
            lazy = KernelOperator(kernel="linear", nugget=1e-10, fit_intercept=fit_intercept).fit(
                Ud, Vd
            )
        assert lazy.coef_ is None and lazy.dual_coef_.shape == (50, 64)
        assert _rel(lazy.predict(Ut), numpy) < 1e-10 and _rel(lazy.predict(Ut), want) < 1e-12
    # the Gram (20,000 bytes) fits 50,000, but not with what the eigen solve holds beside it
    # (50 x (50 + 64 + 64) x 8 = 71,200 bytes): the blocked Cholesky
    with pytest.warns(
        RuntimeWarning, match=r"71,200 more bytes for the data held with it.*blocked"
    ):
        blocked = KernelOperator(
            kernel="linear", nugget=1e-6, fit_intercept=fit_intercept, max_gram_bytes=50_000
        ).fit(Ud, Vd)
    assert (
        _rel(
            blocked.predict(Ut),
            Ridge(alpha=1e-6, solver="svd", fit_intercept=fit_intercept).fit(U, V).predict(Ut),
        )
        < 1e-6
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KernelOperator(
            kernel="linear", nugget=1e-6, fit_intercept=fit_intercept, max_gram_bytes=100_000
        ).fit(Ud, Vd)


@pytest.mark.slow  # the shared process cluster (cluster_client): its start and close
def test_kernel_dask_dual_on_several_workers_needs_no_room_for_a_sum_of_grams(
    cluster_client, monkeypatch
):
    """A kernel fit's Gram is assembled from its tiles on one worker, never summed from the
    workers' Grams: on two workers whose room holds the linear kernel's Gram with what its eigen
    solve holds beside it, but not a second Gram, the fit is the eigen solve, not blocked (the plan
    counted the streamed dual's sum of two Grams: a warning that a worker sums the workers' Grams,
    and the blocked Cholesky, 1e-6 off the eigen solve)."""
    from rfol_dask import memory

    U, V = smooth_operator_data(50, 64)
    Ut = smooth_operator_data(30, 64, seed=1)[0]
    numpy = KernelOperator(kernel="linear", nugget=1e-10).fit(U, V).predict(Ut)
    limits = [w["memory_limit"] for w in cluster_client.scheduler_info()["workers"].values()]
    # every worker has 100,000 bytes before dask pauses it (and as its budget): the Gram, 20,000
    # bytes, and its eigenvectors, inputs and outputs, 71,200 bytes, fit; with a second Gram they
    # would not
    used = 0.8 * min(limits) - 100_000
    monkeypatch.setattr(memory, "_process_memory", lambda: used)
    with cluster_client.as_current(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no blocked plan
        lazy = KernelOperator(kernel="linear", nugget=1e-10).fit(
            da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1))
        )
    assert _rel(lazy.predict(Ut), numpy) < 1e-10


@pytest.mark.cluster
@pytest.mark.slow
def test_kernel_dask_dual_makes_a_row_of_tiles_once_the_row_before_is_placed():
    """The kernel dual's chain copies each row of Gram tiles into the Gram on one worker. The tiles
    were all made at once on every worker, ahead of the chain: dozens waited beside the Gram (a
    row of 16 tiles is what the plan counts). A row's tiles are now made once the row before is
    placed: a worker holds the Gram, one row of tiles and the solve's outputs and coefficients."""
    from conftest import held_arrays
    from distributed import Client, LocalCluster

    U, V = smooth_operator_data(800, 16)
    ref = KernelOperator(kernel="rbf", length_scale=1.1, nugget=1e-6).fit(U, V)
    nb = 16  # row blocks of 50 rows: tiles of 20,000 bytes, the Gram 256 of them
    with (
        LocalCluster(
            n_workers=3, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        held_arrays(client, 50 * 50 * 8) as peaks,
    ):
        lazy = KernelOperator(kernel="rbf", length_scale=1.1, nugget=1e-6).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
    np.testing.assert_allclose(
        lazy.dual_coef_, ref.dual_coef_, rtol=1e-7, atol=1e-7 * np.abs(ref.dual_coef_).max()
    )
    assert max(peaks.values()) <= 1 + nb + 2


def test_kernel_dask_dual_plan_counts_a_row_of_tiles():
    """The chain that assembles the kernel dual's Gram on one worker holds a row of Gram tiles
    beside it: with one row block that row is a second Gram (made on a worker, copied in: two Grams
    held where the plan counted one). The plan counts the row: factorised blocked when the Gram
    and its row do not fit the budget, assembled on one worker when they do."""
    from rfol_dask.exceptions import MemoryPlanWarning

    U, V = smooth_operator_data(200, 12)
    ref = KernelOperator(kernel="rbf", length_scale=1.1, nugget=1e-4).fit(U, V)
    kw = dict(kernel="rbf", length_scale=1.1, nugget=1e-4, max_gram_bytes=1.5 * 200 * 200 * 8)
    Vd = da.from_array(V, chunks=(200, -1))
    with pytest.warns(
        MemoryPlanWarning, match=r"320,000 more bytes for a row of Gram tiles held with it.*blocked"
    ):
        one = KernelOperator(**kw).fit(da.from_array(U, chunks=(200, -1)), Vd)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # four row blocks: a row of a quarter of the Gram fits beside it
        four = KernelOperator(**kw).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
    for model in (one, four):
        np.testing.assert_allclose(model.predict(U), ref.predict(U), rtol=1e-8, atol=1e-9)


@pytest.mark.slow
def test_linear_kernel_primal_in_float32_and_on_pca_scores():
    U, V, Ut = _linear_data("gaussian")
    ref = Ridge(alpha=1e-4, solver="svd").fit(U, V)
    f32 = KernelOperator(kernel="linear", nugget=1e-4, dtype="float32").fit(U, V)
    assert f32.coef_.dtype == f32.intercept_.dtype == np.float32
    assert _rel(f32.predict(Ut.astype(np.float32)), ref.predict(Ut)) < 1e-5
    # input PCA to 5 scores of the 300 x 400 inputs (more inputs than samples): a primal on the
    # scores
    U2, V2 = smooth_operator_data(300, 400)
    Ut2 = smooth_operator_data(50, 400, seed=1)[0]
    model = KernelOperator(kernel="linear", nugget=1e-9, n_components=5).fit(U2, V2)
    scores = PCA(5).fit(U2)
    want = (
        Ridge(alpha=1e-9, solver="svd").fit(scores.transform(U2), V2).predict(scores.transform(Ut2))
    )
    assert model.coef_.shape == (5, 400) and _rel(model.predict(Ut2), want) < 1e-10
    # more inputs than samples: the dual, as before
    dual = KernelOperator(kernel="linear", nugget=1e-3).fit(U2[:100], V2[:100])
    assert dual.coef_ is None and dual.dual_coef_.shape == (100, 400)
    assert (
        _rel(
            dual.predict(Ut2), Ridge(alpha=1e-3, solver="svd").fit(U2[:100], V2[:100]).predict(Ut2)
        )
        < 1e-8
    )


@pytest.mark.slow
def test_linear_kernel_primal_saves_and_a_dual_model_of_the_earlier_version_still_loads(
    tmp_path, monkeypatch
):
    import zarr

    from rfol_dask import persistence

    U, V, Ut = _linear_data("smooth")
    model = KernelOperator(kernel="linear", nugget=1e-10).fit(U, V)
    path = model.save(tmp_path / "primal.zarr")
    group = zarr.open_group(str(path), mode="r")
    assert group.attrs["rfol_dask_format"] == 3 and "coef_" in group and "X_train_" not in group
    again = KernelOperator.load(path)
    assert again.X_train_ is None and again.dual_coef_ is None
    np.testing.assert_array_equal(again.predict(Ut), model.predict(Ut))
    # an rfol_dask that reads format 2 refuses it (it would predict without the weights)
    with monkeypatch.context() as m:
        m.setattr(persistence, "MODEL_FORMAT", 2)
        with pytest.raises(
            ValueError, match="has format 3 .*reads formats 1 to 2: upgrade rfol_dask"
        ):
            KernelOperator.load(path)
    # a linear model fitted in the dual, as the earlier version saved it (format 2, no coef_)
    with monkeypatch.context() as m:
        m.setattr(KernelOperator, "_primal", lambda self, M, p: False)
        old = KernelOperator(kernel="linear", nugget=1e-6).fit(U, V)
        old_path = old.save(tmp_path / "dual.zarr")
    group = zarr.open_group(str(old_path), mode="r")
    assert group.attrs["rfol_dask_format"] == 2 and "coef_" not in group and "dual_coef_" in group
    loaded = KernelOperator.load(old_path)
    assert loaded.coef_ is None and loaded.dual_coef_.shape == (200, 64)
    np.testing.assert_array_equal(loaded.predict(Ut), old.predict(Ut))
    assert (
        _rel(loaded.predict(Ut), Ridge(alpha=1e-6, solver="svd").fit(U, V).predict(Ut)) < 1e-5
    )  # its precision
    # a fitted model pickled by the earlier version has no coef_ at all
    del loaded.coef_
    np.testing.assert_array_equal(loaded.predict(Ut), old.predict(Ut))


def test_linear_kernel_primal_memory_check_names_its_gram():
    U, V, _ = _linear_data("gaussian")
    for X, Y in ((U, V), (da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1)))):
        with pytest.raises(ValueError, match=r"64 x 64 .*n_components: input PCA"):
            KernelOperator(kernel="linear", max_gram_bytes=10_000).fit(X, Y)
    KernelOperator(kernel="linear", max_gram_bytes=40_000).fit(
        U, V
    )  # its 64 x 64 Gram, not the 200 x 200 one


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
def test_float32_distances_survive_a_large_common_offset(kernel):
    # |x|^2 + |y|^2 - 2 x.y in float32 lost every digit at an offset 1000 x the spread
    U, V = smooth_operator_data(150, 16)
    U = U / U.std() + 1000.0
    f64 = KernelOperator(kernel=kernel, length_scale=2.0, nugget=1e-4).fit(U[:100], V[:100])
    f32 = KernelOperator(kernel=kernel, length_scale=2.0, nugget=1e-4).fit(
        U[:100].astype(np.float32), V[:100].astype(np.float32)
    )
    expected = f64.predict(U[100:])
    assert np.linalg.norm(
        f32.predict(U[100:].astype(np.float32)) - expected
    ) < 1e-3 * np.linalg.norm(expected)


def test_save_load_and_errors(tmp_path):
    U, V = smooth_operator_data(60, 8)
    model = KernelOperator(
        kernel="inverse_quadratic", length_scale=1.0, nugget=1e-5, n_components=3
    ).fit(U, V)
    model.save(tmp_path / "k.zarr")
    again = KernelOperator.load(tmp_path / "k.zarr")
    np.testing.assert_allclose(again.predict(U), model.predict(U), rtol=1e-12, atol=1e-14)
    with pytest.raises(
        ValueError, match="'kernel' parameter of KernelOperator must be a str among"
    ):
        KernelOperator(kernel="laplace").fit(U, V)
    with pytest.raises(ValueError, match="X holds NaN or infinity"):
        KernelOperator().fit(np.where(U > 0.5, np.nan, U), V)


@parametrize_with_checks(
    [KernelOperator(length_scale=3.0, nugget=1e-6), KernelOperator(kernel="linear", nugget=1e-6)]
)
@pytest.mark.slow
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_set_params_after_fit_leaves_the_fitted_kernel_alone(tmp_path):
    """predict read the ``kernel`` parameter: ``set_params(kernel="matern12")`` after an RBF fit
    evaluated the Matern kernel against the RBF dual coefficients (predictions off by O(1)), and a
    save after it wrote a model that did the same. The kernel is now fitted (``kernel_``), as the
    length scale and every other parameter are."""
    import json

    import zarr

    from rfol_dask.stores import MODEL_KEY

    U, V = smooth_operator_data(60, 8)
    Ut, _ = smooth_operator_data(20, 8, seed=1)
    model = KernelOperator(kernel="rbf", length_scale=1.3, nugget=1e-6).fit(U, V)
    before = model.predict(Ut)
    model.set_params(kernel="matern12")
    # (equal up to the rounding of threaded BLAS, which differs between calls)
    np.testing.assert_allclose(model.predict(Ut), before, rtol=1e-10, atol=1e-12)
    assert model.kernel_ == "rbf"
    path = model.save(tmp_path / "m.zarr")
    np.testing.assert_allclose(
        KernelOperator.load(path).predict(Ut), before, rtol=1e-10, atol=1e-12
    )
    assert KernelOperator(kernel="rbf").fit(U, V).kernel_ == "rbf"
    # a model saved before kernel_ was kept was fitted with the kernel of its parameters
    old = KernelOperator(kernel="matern32", length_scale=1.3, nugget=1e-6).fit(U, V)
    path = old.save(tmp_path / "old.zarr")
    group = zarr.open_group(str(path), mode="r+")
    attrs = json.loads(group.attrs[MODEL_KEY])
    del attrs["kernel_"]
    group.attrs[MODEL_KEY] = json.dumps(attrs)
    loaded = KernelOperator.load(path)
    assert loaded.kernel_ == "matern32"
    np.testing.assert_allclose(loaded.predict(Ut), old.predict(Ut), rtol=1e-10, atol=1e-12)
