"""xarray / Zarr conventions: reading operands and opening data-set stores (models: ``persistence``).

An operand is a numpy array, a dask array, an ``xarray.DataArray`` with a ``sample``
dimension (anywhere; it is put first), or (for ``fit``) an ``xarray.Dataset`` / Zarr store path holding the
variables ``input`` and ``output``. :func:`as_operand` flattens the grid dimensions to
one axis without computing anything and remembers how to undo that.
"""

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
from .stores import PREDICTION_STORE, check_sources, check_store, describe_path, load_hint

__all__ = [
    "user_path",
    "Operand",
    "as_operand",
    "align_samples",
    "open_dataset",
    "read_pair",
    "check_known_sizes",
    "learn_grid",
    "operand_grid",
    "grid_dims",
    "learn_periods",
    "match_dims",
]


@dataclass
class Operand:
    """A 2-D view ``data`` (M, prod(grid_shape)) of an operand plus what is needed to undo it."""

    data: object
    grid_shape: tuple
    kind: str  # "numpy", "dask" or "xarray"
    dims: tuple | None = None
    coords: dict = field(default_factory=dict)
    sample: dict | None = (
        None  # the DataArray's coordinates along 'sample' and scalar ones (name -> Variable), if any
    )
    periods: dict = field(default_factory=dict)  # dim -> the ``period`` attribute of its coordinate


def user_path(path):
    """``path`` (str or os.PathLike) as a string with a leading ``~`` expanded to the user's home,
    as xarray and zarr read paths (``to_zarr("~/d.zarr")`` writes in the home folder); a path
    read literally would make a folder named ``~`` in the working directory instead."""
    return os.path.expanduser(os.fspath(path))


def open_dataset(path, samples=None):
    """Open a data-set store lazily; raise if it is not one or if blocks or chunks are missing.

    With ``samples``, only the first ``samples`` samples are opened and checked (the leading
    blocks of a store whose generation was interrupted or is still running).

    Stores written by ``rfol_dask.datasets.generate`` carry a ``block_done`` flag per block
    (in the Zarr group ``_rfol_dask``; a variable in stores written before it); a store with
    unset flags was interrupted (rerun the generation to resume it). A chunk
    file of ``input`` / ``output`` missing from the store (it would read back as its fill
    value) is an error naming it; a chunk that cannot be decoded (a damaged file) raises,
    when it is read, a ValueError naming the store, the variable and the chunk.
    """
    path = user_path(path)
    if not Path(path).exists():
        raise FileNotFoundError(f"no data set at {path}")
    kind = describe_path(Path(path).resolve())
    if kind == "model":
        raise ValueError(
            f"{path} is a saved model, not a data set: load it with {load_hint(Path(path).resolve())} "
            "to predict with it; fit and open_dataset read a data-set store (variables input and output, "
            "as rfol-dask generate writes them)"
        )
    if kind == PREDICTION_STORE:
        raise ValueError(
            f"{path} is {kind}, not a data set: read its predictions with xarray.open_zarr(path)"
            "['prediction']; fit, predict and open_dataset read a data-set store (variables input and "
            "output, as rfol-dask generate writes them)"
        )
    try:
        try:
            ds = xr.open_zarr(path, consolidated=True)
        except (KeyError, ValueError):  # stores written without consolidated metadata
            ds = xr.open_zarr(path, consolidated=False)
    except (KeyError, ValueError, OSError) as exc:
        raise ValueError(f"{path} cannot be read as an xarray data set in Zarr: {exc}") from exc
    size = ds.sizes.get("sample", 0)
    if samples is not None and (
        isinstance(samples, bool)
        or not isinstance(samples, numbers.Integral)
        or not 1 <= samples <= size
    ):
        raise ValueError(
            f"samples must be a whole number from 1 to the {size} samples of {path}, got {samples!r}"
        )
    check_store(ds, path, samples)
    ds = ds.drop_vars("block_done", errors="ignore")
    return ds if samples is None else ds.isel(sample=slice(0, int(samples)))


def read_pair(X, y=None, variables=("input", "output")):
    """``(input, output)`` DataArrays from a Dataset or a store path; ``(X, y)`` otherwise,
    with ``y`` aligned to the samples of ``X`` (:func:`align_samples`). With ``variables=
    ("input",)`` (prediction) only ``input`` is needed: ``(input, None)``."""
    opened = isinstance(X, (str, os.PathLike))
    if opened:
        X = open_dataset(X)  # checks the store
    if isinstance(X, xr.Dataset):
        missing = [v for v in variables if v not in X]
        if missing:
            raise ValueError(
                f"the Dataset needs variable{'s' if len(variables) > 1 else ''} "
                f"{' and '.join(map(repr, variables))}; missing {missing}"
            )
        if y is not None:
            raise ValueError(
                "pass either a Dataset / store path alone or the arrays (U, V), not both"
            )
        if not opened and not check_sources(*(X[v] for v in variables)):
            check_store(X)  # loaded into memory from a store: check the store it came from
        return X["input"], X["output"] if "output" in variables else None
    check_sources(X, y)
    return X, align_samples(X, y)


def align_samples(X, y):
    """``y`` paired with ``X`` by the labels of their ``sample`` coordinates.

    Applies when both are DataArrays with a ``sample`` coordinate (else ``y`` unchanged:
    arrays pair by position; a UserWarning where only one side has labels, out of order). The same labels in another order: ``y`` reordered to the
    order of ``X`` (lazily for dask). Different label sets or duplicated labels:
    ValueError saying how to align them.
    """
    labelled = [
        n for n, a in (("X", X), ("y", y)) if isinstance(a, xr.DataArray) and "sample" in a.indexes
    ]
    if (
        len(labelled) == 1
    ):  # one side's labels, the other's positions: worth a word where the labels are shuffled
        index = (X if labelled == ["X"] else y).indexes["sample"]
        if len(index) > 1 and not index.is_monotonic_increasing:
            other = "y" if labelled == ["X"] else "X"
            warnings.warn(
                f"{labelled[0]}'s 'sample' labels are not in increasing order but {other} carries no "
                f"sample labels, so they are paired by position; if {other} is not in {labelled[0]}'s "
                f"order, give it the same labels (a DataArray) or sort {labelled[0]} "
                f"({labelled[0]}.sortby('sample'))",
                DataWarning,
                stacklevel=user_stacklevel(),
            )
    if (
        not (isinstance(X, xr.DataArray) and isinstance(y, xr.DataArray))
        or "sample" not in X.coords
        or "sample" not in y.coords
        or "sample" not in X.indexes
    ):
        return y
    how = (
        "pair them yourself: X, y = xarray.align(X, y, join='inner') keeps the common samples, "
        "y.sel(sample=X.sample) picks y's samples of X, or pass y.values to pair by position"
    )
    return _same_labels(X, y, "sample", ("X", "y"), how)


def _same_labels(a, b, d, names, how):
    """``b`` with the labels of ``a`` along ``d`` (reordered; unchanged where they are equal);
    ValueError, ending in ``how``, for duplicated labels or different label sets."""
    ia, ib = a.indexes[d], b.indexes.get(d)
    if ib is None or ia.equals(ib):
        return b
    if not (ia.is_unique and ib.is_unique):
        raise ValueError(
            f"{names[0]} or {names[1]} has duplicated {d!r} labels, so they cannot be paired by label; "
            f"{how}"
        )
    only_a, only_b = ia.difference(ib), ib.difference(ia)
    if len(only_a) or len(only_b):
        raise ValueError(
            f"{names[0]} and {names[1]} have different {d!r} labels: {len(only_a)} only in {names[0]} (e.g. "
            f"{list(only_a[:3])}), {len(only_b)} only in {names[1]} (e.g. {list(only_b[:3])}); {how}"
        )
    return b.sel({d: ia})


def align_by_label(a, b, names=("true", "pred")):
    """``b`` matched to the DataArray ``a`` by label, as the estimators match their operands:
    dims by name (``b`` transposed to the order of ``a``), and along every dim whose coordinate
    both carry, the labels of ``a`` picked from ``b`` (another order is reordered; numeric grids
    equal to ``1e-6`` of their span are equal; different label sets raise ValueError naming the
    dim). Two DataArrays whose grid dims are named differently (e.g. the ``dim_0`` of a model
    fitted on arrays) are matched along ``sample`` only, their grids paired by position.
    Anything else: ``b`` unchanged, paired by position."""
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
    how = "align them first (e.g. xarray.align(..., join='inner')) or pass .values to pair by position"
    for d in dims:
        ia, ib = a.indexes.get(d), b.indexes.get(d)
        if ia is not None and ib is not None and not _same_axis(ia, ib):
            b = _same_labels(a, b, d, names, how)
    return b


def match_grid_labels(X, coords, grid, name="X"):
    """DataArray ``X`` with the labels of its grid dims matched to ``coords`` (dim -> labels: a
    model's training coordinates) where the model reads them by label, not through a grid
    (``grid`` None: some coordinates are not numbers, or some dim had none): the same labels in
    another order are reordered to the model's (lazily for dask); other labels are a ValueError
    naming the dim. Numeric coordinates equal to ``1e-6`` of their span are equal. A dim without
    coordinates in ``X`` is read by position, and so is any other operand."""
    if not isinstance(X, xr.DataArray) or not coords or grid is not None:
        return X
    X = (
        ascending_grid(X.transpose("sample", ...)) if "sample" in X.dims else X
    )  # as the training data were
    how = (
        f"pass {name} on the model's labels, or drop its coordinates ({name}.drop_vars(...)) or pass "
        f"{name}.values to read it by position"
    )
    for d, labels in coords.items():
        if d not in X.indexes:
            continue
        model = xr.DataArray(np.asarray(labels), dims=(d,), coords={d: np.asarray(labels)})
        if not _same_axis(model.indexes[d], X.indexes[d]):
            X = _same_labels(model, X, d, ("the training data", name), how)
    return X


def _same_axis(ia, ib):
    """Numeric coordinates equal as the grids of the recovery maps are (to ``1e-6`` of the span:
    rounding, float32 copies), point by point in the same order."""
    x, y = np.asarray(ia), np.asarray(ib)
    numeric = all(
        np.issubdtype(v.dtype, np.number) and not np.issubdtype(v.dtype, np.complexfloating)
        for v in (x, y)
    )
    return numeric and x.ndim == 1 and same_grid((x.astype(float),), (y.astype(float),))


def unsorted_axis(coords):
    """True for numeric 1-D coordinates of two or more points that do not increase."""
    c = np.asarray(coords)
    return (
        c.ndim == 1
        and c.size > 1
        and np.issubdtype(c.dtype, np.number)
        and not np.all(np.diff(c) > 0)
    )


def ascending_grid(X):
    """A DataArray with every grid dim (all but the first) whose numeric coordinates are not
    increasing sorted by them (a descending latitude, a reversed axis), lazily; anything else
    as it is. The models read and write grids in increasing order, so data given in another
    order are matched by their coordinates, not by position."""
    if not isinstance(X, xr.DataArray):
        return X
    for d in X.dims[1:]:
        c = X.coords.get(d)
        if c is not None and unsorted_axis(c.values):
            X = X.isel({d: slice(None, None, -1)}) if np.all(np.diff(c.values) < 0) else X.sortby(d)
    return X


def _no_sample_dim(X, name, model_dims, model_shape):
    """The ValueError for a DataArray ``X`` without a ``sample`` dim, advising what fits the
    model's grid dims and shape (None: not known, as at fit): ``expand_dims`` for one sample on
    that grid, a rename only where one dim is left over for the samples."""
    if "sample" in X.coords:  # X.sel(sample=k): one sample, its dim dropped
        return ValueError(
            f"{name} holds one sample ('sample' is a scalar coordinate, dims {X.dims}): keep the "
            f"dimension, e.g. {name}.expand_dims('sample'), or select with a list (sel(sample=[k]))"
        )
    if not X.ndim:
        return ValueError(f"{name} must have a 'sample' dimension, got a 0-d DataArray")
    if model_dims is not None:  # matched by name
        one = sorted(map(str, X.dims)) == sorted(map(str, model_dims))
        extra = [d for d in X.dims if d not in model_dims]
        rename = extra[0] if len(extra) == 1 and X.ndim == len(model_dims) + 1 else None
    else:  # by position: the samples first
        one = model_shape is not None and X.shape == tuple(model_shape)
        rename = X.dims[0] if model_shape is None or X.ndim == len(model_shape) + 1 else None
    if one:
        advice = f"it holds one sample on the model's grid: add the dimension, e.g. {name}.expand_dims('sample')"
    elif rename is not None:
        advice = f"rename the dimension that runs over the samples, e.g. {name}.rename({{{rename!r}: 'sample'}})"
    elif model_dims is not None:
        advice = (
            f"the model was trained on ('sample', {', '.join(map(repr, model_dims))}): rename {name}'s "
            "dims to those"
        )
    else:
        advice = (
            f"the model was trained on functions of shape {tuple(model_shape)}: pass {name} with dims "
            "('sample', ...) of that shape"
        )
    return ValueError(f"{name} must have a 'sample' dimension, got dims {X.dims}; {advice}")


def as_operand(X, name, sort=True, model_dims=None, model_shape=None):
    """Flatten ``X`` (M, *grid) to a 2-D :class:`Operand` lazily; 1-D ``X`` gives grid ``()``.
    A DataArray's ``sample`` dim is put first (wherever it is) and, with ``sort``, its grid dims
    in increasing coordinate order (:func:`ascending_grid`; without: by position). A DataArray
    without one is refused, with advice fitting the model's grid dims and shape where given."""
    if isinstance(X, xr.Dataset):
        raise TypeError(f"{name} is a Dataset; pass its DataArray (e.g. ds['input'])")
    if isinstance(X, xr.DataArray):
        if "sample" not in X.dims:
            raise _no_sample_dim(X, name, model_dims, model_shape)
        X = X.transpose("sample", ...)  # matched by name: the samples first
        X = ascending_grid(X) if sort else X
        coords = {d: X[d].values for d in X.dims[1:] if d in X.coords}
        periods = {d: X[d].attrs["period"] for d in coords if X[d].attrs.get("period") is not None}
        inner = as_operand(X.data, name)
        # labels, times, members along 'sample', and scalar coordinates (a time stamp of them all)
        along = {k: c.variable for k, c in X.coords.items() if c.dims in (("sample",), ())}
        return Operand(
            inner.data,
            inner.grid_shape,
            "xarray",
            tuple(X.dims[1:]),
            coords,
            along or None,
            periods,
        )
    if isinstance(X, da.Array):
        if X.ndim == 0:
            raise ValueError(f"{name} must have a sample axis, got a 0-d array")
        check_known_sizes(X, name)
        if X.ndim > 2:
            X = X.rechunk({k: -1 for k in range(1, X.ndim)})
        return Operand(X.reshape(X.shape[0], -1) if X.ndim > 2 else X, tuple(X.shape[1:]), "dask")
    return Operand(X, None, "numpy")


def check_known_sizes(X, name):
    """ValueError for a dask array ``X`` (named ``name``) of unknown chunk sizes (NaN in its shape,
    e.g. after boolean indexing), saying how to give them; anything else passes."""
    if isinstance(X, da.Array) and any(np.isnan(n) for n in X.shape):
        raise ValueError(
            f"{name} is a dask array of unknown chunk sizes (shape {X.shape}, e.g. after boolean indexing "
            f"or from_delayed): call {name}.compute_chunk_sizes() first, or pass a Zarr store / xarray data set"
        )


def wrap_like(values, template, grid_shape, dims=None, coords=None, name=None):
    """Give predictions (M, m) the caller's kind: reshape to ``(M, *grid_shape)`` and, for
    xarray, wrap with the coordinates along ``sample`` of ``template`` (its labels and e.g. a
    ``time(sample)``), its scalar coordinates (but one named as an output dim) and the output
    grid ``coords``."""
    if tuple(values.shape[1:]) != tuple(
        grid_shape
    ):  # (arrays of the array API have no reshape method)
        values = values.reshape((values.shape[0], *grid_shape))
    if template.kind != "xarray":
        return values
    dims = dims or tuple(f"dim_{k}" for k in range(len(grid_shape)))
    out_coords = {d: c for d, c in (coords or {}).items() if d in dims}
    out_coords.update({k: v for k, v in (template.sample or {}).items() if v.dims or k not in dims})
    return xr.DataArray(values, dims=("sample", *dims), coords=out_coords, name=name)


# ------------------------------------------------------------------------------ grids and dims


def learn_grid(grid, operand, shape, which):
    """The training grid of one side: the explicit ``grid``, else the xarray coordinates."""
    if grid is not None:
        grid = as_grid(grid, f"{which}_grid")
        if tuple(len(ax) for ax in grid) != tuple(shape):
            raise ValueError(
                f"{which}_grid has shape {tuple(len(ax) for ax in grid)} but the {which} "
                f"functions have grid shape {tuple(shape)}"
            )
        return grid
    return operand_grid(operand)


def operand_grid(operand):
    """The grid of an xarray operand if every grid dim has numeric coordinates (None if one has
    none or labels that are not numbers). ValueError for numeric coordinates that are no grid
    (a repeated value, NaN): matched by coordinate, their values would be read by position."""
    if (
        operand.kind != "xarray"
        or not operand.dims
        or any(d not in operand.coords for d in operand.dims)
    ):
        return None
    coords = {d: np.asarray(operand.coords[d]) for d in operand.dims}
    if not all(
        np.issubdtype(c.dtype, np.number) and not np.iscomplexobj(c) for c in coords.values()
    ):
        return None
    try:
        as_grid(
            {d: np.sort(c) for d, c in coords.items()}
        )  # in any order: a descending axis is a grid
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the coordinates of the grid dims {list(coords)} are not a grid ({exc}); fix them, or drop "
            "them (da.drop_vars(...)) to have the values read by position"
        ) from exc
    try:
        return as_grid(coords)
    except (
        ValueError
    ):  # not increasing: read by position (a model without grid), else sorted before
        return None


def grid_dims(operand, grid_arg, grid):
    """The names of one side's grid axes: the xarray dims, else the keys of a mapping
    ``fit(..., input_grid=/output_grid=)``, else ``dim_0, dim_1, ...``."""
    if operand.dims:
        return tuple(operand.dims)
    if isinstance(grid_arg, Mapping):
        return tuple(grid_arg)
    return tuple(f"dim_{k}" for k in range(len(grid or ())))


def learn_periods(periods, operand, grid, which, dims=None):
    """Per-axis periods (float or None) of one training grid, from ``fit(periods=)`` (a
    number, one entry per axis, or a mapping dim -> period, the dims named as
    :func:`grid_dims` names them) or else from the ``period`` attributes of the xarray
    coordinates; None without a grid."""
    dims = grid_dims(operand, None, grid) if dims is None else dims
    if periods is None:
        per_axis = [operand.periods.get(d) for d in dims]
    elif isinstance(periods, Mapping):
        per_axis = [periods.get(d) for d in dims]
    elif isinstance(periods, numbers.Real):
        per_axis = [periods] * len(dims)
    else:
        per_axis = list(periods)
        if grid is not None and len(per_axis) != len(grid):
            raise ValueError(
                f"periods has {len(per_axis)} entries but the {which} grid has {len(grid)} axes: give one "
                "period (or None) per axis, or a mapping dim -> period when the input and output grids differ"
            )
    if grid is None:
        named = (
            any(d in periods for d in dims) if isinstance(periods, Mapping) else periods is not None
        )
        if named:
            raise ValueError(
                f"periods= needs the {which} grid coordinates: pass fit(..., {which}_grid=...) "
                "or xarray data with coordinates"
            )
        return None
    return as_periods(per_axis, grid, f"the periods of the {which} grid")


def match_dims(X, dims, name):
    """DataArray ``X`` transposed to ``("sample", *dims)`` (grid dims matched by name, as
    ``apply_ufunc`` core dims are); other operands, or ``dims`` None, unchanged."""
    if not isinstance(X, xr.DataArray) or dims is None or "sample" not in X.dims:
        return X
    grid = tuple(d for d in X.dims if d != "sample")
    if grid == tuple(dims):
        return X.transpose("sample", *dims) if X.dims[0] != "sample" else X
    if sorted(map(str, grid)) != sorted(map(str, dims)):
        unknown, absent = [d for d in grid if d not in dims], [d for d in dims if d not in grid]
        raise ValueError(
            f"{name} has dims {X.dims} but the model was trained on ('sample', {', '.join(map(repr, dims))}); "
            f"unknown dims {unknown}, missing {absent}: rename them, e.g. {name}.rename("
            f"{dict(zip(unknown, absent)) or '...'})"
        )
    return X.transpose("sample", *dims)
