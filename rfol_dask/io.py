"""Operands and grids: data sets opened lazily (Zarr stores, NetCDF files); operands matched by
name (:func:`named`, samples and grid dims by label) and flattened to 2-D (:func:`as_operand`)."""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr

from .exceptions import DataWarning
from .recovery.grids import as_grid, as_periods, same_grid
from .stacklevel import user_stacklevel
from .stores import PREDICTION_STORE, check_sources, describe_path, use_hint


@dataclass
class Operand:
    """A 2-D view ``data`` (M, prod(grid_shape)) of an operand plus what is needed to undo it."""

    data: object
    grid_shape: tuple
    kind: str  # "numpy", "dask" or "xarray"
    dims: tuple | None = None
    coords: dict = field(default_factory=dict)
    sample: dict | None = None  # a DataArray's coordinates along 'sample' and scalar ones
    periods: dict = field(default_factory=dict)  # dim -> its coordinate's ``period`` attribute


def user_path(path):
    """``path`` as a string with a leading ``~`` expanded, as xarray and zarr read paths."""
    return os.path.expanduser(os.fspath(path))


def open_dataset(path, samples=None, sample_dim="sample", check=("input", "output")):
    """A Zarr store (its variables ``check`` checked) or NetCDF file, lazily, first ``samples``."""
    path = user_path(path)
    where = Path(path).resolve()
    if not where.exists():
        raise FileNotFoundError(f"no data set at {path}")
    if (kind := describe_path(where)) in ("model", PREDICTION_STORE):
        what = "a saved model" if kind == "model" else kind
        raise ValueError(f"{path} is {what}, not a data set: {use_hint(where, kind)}")
    is_file = where.is_file()
    try:
        if is_file:
            ds = xr.open_dataset(path, chunks={})
        else:  # each array's own metadata: a local store, and never a stale consolidated copy
            ds = xr.open_zarr(path, consolidated=False)
    except (KeyError, ValueError, OSError) as exc:
        how = ": {} (NetCDF needs h5netcdf or netCDF4 installed)" if is_file else " in Zarr: {}"
        raise ValueError(f"{path} cannot be read as an xarray data set" + how.format(exc)) from exc
    size = ds.sizes.get(sample_dim, 0)
    whole = isinstance(samples, numbers.Integral) and not isinstance(samples, bool)
    if samples is not None and not (whole and 1 <= samples <= size):
        raise ValueError(
            f"samples must be a whole number from 1 to the {size} samples of {path}, "
            f"got {samples!r}"
        )
    if not is_file:
        check_sources(*(ds[v] for v in check if v in ds), samples=samples, sample_dim=sample_dim)
    elif size:  # about 64 MiB of samples a chunk
        row = max((v.nbytes // size for v in ds.values() if sample_dim in v.dims), default=1)
        ds = ds.chunk({sample_dim: int(max(1, min(size, 2**26 // max(row, 1))))})
    return ds if samples is None else ds.isel({sample_dim: slice(0, int(samples))})


def read_pair(X, y=None, names=("input", "output"), sample_dim="sample"):
    """``(X, y)``, or the variables ``names`` of a Dataset or store path ``X``, stores checked."""
    if isinstance(X, (str, os.PathLike)):
        X = open_dataset(X, sample_dim=sample_dim, check=())  # the arrays read are checked below
    if isinstance(X, xr.Dataset):
        wanted = [v for v in names if v is not None]
        if missing := [v for v in wanted if v not in X]:
            held = sorted(map(str, X.data_vars)) or ["?"]
            dims = X[held[0]].dims if held[0] in X.data_vars else ()
            dim = f", sample_dim={dims[0]!r}" if dims and sample_dim not in X.dims else ""
            raise ValueError(
                f"the data set has no variable {' or '.join(map(repr, missing))}; it holds "
                f"{held}: name yours, e.g. fit(ds, input={held[0]!r}, output={held[-1]!r}{dim})"
            )
        if y is not None:
            raise ValueError("pass either a Dataset / store path or the arrays (X, y), not both")
        X, y = X[names[0]], None if names[1] is None else X[names[1]]
    check_sources(X, y, sample_dim=sample_dim)
    return X, y


def align_samples(X, y):
    """``y`` reordered to the ``sample`` labels of ``X`` where both carry them, else as it is."""
    has = [isinstance(a, xr.DataArray) and "sample" in a.indexes for a in (X, y)]
    if all(has):
        how = "align them (xarray.align(X, y, join='inner')) or pass y.values to pair by position"
        return _same_labels(X, y, "sample", ("X", "y"), how)
    one, other, a = ("X", "y", X) if has[0] else ("y", "X", y)
    index = a.indexes["sample"] if any(has) else ()
    if len(index) > 1 and not index.is_monotonic_increasing:
        warnings.warn(
            f"{one}'s sample labels are not in increasing order but {other} has none, so they are "
            f"paired by position; give {other} the same labels or sort {one}.sortby('sample')",
            DataWarning,
            stacklevel=user_stacklevel(),
        )
    return y


def _same_labels(a, b, d, names, how):
    """``b`` reordered to the labels of ``a`` along ``d``; ValueError ending in ``how``."""
    ia, ib = a.indexes[d], b.indexes.get(d)
    if ib is None or ia.equals(ib):
        return b
    if not (ia.is_unique and ib.is_unique):
        raise ValueError(f"{names[0]} or {names[1]} has duplicated {d!r} labels; {how}")
    only_a, only_b = ia.difference(ib), ib.difference(ia)
    if len(only_a) or len(only_b):
        raise ValueError(
            f"{names[0]} and {names[1]} have different {d!r} labels: {len(only_a)} only in "
            f"{names[0]} (e.g. {list(only_a[:3])}), {len(only_b)} only in {names[1]} (e.g. "
            f"{list(only_b[:3])}); {how}"
        )
    return b.sel({d: ia})


def align_by_label(a, b, names=("true", "pred")):
    """``b`` matched to the DataArray ``a`` by dim names and labels (else by position)."""
    if not (isinstance(a, xr.DataArray) and isinstance(b, xr.DataArray)):
        return b
    if set(a.dims) == set(b.dims):
        b, dims = b.transpose(*a.dims), a.dims
    elif "sample" in a.dims and "sample" in b.dims and a.ndim == b.ndim:
        order = [d for d in b.dims if d != "sample"]
        order.insert(a.dims.index("sample"), "sample")
        b, dims = b.transpose(*order), ("sample",)
    else:
        return b
    how = "align them first (xarray.align(..., join='inner')) or pass .values to pair by position"
    for d in dims:
        ia, ib = a.indexes.get(d), b.indexes.get(d)
        if ia is not None and ib is not None and not _same_axis(ia, ib):
            b = _same_labels(a, b, d, names, how)
    return b


def match_grid_labels(X, coords, grid, name="X"):
    """DataArray ``X`` reordered to the model's non-numeric grid labels ``coords`` (no ``grid``)."""
    if not isinstance(X, xr.DataArray) or not coords or grid is not None:
        return X
    X = ascending_grid(X.transpose("sample", ...)) if "sample" in X.dims else X
    how = f"pass {name} on the model's labels, or {name}.values to read it by position"
    for d, labels in coords.items():
        if d in X.indexes and not _same_axis(labels, X.indexes[d]):
            model = xr.DataArray(np.asarray(labels), dims=(d,), coords={d: np.asarray(labels)})
            X = _same_labels(model, X, d, ("the training data", name), how)
    return X


def _same_axis(ia, ib):
    """Numeric 1-D coordinates equal point by point to ``1e-6`` of the span (float32 copies)."""
    x, y = np.asarray(ia), np.asarray(ib)
    numeric = x.dtype.kind in "iuf" and y.dtype.kind in "iuf" and x.ndim == 1
    return numeric and same_grid((x.astype(float),), (y.astype(float),))


def unsorted_axis(coords):
    """True for numeric 1-D coordinates of two or more points that do not increase."""
    c = np.asarray(coords)
    return c.ndim == 1 and c.size > 1 and c.dtype.kind in "iufc" and not np.all(np.diff(c) > 0)


def ascending_grid(X):
    """A DataArray with its grid dims (all but the first) sorted by numeric coordinate, lazily."""
    for d in X.dims[1:] if isinstance(X, xr.DataArray) else ():
        c = X.coords.get(d)
        if c is not None and unsorted_axis(c.values):
            X = X.isel({d: slice(None, None, -1)}) if np.all(np.diff(c.values) < 0) else X.sortby(d)
    return X


def named(X, name, sample_dim="sample", dims=None, shape=None):
    """DataArray ``X``'s dims as ``("sample", *dims)`` by name, else a ValueError with the fix."""
    if not isinstance(X, xr.DataArray):
        return X
    want = (sample_dim, *(dims or ()))
    fits = set(X.dims) == set(want) and X.ndim == len(want) if dims else sample_dim in X.dims
    if fits:
        X = X.rename({sample_dim: "sample"}) if sample_dim != "sample" else X
        return X.transpose("sample", *dims) if dims else X.transpose("sample", ...)
    scalar = X.ndim == 0 or sample_dim in X.coords and sample_dim not in X.dims  # 0-d, sel(k)
    field = shape is not None and X.shape == tuple(shape) and set(X.dims) == set(dims or X.dims)
    if scalar or field:  # one sample (of the model's grid)
        raise ValueError(
            f"{name} holds one sample without a {sample_dim!r} dim: add it with "
            f"{name}.expand_dims({sample_dim!r}), or select samples with a list"
        )
    if not dims:
        raise ValueError(
            f"{name} has dims {X.dims} and none named {sample_dim!r}: pass sample_dim={X.dims[0]!r}"
            " (the dim that runs over the samples)"
        )
    extra, missing = [d for d in X.dims if d not in want], [d for d in want if d not in X.dims]
    fix = f"{name}.rename() its dims {extra} to {missing}" if missing else f"drop the dims {extra}"
    runs = [e for e in extra if X.sizes[e] > 1]  # the dims that a rename, not a squeeze, fixes
    if sample_dim in missing and len(runs) == len(missing):
        fix += f" (or pass sample_dim={runs[0]!r})"
    raise ValueError(
        f"{name} has dims {X.dims} but the model reads {want}: {fix}, squeezing or selecting any "
        "of size one"
    )


def as_operand(X, name, sort=True):
    """``X`` (M, *grid) flattened lazily to a 2-D :class:`Operand` (a DataArray's grid sorted)."""
    if isinstance(X, xr.Dataset):
        raise TypeError(f"{name} is a Dataset; pass its DataArray (e.g. ds['input'])")
    if isinstance(X, xr.DataArray):
        X = ascending_grid(named(X, name)) if sort else named(X, name)
        coords = {d: X[d].values for d in X.dims[1:] if d in X.coords}
        periods = {d: X[d].attrs["period"] for d in coords if X[d].attrs.get("period") is not None}
        inner = as_operand(X.data, name)
        # labels, times, members along 'sample', and scalar coordinates (a time stamp of them all)
        along = {k: c.variable for k, c in X.coords.items() if c.dims in (("sample",), ())}
        return Operand(inner.data, inner.grid_shape, "xarray", X.dims[1:], coords, along, periods)
    if not isinstance(X, da.Array):
        return Operand(X, None, "numpy")
    if X.ndim == 0:
        raise ValueError(f"{name} must have a sample axis, got a 0-d array")
    check_known_sizes(X, name)
    flat = X.rechunk({k: -1 for k in range(1, X.ndim)}).reshape(len(X), -1) if X.ndim > 2 else X
    return Operand(flat, tuple(X.shape[1:]), "dask")


def check_known_sizes(X, name):
    """ValueError for a dask array ``X`` of unknown chunk sizes (after boolean indexing)."""
    if isinstance(X, da.Array) and any(np.isnan(n) for n in X.shape):
        raise ValueError(
            f"{name} is a dask array of unknown chunk sizes (shape {X.shape}): call "
            f"{name}.compute_chunk_sizes() first"
        )


def wrap_like(values, template, grid_shape, dims=None, coords=None, name=None):
    """Predictions (M, m) as ``(M, *grid_shape)``, for xarray with ``template``'s coordinates."""
    if tuple(values.shape[1:]) != tuple(grid_shape):
        values = values.reshape((values.shape[0], *grid_shape))
    if template.kind != "xarray":
        return values
    dims = dims or tuple(f"dim_{k}" for k in range(len(grid_shape)))
    out = {d: c for d, c in (coords or {}).items() if d in dims}
    out.update({k: v for k, v in (template.sample or {}).items() if v.dims or k not in dims})
    return xr.DataArray(values, dims=("sample", *dims), coords=out, name=name)


def learn_grid(grid, operand, shape, which):
    """The training grid of one side: the explicit ``grid``, else the xarray coordinates."""
    if grid is None:
        return operand_grid(operand)
    grid = as_grid(grid, f"{which}_grid")
    if (got := tuple(len(ax) for ax in grid)) != tuple(shape):
        raise ValueError(
            f"{which}_grid has shape {got} but the {which} functions have grid shape {tuple(shape)}"
        )
    return grid


def operand_grid(operand):
    """The grid of an xarray operand's numeric coordinates; ValueError if they are no grid."""
    if operand.kind != "xarray" or not operand.dims or set(operand.dims) - set(operand.coords):
        return None
    coords = {d: np.asarray(operand.coords[d]) for d in operand.dims}
    if not all(c.dtype.kind in "iuf" for c in coords.values()):
        return None
    try:
        as_grid({d: np.sort(c) for d, c in coords.items()})  # in any order
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the coordinates of the grid dims {list(coords)} are not a grid ({exc}); fix them, "
            "or drop them (da.drop_vars(...)) to have the values read by position"
        ) from exc
    return None if any(map(unsorted_axis, coords.values())) else as_grid(coords)  # or by position


def grid_dims(operand, grid_arg, grid):
    """One side's grid dims: the xarray dims, a mapping grid's keys, else ``dim_0, dim_1, ...``."""
    if operand.dims or isinstance(grid_arg, Mapping):
        return tuple(operand.dims or grid_arg)
    return tuple(f"dim_{k}" for k in range(len(grid or ())))


def learn_periods(periods, operand, grid, which, dims):
    """One grid's periods per axis, from ``fit(periods=)`` or the coordinates' ``period``."""
    if grid is None:
        if any(d in periods for d in dims) if isinstance(periods, Mapping) else periods is not None:
            raise ValueError(
                f"periods= needs the {which} grid coordinates: pass fit(..., {which}_grid=...) "
                "or xarray data with coordinates"
            )
        return None
    if periods is None or isinstance(periods, Mapping):
        periods = [(operand.periods if periods is None else periods).get(d) for d in dims]
    return as_periods(periods, grid, f"the periods of the {which} grid")
