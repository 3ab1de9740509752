"""Every bad input of the estimator gets a ValueError / TypeError that says what to fix."""

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator


@pytest.fixture
def data():
    return smooth_operator_data(60, 8)


def test_sample_counts_differ(data):
    U, V = data
    with pytest.raises(ValueError, match="U has 60 samples but V has 59"):
        RandomFeatureOperator().fit(U, V[:59])
    with pytest.raises(ValueError, match="U has 60 samples but V has 59"):
        RandomFeatureOperator().fit(da.from_array(U), da.from_array(V[:59]))


def test_wrong_width_at_predict(data):
    U, V = data
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(U, V)
    with pytest.raises(ValueError, match=r"X has 7 features, but RandomFeatureOperator is expecting 8"):
        model.predict(U[:, :7])
    with pytest.raises(ValueError, match=r"training grid \(8,\)"):
        model.predict(da.from_array(U[:, :7]))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf_named_with_sample_range(data, bad):
    U, V = data
    U = U.copy()
    U[37, 2] = bad
    with pytest.raises(ValueError, match=r"U contains NaN or infinity in samples 0-59 \(first bad sample: 37"):
        RandomFeatureOperator(n_features=100).fit(U, V)
    Ud = da.from_array(U, chunks=(20, -1))
    for n_features in (100, 20):  # dual and primal graphs
        with pytest.raises(ValueError, match=r"U contains NaN or infinity in samples 20-39 \(first bad sample: 37"):
            RandomFeatureOperator(n_features=n_features).fit(Ud, V)
    V2 = V.copy()
    V2[45, 0] = bad
    with pytest.raises(ValueError, match=r"V contains NaN or infinity in samples 40-59 \(first bad sample: 45"):
        RandomFeatureOperator(n_features=100).fit(da.from_array(data[0], chunks=(20, -1)), V2)


@pytest.mark.parametrize("param,value,match", [
    ("gamma", -1.0, "'gamma' parameter of RandomFeatureOperator must be a float in the range \\(0"),
    ("alpha", -1e-3, "'alpha' parameter of RandomFeatureOperator must be a float in the range \\[0"),
    ("distribution", "laplace", "'distribution' parameter of RandomFeatureOperator must be a str among"),
    ("n_features", 0, "'n_features' parameter of RandomFeatureOperator must be an int in the range \\[1"),
    ("solver", "qr", "'solver' parameter"),
])
def test_bad_parameters(data, param, value, match):
    with pytest.raises(ValueError, match=match):
        RandomFeatureOperator(**{param: value}).fit(*data)


def test_student_t_needs_nu(data):
    with pytest.raises(ValueError, match="pass nu > 0"):
        RandomFeatureOperator(distribution="student_t").fit(*data)


def test_alpha_zero_singular_gram_suggests_alpha(data):
    U, V = data
    with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular.*pass alpha > 0"):
        RandomFeatureOperator(n_features=10, solver="dual", alpha=0.0, random_state=0).fit(U, V)
    # repeated samples make the dual Gram singular as well
    with pytest.raises(ValueError, match="pass alpha > 0"):
        RandomFeatureOperator(n_features=500, alpha=0.0, random_state=0).fit(np.vstack([U, U]), np.vstack([V, V]))


def test_gram_too_large_names_bytes(data):
    U, V = data
    with pytest.raises(ValueError, match=r"60 x 60 Gram matrix needs 28,800 bytes"):
        RandomFeatureOperator(n_features=100, max_gram_bytes=1000).fit(U, V)
    # the primal N x N Gram of dask input must fit one worker too
    with pytest.raises(ValueError, match=r"20 x 20 Gram matrix needs 3,200 bytes"):
        RandomFeatureOperator(n_features=20, max_gram_bytes=1000).fit(da.from_array(U), da.from_array(V))
    # (a dual Gram of dask input that does not fit is factorised blocked instead: tests/test_scale.py)


def test_not_fitted_and_missing_target(data):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        RandomFeatureOperator().predict(data[0])
    with pytest.raises(ValueError, match="requires y to be passed"):
        RandomFeatureOperator().fit(data[0])


def test_xarray_needs_sample_first_and_dataset_variables(data):
    U, V = data
    with pytest.raises(ValueError, match="'sample' as its first dimension"):
        RandomFeatureOperator().fit(xr.DataArray(U, dims=("x", "sample")), V)
    with pytest.raises(ValueError, match="needs variables 'input' and 'output'"):
        RandomFeatureOperator().fit(xr.Dataset({"input": (("sample", "x"), U)}))


def test_complex_and_string_data_rejected(data):
    U, V = data
    with pytest.raises(ValueError, match="[Cc]omplex"):
        RandomFeatureOperator().fit(U.astype(complex), V)
    with pytest.raises(TypeError, match="real numbers"):
        RandomFeatureOperator().fit(da.from_array(U.astype(complex)), da.from_array(V))
