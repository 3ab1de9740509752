"""scikit-learn's own estimator checks."""

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from rfol_dask import RandomFeatureOperator


@parametrize_with_checks([RandomFeatureOperator(n_features=200, random_state=0),
                          # the defaults (gamma="median") pass with few features too
                          RandomFeatureOperator(n_features=50, random_state=0)])
def test_sklearn_compatible_estimator(estimator, check):
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
        loaded.predict(frame[["c4", "c3", "c2", "c1", "c0"]])  # the loaded model read them by position
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

    est = {"rf": lambda: RandomFeatureOperator(n_features=50, random_state=0),
           "rf_cv": lambda: RandomFeatureOperatorCV(n_features=50, random_state=0, gammas=(1.0,), alphas=(1e-3,)),
           "kernel": lambda: KernelOperator(),
           "kernel_cv": lambda: KernelOperatorCV(length_scales=(1.0,), nuggets=(1e-3,))}[make]
    rng = np.random.default_rng(0)
    U, V = rng.random((40, 5)), rng.random((40, 2))
    name = type(est()).__name__
    fitted = []
    monkeypatch.setattr(OperatorEstimator, "_check_params", lambda self: fitted.append(self))
    with pytest.raises(ValueError, match="^sample_weight is not supported$"):
        est().fit(U, V, sample_weight=np.ones(40))
    with pytest.raises(TypeError, match=rf"^{name}\.fit\(\) got an unexpected keyword argument 'sample_wieght'$"):
        est().fit(U, V, sample_wieght=np.ones(40))
    assert not fitted  # refused before the parameters were checked, let alone the data read
    monkeypatch.undo()
    assert est().fit(U, V, sample_weight=None).predict(U).shape == V.shape
    assert not has_fit_parameter(est(), "sample_weight")  # no sample-weight checks of scikit-learn's
    with pytest.raises(ValueError, match="sample_weight is not supported"):
        cross_val_score(est(), U, V, cv=2, params={"sample_weight": np.ones(40)}, error_score="raise")
