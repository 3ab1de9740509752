"""scikit-learn's own estimator checks."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from rfol_dask import RandomFeatureOperator


@parametrize_with_checks([RandomFeatureOperator(n_features=200, random_state=0),
                          # the defaults (gamma="median") pass with few features too
                          RandomFeatureOperator(n_features=50, random_state=0)])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
