"""Error measures and the relative-L2 scorer."""

import dask.array as da
import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, KFold

from rfol_dask import RandomFeatureOperator
from rfol_dask.metrics import r2_score, relative_l2_error, relative_l2_errors, relative_l2_scorer


def test_relative_l2_error_numpy_and_dask():
    rng = np.random.default_rng(0)
    true, pred = rng.normal(size=(7, 3, 4)), rng.normal(size=(7, 3, 4))
    want = np.mean(
        np.linalg.norm((pred - true).reshape(7, -1), axis=1)
        / np.linalg.norm(true.reshape(7, -1), axis=1)
    )
    assert relative_l2_error(true, pred) == pytest.approx(want, rel=1e-12)
    assert relative_l2_error(
        da.from_array(true, chunks=3), da.from_array(pred, chunks=2)
    ) == pytest.approx(want)


@pytest.mark.filterwarnings("ignore:.*encountered in divide:RuntimeWarning")
def test_relative_l2_all_zero_true_sample_is_infinite():
    true = np.array([[1.0, 0.0], [0.0, 0.0]])
    pred = np.array([[1.0, 0.0], [0.1, 0.0]])
    errs = np.asarray(relative_l2_errors(true, pred))
    assert errs[0] == 0 and np.isinf(errs[1])
    assert np.isinf(relative_l2_error(true, pred))
    # a zero true sample predicted exactly is 0/0: NaN, and the mean says so
    assert np.isnan(relative_l2_error(true, np.array([[1.0, 0.0], [0.0, 0.0]])))


def test_r2_constant_column_rule():
    true = np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    # constant component predicted exactly: scores 1, so the mean is that of (1, 1)
    assert r2_score(true, true) == 1.0
    pred = true.copy()
    pred[:, 1] = [5.0, 5.1, 5.0]  # constant component missed: scores 0, not -inf
    assert r2_score(true, pred) == pytest.approx(0.5)
    from sklearn.metrics import r2_score as sk_r2

    assert r2_score(true, pred) == pytest.approx(sk_r2(true, pred))


def test_r2_of_a_constant_column_whose_mean_rounds_is_the_constant_column_rule():
    """Seven values 0.1 have a mean one ulp off 0.1: the column's total variance was 1e-33, not 0,
    and
    its R^2 -6e26 (scikit-learn's r2_score gives the same), so the mean over the columns, ``score``
    and every search ranking by it (GridSearchCV's default) measured that column's noise alone."""
    from sklearn.metrics import r2_score as sk_r2

    rng = np.random.default_rng(0)
    true = rng.standard_normal((7, 3))
    true[:, 1] = 0.1
    pred = true + 1e-3 * rng.standard_normal(true.shape)
    want = np.mean([sk_r2(true[:, 0], pred[:, 0]), 0.0, sk_r2(true[:, 2], pred[:, 2])])
    assert sk_r2(true, pred) < -1e20  # the rounded mean: scikit-learn's own result
    assert r2_score(true, pred) == pytest.approx(want, rel=1e-12)
    assert r2_score(da.from_array(true, chunks=3), da.from_array(pred, chunks=2)) == pytest.approx(
        want, rel=1e-12
    )
    assert r2_score(true.astype(np.float32), pred.astype(np.float32)) == pytest.approx(
        want, rel=1e-4
    )
    exact = pred.copy()
    exact[:, 1] = 0.1  # predicted exactly: scores 1
    assert r2_score(true, exact) == pytest.approx(
        np.mean([sk_r2(true[:, 0], exact[:, 0]), 1.0, sk_r2(true[:, 2], exact[:, 2])]), rel=1e-12
    )
    # a model's score on outputs with a constant point (a boundary value of 0.1)
    U = rng.uniform(-1, 1, size=(70, 6))
    V = np.sin(U @ rng.normal(size=(6, 4)))
    V[:, 0] = 0.1
    model = RandomFeatureOperator(n_features=100, gamma=0.5, alpha=1e-6, random_state=0).fit(
        U[:63], V[:63]
    )
    P = model.predict(U[63:])
    constant = float(np.array_equal(P[:, 0], V[63:, 0]))  # 1 where predicted exactly, else 0
    assert model.score(U[63:], V[63:]) == pytest.approx(
        np.mean([constant, *(sk_r2(V[63:, j], P[:, j]) for j in (1, 2, 3))]), rel=1e-12
    )


def test_scorer_is_negative_relative_l2_and_ranks_in_gridsearch():
    rng = np.random.default_rng(1)
    U = rng.uniform(-1, 1, size=(80, 6))
    V = np.sin(U @ rng.normal(size=(6, 5))) + 2.0
    model = RandomFeatureOperator(n_features=100, gamma=0.5, alpha=1e-6, random_state=0).fit(
        U[:60], V[:60]
    )
    assert relative_l2_scorer(model, U[60:], V[60:]) == pytest.approx(
        -relative_l2_error(V[60:], model.predict(U[60:])), rel=1e-12
    )
    search = GridSearchCV(
        RandomFeatureOperator(n_features=100, gamma=0.5, random_state=0),
        {"alpha": [1e-6, 1e3]},
        scoring=relative_l2_scorer,
        cv=KFold(3),
    )
    search.fit(U, V)
    assert search.best_params_ == {"alpha": 1e-6}
    assert search.best_score_ < 0


def test_float32_sums_neither_overflow_nor_underflow():
    rng = np.random.default_rng(0)
    for scale in (1e20, 1e-23):  # squares beyond float32's range: nan before
        T = (rng.standard_normal((10, 5)) * scale).astype(np.float32)
        P = T * np.float32(1.1)
        assert relative_l2_error(T, P) == pytest.approx(0.1, rel=1e-5)
        assert relative_l2_error(
            da.from_array(T, chunks=3), da.from_array(P, chunks=3)
        ) == pytest.approx(0.1, rel=1e-5)
        assert r2_score(T, P) == pytest.approx(r2_score(T.astype(float), P.astype(float)), rel=1e-4)


def test_degenerate_shapes():
    from sklearn.exceptions import UndefinedMetricWarning

    with pytest.warns(UndefinedMetricWarning):  # as scikit-learn: nan for one sample
        assert np.isnan(r2_score(np.ones((1, 3)), np.ones((1, 3))))
    with pytest.raises(ValueError, match="at least one value per sample"):
        relative_l2_error(np.zeros((3, 0)), np.zeros((3, 0)))


def test_dask_operands_of_unknown_chunk_sizes_are_named_with_the_fix():
    """Rows picked by a boolean mask have unknown sizes: the metrics said 'true has shape (nan, 3)
    but pred has shape (nan, 3)' for operands of the same mask (and so did ``score``)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((30, 3))
    keep = da.from_array(rng.random(30) > 0.5, chunks=10)
    masked = da.from_array(A, chunks=10)[keep]
    for metric in (relative_l2_error, r2_score):
        with pytest.raises(
            ValueError, match=r"true is a dask array of unknown chunk sizes .*compute_chunk_sizes"
        ):
            metric(masked, masked + 1.0)
        with pytest.raises(
            ValueError, match=r"pred is a dask array of unknown chunk sizes .*compute_chunk_sizes"
        ):
            metric(A[:12], masked)
    model = RandomFeatureOperator(n_features=20, random_state=0).fit(A, A)
    with pytest.raises(
        ValueError, match=r"y is a dask array of unknown chunk sizes .*y.compute_chunk_sizes"
    ):
        model.score(A[np.asarray(keep)], masked)
    known = masked.compute_chunk_sizes()  # in place
    assert relative_l2_error(known, known + 1.0) == pytest.approx(
        relative_l2_error(known.compute(), known.compute() + 1.0)
    )


def test_numpy_metrics_read_row_blocks_and_match_the_plain_formulas(monkeypatch):
    from sklearn.metrics import r2_score as sk_r2

    from rfol_dask import metrics

    rng = np.random.default_rng(3)
    true = rng.normal(size=(101, 6, 5)) + 3.0
    pred = true + 0.1 * rng.normal(size=true.shape)
    flat_t, flat_p = true.reshape(101, -1), pred.reshape(101, -1)
    want = np.linalg.norm(flat_p - flat_t, axis=1) / np.linalg.norm(flat_t, axis=1)
    monkeypatch.setattr(
        metrics, "BLOCK_BYTES", 8 * 30 * 7
    )  # blocks of 7 rows: 15 blocks, the last short
    np.testing.assert_allclose(relative_l2_errors(true, pred), want, rtol=1e-13)
    assert r2_score(true, pred) == pytest.approx(sk_r2(flat_t, flat_p), rel=1e-12)
    # float32 inputs: the same values summed in float64
    t32, p32 = true.astype(np.float32), pred.astype(np.float32)
    assert relative_l2_error(t32, p32) == pytest.approx(
        relative_l2_error(t32.astype(float), p32.astype(float)), rel=1e-12
    )
    assert r2_score(t32, p32) == pytest.approx(
        r2_score(t32.astype(float), p32.astype(float)), rel=1e-12
    )


@pytest.mark.slow
def test_numpy_metrics_hold_blocks_not_float64_copies_of_their_inputs():
    import tracemalloc

    from rfol_dask.metrics import BLOCK_BYTES

    rng = np.random.default_rng(4)
    true = rng.normal(size=(4000, 4096)).astype(
        np.float32
    )  # 65 MB each; float64 copies: 131 MB each
    pred = true + np.float32(0.01)
    tracemalloc.start()
    try:
        relative_l2_error(true, pred)
        _, peak_l2 = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        r2_score(true, pred)
        _, peak_r2 = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert max(peak_l2, peak_r2) < 2.2 * BLOCK_BYTES, (peak_l2, peak_r2)  # two float64 blocks


def test_one_output_as_a_vector_against_a_column_is_scored_as_scikit_learn_does():
    """Outputs of shape (M,) against predictions of shape (M, 1) (or the other way round) were
    refused; scikit-learn reads both as one output. Other shapes that differ are still refused."""
    from sklearn.metrics import r2_score as sk_r2

    rng = np.random.default_rng(0)
    y = rng.standard_normal(30)
    p = (y + 0.1 * rng.standard_normal(30))[:, None]
    assert r2_score(y, p) == pytest.approx(sk_r2(y, p), rel=1e-12)
    assert r2_score(p, y) == pytest.approx(sk_r2(p, y), rel=1e-12)
    assert relative_l2_error(y, p) == pytest.approx(relative_l2_error(y, p[:, 0]), rel=1e-12)
    with pytest.raises(ValueError, match=r"true has shape \(30,\) but pred has shape \(30, 2\)"):
        r2_score(y, np.hstack([p, p]))
