"""scikit-learn's own estimator checks."""

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperatorCV


@parametrize_with_checks(
    [
        RandomFeatureOperator(n_features=200, random_state=0),
        # the defaults (gamma="median") pass with few features too
        RandomFeatureOperator(n_features=50, random_state=0),
    ]
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# Why a search fails a check where it does: properties of the estimator, not bugs
#: the check sets n_components=1 and fits a step function of 20 points: the default nuggets (down to
#: 1e-16) let the search pick a near-interpolating RBF (nugget 1e-11, dual coefficients up to 1e11;
#: in float32 the refit's raised ridge, 7e-6, and coefficients of 2e5), so each prediction is a sum
#: cancelling to eps x 1e11, whose rounding depends on how many rows a batch has (the BLAS kernel);
#: KernelOperator at that nugget fails it alike
NEAR_INTERPOLANT = (
    "the search picks a near-interpolating nugget on the check's 20-point step function, whose "
    "predictions carry rounding (eps x dual coefficients of 1e11) that depends on the batch size"
)
#: the search ranks by the mean relative L2 error per sample, the paper's metric for functions: on a
#: scalar target centred at zero it is ruled by the samples nearest zero and favours a model that
#: predicts the mean (R^2 6e-5 with cv=5, below 0.5 with 3 too; the default split passes)
RELATIVE_SCORE = (
    "the search scores by the relative L2 error per sample, which on a zero-centred scalar "
    "target favours predicting the mean over an R^2 above 0.5"
)
#: dtype="float32" is a request for float32 predictions
FLOAT32 = "dtype='float32' predicts in float32; the check wants float64 from float64 data"
#: its nuggets are searched above float32's rounding floor (not near-interpolating: subset
#: invariant), but a float32 prediction moves by an ulp with the order of the sums
FLOAT32_ULP = "float32 predictions differ by one ulp (1.2e-7) with the sample order; rtol is 1e-7"

# K folds of sorted data (the checks' nan/inf and positive-only data): a fold whose outputs are all
# zero is left out (3 folds take the path as 5 did, in two thirds of the time)
SEARCHES = [
    (
        RandomFeatureOperatorCV(n_features=200, cv=3, random_state=0),
        {"check_regressors_train": RELATIVE_SCORE},
    ),
    (KernelOperatorCV(), {"check_methods_subset_invariance": NEAR_INTERPOLANT}),
    (KernelOperatorCV(cv=3), {}),
    (KernelOperatorCV(dtype="float32"), {"check_regressor_multioutput": FLOAT32}),
]


@parametrize_with_checks(
    [est for est, _ in SEARCHES],
    expected_failed_checks=lambda est: next(f for e, f in SEARCHES if e is est),
    xfail_strict=True,
)
@pytest.mark.slow
def test_searches_pass_sklearn_checks_but_for_their_properties(estimator, check):
    """The searches with their default grids and K folds pass scikit-learn's checks, but for those
    listed with why (xfail_strict: each must still fail); fits on K folds whose first folds hold
    only zero outputs (the checks' iris and nan/inf data) failed, "every validation output is
    identically zero"."""
    name = getattr(check, "func", check).__name__
    if name == "check_methods_sample_order_invariance" and estimator.dtype == "float32":
        pytest.skip(FLOAT32_ULP + " in some runs, not others (the order of threaded sums)")
    check(estimator)


def test_feature_names_survive_save_and_are_reset_by_a_refit_without_them(tmp_path):
    import warnings

    import dask.array as da
    import pandas as pd

    rng = np.random.default_rng(0)
    U, V = rng.random((40, 5)), rng.random((40, 2))
    frame = pd.DataFrame(U).add_prefix("c")
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(frame, V)
    model.save(tmp_path / "m.zarr")
    loaded = RandomFeatureOperator.load(tmp_path / "m.zarr")
    np.testing.assert_array_equal(loaded.feature_names_in_, ["c0", "c1", "c2", "c3", "c4"])
    with pytest.raises(ValueError, match="feature names should match"):
        loaded.predict(
            frame[["c4", "c3", "c2", "c1", "c0"]]
        )  # the loaded model read them by position
    bad = V.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.fit(frame, bad)  # a refit that fails keeps the names of the model it leaves in place
    with pytest.raises(ValueError, match="feature names should match"):
        model.predict(frame[["c4", "c3", "c2", "c1", "c0"]])
    model.fit(da.from_array(U), da.from_array(V))  # no names: the old ones must go
    assert not hasattr(model, "feature_names_in_")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.predict(U)


@pytest.mark.parametrize(
    "cls,kw",
    [(RandomFeatureOperator, {"n_features": 30, "random_state": 0}), ("KernelOperator", {})],
    ids=["RandomFeatureOperator", "KernelOperator"],
)
def test_nested_lists_on_a_grid_are_read_as_the_numpy_array(cls, kw):
    """fit / predict / score of (M, nx, ny) nested lists (or lists of 2-D arrays) give what the
    numpy array gives; scikit-learn's validation had refused them ("Found array with dim 3")."""
    import dask.array as da

    from rfol_dask.baselines import KernelOperator

    cls = KernelOperator if cls == "KernelOperator" else cls
    rng = np.random.default_rng(0)
    x, y = np.linspace(0, 1, 6), np.linspace(0, 1, 7)
    U = rng.standard_normal((40, 6, 7))
    V = np.sin(U[:, :, :5])  # another output grid
    ref = cls(**kw).fit(U, V, input_grid=[x, y], output_grid=[x, y[:5]])
    model = cls(**kw).fit(U.tolist(), list(V), input_grid=[x, y], output_grid=[x, y[:5]])
    assert (model.input_shape_, model.output_shape_, model.n_features_in_) == ((6, 7), (6, 5), 42)
    pred = model.predict(U.tolist())
    assert pred.shape == (40, 6, 5)
    np.testing.assert_array_equal(pred, ref.predict(U))
    assert model.score(U.tolist(), V.tolist()) == ref.score(U, V)
    fine = np.linspace(0, 1, 13)
    np.testing.assert_array_equal(
        model.predict(U[:3].tolist(), output_grid=[fine, fine * y[4]]),
        ref.predict(U[:3], output_grid=[fine, fine * y[4]]),
    )
    coarse = [0, 2, 3, 5]  # a tuple of 2-D arrays on another input grid
    np.testing.assert_array_equal(
        model.predict(tuple(U[:3, coarse]), input_grid=[x[coarse], y]),
        ref.predict(U[:3, coarse], input_grid=[x[coarse], y]),
    )
    lazy = cls(**kw).fit(da.from_array(U, chunks=(10, 6, 7)), V.tolist())  # one side dask
    np.testing.assert_allclose(lazy.predict(U), ref.predict(U), rtol=1e-9, atol=1e-9)
    with pytest.raises(
        ValueError, match=r"input grid \(6, 7, 1\) but the model was trained on the grid \(6, 7\)"
    ):
        model.predict(U[:, :, :, None].tolist())  # as numpy's (6, 7, 1) is refused
    ragged = U.tolist()
    ragged[3][2] = ragged[3][2][:5]
    with pytest.raises(
        ValueError,
        match=r"U is a nested list that is not a regular array of shape \(n_samples, \*grid\)",
    ):
        cls(**kw).fit(ragged, V)


@pytest.mark.parametrize("make", ["rf", "rf_cv", "kernel", "kernel_cv"])
def test_fit_with_sample_weight_is_a_value_error_before_any_work(make, monkeypatch):
    """fit(X, y, sample_weight=w) raised "TypeError: SelectionCV.fit() got an unexpected keyword
    argument" (naming the base class) on the searches, and a TypeError on the others; score said
    ValueError("sample_weight is not supported"). None passes, as in score; a misspelt keyword is
    still a TypeError naming the class; scikit-learn still sees no sample_weight parameter."""
    from sklearn.model_selection import cross_val_score
    from sklearn.utils.validation import has_fit_parameter

    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperator, KernelOperatorCV
    from rfol_dask.estimator import OperatorEstimator

    est = {
        "rf": lambda: RandomFeatureOperator(n_features=50, random_state=0),
        "rf_cv": lambda: RandomFeatureOperatorCV(
            n_features=50, random_state=0, gammas=(1.0,), alphas=(1e-3,)
        ),
        "kernel": lambda: KernelOperator(),
        "kernel_cv": lambda: KernelOperatorCV(length_scales=(1.0,), nuggets=(1e-3,)),
    }[make]
    rng = np.random.default_rng(0)
    U, V = rng.random((40, 5)), rng.random((40, 2))
    name = type(est()).__name__
    fitted = []
    monkeypatch.setattr(OperatorEstimator, "_check_params", lambda self: fitted.append(self))
    with pytest.raises(ValueError, match="^sample_weight is not supported$"):
        est().fit(U, V, sample_weight=np.ones(40))
    with pytest.raises(
        TypeError, match=rf"^{name}\.fit\(\) got an unexpected keyword argument 'sample_wieght'$"
    ):
        est().fit(U, V, sample_wieght=np.ones(40))
    assert not fitted  # refused before the parameters were checked, let alone the data read
    monkeypatch.undo()
    assert est().fit(U, V, sample_weight=None).predict(U).shape == V.shape
    assert not has_fit_parameter(
        est(), "sample_weight"
    )  # no sample-weight checks of scikit-learn's
    with pytest.raises(ValueError, match="sample_weight is not supported"):
        cross_val_score(
            est(), U, V, cv=2, params={"sample_weight": np.ones(40)}, error_score="raise"
        )
