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
    with pytest.raises(ValueError, match=r"alpha=0 \(min-norm interpolation\) in the dual needs n_features >= 59.*"
                                         "pass solver='primal' or alpha > 0"):
        RandomFeatureOperator(n_features=10, solver="dual", alpha=0.0, random_state=0).fit(U, V)
    with pytest.raises(ValueError, match=r"in the primal needs n_features <= 60.*pass solver='dual' or alpha > 0"):
        RandomFeatureOperator(n_features=61, solver="primal", alpha=0.0, fit_intercept=False).fit(U, V)
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


def test_xarray_needs_a_sample_dim_anywhere_and_dataset_variables(data):
    U, V = data
    with pytest.raises(ValueError, match=r"must have a 'sample' dimension.*rename\(\{'time': 'sample'\}\)"):
        RandomFeatureOperator().fit(xr.DataArray(U, dims=("time", "x")), V)
    # the sample dim is found by name, wherever it is: (x, sample) fits as (sample, x) does
    kw = dict(n_features=60, gamma=0.5, random_state=0)
    want = RandomFeatureOperator(**kw).fit(xr.DataArray(U, dims=("sample", "x")), V).predict(U[:5])
    got = RandomFeatureOperator(**kw).fit(xr.DataArray(U.T, dims=("x", "sample")), V).predict(U[:5])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="needs variables 'input' and 'output'"):
        RandomFeatureOperator().fit(xr.Dataset({"input": (("sample", "x"), U)}))


def test_complex_and_string_data_rejected(data):
    U, V = data
    with pytest.raises(ValueError, match="[Cc]omplex"):
        RandomFeatureOperator().fit(U.astype(complex), V)
    with pytest.raises(TypeError, match="real numbers"):
        RandomFeatureOperator().fit(da.from_array(U.astype(complex)), da.from_array(V))


# ------------------------------------------------------------------ issue 11, item 12


@pytest.fixture
def count_features(monkeypatch):
    """Counts the calls of the feature map in every fit path (numpy, dask dual and primal)."""
    from rfol_dask import features, gram
    from rfol_dask.solve import streamed

    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return features.feature_map(*args, **kwargs)

    monkeypatch.setattr(gram, "feature_map", counted)
    monkeypatch.setattr(streamed, "feature_map", counted)
    return calls


@pytest.mark.parametrize("lazy", [False, True])
def test_nan_in_v_is_found_before_the_features(data, count_features, lazy):
    U, V = data
    V = V.copy()
    V[45, 3] = np.nan
    if lazy:
        U, V = da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1))
    match = r"V contains NaN or infinity in samples (40-59|0-59) \(first bad sample: 45"
    with pytest.raises(ValueError, match=match):
        RandomFeatureOperator(n_features=100, random_state=0).fit(U, V)  # dual: the Gram is the expensive pass
    assert count_features == []


def test_empty_output_width_is_refused(data):
    U, _ = data
    with pytest.raises(ValueError, match=r"0 feature\(s\) \(shape=\(60, 0\)\)"):  # scikit-learn's check
        RandomFeatureOperator(n_features=20).fit(U, np.zeros((60, 0)))
    with pytest.raises(ValueError, match=r"V has shape \(60, 0\): the output functions have no values"):
        RandomFeatureOperator(n_features=20).fit(da.from_array(U), da.zeros((60, 0), chunks=(20, -1)))


def test_predict_nan_names_the_right_samples(data):
    U, V = data
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(U, V)
    bad = U.copy()
    bad[37, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN or infinity in samples 20-39 \(first bad sample: 37.*"
                                         r"before predicting"):
        model.predict(da.from_array(bad, chunks=(20, -1))).compute()
    with pytest.raises(ValueError, match=r"samples 0-59 \(first bad sample: 37.*before predicting"):
        model.predict(bad)


def test_unknown_chunk_sizes_say_how_to_fix(data):
    U, V = data
    Ud, Vd = da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1))
    keep = Ud[:, 0] > -np.inf  # boolean indexing leaves the chunk sizes unknown
    with pytest.raises(ValueError, match=r"U is a dask array of unknown chunk sizes \(shape \(nan, 8\).*"
                                         r"compute_chunk_sizes\(\)"):
        RandomFeatureOperator(n_features=20).fit(Ud[keep], Vd[keep])
    model = RandomFeatureOperator(n_features=20, random_state=0).fit(U, V)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        model.predict(Ud[keep])
    np.testing.assert_allclose(model.predict(Ud[keep].compute_chunk_sizes()).compute(), model.predict(U))


@pytest.fixture
def store(tmp_path):
    from rfol_dask import datasets

    datasets.generate("advection1", 12, store=tmp_path / "d.zarr", seed=0, block_size=4)
    return tmp_path / "d.zarr"


def _chunk_file(store, name, block):
    import zarr

    arr = zarr.open_array(str(store / name), mode="r")
    return store / name / arr.metadata.encode_chunk_key((block, 0))


def test_deleted_chunk_is_reported_missing_not_nan(store):
    from rfol_dask.io import open_dataset

    path = _chunk_file(store, "output", 1)
    path.unlink()
    # the store's fill value is NaN, so without the listing check this read as "NaN samples"
    with pytest.raises(ValueError, match=r"1 chunk\(s\) of variable 'output' are missing from the store \(first: "
                                         r"chunk \(1, 0\), samples 4-7, file .*damaged.*regenerate"):
        RandomFeatureOperator(n_features=20).fit(str(store))
    with pytest.raises(ValueError, match="missing from the store"):
        open_dataset(store)
    with pytest.raises(ValueError, match="chunk.* of variable 'output' are missing from the store"):
        RandomFeatureOperator(n_features=20).fit(xr.open_zarr(store, consolidated=False))


def test_corrupt_chunk_names_store_variable_and_chunk(store):
    path = _chunk_file(store, "input", 2)
    path.write_bytes(b"not zstd data" * 8)
    with pytest.raises(ValueError, match=r"cannot read chunk \(2, 0\) \(samples 8-11, file .*\) of variable 'input' "
                                         r"in the data set at .*d\.zarr: .*damaged") as info:
        RandomFeatureOperator(n_features=20).fit(str(store))
    assert str(path) in str(info.value)


def test_kernel_operator_errors_name_nugget(data):
    from rfol_dask.baselines import KernelOperator

    U, V = data
    with pytest.raises(ValueError, match=r"nugget=0 leaves the Gram matrix singular.*pass nugget > 0") as info:
        KernelOperator(kernel="linear", nugget=0.0).fit(U, V)
    assert "alpha" not in str(info.value)


@pytest.mark.parametrize("dtype", [np.float32, np.dtype("float32"), "float32"])
def test_dtype_accepts_types_dtypes_and_names(data, dtype):
    from rfol_dask.baselines import KernelOperator

    U, V = data
    assert RandomFeatureOperator(n_features=20, dtype=dtype).fit(U, V).coef_.dtype == np.float32
    assert KernelOperator(dtype=dtype, nugget=1e-3).fit(U, V).dual_coef_.dtype == np.float32
