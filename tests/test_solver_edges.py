"""Solver edges: alpha = 0 as the min-norm interpolant or refused, slabs sized with their
frequencies, kernel fits of masked dask rows."""

import dask.array as da
import numpy as np
import pytest
from conftest import rel, smooth_operator_data

from rfol_dask import RandomFeatureOperator
from rfol_dask.baselines import KernelOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize(
    "n_features, solver",
    [(99, "dual"), (100, "dual"), (101, "auto"), (99, "primal"), (99, "auto"), (60, "auto")],
)
@pytest.mark.slow
def test_alpha_zero_is_the_min_norm_interpolant_on_every_path(n_features, solver, lazy):
    # the centred features have rank min(N, M - 1): the dual's ones direction is lifted, so the
    # fit no longer factorises (or fails) by rounding; compared with pinv of the centred features
    rng = np.random.default_rng(4)
    U, Ut = rng.normal(size=(100, 10)), rng.normal(size=(50, 10))
    V = np.tanh(U[:, :3]) + 1.5
    X, Y = (da.from_array(U, chunks=30), da.from_array(V, chunks=30)) if lazy else (U, V)
    model = _rf(n_features=n_features, gamma=0.3, alpha=0.0, solver=solver).fit(X, Y)
    if lazy and model.solver_ == "dual":  # and factorised blocked across the workers
        with pytest.warns(RuntimeWarning, match="blocked"):
            blocked = _rf(
                n_features=n_features, gamma=0.3, alpha=0.0, solver=solver, max_gram_bytes=1000
            ).fit(X, Y)
        np.testing.assert_allclose(blocked.predict(Ut), model.predict(Ut), rtol=1e-9, atol=1e-9)
    A, At = (
        np.sqrt(2 / n_features) * np.cos((W - model.input_centre_) @ model.omega_ + model.b_)
        for W in (U, Ut)
    )
    mu, vbar = A.mean(0), V.mean(0)
    expected = (At - mu) @ (np.linalg.pinv(A - mu) @ (V - vbar)) + vbar
    np.testing.assert_allclose(
        np.asarray(model.predict(Ut)), expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max()
    )


def test_alpha_zero_where_the_gram_is_singular_whatever_the_data_is_refused():
    U, V = smooth_operator_data(100, 6)
    with pytest.raises(ValueError, match="in the primal needs n_features <= 99"):
        _rf(n_features=100, alpha=0.0, solver="primal").fit(U, V)
    with pytest.raises(ValueError, match="in the dual needs n_features >= 99"):
        _rf(n_features=98, alpha=0.0, solver="dual").fit(da.from_array(U, chunks=30), V)


def _repeated_inputs(case):
    """Training data with 3 inputs repeated, their outputs moved by 1: an exactly singular Gram."""
    rng = np.random.default_rng(0 if case == "cauchy" else 3)
    if case == "cauchy":
        x = np.linspace(0, 1, 10)
        U = rng.standard_normal((100, 5)) @ np.sin(np.outer(np.arange(1, 6), np.pi * x))
        V = (
            np.tanh(2 * U[:, :1]) * np.cos(np.pi * np.linspace(0, 1, 4))[None]
            + 0.3 * (U**2).mean(1, keepdims=True)
            + 0.01 * rng.standard_normal((100, 4))
        )
    else:
        U = rng.standard_normal((100, 5)) @ rng.standard_normal((5, 10))
        V = np.sin(U[:, :4])
    return np.vstack([U, U[:3]]), np.vstack([V, V[:3] + 1.0])


@pytest.mark.parametrize("case, blocked", [("cauchy", True), ("gaussian", False)])
def test_alpha_zero_on_a_singular_gram_is_refused_whatever_the_rounding(case, blocked):
    """With alpha = 0 the factorisation of an exactly singular Gram succeeded or failed by
    rounding; where it succeeded (these two cases) the model predicted 2.22 at a repeated input
    whose outputs are 0.13 and 1.13 (in memory), or 0.17 for 0.11 and 1.11 (blocked)."""
    import warnings

    U, V = _repeated_inputs(case)
    model = RandomFeatureOperator(n_features=500, alpha=0.0, random_state=0, distribution=case)
    data = (U, V)
    if blocked:  # the Gram just above the budget: factorised blocked over dask tiles
        model.set_params(max_gram_bytes=len(U) ** 2 * 8 * 1.05)
        data = (da.from_array(U, chunks=40), da.from_array(V, chunks=40))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular"):
            model.fit(*data)
        model.set_params(alpha=1e-8).fit(*data)  # a ridge fits it


def test_slabs_count_their_frequencies_and_a_cache_typo_is_refused():
    """A streamed slab was sized from its M features alone; at n = 6250 inputs for M = 3000 its
    frequencies were twice that, and the worker of a plan that fitted on paper was killed. A typo
    in rfol_dask.feature-cache ('dsik') turned the cache off without a word."""
    import dask

    from rfol_dask.memory import dual_plan

    client = __import__("conftest").FakeClient(700 * 2**20)
    M, n = 3000, 6250
    plain = dual_plan(M, np.float64, client=client, n_features=20000)
    counted = dual_plan(M, np.float64, client=client, n_features=20000, n_inputs=n)
    assert not counted.blocked and counted.slab_bytes == pytest.approx(
        plain.slab_bytes * M / (M + n + 1), rel=1e-6
    )
    U, V = smooth_operator_data(60, 8)
    with dask.config.set({"rfol_dask.feature-cache": "dsik"}):
        with pytest.raises(ValueError, match="feature-cache must be 'disk' or 'none', got 'dsik'"):
            _rf(solver="dual").fit(da.from_array(U, chunks=20), da.from_array(V, chunks=20))


def test_kernel_fits_of_masked_dask_rows_with_empty_chunks_warn_nothing():
    """Rows picked by a boolean mask, with ``compute_chunk_sizes()`` as the error for unknown chunk
    sizes advises, leave empty chunks where a block kept no row: the kernel fits took the mean
    of each empty block for the centre of its distances and warned 'Mean of empty slice' and
    'invalid value encountered in divide' a dozen times (the fit was right)."""
    import warnings

    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(60, 8)
    keep = np.ones(60, bool)
    keep[10:20] = keep[40:50] = False
    dU, dV = (
        da.from_array(A, chunks=(10, -1))[da.from_array(keep, chunks=10)].compute_chunk_sizes()
        for A in (U, V)
    )
    assert 0 in dU.chunks[0]
    for make in (lambda: KernelOperator(nugget=1e-6), lambda: KernelOperatorCV()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = make().fit(dU, dV)
            got = model.predict(dU).compute()
        ref = make().fit(U[keep], V[keep])
        assert getattr(model, "best_params_", None) == getattr(ref, "best_params_", None)
        assert (
            rel(got, ref.predict(U[keep])) < 1e-8
        )  # the sums' order: rounding under nuggets down to 1e-7
