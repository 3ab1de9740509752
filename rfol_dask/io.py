"""xarray / Zarr conventions: reading operands, opening data-set stores, saving models.

An operand is a numpy array, a dask array, an ``xarray.DataArray`` with ``sample`` as its
first dimension, or (for ``fit``) an ``xarray.Dataset`` / Zarr store path holding the
variables ``input`` and ``output``. :func:`as_operand` flattens the grid dimensions to
one axis without computing anything and remembers how to undo that.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr

from ._version import __version__

__all__ = ["Operand", "as_operand", "open_dataset", "read_pair", "save_model", "load_model"]


@dataclass
class Operand:
    """A 2-D view ``data`` (M, prod(grid_shape)) of an operand plus what is needed to undo it."""

    data: object
    grid_shape: tuple
    kind: str  # "numpy", "dask" or "xarray"
    dims: tuple | None = None
    coords: dict = field(default_factory=dict)
    sample: object = None  # the DataArray's sample coordinate, if any


def open_dataset(path):
    """Open a data-set store lazily; raise if it is not one or if blocks are missing.

    Stores written by ``rfol_dask.datasets.generate`` carry a ``block_done`` flag per block;
    a store with unset flags was interrupted (rerun the generation to resume it).
    """
    path = os.fspath(path)
    if not Path(path).exists():
        raise FileNotFoundError(f"no data set at {path}")
    try:
        ds = xr.open_zarr(path, consolidated=False)
    except (KeyError, ValueError, OSError) as exc:
        raise ValueError(f"{path} cannot be read as an xarray data set in Zarr: {exc}") from exc
    if "block_done" in ds:
        done = ds["block_done"].values.astype(bool)
        if not done.all():
            missing = np.flatnonzero(~done)
            meta = json.loads(ds.attrs.get("rfol_dask_meta", "{}"))
            bs = int(meta.get("block_size", 1))
            first = int(missing[0]) * bs
            raise ValueError(
                f"data set at {path} is incomplete: {len(missing)} of {len(done)} blocks were never "
                f"written (first missing samples {first}-{first + bs - 1}); rerun the same generate "
                f"command (rfol-dask generate {meta.get('dataset', 'NAME')} ...) to resume it"
            )
        ds = ds.drop_vars("block_done")
    return ds


def read_pair(X, y=None):
    """``(input, output)`` DataArrays from a Dataset or a store path; ``(X, y)`` otherwise."""
    if isinstance(X, (str, os.PathLike)):
        X = open_dataset(X)
    if isinstance(X, xr.Dataset):
        missing = [v for v in ("input", "output") if v not in X]
        if missing:
            raise ValueError(f"the Dataset needs variables 'input' and 'output'; missing {missing}")
        if y is not None:
            raise ValueError("pass either a Dataset / store path alone or the arrays (U, V), not both")
        return X["input"], X["output"]
    return X, y


def as_operand(X, name):
    """Flatten ``X`` (M, *grid) to a 2-D :class:`Operand` lazily; 1-D ``X`` gives grid ``()``."""
    if isinstance(X, xr.Dataset):
        raise TypeError(f"{name} is a Dataset; pass its DataArray (e.g. ds['input'])")
    if isinstance(X, xr.DataArray):
        if X.ndim == 0 or X.dims[0] != "sample":
            raise ValueError(
                f"{name} must have 'sample' as its first dimension, got dims {X.dims}; "
                f"use {name}.transpose('sample', ...) or rename the sample dimension"
            )
        coords = {d: X[d].values for d in X.dims[1:] if d in X.coords}
        inner = as_operand(X.data, name)
        return Operand(inner.data, inner.grid_shape, "xarray", tuple(X.dims[1:]), coords,
                       X["sample"] if "sample" in X.coords else None)
    if isinstance(X, da.Array):
        if X.ndim == 0:
            raise ValueError(f"{name} must have a sample axis, got a 0-d array")
        if X.ndim > 2:
            X = X.rechunk({k: -1 for k in range(1, X.ndim)})
        return Operand(X.reshape(X.shape[0], -1) if X.ndim > 2 else X, tuple(X.shape[1:]), "dask")
    return Operand(X, None, "numpy")


def wrap_like(values, template, grid_shape, dims=None, coords=None, name=None):
    """Give predictions (M, m) the caller's kind: reshape to ``(M, *grid_shape)`` and, for
    xarray, wrap with the sample coordinate of ``template`` and the output grid ``coords``."""
    values = values.reshape((values.shape[0], *grid_shape))
    if template.kind != "xarray":
        return values
    dims = dims or tuple(f"dim_{k}" for k in range(len(grid_shape)))
    out_coords = {d: c for d, c in (coords or {}).items() if d in dims}
    if template.sample is not None:
        out_coords["sample"] = template.sample
    return xr.DataArray(values, dims=("sample", *dims), coords=out_coords, name=name)


# ------------------------------------------------------------------------------ models


def save_model(path, arrays, attrs):
    """Write ``arrays`` (name -> numpy) and JSON-able ``attrs`` to a Zarr group at ``path``.

    The group is written to a temporary sibling and renamed into place, so an interrupted
    save leaves the previous model at ``path`` readable.
    """
    import zarr

    path = Path(os.fspath(path))
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        group = zarr.open_group(str(tmp), mode="w")
        for key, value in arrays.items():
            value = np.asarray(value)
            group.create_array(key, shape=value.shape, dtype=value.dtype,
                               chunks=value.shape or None)[...] = value
        group.attrs.update({"rfol_dask_model": json.dumps(attrs), "rfol_dask_version": __version__})
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_model(path):
    """Read ``(arrays, attrs)`` written by :func:`save_model`.

    If ``path`` is missing because a save was interrupted between its two renames, the
    previous model kept beside it is read instead.
    """
    import zarr

    path = Path(os.fspath(path))
    if not path.exists():
        olds = sorted(path.parent.glob(f".{path.name}.old-*"))
        if not olds:
            raise FileNotFoundError(f"no model at {path}")
        path = olds[-1]
    group = zarr.open_group(str(path), mode="r")
    if "rfol_dask_model" not in group.attrs:
        raise ValueError(f"{path} is not an rfol_dask model (no 'rfol_dask_model' attribute)")
    arrays = {key: arr[...] for key, arr in group.arrays()}
    return arrays, json.loads(group.attrs["rfol_dask_model"])
