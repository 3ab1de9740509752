"""Dense linear algebra: the Cholesky jitter policy and the threads of the factorisation."""

import os

import dask
import numpy as np
import pytest
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator
from rfol_dask.linalg import cho_solve, cholesky, factor_threads


def _rank_deficient_gram(n=40, rank=5, seed=0):
    A = np.random.default_rng(seed).standard_normal((n, rank))
    return np.asfortranarray(A @ A.T)


def test_cholesky_of_a_singular_gram_retries_with_jitter_and_says_so():
    G = _rank_deficient_gram()
    ref = G.copy()
    with pytest.warns(
        RuntimeWarning,
        match=r"alpha=1e-30 is not numerically positive definite in float64; "
        r"used ridge \S+ instead",
    ):
        L, ridge = cholesky(G, 1e-30)
    assert (
        1e-30 < ridge < 1e-6 * np.abs(np.diag(ref)).mean()
    )  # a small step above the rounding floor
    L = np.tril(L)
    np.testing.assert_allclose(
        L @ L.T, ref + ridge * np.eye(len(ref)), atol=1e-12 * np.abs(ref).max()
    )


def test_cholesky_of_a_positive_definite_gram_keeps_alpha_without_warning(recwarn):
    G = _rank_deficient_gram() + 2.0 * np.eye(40)
    ref = G.copy()
    L, ridge = cholesky(np.asfortranarray(G), 1e-3)
    assert ridge == 1e-3 and not recwarn.list
    B = np.random.default_rng(1).standard_normal((40, 3))
    np.testing.assert_allclose((ref + 1e-3 * np.eye(40)) @ cho_solve(L, B), B, atol=1e-10)


def test_cholesky_with_alpha_zero_refuses_a_singular_gram():
    with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular.*pass alpha > 0"):
        cholesky(_rank_deficient_gram(), 0.0)


def test_fit_with_a_tiny_alpha_warns_with_the_ridge_it_used():
    U, V = smooth_operator_data(60, 8)
    with pytest.warns(RuntimeWarning, match="used ridge"):
        model = RandomFeatureOperator(
            n_features=20, alpha=1e-30, solver="dual", random_state=0
        ).fit(U, V)
    assert np.isfinite(model.coef_).all()


def test_recorded_ridges_holds_this_context_s_raised_ridges_named_as_asked(recwarn):
    """recorded_ridges records instead of warning, in its own context: a factorisation in a task
    of dask's threaded scheduler (which copies the context) is recorded, one in another thread is
    warned there; ridge_name renames the ridge in the message."""
    import threading

    from rfol_dask.linalg import RidgeRaised, recorded_ridges, ridge_name

    with recorded_ridges() as raised, ridge_name("nugget"):
        ((_, ridge),) = dask.compute(
            dask.delayed(cholesky)(_rank_deficient_gram(), 1e-30), scheduler="threads"
        )
        other = threading.Thread(target=cholesky, args=(_rank_deficient_gram(seed=1), 1e-30))
        other.start()
        other.join()
    assert [(w.alpha, w.ridge) for w in raised] == [(1e-30, ridge)]
    assert "the Gram matrix plus nugget=1e-30" in str(raised[0]) and "a larger nugget" in str(
        raised[0]
    )
    assert [type(w.message) for w in recwarn.list] == [
        RidgeRaised
    ]  # the other thread's, named alpha
    assert "plus alpha=1e-30" in str(recwarn.list[0].message)


def test_factor_threads_follows_the_dask_config_key():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert factor_threads() == cores
    U, V = smooth_operator_data(80, 8)
    ref = RandomFeatureOperator(n_features=300, alpha=1e-6, random_state=0).fit(U, V)
    with dask.config.set({"rfol_dask.factor-threads": 3}):
        assert factor_threads() == 3
        model = RandomFeatureOperator(n_features=300, alpha=1e-6, random_state=0).fit(U, V)
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-10, atol=1e-12 * np.abs(ref.coef_).max()
    )


def test_overlapping_blas_limits_of_two_threads_restore_the_count_found_first():
    """The BLAS thread count is one setting of the process. Two fits in two threads used to
    leave it changed for good: the first section to end restored what it found, the second what
    it found, which was the first section's limit (seen as a user's 1 thread raised to 2)."""
    import threading

    from rfol_dask.linalg import _controller, blas_limits

    def count():
        return [i["num_threads"] for i in _controller().info() if i["user_api"] == "blas"]

    start = count()
    if not start:
        pytest.skip("no BLAS found by threadpoolctl")
    k0 = start[0]
    a = 2 if k0 == 1 else 1
    entered, leave = [threading.Event() for _ in range(2)], [threading.Event() for _ in range(2)]

    def section(i, n):
        with blas_limits(n):
            entered[i].set()
            leave[i].wait(10)

    threads = [
        threading.Thread(target=section, args=(0, a)),
        threading.Thread(target=section, args=(1, k0)),
    ]
    threads[0].start()
    entered[0].wait(10)
    threads[1].start()
    entered[1].wait(10)
    for i in (0, 1):  # the first to enter leaves first
        leave[i].set()
        threads[i].join(10)
    assert count() == start
    with blas_limits(a):  # nested in one thread: the enclosing limit again at the inner end
        with blas_limits(k0):
            pass
        assert count() == [a] * len(start)
    assert count() == start


def _fits_reaching_the_factorisation():
    """Fits of every Gram producer that factorises on the CPU through LAPACK ``potrf``."""
    import dask.array as da

    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperator, KernelOperatorCV
    from rfol_dask.recovery import make_recovery

    U, V = smooth_operator_data(n_samples=300, n_points=24)
    Ud, Vd = da.from_array(U, chunks=(70, -1)), da.from_array(V, chunks=(70, -1))
    rf = dict(n_features=400, gamma=1.0, alpha=1e-8, random_state=0)
    return {
        "rf dual numpy": lambda: RandomFeatureOperator(solver="dual", **rf).fit(U, V),
        "rf dual float32": lambda: RandomFeatureOperator(solver="dual", dtype="float32", **rf).fit(
            U, V
        ),
        "rf primal numpy": lambda: RandomFeatureOperator(solver="primal", **rf).fit(U, V),
        "rf dual dask": lambda: RandomFeatureOperator(solver="dual", **rf).fit(Ud, Vd),
        "rf search": lambda: RandomFeatureOperatorCV(
            n_features=200, gammas=(0.5, 1.0), alphas=(1e-8, 1e-4), random_state=0
        ).fit(U, V),
        "kernel rbf numpy": lambda: KernelOperator(kernel="rbf", length_scale=2.0, nugget=1e-8).fit(
            U, V
        ),
        "kernel matern dask": lambda: KernelOperator(
            kernel="matern32", length_scale=2.0, nugget=1e-8
        ).fit(Ud, Vd),
        "kernel search": lambda: KernelOperatorCV(length_scales=(1.0, 2.0), nuggets=(1e-8,)).fit(
            U, V
        ),
        "rf recovery map": lambda: make_recovery("rf", np.arange(40) / 40),
    }


@pytest.mark.parametrize("name", list(_fits_reaching_the_factorisation()))
@pytest.mark.slow
def test_every_gram_reaches_its_first_factorisation_exactly_symmetric(name, monkeypatch):
    # the first attempt factorises the lower triangle as it is and a retry mirrors the upper one
    # into it (potrf_ridge): the two agree only if the triangles were equal to the last bit
    import rfol_dask.linalg as linalg

    seen, potrf = [], linalg.potrf_ridge

    def checked(G, diag, ridge, mirror=True):
        if not mirror:
            D = G.copy()
            np.fill_diagonal(D, diag)
            seen.append((G.shape[0], int(np.count_nonzero(D != D.T))))
        return potrf(G, diag, ridge, mirror)

    monkeypatch.setattr(linalg, "potrf_ridge", checked)
    with dask.config.set(scheduler="sync"):
        _fits_reaching_the_factorisation()[name]()
    assert seen and all(n > 1 for n, _ in seen)
    assert [bad for _, bad in seen] == [0] * len(seen), seen


def test_centre_gram_is_the_double_centring_and_keeps_exact_symmetry():
    from rfol_dask.backend import centre_gram

    A = np.random.default_rng(3).standard_normal((333, 50))
    K = np.asfortranarray(A @ A.T)
    assert np.array_equal(K, K.T)
    H = np.eye(333) - 1.0 / 333
    want = H @ K @ H
    r = K.sum(axis=1)
    got = centre_gram(
        K, r / 333, r.sum() / 333**2, block_bytes=7 * 333 * 8
    )  # ragged blocks of 7 columns
    np.testing.assert_allclose(got, want, atol=1e-12 * np.abs(want).max())
    assert np.array_equal(got, got.T)


def _blas_counts():
    from rfol_dask.linalg import _controller

    return [i["num_threads"] for i in _controller().info() if i["user_api"] == "blas"]


def _no_controlling_thread():
    """threadpoolctl 3.8 lets one thread at a time set OpenBLAS's (pthreads) pool size: start
    with none holding that right, as a fresh process does."""
    import threadpoolctl

    clear = getattr(
        getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None
    )
    if clear is not None:
        clear(force=True)


def test_a_restore_from_another_thread_than_the_first_to_set_takes_effect():
    """Two fits in two threads: the first to enter a section is still running when the other,
    the last to leave, restores the count. threadpoolctl 3.8 dropped that restore (only the
    first thread to set OpenBLAS's pool may set it while it lives): the user's 1 BLAS thread
    stayed at 2 (seen in 1 of 60 rounds of two parallel in-memory fits)."""
    import threading

    from rfol_dask.linalg import blas_limits

    start = _blas_counts()
    if not start:
        pytest.skip("no BLAS found by threadpoolctl")
    a = 2 if start[0] == 1 else 1
    _no_controlling_thread()
    a_in, b_in, a_out, b_out, a_read, a_done = (threading.Event() for _ in range(6))
    seen = {}

    def first():  # enters first, leaves its section first, lives on (the rest of its fit)
        with blas_limits(a):
            a_in.set()
            b_in.wait(10)
        a_out.set()
        b_out.wait(10)
        seen["after"] = _blas_counts()
        a_read.set()
        a_done.wait(10)

    def second():
        a_in.wait(10)
        with blas_limits(a):
            b_in.set()
            seen["inside"] = _blas_counts()
            a_out.wait(10)
        b_out.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    threads[1].join(10)
    try:
        assert seen["inside"] == [a] * len(start)
        a_read.wait(10)
        assert seen["after"] == start  # restored while the first thread still runs
    finally:
        a_done.set()
        threads[0].join(10)
    assert _blas_counts() == start


def test_sections_in_worker_threads_take_effect_after_one_in_the_main_thread():
    """After a section in the main thread (an in-memory fit), a section in another thread (a
    dask task's factorisation or slab) and a user's own ``threadpool_limits`` block there set
    the count: under threadpoolctl 3.8 the main thread had kept the sole right to set it and
    both were silently dropped."""
    import threading

    from threadpoolctl import threadpool_limits

    from rfol_dask.linalg import blas_limits

    start = _blas_counts()
    if not start:
        pytest.skip("no BLAS found by threadpoolctl")
    a = 2 if start[0] == 1 else 1
    _no_controlling_thread()
    with blas_limits(a):
        pass
    assert _blas_counts() == start
    seen = {}

    def task():
        with blas_limits(a):
            seen["section"] = _blas_counts()
        seen["after"] = _blas_counts()
        with threadpool_limits(limits=a, user_api="blas"):
            seen["user"] = _blas_counts()

    t = threading.Thread(target=task)
    t.start()
    t.join(10)
    assert seen == {"section": [a] * len(start), "after": start, "user": [a] * len(start)}
    assert _blas_counts() == start
