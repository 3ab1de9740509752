"""Prediction stores: a model's predictions written to Zarr, block by block, without loss.

:func:`write_predictions` writes a prediction (``model.predict`` of xarray inputs, lazy or not)
as the variable ``prediction`` of a Zarr store, uncompressed and chunked along ``sample`` as the
data sets' fields, with consolidated metadata (a plain ``xr.open_zarr`` reads it). Files are never
lost: the path may be new, an empty folder or an earlier prediction store (marked by the root
attribute :data:`PREDICTION_KEY`, holding nothing else), which is replaced; anything else is
refused. The store is written beside the path and moved into place, so an error or Ctrl-C leaves
no half-written store under the name and an earlier one as it was. ``rfol-dask predict`` uses it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from ._version import __version__
from .io import (
    PREDICTION_KEY,
    check_outside_stores,
    check_parent_dir,
    describe_path,
    foreign_entries,
    group_attrs,
    quiet_consolidated,
    user_path,
)
from .persistence import clean_leftovers, lock_beside, refuse_foreign, swap_into_place
from .progress import compute

__all__ = ["PREDICTION_KEY", "prediction_arrays", "check_prediction_path", "write_predictions"]


def write_predictions(pred, path, attrs=None, client=None, progress=True):
    """Write the DataArray ``pred`` (dims ``("sample", *grid)``: ``model.predict`` of a DataArray,
    lazy or not) as the variable ``prediction`` of a Zarr store at ``path``, in blocks of its
    largest chunk along ``sample`` (whole along the grid: :func:`_regular_blocks`), block by block
    on the workers of ``client`` (or dask's local scheduler), with the root ``attrs`` and the
    package version. ``path``: new, an empty folder or an earlier prediction store, replaced
    (:func:`check_prediction_path`, checked again while the lock beside it is held). Returns the
    absolute path. Memory: one block of the prediction per running task (two of its chunks where
    they are merged); nothing in the client."""
    if not isinstance(pred, xr.DataArray):
        raise TypeError(
            f"write_predictions writes a DataArray (model.predict of ds['input'], a DataArray with "
            f"dims sample and the grid's), got a {type(pred).__name__}; wrap an array with "
            "xarray.DataArray(pred, dims=('sample', ...))"
        )
    pred = _regular_blocks(pred)
    path = Path(os.path.abspath(user_path(path)))
    check_prediction_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _prediction_lock(path):
        check_prediction_path(path)  # again, holding the lock
        _write_atomically(
            pred, path, {**(attrs or {}), "rfol_dask_version": __version__}, client, progress
        )
    return path


def _regular_blocks(pred):
    """``pred`` in regular blocks along its first dim, of its largest chunk there (Zarr's chunks:
    a first chunk cut short, as by ``isel(sample=slice(3, None))`` of a store's blocks, would make
    other blocks straddle two of them), whole along the others; an in-memory ``pred`` in one."""
    k = max(pred.chunks[0]) if pred.chunks else pred.shape[0]
    return pred.chunk({pred.dims[0]: max(1, k), **{d: -1 for d in pred.dims[1:]}})


def prediction_arrays(path):
    """The arrays of the prediction store at ``path`` as its attribute lists them; None when
    ``path`` is not one (nothing there, another store, a file)."""
    if path.is_symlink() or not path.is_dir():
        return None
    try:
        return set(json.loads((group_attrs(path) or {})[PREDICTION_KEY]))
    except (KeyError, TypeError, ValueError):
        return None


def check_prediction_path(path):
    """ValueError unless predictions may be written at the absolute ``path`` (checked before any
    work, and again holding its lock): nothing there, an empty folder, or a prediction store of
    ``rfol-dask predict`` holding nothing but its arrays (replaced); never inside a Zarr store,
    nor the current directory or a folder holding it."""
    cwd = Path(os.path.realpath("."))
    if Path(os.path.realpath(path)) in (cwd, *cwd.parents):
        raise ValueError(
            f"{path} is the current directory or holds it, which writing replaces; give another "
            "path"
        )
    check_outside_stores(path, "write predictions")
    arrays = prediction_arrays(path)
    if arrays is not None:
        refuse_foreign(
            foreign_entries(path, arrays), f"the prediction store {path}", "give another path"
        )
        return
    kind = describe_path(path)
    if kind is None:
        check_parent_dir(path, "predictions")
    elif kind != "empty":
        kind = "an rfol_dask model" if kind == "model" else kind
        raise ValueError(
            f"{path} exists and is {kind}, not a prediction store of rfol-dask predict; it is "
            "never replaced: give a new path (or move it away)"
        )


def _prediction_lock(path):
    """:func:`rfol_dask.persistence.lock_beside` the prediction store ``path`` (a model save of that
    path takes the same lock), held while predict checks, writes and swaps in."""
    return lock_beside(
        path,
        {"predictions": str(path)},
        f"{path} is being written by another run",
        "give another path",
        "run",
    )


def _write_atomically(pred, path, attrs, client, progress):
    """:func:`write_predictions`'s write, its lock held, swapped into place
    (:func:`rfol_dask.persistence.swap_into_place`: an error or Ctrl-C leaves ``path`` as it was)."""
    ds = pred.to_dataset(name="prediction")
    for var in ds.variables.values():
        var.encoding = {}  # the input store's chunks and codecs are not the prediction's
    ds.attrs = {**attrs, PREDICTION_KEY: json.dumps(sorted(map(str, ds.variables)))}
    encoding = {
        "prediction": {
            "chunks": tuple(c[0] for c in pred.chunks),
            "fill_value": np.nan,
            "compressors": None,
        }
    }

    def write(tmp):
        with quiet_consolidated():
            job = ds.to_zarr(
                str(tmp), mode="w-", compute=False, encoding=encoding, consolidated=True
            )
        compute(job, client=client, progress=progress, desc="predict", settle=True)

    swap_into_place(
        path, write, lambda: check_prediction_path(path)
    )  # checked again: may have changed
    clean_leftovers(path)  # what killed runs left
