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


def test_wrong_width_at_predict(data):
    U, V = data
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(U, V)
    with pytest.raises(ValueError, match=r"training grid \(8,\)"):  # numpy: tests/test_refusals.py
        model.predict(da.from_array(U[:, :7]))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf_named_with_sample_range(data, bad):
    U, V = data
    U = U.copy()
    U[37, 2] = bad
    with pytest.raises(ValueError, match=r"X holds NaN or infinity in 1 sample \(rows 37\)"):
        RandomFeatureOperator(n_features=100).fit(U, V)
    Ud = da.from_array(U, chunks=(20, -1))
    for n_features in (100, 20):  # dual and primal graphs
        with pytest.raises(ValueError, match=r"X holds NaN or infinity in 1 sample \(rows 37\)"):
            RandomFeatureOperator(n_features=n_features).fit(Ud, V)
    V2 = V.copy()
    V2[45, 0] = bad
    with pytest.raises(ValueError, match=r"y holds NaN or infinity in 1 sample \(rows 45\)"):
        RandomFeatureOperator(n_features=100).fit(da.from_array(data[0], chunks=(20, -1)), V2)


@pytest.mark.parametrize(
    "param,value,match",
    [
        (
            "gamma",
            -1.0,
            "'gamma' parameter of RandomFeatureOperator must be a float in the range \\(0",
        ),
        (
            "alpha",
            -1e-3,
            "'alpha' parameter of RandomFeatureOperator must be a float in the range \\[0",
        ),
        (
            "distribution",
            "laplace",
            "'distribution' parameter of RandomFeatureOperator must be a str among",
        ),
        (
            "n_features",
            0,
            "'n_features' parameter of RandomFeatureOperator must be an int in the range \\[1",
        ),
        ("solver", "qr", "'solver' parameter"),
    ],
)
def test_bad_parameters(data, param, value, match):
    with pytest.raises(ValueError, match=match):
        RandomFeatureOperator(**{param: value}).fit(*data)


def test_student_t_needs_nu(data):
    with pytest.raises(ValueError, match="pass nu > 0"):
        RandomFeatureOperator(distribution="student_t").fit(*data)


def test_alpha_zero_singular_gram_suggests_alpha(data):
    U, V = data
    with pytest.raises(
        ValueError,
        match=r"alpha=0 \(min-norm interpolation\) in the dual needs n_features >= 59.*"
        "pass solver='primal' or alpha > 0",
    ):
        RandomFeatureOperator(n_features=10, solver="dual", alpha=0.0, random_state=0).fit(U, V)
    with pytest.raises(
        ValueError, match=r"in the primal needs n_features <= 60.*pass solver='dual' or alpha > 0"
    ):
        RandomFeatureOperator(n_features=61, solver="primal", alpha=0.0, fit_intercept=False).fit(
            U, V
        )
    # repeated samples make the dual Gram singular as well
    with pytest.raises(ValueError, match="pass alpha > 0"):
        RandomFeatureOperator(n_features=500, alpha=0.0, random_state=0).fit(
            np.vstack([U, U]), np.vstack([V, V])
        )


def test_gram_too_large_names_bytes(data):
    U, V = data
    with pytest.raises(ValueError, match=r"60 x 60 Gram matrix needs 28,800 bytes"):
        RandomFeatureOperator(n_features=100, max_gram_bytes=1000).fit(U, V)
    # the primal N x N Gram of dask input must fit one worker too
    with pytest.raises(ValueError, match=r"20 x 20 Gram matrix needs 3,200 bytes"):
        RandomFeatureOperator(n_features=20, max_gram_bytes=1000).fit(
            da.from_array(U), da.from_array(V)
        )
    # (a dual Gram of dask input that does not fit is factorised blocked instead:
    # tests/test_scale.py)


def test_not_fitted_and_missing_target(data):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        RandomFeatureOperator().predict(data[0])
    with pytest.raises(ValueError, match="requires y to be passed"):
        RandomFeatureOperator().fit(data[0])


def test_xarray_needs_a_sample_dim_anywhere_and_dataset_variables(data):
    U, V = data
    with pytest.raises(
        ValueError, match=r"dims \('time', 'x'\) and none named 'sample': pass sample_dim='time'"
    ):
        RandomFeatureOperator().fit(xr.DataArray(U, dims=("time", "x")), V)
    # the sample dim is found by name, wherever it is: (x, sample) fits as (sample, x) does
    kw = dict(n_features=60, gamma=0.5, random_state=0)
    want = RandomFeatureOperator(**kw).fit(xr.DataArray(U, dims=("sample", "x")), V).predict(U[:5])
    got = RandomFeatureOperator(**kw).fit(xr.DataArray(U.T, dims=("x", "sample")), V).predict(U[:5])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="has no variable 'output'"):
        RandomFeatureOperator().fit(xr.Dataset({"input": (("sample", "x"), U)}))


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
    match = r"y holds NaN or infinity in 1 sample \(rows 45\)"
    with pytest.raises(ValueError, match=match):
        RandomFeatureOperator(n_features=100, random_state=0).fit(
            U, V
        )  # dual: the Gram is the expensive pass
    assert count_features == []


def test_empty_output_width_is_refused(data):
    U, _ = data
    with pytest.raises(
        ValueError, match=r"0 feature\(s\) \(shape=\(60, 0\)\)"
    ):  # scikit-learn's check
        RandomFeatureOperator(n_features=20).fit(U, np.zeros((60, 0)))
    with pytest.raises(
        ValueError, match=r"V has shape \(60, 0\): the output functions have no values"
    ):
        RandomFeatureOperator(n_features=20).fit(
            da.from_array(U), da.zeros((60, 0), chunks=(20, -1))
        )


def test_predict_nan_names_the_right_samples(data):
    U, V = data
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(U, V)
    bad = U.copy()
    bad[37, 1] = np.nan
    with pytest.raises(
        ValueError,
        match=r"X holds NaN or infinity in 1 sample of this chunk \(sample 37\).*"
        r"before predicting",
    ):
        model.predict(da.from_array(bad, chunks=(20, -1))).compute()
    with pytest.raises(ValueError, match=r"1 sample \(rows 37\).*before predicting"):
        model.predict(bad)


def test_unknown_chunk_sizes_say_how_to_fix(data):
    U, V = data
    Ud, Vd = da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1))
    keep = Ud[:, 0] > -np.inf  # boolean indexing leaves the chunk sizes unknown
    with pytest.raises(
        ValueError,
        match=r"U is a dask array of unknown chunk sizes \(shape \(nan, 8\).*"
        r"compute_chunk_sizes\(\)",
    ):
        RandomFeatureOperator(n_features=20).fit(Ud[keep], Vd[keep])
    model = RandomFeatureOperator(n_features=20, random_state=0).fit(U, V)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        model.predict(Ud[keep])
    np.testing.assert_allclose(
        model.predict(Ud[keep].compute_chunk_sizes()).compute(), model.predict(U)
    )


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
    with pytest.raises(
        ValueError,
        match=r"1 chunk\(s\) of variable 'output' are missing from the store \(first: "
        r"chunk \(1, 0\), samples 4-7, file .*damaged.*regenerate",
    ):
        RandomFeatureOperator(n_features=20).fit(str(store))
    with pytest.raises(ValueError, match="missing from the store"):
        open_dataset(store)
    with pytest.raises(ValueError, match="chunk.* of variable 'output' are missing from the store"):
        RandomFeatureOperator(n_features=20).fit(xr.open_zarr(store, consolidated=False))


def test_a_corrupt_chunk_is_an_error_not_numbers(store):
    _chunk_file(store, "input", 2).write_bytes(b"not zstd data" * 8)
    with pytest.raises(ValueError):  # zarr's own error (the chunk cannot be decoded)
        RandomFeatureOperator(n_features=20).fit(str(store))


def test_kernel_operator_errors_name_nugget(data):
    from rfol_dask.baselines import KernelOperator

    U, V = data
    with pytest.raises(
        ValueError, match=r"nugget=0 leaves the Gram matrix singular.*pass nugget > 0"
    ) as info:
        KernelOperator(kernel="linear", nugget=0.0).fit(U, V)
    assert "alpha" not in str(info.value)


@pytest.mark.parametrize("dtype", [np.float32, np.dtype("float32"), "float32"])
def test_dtype_accepts_types_dtypes_and_names(data, dtype):
    from rfol_dask.baselines import KernelOperator

    U, V = data
    assert RandomFeatureOperator(n_features=20, dtype=dtype).fit(U, V).coef_.dtype == np.float32
    assert KernelOperator(dtype=dtype, nugget=1e-3).fit(U, V).dual_coef_.dtype == np.float32


def _users_stores(tmp_path):
    """The same pairs (40 samples, chunks of 10) in a store written by xarray (fill value NaN)
    and in one written by zarr directly (fill value 0), each with input chunk 1 (samples 10-19)
    deleted."""
    import zarr

    U, V = smooth_operator_data(40, 8)
    by_xarray, by_zarr = tmp_path / "x.zarr", tmp_path / "z.zarr"
    xr.Dataset({"input": (("sample", "x"), U), "output": (("sample", "y"), V)}).chunk(
        {"sample": 10}
    ).to_zarr(by_xarray, consolidated=False)
    group = zarr.open_group(str(by_zarr), mode="w")
    for name, a in (("input", U), ("output", V)):
        group.create_array(name, shape=a.shape, chunks=(10, a.shape[1]), dtype=a.dtype)[:] = a
    for path in (by_xarray, by_zarr):
        (
            path / "input" / zarr.open_array(str(path / "input")).metadata.encode_chunk_key((1, 0))
        ).unlink()
    return by_xarray, by_zarr, U, V


def test_a_missing_chunk_behind_dataarrays_and_dask_arrays_is_an_error(tmp_path):
    """A DataArray of xr.open_zarr or a dask array of da.from_zarr skipped the store's check: the
    missing chunk read as the fill value, NaN ('U contains NaN or infinity in samples 10-19 ...,
    drop or fill those samples': the data on disk were gone) or 0 (a silently wrong fit)."""
    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperator

    by_xarray, by_zarr, U, V = _users_stores(tmp_path)
    missing = (
        r"1 chunk\(s\) of variable 'input' are missing from the store "
        r"\(first: chunk \(1, 0\), samples 10-19, "
    )
    ds = xr.open_zarr(by_xarray, consolidated=False)
    with pytest.raises(
        ValueError,
        match=missing + r"file .*x\.zarr.*; the store is damaged: restore the files or "
        r"write the store again$",
    ):
        RandomFeatureOperator(n_features=20).fit(ds["input"], ds["output"])
    for inline in (False, True):  # the array in its own graph layer, or in every task
        Z, W = (
            da.from_zarr(str(by_zarr), component=n, inline_array=inline)
            for n in ("input", "output")
        )
        with pytest.raises(ValueError, match=missing + r".*write_empty_chunks=True"):
            RandomFeatureOperator(n_features=20).fit(Z, W)
    for fit in (KernelOperator().fit, RandomFeatureOperatorCV(n_features=20).fit):
        with pytest.raises(ValueError, match=missing):
            fit(Z, W)
    model = RandomFeatureOperator(n_features=20).fit(U, V)
    for call in (
        lambda: model.predict(Z),
        lambda: model.predict(ds["input"]),
        lambda: model.score(Z, V),
        lambda: model.score(U, ds["input"].rename(x="y")),
    ):
        with pytest.raises(ValueError, match=missing):
            call()


@pytest.mark.slow
def test_each_entry_point_checks_the_stored_arrays_it_reads(tmp_path, monkeypatch):
    """fit, predict, score, a search with its refit, the kernel baseline and the CLI's fit count the
    chunks of each stored array they read; numpy input, none."""
    import zarr

    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperator
    from rfol_dask.cli import main

    U, V = smooth_operator_data(40, 8)
    path = tmp_path / "d.zarr"
    xr.Dataset({"input": (("sample", "x"), U), "output": (("sample", "y"), V)}).chunk(
        {"sample": 10}
    ).to_zarr(path, consolidated=False)
    counted = []
    listed = zarr.Array.nchunks_initialized
    monkeypatch.setattr(
        zarr.Array,
        "nchunks_initialized",
        property(
            lambda a: (
                counted.append(str(a.store_path).rstrip("/").rsplit("/", 1)[-1]),
                listed.fget(a),
            )[1]
        ),
    )

    def count(call):
        counted.clear()
        call()
        return sorted(set(counted))

    ds = xr.open_zarr(path, consolidated=False)
    Ui, Vo = ds["input"], ds["output"]
    model = RandomFeatureOperator(n_features=20)
    both, one = ["input", "output"], ["input"]
    assert count(lambda: model.fit(Ui, Vo)) == both
    assert count(lambda: RandomFeatureOperatorCV(n_features=20).fit(Ui, Vo)) == both
    assert count(lambda: RandomFeatureOperatorCV(n_features=20).fit(ds)) == both
    assert (
        count(lambda: KernelOperator().fit(da.from_zarr(str(path), component="input"), Vo)) == both
    )
    assert count(lambda: model.predict(Ui)) == one
    assert count(lambda: model.score(Ui, Vo)) == both
    assert count(lambda: model.score(ds)) == both
    for call, read in ((lambda: model.fit(path), both), (lambda: model.predict(path), one)):
        counted.clear()
        call()
        assert sorted(counted) == read  # each array checked once (not on opening, then again)
    assert count(lambda: model.fit(U, V).predict(U)) == []
    fit = ["fit", str(path), "--train", "30", "--n-features", "20"]
    assert count(lambda: main(fit)) == both


def test_a_missing_shard_is_named_with_its_samples(tmp_path):
    """In a sharded store a chunk file holds a shard: a missing shard (samples 10-19, of inner
    chunks
    of 5) was reported as 5 missing chunks, the first 'chunk (1, 0), samples 5-9' (file c/1/0, the
    shard's), the others files that no sharded store has."""
    U, V = smooth_operator_data(40, 8)
    path = tmp_path / "s.zarr"
    ds = xr.Dataset({"input": (("sample", "x"), U), "output": (("sample", "y"), V)})
    ds.to_zarr(
        path, encoding={v: {"chunks": (5, 8), "shards": (10, 8)} for v in ds}, consolidated=False
    )
    (path / "input" / "c" / "1" / "0").unlink()
    missing = (
        r"1 chunk\(s\) of variable 'input' are missing from the store "
        r"\(first: chunk \(1, 0\), samples 10-19, "
    )
    with pytest.raises(ValueError, match=missing):
        RandomFeatureOperator(n_features=20).fit(path)
    opened = xr.open_zarr(path, consolidated=False)
    with pytest.raises(ValueError, match=missing):
        RandomFeatureOperator(n_features=20).fit(opened["input"], opened["output"])


def test_dataarrays_of_an_interrupted_generator_store_are_refused(tmp_path):
    """A data set whose generation stopped between writing a block and flagging it (every chunk
    file present, a ``block_done`` flag unset) is refused through ``xr.open_zarr``'s DataArrays
    and Dataset, as through its path: the check of the flags does not wait for a missing chunk."""
    import zarr

    from rfol_dask import datasets
    from rfol_dask.stores import FLAGS_KEY

    path = tmp_path / "flags.zarr"
    datasets.generate("advection1", 20, store=path, block_size=10)
    group = zarr.open_group(str(path), mode="r+")
    group[FLAGS_KEY][1] = 0
    ds = xr.open_zarr(path)
    for args in ((ds["input"], ds["output"]), (ds,)):
        with pytest.raises(ValueError, match="incomplete.*rerun the same generate command"):
            RandomFeatureOperator(n_features=20, random_state=0).fit(*args)
