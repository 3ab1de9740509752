"""Stores: a missing or unreadable chunk of a user's store named by its samples, handles opened
before a store was written again refused."""

import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


def test_a_users_store_with_samples_last_names_the_samples_of_a_bad_chunk(tmp_path):
    """A store laid out (x, sample) named a missing chunk's samples along x ('samples 8-15', not
    40-59), checked the chunks of other samples than the first ``samples``, and told the user to
    regenerate it with 'rfol-dask generate NAME', which never wrote it."""
    import zarr

    from rfol_dask.io import open_dataset

    U, V = smooth_operator_data(60, 16)
    path = tmp_path / "mine.zarr"
    xr.Dataset(
        {"input": (("x", "sample"), U.T), "output": (("x", "sample"), V.T)},
        coords={"x": np.linspace(0, 1, 16), "sample": np.arange(60)},
    ).chunk({"x": 8, "sample": 20}).to_zarr(path)
    key = zarr.open_array(str(path / "input"), mode="r").metadata.encode_chunk_key
    (path / "input" / key((1, 2))).unlink()
    with pytest.raises(ValueError, match=r"'input' .*missing.*samples 40-59"):
        _rf().fit(path)
    assert (
        open_dataset(path, samples=40).sizes["sample"] == 40
    )  # the chunk is not among the first 40 samples
    (path / "input" / key((1, 2))).write_bytes((path / "input" / key((1, 1))).read_bytes())
    (path / "output" / key((0, 1))).write_bytes(b"not zstd data" * 8)
    with pytest.raises((ValueError, RuntimeError)):  # the codec's error: it cannot decode it
        _rf().fit(path)


def test_reuse_or_generate_checks_the_count(tmp_path):
    """On an existing store a count of -3 returned 7 samples (a negative slice)."""
    from rfol_dask import datasets

    path = tmp_path / "b.zarr"
    datasets.reuse_or_generate("advection1", 10, path, seed=1)
    for bad in (-3, 0, True, 2.5):
        with pytest.raises(ValueError, match="n_samples must be a positive integer"):
            datasets.reuse_or_generate("advection1", bad, path, seed=1)
    datasets.reuse_or_generate("advection1", 20, path, seed=1)  # made again, larger
    assert datasets.open(path).sizes["sample"] == 20
