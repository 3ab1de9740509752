"""Refusals of bad input, one table: each dtype that is no real numbers, each operand shape that
does not fit, on every backend (numpy, dask, xarray), estimator and method; then non-finite
values, named by their sample."""

import re
import warnings

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


ESTIMATORS = {
    "rf": _rf,
    "rf_cv": lambda: RandomFeatureOperatorCV(
        n_features=20, distributions=("gaussian",), gammas=(0.1,), alphas=(1e-6,), cv=3
    ),
    "kernel": lambda: KernelOperator(kernel="rbf", length_scale=1.0),
}
BACKENDS = {
    "numpy": lambda a: a,
    "dask": lambda a: da.from_array(a, chunks=10),
    "xarray": lambda a: xr.DataArray(a, dims=("sample", *(f"d{k}" for k in range(a.ndim - 1)))),
}
DTYPES = {  # how a user's data end up as each dtype
    "complex128": lambda a: a + 1j * a,
    "timedelta64[s]": lambda a: (a * 100).astype("m8[s]"),
    "datetime64[s]": lambda a: (a * 100).astype("M8[s]"),
    "bool": lambda a: a > 0,
}


@pytest.fixture(scope="module")
def data():
    return smooth_operator_data(30, 8)


@pytest.fixture(scope="module")
def fitted(data):
    return {name: make().fit(*data) for name, make in ESTIMATORS.items()}


def _call(method, estimator, fitted, data, bad, wrap):
    """``fit`` with ``bad`` as U or V, or ``predict`` of it, on the backend ``wrap``."""
    U, V = data
    if method == "fit U":
        return ESTIMATORS[estimator]().fit(wrap(bad(U)), wrap(V))
    if method == "fit V":
        return ESTIMATORS[estimator]().fit(wrap(U), wrap(bad(V)))
    return fitted[estimator].predict(wrap(bad(U)))


@pytest.mark.parametrize("method", ["fit U", "fit V", "predict"])
@pytest.mark.parametrize("estimator", list(ESTIMATORS))
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_operands_that_are_no_real_numbers_are_refused(
    dtype, backend, estimator, method, fitted, data
):
    """numpy once counted bool, datetime64 and timedelta64 as numbers and fitted them as counts
    (or failed in the arithmetic), and scikit-learn's complex error printed the whole array."""
    name = {"fit U": "U", "fit V": "V", "predict": "X"}[method]
    with pytest.raises(TypeError, match=re.escape(f"{name} must hold real numbers")) as raised:
        _call(method, estimator, fitted, data, DTYPES[dtype], BACKENDS[backend])
    assert f"got dtype {dtype}" in str(raised.value) and len(str(raised.value)) < 200


@pytest.mark.parametrize("method", ["fit U", "fit V", "predict"])
@pytest.mark.parametrize("estimator", list(ESTIMATORS))
def test_dask_operands_of_objects_are_refused(estimator, method, fitted, data):
    with pytest.raises(TypeError, match="must hold real numbers"):
        _call(method, estimator, fitted, data, lambda a: a.astype(object), BACKENDS["dask"])


def test_boolean_operands_in_memory_are_told_how_to_give_them_as_numbers(data):
    U, V = data
    with pytest.raises(TypeError, match=re.escape("U.astype(float)")):
        _rf().fit(U > 0, V)
    _rf().fit((U > 0).astype(float), V)


SHAPES = {  # (method, operand maker, key phrase)
    "1-D U": ("fit", lambda U, V: (U[:, 0], V), r"2-?D"),
    "1-D X": ("predict", lambda U, V: (U[:, 0],), r"2-?D"),
    "rows differ": ("fit", lambda U, V: (U, V[:20]), "U has 30 samples but V has 20"),
    "width differs": ("predict", lambda U, V: (U[:, :5],), "expecting 8 features"),
}


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("case", list(SHAPES))
def test_operands_of_the_wrong_shape_are_refused(case, backend, estimator, fitted, data):
    method, operands, phrase = SHAPES[case]
    args = [BACKENDS[backend](a) for a in operands(*data)]
    model = ESTIMATORS[estimator]() if method == "fit" else fitted[estimator]
    with pytest.raises(ValueError, match=phrase):
        getattr(model, method)(*args)


def test_a_value_that_overflows_float32_is_named_in_dask_fits():
    U, V = smooth_operator_data(30, 8)
    V[4, 1] = 1e300
    for model in (
        _rf(dtype="float32"),
        KernelOperator(kernel="rbf", length_scale=1.0, dtype="float32"),
    ):
        with pytest.raises(ValueError, match="V contains NaN or infinity.*first bad sample: 4"):
            model.fit(da.from_array(U, chunks=10), da.from_array(V, chunks=10))


@pytest.mark.parametrize("lazy", [False, True])
def test_nan_inputs_with_an_input_pca_are_named_as_without_one(lazy):
    """With pca_power (or the kernels' n_components) a NaN in U failed inside the SVD / eigensolver
    ('SVD did not converge'), not with the documented error naming the samples."""
    from rfol_dask.baselines import KernelOperator

    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((300, 20)), rng.standard_normal((300, 3))
    U[1, 7] = np.nan
    data = (da.from_array(U, chunks=100), da.from_array(V, chunks=100)) if lazy else (U, V)
    for model in (
        _rf(n_features=200, pca_power=1.0),
        KernelOperator(pca_power=1.0),
        KernelOperator(n_components=5),
    ):
        with pytest.raises(
            ValueError, match=r"NaN or infinity .*(first bad sample: 1\b|\(rows 1\))"
        ):
            model.fit(*data)


def test_an_infinite_input_among_the_first_samples_is_named_before_any_warning():
    """Inf in the first samples reached the input centre and the fold of its phases ('invalid
    value encountered in remainder', four times) before the ValueError naming the sample."""

    X = np.random.default_rng(0).standard_normal((40, 5))
    Y = X[:, :2] ** 2
    X[0, 1] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            ValueError, match=r"NaN or infinity .*(first bad sample: 0\b|\(rows 0\))"
        ):
            RandomFeatureOperator(n_features=50).fit(X, Y)


def test_inputs_of_extreme_scale_give_an_error_not_nan_coefficients():
    U, V = smooth_operator_data(60, 8)
    # the median heuristic measures rescaled rows: any representable input scale gets its gamma
    tiny = RandomFeatureOperator(distribution="gaussian", n_features=80, random_state=0).fit(
        U * 1e-150, V
    )
    plain = RandomFeatureOperator(distribution="gaussian", n_features=80, random_state=0).fit(U, V)
    np.testing.assert_allclose(tiny.predict(U * 1e-150), plain.predict(U), rtol=1e-6, atol=1e-6)
    # a median whose gamma is not a float64 is an error, not a silent gamma = 1
    for scale in (1e-170, 1e200):
        with pytest.raises(
            ValueError, match="median squared distance of the inputs is .* rescale the inputs"
        ):
            RandomFeatureOperator(distribution="gaussian", n_features=80).fit(U * scale, V)
    for kw in ({}, {"fit_intercept": False}):  # NaN coefficients used to be returned silently
        with pytest.raises(ValueError, match=r"NaN or infinite coefficients \(gamma_=1e\+308\)"):
            RandomFeatureOperator(gamma=1e308, n_features=80, random_state=0, **kw).fit(U, V)
    with pytest.raises(
        ValueError, match="length scale .* its square is beyond the range of float64"
    ):
        KernelOperator().fit(U * 1e160, V)
    with pytest.raises(ValueError, match="length scale 1e-200"):
        KernelOperator(length_scale=1e-200).fit(U, V)
