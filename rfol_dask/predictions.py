"""Prediction stores: a model's predictions written to Zarr, block by block, without loss.

The store (variable ``prediction``, uncompressed, chunked along ``sample``, consolidated) is
written beside its path and swapped into place; only an earlier prediction store (root attribute
:data:`PREDICTION_KEY`, holding nothing else) is ever replaced. ``rfol-dask predict`` uses it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from ._version import __version__
from .persistence import swap_into_place
from .progress import compute
from .stores import (
    PREDICTION_KEY,
    PREDICTION_STORE,
    check_outside_stores,
    check_parent_dir,
    describe_path,
    foreign_entries,
    group_attrs,
    quiet_consolidated,
    refuse_foreign,
)


def write_predictions(pred, path, attrs=None, client=None, progress=True):
    """Write the DataArray ``pred`` (dims ``("sample", *grid)``) as the variable ``prediction`` of
    a Zarr store at ``path``, in blocks of its largest chunk along ``sample``, on the workers of
    ``client`` (or dask's local scheduler), with the root ``attrs``. Returns the absolute path.
    Memory: one block of the prediction per running task; nothing in the client."""
    if not isinstance(pred, xr.DataArray):
        raise TypeError(
            f"write_predictions writes a DataArray (model.predict of ds['input']), got a "
            f"{type(pred).__name__}; wrap an array: xarray.DataArray(pred, dims=('sample', ...))"
        )
    # regular blocks along sample (a first chunk cut short would make blocks straddle two chunks)
    k = max(pred.chunks[0]) if pred.chunks else pred.shape[0]
    pred = pred.chunk({pred.dims[0]: max(1, k), **{d: -1 for d in pred.dims[1:]}})
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    check_prediction_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = pred.to_dataset(name="prediction")
    for var in ds.variables.values():
        var.encoding = {}  # the input store's chunks and codecs are not the prediction's
    ds.attrs = {**(attrs or {}), "rfol_dask_version": __version__}
    ds.attrs[PREDICTION_KEY] = json.dumps(sorted(map(str, ds.variables)))
    chunks = tuple(c[0] for c in pred.chunks)
    encoding = {"prediction": {"chunks": chunks, "fill_value": np.nan, "compressors": None}}

    def write(tmp):
        with quiet_consolidated():
            job = ds.to_zarr(
                str(tmp), mode="w-", compute=False, encoding=encoding, consolidated=True
            )
        compute(job, client=client, progress=progress, desc="predict", settle=True)

    busy = f"{path} is being written by another run"
    swap_into_place(path, write, lambda: check_prediction_path(path), busy)
    return path


def check_prediction_path(path):
    """ValueError unless predictions may be written at the absolute ``path``: nothing there, an
    empty folder, or a prediction store holding nothing but its arrays (replaced); never inside
    a Zarr store, nor the current directory or a folder holding it."""
    check_outside_stores(path, "write predictions")
    kind, arrays = describe_path(path), None
    with contextlib.suppress(TypeError, ValueError):  # the arrays its attribute lists
        arrays = kind == PREDICTION_STORE and set(json.loads(group_attrs(path)[PREDICTION_KEY]))
    if arrays:
        foreign = foreign_entries(path, arrays)
        return refuse_foreign(foreign, f"the prediction store {path}", "give another path")
    if kind is None:
        check_parent_dir(path, "predictions")
    elif kind != "empty":
        kind = "an rfol_dask model" if kind == "model" else kind
        raise ValueError(
            f"{path} exists and is {kind}, not a prediction store of rfol-dask predict; it is "
            "never replaced: give a new path (or move it away)"
        )
