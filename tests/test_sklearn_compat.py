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


@pytest.mark.parametrize("cls,kw", [(RandomFeatureOperator, {"n_features": 30, "random_state": 0}),
                                    ("KernelOperator", {})], ids=["RandomFeatureOperator", "KernelOperator"])
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
    np.testing.assert_array_equal(model.predict(U[:3].tolist(), output_grid=[fine, fine * y[4]]),
                                  ref.predict(U[:3], output_grid=[fine, fine * y[4]]))
    coarse = [0, 2, 3, 5]  # a tuple of 2-D arrays on another input grid
    np.testing.assert_array_equal(model.predict(tuple(U[:3, coarse]), input_grid=[x[coarse], y]),
                                  ref.predict(U[:3, coarse], input_grid=[x[coarse], y]))
    lazy = cls(**kw).fit(da.from_array(U, chunks=(10, 6, 7)), V.tolist())  # one side dask
    np.testing.assert_allclose(lazy.predict(U), ref.predict(U), rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match=r"input grid \(6, 7, 1\) but the model was trained on the grid \(6, 7\)"):
        model.predict(U[:, :, :, None].tolist())  # as numpy's (6, 7, 1) is refused
    ragged = U.tolist()
    ragged[3][2] = ragged[3][2][:5]
    with pytest.raises(ValueError, match=r"U is a nested list that is not a regular array of shape \(n_samples, \*grid\)"):
        cls(**kw).fit(ragged, V)
