import numpy as np
import pytest
import xarray as xr
import zarr

from rfol_dask import __version__, datasets


def test_registry_lists_and_rejects():
    assert {"advection1", "advection2"} <= set(datasets.names())
    with pytest.raises(ValueError, match="unknown data set 'nope'; known data sets: .*advection1"):
        datasets.generate("nope", 3)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['speed'\] for data set 'advection1'"):
        datasets.generate("advection1", 3, speed=2)
    for bad in (0, -5, 2.5):
        with pytest.raises(ValueError, match="n_samples must be a positive integer"):
            datasets.generate("advection1", bad)


@pytest.mark.cluster
def test_same_bytes_for_any_block_size_and_workers(tmp_path):
    ref = datasets.generate("advection2", 23, seed=5, block_size=23)
    a = datasets.generate("advection2", 23, store=tmp_path / "a.zarr", seed=5, block_size=4)
    np.testing.assert_array_equal(a["input"].values, ref["input"].values)
    np.testing.assert_array_equal(a["output"].values, ref["output"].values)
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c, Client(c) as cl:
        b = datasets.generate("advection2", 23, store=tmp_path / "b.zarr", seed=5, block_size=7, client=cl)
        np.testing.assert_array_equal(b["output"].values, ref["output"].values)
    assert not np.array_equal(datasets.generate("advection2", 23, seed=6)["input"].values, ref["input"].values)


def test_store_layout_attributes_and_chunks(tmp_path):
    ds = datasets.generate("advection1", 10, store=tmp_path / "s.zarr", seed=2, block_size=4, t_index=10)
    assert ds["input"].dims == ("sample", "x") and ds["input"].chunks == ((4, 4, 2), (40,))
    assert ds.attrs["seed"] == 2 and ds.attrs["param_t_index"] == 10 and ds.attrs["param_n_points"] == 40
    assert ds.attrs["rfol_dask_version"] == __version__
    assert ds["x"].attrs["units"] == "m" and ds["x"].attrs["period"] == 1.0
    assert "block_done" not in ds


def test_resume_after_interruption_equals_uninterrupted(tmp_path, monkeypatch):
    from rfol_dask.datasets import store as store_mod

    path = tmp_path / "r.zarr"
    real = store_mod._write_block

    def dies_on_block_2(p, name, seed, start, stop, block, params):
        if block == 2:
            raise KeyboardInterrupt("worker killed")
        return real(p, name, seed, start, stop, block, params)

    monkeypatch.setattr(store_mod, "_write_block", dies_on_block_2)
    import dask

    with pytest.raises(KeyboardInterrupt), dask.config.set(scheduler="sync"):
        datasets.generate("advection1", 20, store=path, seed=1, block_size=5)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="incomplete.*rerun the same generate command"):
        datasets.open(path)
    # the missing block is NaN in the raw store, never zeros
    raw = xr.open_zarr(path, consolidated=False)
    done = raw["block_done"].values
    missing = int(np.flatnonzero(done == 0)[0])
    assert np.isnan(raw["input"].values[missing * 5:(missing + 1) * 5]).all()

    calls = []
    monkeypatch.setattr(store_mod, "_write_block", lambda *a: calls.append(a[5]) or real(*a))
    resumed = datasets.generate("advection1", 20, store=path, seed=1, block_size=5)
    assert sorted(calls) == list(np.flatnonzero(done == 0))  # only the unwritten blocks were made
    assert done.sum() >= 1  # something had been written before the kill
    ref = datasets.generate("advection1", 20, seed=1)
    np.testing.assert_array_equal(resumed["input"].values, ref["input"].values)
    np.testing.assert_array_equal(resumed["output"].values, ref["output"].values)


def test_existing_store_not_overwritten(tmp_path):
    path = tmp_path / "o.zarr"
    datasets.generate("advection1", 8, store=path, seed=0)
    with pytest.raises(ValueError, match="holds another data set.*overwrite=True"):
        datasets.generate("advection2", 8, store=path, seed=0)
    with pytest.raises(ValueError, match="holds another data set"):
        datasets.generate("advection1", 8, store=path, seed=1)
    ds = datasets.generate("advection2", 8, store=path, seed=0, overwrite=True)
    assert ds.attrs["dataset"] == "advection2"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an rfol_dask data set"):
        datasets.generate("advection1", 8, store=other)
    assert (other / "keep.txt").read_text() == "mine"


def test_open_rejects_foreign_store(tmp_path):
    with pytest.raises(FileNotFoundError):
        datasets.open(tmp_path / "missing.zarr")
    g = zarr.open_group(str(tmp_path / "z.zarr"), mode="w")
    g.create_array("a", shape=(2,), dtype="f8")
    with pytest.raises(ValueError, match="cannot be read as an xarray data set in Zarr"):
        datasets.open(tmp_path / "z.zarr")
