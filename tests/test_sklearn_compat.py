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
