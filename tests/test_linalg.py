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
    with pytest.warns(RuntimeWarning, match=r"alpha=1e-30 is not numerically positive definite in float64; "
                                            r"used ridge \S+ instead"):
        L, ridge = cholesky(G, 1e-30)
    assert 1e-30 < ridge < 1e-6 * np.abs(np.diag(ref)).mean()  # a small step above the rounding floor
    L = np.tril(L)
    np.testing.assert_allclose(L @ L.T, ref + ridge * np.eye(len(ref)), atol=1e-12 * np.abs(ref).max())


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
        model = RandomFeatureOperator(n_features=20, alpha=1e-30, solver="dual", random_state=0).fit(U, V)
    assert np.isfinite(model.coef_).all()


def test_recorded_ridges_holds_this_context_s_raised_ridges_named_as_asked(recwarn):
    """recorded_ridges records instead of warning, in its own context: a factorisation in a task
    of dask's threaded scheduler (which copies the context) is recorded, one in another thread is
    warned there; ridge_name renames the ridge in the message."""
    import threading

    from rfol_dask.linalg import RidgeRaised, recorded_ridges, ridge_name

    with recorded_ridges() as raised, ridge_name("nugget"):
        (_, ridge), = dask.compute(dask.delayed(cholesky)(_rank_deficient_gram(), 1e-30), scheduler="threads")
        other = threading.Thread(target=cholesky, args=(_rank_deficient_gram(seed=1), 1e-30))
        other.start()
        other.join()
    assert [(w.alpha, w.ridge) for w in raised] == [(1e-30, ridge)]
    assert "the Gram matrix plus nugget=1e-30" in str(raised[0]) and "a larger nugget" in str(raised[0])
    assert [type(w.message) for w in recwarn.list] == [RidgeRaised]  # the other thread's, named alpha
    assert "plus alpha=1e-30" in str(recwarn.list[0].message)


def test_factor_threads_follows_the_dask_config_key():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert factor_threads() == cores
    U, V = smooth_operator_data(80, 8)
    ref = RandomFeatureOperator(n_features=300, alpha=1e-6, random_state=0).fit(U, V)
    with dask.config.set({"rfol_dask.factor-threads": 3}):
        assert factor_threads() == 3
        model = RandomFeatureOperator(n_features=300, alpha=1e-6, random_state=0).fit(U, V)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10, atol=1e-12 * np.abs(ref.coef_).max())


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

    threads = [threading.Thread(target=section, args=(0, a)), threading.Thread(target=section, args=(1, k0))]
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
