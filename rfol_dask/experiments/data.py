"""Data access of the experiments: the seed-0 splits of the benchmark data sets, from Zarr stores
(sample ``i`` depends only on ``(seed, i)``: :func:`load_subset` slices a larger store)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from .. import datasets
from ..cluster import close_client, local_client


class SharedCluster:
    """One LocalCluster of ``workers`` processes for the data generated in a run, started on the
    first call (which returns its client; ``workers=0``: None, dask threads in this process)."""

    def __init__(self, workers: int):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be a whole number >= 0 (0: threads), got {workers!r}")
        self.workers, self.client = workers, None

    def __call__(self):
        if self.client is None and self.workers:
            self.client = local_client(n_workers=self.workers)
        return self.client

    def close(self) -> None:
        close_client(self.client)
        self.client = None


def load_split(name: str, data_dir, max_test: int, cluster=None) -> tuple[xr.Dataset, xr.Dataset]:
    """The paper-size split ``(train, test)`` of data set ``name`` (seed 0, at most ``max_test``
    test samples) in memory, from ``<data_dir>/<name>.zarr``, generated there on ``cluster()``
    where missing (:func:`rfol_dask.datasets.reuse_or_generate`: other data is refused)."""
    paper = datasets.get(name).paper
    n_train, n_test = paper["train"], min(paper["test"], max_test)
    path = Path(data_dir) / f"{name}.zarr"
    ds = datasets.reuse_or_generate(name, n_train + n_test, path, seed=0, client=cluster).load()
    return ds.isel(sample=slice(0, n_train)), ds.isel(sample=slice(n_train, None))


def load_subset(name: str, n_train: int, n_test: int, data_dir, cluster=None):
    """Samples ``[0, n_train)`` (train) and ``[n_train, n_train + n_test)`` (test), seed 0: sliced
    from the store of :func:`load_split` where it holds them, else generated into
    ``<data_dir>/subsets/<name>_<n>.zarr`` on ``cluster()`` (None: dask threads)."""
    total = n_train + n_test
    try:
        ds = datasets.open_dataset(Path(data_dir) / f"{name}.zarr")
        meta = json.loads(ds.attrs.get("rfol_dask_meta", "{}"))
        if ds.sizes["sample"] < total or datasets.request_mismatch(meta, name):
            raise ValueError("too small or other data")
    except (FileNotFoundError, ValueError):
        path = Path(data_dir) / "subsets" / f"{name}_{total}.zarr"
        path.parent.mkdir(parents=True, exist_ok=True)
        ds = datasets.reuse_or_generate(name, total, path, seed=0, client=cluster)
    ds = ds.isel(sample=slice(0, total)).load()
    return ds.isel(sample=slice(0, n_train)), ds.isel(sample=slice(n_train, None))


def arrays(ds: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and outputs flattened per sample: shapes (M, n) and (M, m)."""
    U, V = ds["input"].values, ds["output"].values
    return U.reshape(len(U), -1), V.reshape(len(V), -1)


def grid(da: xr.DataArray) -> tuple[np.ndarray, ...] | None:
    """The 1-D coordinates of the grid dimensions of ``da`` (None when a dimension has none)."""
    if all(d in da.coords for d in da.dims[1:]):
        return tuple(np.asarray(da[d].values) for d in da.dims[1:])
