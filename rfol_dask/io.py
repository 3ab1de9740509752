"""Operands and grids: reading data sets (Zarr stores, NetCDF files) and operands.

An operand is a numpy array, a dask array, an ``xarray.DataArray`` with a sample dim (the
user's name, renamed ``sample`` and put first: :func:`named`), or a Dataset / path holding the
input and output variables. :func:`as_operand` flattens the grid dims lazily and remembers
how to undo that.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import numbers
import os
import re
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import xarray as xr

from .exceptions import DataWarning
from .recovery.grids import as_grid, as_periods, same_grid
from .stacklevel import user_stacklevel

__all__ = [
    "user_path",
    "Operand",
    "as_operand",
    "align_samples",
    "open_dataset",
    "read_pair",
    "BOOKKEEPING_GROUP",
    "block_flags",
    "check_known_sizes",
    "flags_key",
    "process_alive",
    "lock_file",
    "lock_held",
    "learn_grid",
    "operand_grid",
    "grid_dims",
    "learn_periods",
    "named",
    "foreign_entries",
    "zarr_parents",
    "quiet_consolidated",
    "wait_zarr_io",
    "MODEL_KEY",
    "group_attrs",
    "describe_path",
    "check_outside_stores",
    "check_sources",
    "checked_once",
]


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


def open_dataset(path, samples=None, sample_dim="sample"):
    """Open a data set lazily: a Zarr store (checked for missing blocks and chunks) or a file
    xarray opens (NetCDF), in chunks along ``sample_dim``.

    With ``samples``, only the first ``samples`` samples are opened and checked. A generated
    store with unset ``block_done`` flags (interrupted: rerun the generation), or a missing chunk
    file of ``input`` / ``output``, is a ValueError naming it; so is, when read, a chunk that
    cannot be decoded.
    """
    path = user_path(path)
    if not Path(path).exists():
        raise FileNotFoundError(f"no data set at {path}")
    if Path(path).is_file():
        return _open_file(path, samples, sample_dim)
    kind = describe_path(Path(path).resolve())
    if kind == "model":
        raise ValueError(
            f"{path} is a saved model, not a data set: load it with "
            f"{load_hint(Path(path).resolve())} to predict with it; fit and open_dataset read a "
            "data-set store"
        )
    if kind == PREDICTION_STORE:
        raise ValueError(
            f"{path} is {kind}, not a data set: read its predictions with "
            "xarray.open_zarr(path)['prediction']"
        )
    try:
        try:
            ds = xr.open_zarr(path, consolidated=True)
        except (KeyError, ValueError):  # stores written without consolidated metadata
            ds = xr.open_zarr(path, consolidated=False)
    except (KeyError, ValueError, OSError) as exc:
        raise ValueError(f"{path} cannot be read as an xarray data set in Zarr: {exc}") from exc
    _check_samples(samples, ds.sizes.get(sample_dim, 0), path)
    readers = _check_store(ds, path, samples)
    ds = ds.drop_vars("block_done", errors="ignore")
    for name, reader in readers.items():
        if (
            isinstance(ds[name].data, da.Array)
            and "scale_factor" not in ds[name].encoding
            and "add_offset" not in ds[name].encoding
        ):
            data = da.from_array(
                reader,
                chunks=ds[name].data.chunks,
                asarray=True,
                lock=False,
                meta=np.empty((0,) * reader.ndim, reader.dtype),
                name=f"read-{name}-{dask.base.tokenize(path, name, reader.stamp)}",
            )
            ds[name] = ds[name].copy(data=data)
    return ds if samples is None else ds.isel({sample_dim: slice(0, int(samples))})


def _check_samples(samples, size, path):
    if samples is not None and (
        isinstance(samples, bool)
        or not isinstance(samples, numbers.Integral)
        or not 1 <= samples <= size
    ):
        raise ValueError(
            f"samples must be a whole number from 1 to the {size} samples of {path}, "
            f"got {samples!r}"
        )


def _open_file(path, samples, sample_dim):
    """A NetCDF (or other) file opened lazily by xarray, about 64 MiB of samples a chunk."""
    try:
        ds = xr.open_dataset(path, chunks={})
    except (ValueError, OSError) as exc:
        raise ValueError(
            f"{path} cannot be read as an xarray data set: {exc} (NetCDF needs h5netcdf or "
            "netCDF4 installed)"
        ) from exc
    size = ds.sizes.get(sample_dim, 0)
    _check_samples(samples, size, path)
    if size:
        row = max(
            (v.nbytes // size for v in ds.data_vars.values() if sample_dim in v.dims), default=1
        )
        ds = ds.chunk({sample_dim: int(max(1, min(size, 2**26 // max(row, 1))))})
    return ds if samples is None else ds.isel({sample_dim: slice(0, int(samples))})


def _check_store(ds, path, samples=None):
    """ValueError if the store at ``path`` (opened as ``ds``) was never finished (unset
    ``block_done`` flags: resume it) or lacks a chunk file of ``input`` / ``output``, among the
    blocks of its first ``samples`` samples if given; returns the checked variables' readers
    ``{name: _ChunkReader}``."""
    meta = json.loads(ds.attrs.get("rfol_dask_meta", "{}"))
    _check_flags(path, meta, samples)
    readers = {
        name: _ChunkReader(path, name, ds[name].dims, _advice(meta))
        for name in ("input", "output")
        if name in ds and os.path.isdir(os.path.join(path, name))
    }
    for reader in readers.values():
        if samples is not None or _first_check(os.path.join(reader.path, reader.name)):
            reader.check_complete(samples)
    return readers


def _check_flags(path, meta, samples=None):
    """ValueError if the data-set store at ``path`` (its ``rfol_dask_meta`` attribute ``meta``)
    has unset ``block_done`` flags (among the blocks of its first ``samples`` samples if given):
    its generation was cut short or still runs. Stores without flags pass."""
    done = block_flags(path)
    if done is not None and samples is not None:
        done = done[: -(-int(samples) // int(meta.get("block_size", 1)))]
    if done is not None and not done.all():
        missing = np.flatnonzero(~done)
        bs = int(meta.get("block_size", 1))
        first = int(missing[0]) * bs
        raise ValueError(
            f"data set at {path} is incomplete: {len(missing)} of {len(done)} blocks were never "
            f"written (first missing samples {first}-{first + bs - 1}); rerun the same generate "
            f"command ({_generate_command(meta)}) to resume it (if that command was refused, for an under-resolved "
            "grid or too few steps, the corrected one with --overwrite)"
        )


def _generate_command(meta):
    return f"rfol-dask generate {meta.get('dataset', 'NAME')} ..."


def _advice(meta):
    """How to mend a damaged store whose ``rfol_dask_meta`` is ``meta``: a store of the generator
    can be generated again, a user's store only restored or written again."""
    return (
        f"regenerate it ({_generate_command(meta)} --overwrite)"
        if "dataset" in meta
        else "write the store again"
    )


class _ChunkReader:
    """Array-like view of variable ``name`` (dims ``dims``) of the Zarr store at ``path`` for
    ``da.from_array``; a failed read names the store, the variable, the chunk and its samples,
    and says to restore the files or (``advice``) how else to mend the store (picklable: reopens
    the array)."""

    def __init__(self, path, name, dims, advice):
        self.path, self.name = os.path.abspath(path), name  # workers may run elsewhere
        self.axis = dims.index("sample") if "sample" in dims else None
        self.advice = f"restore the files or {advice}"
        arr = self.array
        self.shape, self.dtype, self.ndim = arr.shape, arr.dtype, arr.ndim
        self.chunks = (
            arr.shards or arr.chunks
        )  # what a chunk file holds: a shard of a sharded array
        self.stamp = os.stat(os.path.join(path, name)).st_mtime_ns
        self.identity = self._identity()

    def _identity(self):
        """The variable's metadata file (inode, time, size): a store written again (overwritten,
        made larger) replaces it, the writing of its blocks does not."""
        meta = next(
            (
                f
                for f in (os.path.join(self.path, self.name, m) for m in _ZARR_META)
                if os.path.isfile(f)
            ),
            None,
        )
        st = os.stat(meta) if meta is not None else None
        return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def array(self):
        import zarr

        if getattr(self, "_array", None) is None:
            self._array = zarr.open_array(os.path.join(self.path, self.name), mode="r")
        return self._array

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_array"}

    def _chunk_file(self, index):
        return os.path.join(self.path, self.name, self.array.metadata.encode_chunk_key(index))

    def _samples(self, index):
        """The samples of chunk ``index``: its range along the ``sample`` axis."""
        if self.axis is None:
            return "all samples"
        c = self.chunks[self.axis]
        a = index[self.axis] * c
        return f"samples {a}-{min(a + c, self.shape[self.axis]) - 1}"

    def check_complete(self, samples=None):
        """ValueError naming the first chunk file of the variable (of its first ``samples``
        samples, if given) that is not in the store."""
        arr = self.array
        if arr.nchunks_initialized == arr.nchunks:
            return
        rows = (
            None
            if samples is None or self.axis is None
            else -(-int(samples) // self.chunks[self.axis])
        )
        missing = [
            i
            for i in np.ndindex(*(-(-n // c) for n, c in zip(self.shape, self.chunks)))
            if (rows is None or i[self.axis] < rows) and not os.path.exists(self._chunk_file(i))
        ]
        if missing:
            raise ValueError(
                f"data set at {self.path}: {len(missing)} chunk(s) of variable {self.name!r} are missing from the "
                f"store (first: chunk {missing[0]}, {self._samples(missing[0])}, file {self._chunk_file(missing[0])}); "
                f"the store is damaged: {self.advice}{_empty_chunks_hint(arr.fill_value)}"
            )

    def __getitem__(self, key):
        if (
            self._identity() != self.identity
        ):  # else: a wrong shape read as 'damaged', or the new data silently
            raise ValueError(
                f"the data set at {self.path} was written again (overwritten or made larger) after it "
                "was opened: open it again"
            )
        try:
            return self.array[key]
        except Exception as exc:
            bad = self._find_bad_chunk(key)
            where = (
                f"chunk {bad} ({self._samples(bad)}, file {self._chunk_file(bad)})"
                if bad is not None
                else f"region {key}"
            )
            raise ValueError(
                f"cannot read {where} of variable {self.name!r} in the data set at {self.path}: "
                f"{type(exc).__name__}: {exc}; the store is damaged: {self.advice}"
            ) from exc

    def _find_bad_chunk(self, key):
        """The first chunk index within the region ``key`` (a tuple of slices) that fails to read."""
        ranges = []
        for k, n, c in zip(key, self.shape, self.chunks):
            start, stop, _ = k.indices(n) if isinstance(k, slice) else (int(k), int(k) + 1, 1)
            ranges.append(range(start // c, max(start // c + 1, -(-stop // c))))
        for index in np.ndindex(*(len(r) for r in ranges)):
            chunk = tuple(r[i] for r, i in zip(ranges, index))
            try:
                self.array[tuple(slice(i * c, (i + 1) * c) for i, c in zip(chunk, self.chunks))]
            except Exception:
                return chunk
        return None


def read_pair(X, y=None, names=("input", "output"), sample_dim="sample"):
    """``(X, y)``, or the variables ``names`` of a Dataset or data-set path ``X`` (``names[1]``
    None: prediction, ``(input, None)``); the stores they read are checked for missing chunks."""
    opened = isinstance(X, (str, os.PathLike))
    if opened:
        X = open_dataset(X, sample_dim=sample_dim)  # checks the store
    if not isinstance(X, xr.Dataset):
        check_sources(X, y)
        return X, y
    wanted = [v for v in names if v is not None]
    missing = [v for v in wanted if v not in X]
    held = list(map(str, X.data_vars)) or ["?"]
    if missing:
        raise ValueError(
            f"the data set has no variable {' or '.join(map(repr, missing))}; it holds "
            f"{held}: name yours, e.g. fit(ds, input={held[0]!r}, output={held[-1]!r})"
        )
    if y is not None:
        raise ValueError("pass either a Dataset / store path alone or the arrays (X, y), not both")
    if not opened and not check_sources(*(X[v] for v in wanted)):
        _check_source(X)  # loaded into memory from a store: check the store it came from
    return X[names[0]], None if names[1] is None else X[names[1]]


def _check_source(ds):
    """:func:`_check_store` for a Dataset opened from a local Zarr store by ``xr.open_zarr``
    (its ``source``): a missing chunk would otherwise read as its fill value."""
    source = ds.encoding.get("source")
    if isinstance(source, str) and os.path.isdir(source):
        _check_store(ds, source)


def _empty_chunks_hint(fill):
    """The words for a missing chunk of an array whose fill value ``fill`` is a number (not NaN):
    zarr (3, ``write_empty_chunks=False``, its default) leaves out chunks whose values all equal
    it, so the chunk may be such a chunk rather than lost."""
    try:
        if fill is None or np.isnan(fill):
            return ""
    except TypeError:  # not a number
        return ""
    return (
        f"; or, if all values of those chunks equal the array's fill value {fill}, zarr left them out "
        "(write_empty_chunks=False, its default): write the store with write_empty_chunks=True, or load the "
        "data into memory (.load() / .compute()), which reads them as that value"
    )


_CHECKED = contextvars.ContextVar("rfol_dask_checked_arrays", default=None)


@contextlib.contextmanager
def checked_once():
    """Within this block each Zarr array is checked for missing chunk files once (by
    :func:`check_sources`, and :func:`_check_store` of a whole store): a search and its refit, a
    ``score`` and its ``predict`` read the same data. Nested blocks share the outermost's record."""
    if _CHECKED.get() is not None:
        yield
        return
    token = _CHECKED.set(set())
    try:
        yield
    finally:
        _CHECKED.reset(token)


def _first_check(where):
    """Whether the array in the folder ``where`` is still to be checked in this
    :func:`checked_once` block (then it is recorded as checked); always True outside one."""
    seen = _CHECKED.get()
    if seen is None:
        return True
    key = os.path.realpath(where)
    if key in seen:
        return False
    seen.add(key)
    return True


def check_sources(*operands):
    """ValueError naming the store, variable, chunk and samples where an operand reads a Zarr array
    of a local store that lacks a chunk file (which zarr reads as the fill value: NaN in xarray's
    float stores, often 0 in zarr's own). Operands: DataArrays and dask arrays, e.g. from
    ``xr.open_zarr(path)["input"]`` or ``da.from_zarr(path)``; anything else passes at no cost, and
    so do arrays of :func:`open_dataset` (checked when it opened them) and of other stores (remote,
    in memory: not listed). The whole array is checked whatever part the operand reads, as a
    Dataset's store is. Cost: zarr's count of the chunks present (one listing of the array's
    folder); chunk by chunk only where some are missing. Returns how many stored arrays (of any
    store) the operands read: 0 for data in memory."""
    found = 0
    for X in operands:
        for arr in _stored_arrays(X):
            found += 1
            where = None if isinstance(arr, _ChunkReader) else _local_folder(arr)
            if where is None or not _first_check(where):
                continue
            store, name = os.path.split(where)
            meta = json.loads((group_attrs(store) or {}).get("rfol_dask_meta", "{}"))
            _check_flags(
                store, meta
            )  # a data set whose generation was cut short (or still runs): resume it
            if arr.nchunks_initialized == arr.nchunks:
                continue
            names = getattr(arr.metadata, "dimension_names", None) or arr.attrs.get(
                "_ARRAY_DIMENSIONS"
            )
            dims = (
                tuple(names) if names and "sample" in names else ("sample",)
            )  # else: the samples first
            reader = _ChunkReader(store, name, dims, _advice(meta))
            if (reader.shape, reader.chunks) != (
                arr.shape,
                arr.shards or arr.chunks,
            ):  # its chunks were not counted
                raise ValueError(
                    f"the Zarr array {where} was written again after it was opened (shape {arr.shape} "
                    f"then, {reader.shape} now): open the store again"
                )
            reader.check_complete()
    return found


def _stored_arrays(X):
    """The ``zarr.Array`` objects (and :func:`open_dataset`'s readers) whose data the DataArray or
    dask array ``X`` reads: found in its dask graph (``da.from_zarr`` holds the array there;
    ``xr.open_zarr`` an ``ImplicitToExplicitIndexingAdapter`` around a ``ZarrArrayWrapper`` of it),
    or behind the lazily indexed variable of ``xr.open_dataset(..., engine="zarr")`` without chunks."""
    zarr = sys.modules.get("zarr")
    if zarr is None:  # never imported: no Zarr array anywhere
        return
    if isinstance(X, xr.DataArray):
        X = X.variable._data  # not .data, which reads a lazily indexed variable
    objects = _graph_literals(X.__dask_graph__()) if isinstance(X, da.Array) else (X,)
    for obj in objects:
        obj = _unwrap(obj)
        if isinstance(obj, (zarr.Array, _ChunkReader)):
            yield obj


def _graph_literals(graph):
    """The objects a dask graph holds besides its tasks, where ``da.from_array`` puts the array it
    reads: the values of its materialized layers (``original-...``) and the literal arguments of its
    blockwise layers (``inline_array=True``). Other layers are not materialized."""
    layers = getattr(graph, "layers", None)
    for layer in (graph,) if layers is None else layers.values():
        indices = getattr(layer, "indices", None)
        if indices is not None:
            yield from (arg for arg, ind in indices if ind is None)
        elif layers is None or hasattr(layer, "mapping"):
            yield from getattr(layer, "mapping", layer).values()


def _unwrap(obj):
    """The object inside xarray's lazy indexing wrappers (``ImplicitToExplicitIndexingAdapter``,
    ``CopyOnWriteArray``, ``LazilyIndexedArray``, ...) and its ``ZarrArrayWrapper``, if any."""
    xr_zarr = sys.modules.get("xarray.backends.zarr")
    for _ in range(16):  # a few wrappers deep
        if xr_zarr is not None and isinstance(obj, xr_zarr.ZarrArrayWrapper):
            return obj.get_array()
        if not type(obj).__module__.startswith("xarray.") or not hasattr(obj, "array"):
            return obj
        obj = obj.array
    return obj


def _local_folder(arr):
    """The folder of the Zarr array ``arr`` if its store is a local directory (``LocalStore``, or
    ``FsspecStore`` of the local file system, as ``da.from_zarr(path)`` opens it), else None."""
    store, key = arr.store_path.store, arr.store_path.path
    root = getattr(store, "root", None)
    if root is None:
        fs = getattr(store, "fs", None)
        fs = getattr(fs, "sync_fs", fs)  # fsspec's async wrapper of a synchronous file system
        protocol = getattr(fs, "protocol", ())
        if "file" not in ((protocol,) if isinstance(protocol, str) else protocol):
            return None
        root = store.path
    where = os.path.join(os.fspath(root), key)
    return where if os.path.isdir(where) else None


def align_samples(X, y):
    """``y`` paired with ``X`` by the labels of their ``sample`` coordinates where both carry
    them (reordered lazily; ValueError for other or duplicated labels), else by position (a
    DataWarning where one side's labels are out of order)."""
    labelled = [
        n for n, a in (("X", X), ("y", y)) if isinstance(a, xr.DataArray) and "sample" in a.indexes
    ]
    if len(labelled) == 1:
        index, (one, other) = (
            (X if labelled == ["X"] else y).indexes["sample"],
            sorted(("X", "y"), key=lambda n: n != labelled[0]),
        )
        if len(index) > 1 and not index.is_monotonic_increasing:
            warnings.warn(
                f"{one}'s sample labels are not in increasing order but {other} has none, so they "
                f"are paired by position; give {other} the same labels or sort {one} "
                f"({one}.sortby('sample'))",
                DataWarning,
                stacklevel=user_stacklevel(),
            )
    if len(labelled) < 2:
        return y
    how = (
        "pair them yourself: xarray.align(X, y, join='inner') keeps the common samples, "
        "y.sel(sample=X.sample) picks y's samples of X, or pass y.values to pair by position"
    )
    return _same_labels(X, y, "sample", ("X", "y"), how)


def _same_labels(a, b, d, names, how):
    """``b`` with the labels of ``a`` along ``d`` (reordered); ValueError ending in ``how`` for
    duplicated labels or different label sets."""
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
    """``b`` matched to the DataArray ``a`` as the estimators match operands: dims by name, labels
    by coordinate along every dim both carry (numeric grids equal to ``1e-6`` of their span);
    grid dims named differently (a model fitted on arrays: ``dim_0``) along ``sample`` only.
    Anything else is paired by position."""
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
    """DataArray ``X`` with its grid labels matched to ``coords`` (the model's) where the model
    reads them by label, having no ``grid`` (labels that are not numbers): reordered, or a
    ValueError naming the dim. Dims without coordinates, and other operands, by position."""
    if not isinstance(X, xr.DataArray) or not coords or grid is not None:
        return X
    X = ascending_grid(X.transpose("sample", ...)) if "sample" in X.dims else X
    how = (
        f"pass {name} on the model's labels, or drop its coordinates ({name}.drop_vars(...)) or "
        f"pass {name}.values to read it by position"
    )
    for d, labels in coords.items():
        if d not in X.indexes:
            continue
        model = xr.DataArray(np.asarray(labels), dims=(d,), coords={d: np.asarray(labels)})
        if not _same_axis(model.indexes[d], X.indexes[d]):
            X = _same_labels(model, X, d, ("the training data", name), how)
    return X


def _same_axis(ia, ib):
    """Numeric 1-D coordinates equal point by point to ``1e-6`` of the span (float32 copies)."""
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
    """A DataArray with every grid dim (all but the first) sorted by its numeric coordinates,
    lazily (the models read grids in increasing order); anything else as it is."""
    if not isinstance(X, xr.DataArray):
        return X
    for d in X.dims[1:]:
        c = X.coords.get(d)
        if c is not None and unsorted_axis(c.values):
            X = X.isel({d: slice(None, None, -1)}) if np.all(np.diff(c.values) < 0) else X.sortby(d)
    return X


def named(X, name, sample_dim="sample", dims=None, shape=None):
    """DataArray ``X`` with its ``sample_dim`` renamed ``sample`` and put first, then the grid
    ``dims`` (the model's, matched by name; None: any); other operands unchanged. ValueError
    listing at once every rename or squeeze that makes ``X`` match (``shape``: the model's grid
    shape, which pairs dims by size)."""
    if not isinstance(X, xr.DataArray):
        return X
    want = (sample_dim, *(dims or ()))
    ok = set(X.dims) == set(want) and X.ndim == len(want) if dims else sample_dim in X.dims
    if not ok:
        raise ValueError(_rename_advice(X, name, sample_dim, dims, shape))
    X = X.rename({sample_dim: "sample"}) if sample_dim != "sample" else X
    order = ("sample", *dims) if dims else ("sample", ...)
    return X if X.dims[0] == "sample" and not dims else X.transpose(*order)


def _rename_advice(X, name, sample_dim, dims, shape):
    """What :func:`named` says: ``X``'s dims, the model's, and one expression that fixes them."""
    if sample_dim in X.coords and sample_dim not in X.dims:
        return (
            f"{name} holds one sample ({sample_dim!r} is a scalar coordinate): keep the dimension, "
            f"e.g. {name}.expand_dims({sample_dim!r}), or select with a list"
        )
    if shape is not None and X.shape == tuple(shape) and (dims is None or set(X.dims) == set(dims)):
        return f"{name} holds one sample of the model's grid: {name}.expand_dims({sample_dim!r})"
    if not dims:
        guess = next((d for d in X.dims if shape is None or X.ndim != len(shape) + 1), None)
        guess = X.dims[0] if guess is None else guess
        return (
            f"{name} has dims {X.dims} and none named {sample_dim!r}: pass sample_dim={guess!r} "
            "(the dim that runs over the samples)"
        )
    extra = [d for d in X.dims if d not in (sample_dim, *dims)]
    sizes = dict(zip(dims, shape or (), strict=False))
    rename = {}
    for d in (d for d in dims if d not in X.dims):  # grid dims first, paired by size
        free = [e for e in extra if e not in rename]
        e = next((e for e in free if X.sizes[e] == sizes.get(d)), free[0] if free else None)
        if e is not None:
            rename[e] = d
    free = [e for e in extra if e not in rename]
    if sample_dim not in X.dims and free:
        rename[next((e for e in free if X.sizes[e] > 1), free[0])] = sample_dim
    squeeze = [e for e in extra if e not in rename and X.sizes[e] == 1]
    left = [e for e in extra if e not in rename and e not in squeeze]
    fix = name + (f".squeeze({squeeze!r})" if squeeze else "")
    fix += f".rename({rename!r})" if rename else ""
    fix = "" if fix == name else f": {fix}"
    if left:
        fix += f"{';' if fix else ':'} drop or select the dims {left}, which the model has not"
    if sample_dim in rename.values():
        fix += f" (or pass sample_dim={next(k for k, v in rename.items() if v == sample_dim)!r})"
    return f"{name} has dims {X.dims} but the model reads {(sample_dim, *dims)}{fix}"


def as_operand(X, name, sort=True):
    """Flatten ``X`` (M, *grid) to a 2-D :class:`Operand` lazily; 1-D ``X`` gives grid ``()``.
    A DataArray's ``sample`` dim is put first (wherever it is) and, with ``sort``, its grid dims
    in increasing coordinate order (:func:`ascending_grid`; without: by position)."""
    if isinstance(X, xr.Dataset):
        raise TypeError(f"{name} is a Dataset; pass its DataArray (e.g. ds['input'])")
    if isinstance(X, xr.DataArray):
        X = ascending_grid(named(X, name)) if sort else named(X, name)
        coords = {d: X[d].values for d in X.dims[1:] if d in X.coords}
        periods = {d: X[d].attrs["period"] for d in coords if X[d].attrs.get("period") is not None}
        inner = as_operand(X.data, name)
        # labels, times, members along 'sample', and scalar coordinates (a time stamp of them all)
        along = {k: c.variable for k, c in X.coords.items() if c.dims in (("sample",), ())}
        return Operand(
            inner.data, inner.grid_shape, "xarray", X.dims[1:], coords, along or None, periods
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
    """ValueError for a dask array ``X`` of unknown chunk sizes (after boolean indexing)."""
    if isinstance(X, da.Array) and any(np.isnan(n) for n in X.shape):
        raise ValueError(
            f"{name} is a dask array of unknown chunk sizes (shape {X.shape}): call "
            f"{name}.compute_chunk_sizes() first"
        )


def wrap_like(values, template, grid_shape, dims=None, coords=None, name=None):
    """Predictions (M, m) reshaped to ``(M, *grid_shape)`` and, for xarray, wrapped with the
    sample and scalar coordinates of ``template`` and the output grid ``coords``."""
    if tuple(values.shape[1:]) != tuple(grid_shape):
        values = values.reshape((values.shape[0], *grid_shape))
    if template.kind != "xarray":
        return values
    dims = dims or tuple(f"dim_{k}" for k in range(len(grid_shape)))
    out_coords = {d: c for d, c in (coords or {}).items() if d in dims}
    out_coords.update({k: v for k, v in (template.sample or {}).items() if v.dims or k not in dims})
    return xr.DataArray(values, dims=("sample", *dims), coords=out_coords, name=name)


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
    """The grid of an xarray operand whose grid dims all have numeric coordinates, else None;
    ValueError for numeric coordinates that are no grid (a repeated value, NaN)."""
    if operand.kind != "xarray" or not operand.dims or set(operand.dims) - set(operand.coords):
        return None
    coords = {d: np.asarray(operand.coords[d]) for d in operand.dims}
    if not all(
        np.issubdtype(c.dtype, np.number) and not np.iscomplexobj(c) for c in coords.values()
    ):
        return None
    try:
        as_grid({d: np.sort(c) for d, c in coords.items()})  # in any order
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the coordinates of the grid dims {list(coords)} are not a grid ({exc}); fix them, "
            "or drop them (da.drop_vars(...)) to have the values read by position"
        ) from exc
    try:
        return as_grid(coords)
    except ValueError:  # not increasing: read by position
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
    """Per-axis periods (float or None) of one training grid, from ``fit(periods=)`` or else
    the coordinates' ``period`` attributes; None without a grid."""
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
                f"periods has {len(per_axis)} entries but the {which} grid has {len(grid)} axes: "
                "give one period (or None) per axis, or a mapping dim -> period"
            )
    if grid is None:
        if any(d in periods for d in dims) if isinstance(periods, Mapping) else periods is not None:
            raise ValueError(
                f"periods= needs the {which} grid coordinates: pass fit(..., {which}_grid=...) "
                "or xarray data with coordinates"
            )
        return None
    return as_periods(per_axis, grid, f"the periods of the {which} grid")


# ------------------------------------------------------------------------------ data-set stores

BOOKKEEPING_GROUP = "_rfol_dask"
"""The Zarr group of a data-set store holding ``block_done`` (not an xarray variable)."""


def check_parent_dir(path, what):
    """ValueError when the nearest existing folder above ``path`` is a file (``what`` cannot be
    written there: ``mkdir`` would fail half-way)."""
    parent = next(p for p in Path(os.path.abspath(path)).parents if p.exists())
    if not parent.is_dir():
        raise ValueError(f"cannot write {what} at {path}: {parent} is a file, not a directory")


def owned_tag(length=32):
    """A fresh ``<host>.<pid>.<hex>`` tag (``length`` hex digits): what is named with it says
    which process made it (:func:`tag_owner`)."""
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:length]}"


def tag_owner(tag):
    """``(host, pid)`` of a tag made by :func:`owned_tag`, or None for any other text."""
    try:
        host, pid, digits = tag.rsplit(".", 2)
        int(digits, 16)
        return (host, int(pid)) if host else None
    except ValueError:
        return None


def process_alive(host, pid):
    """Whether process ``pid`` on ``host`` may still run (another host: assumed alive)."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    return not _zombie(int(pid))


def _zombie(pid):
    """Whether ``pid`` has exited and waits to be reaped (a killed run under a parent that does
    not reap it, e.g. a container's PID 1: it holds its pid, and so its locks, indefinitely)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _read_lock(lock):
    try:
        return lock.read_text()
    except FileNotFoundError:
        return None


def _lock_holder(text):
    """The lock's JSON content, or None while its writer has not written it yet."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _lock_state(lock):
    """``(live, holder, text)`` of the lock file ``lock``: whether a live process holds it (a lock
    being written, or cut short, for a minute), its JSON (None if unreadable) and its text (None
    if there is no lock)."""
    text = _read_lock(lock)
    held = _lock_holder(text)
    if held is None:  # being written right now, or cut short: judge by age
        try:
            return time.time() - lock.stat().st_mtime < 60, None, text
        except FileNotFoundError:
            return False, None, text
    return process_alive(held.get("host"), held.get("pid")), held, text


def lock_held(lock):
    """Whether a live process holds the lock file ``lock`` (see :func:`lock_file`)."""
    return _lock_state(Path(lock))[0]


@contextlib.contextmanager
def lock_file(lock, holder, busy):
    """Hold the lock file ``lock`` (a ``Path``, created with ``O_EXCL``) while the block runs; it
    holds ``holder`` (a dict) as JSON, with this process's ``pid`` and ``host`` and the start time.

    If another live process holds it, raises ValueError with the message ``busy(held)`` (``held``:
    the lock's JSON, None while it is being written). A lock whose process is gone (same host), or
    unreadable for a minute, is taken over; a lock of another host is never judged gone.
    """
    mine = json.dumps(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            **holder,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
    )
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            live, held, text = _lock_state(lock)
            if live:
                raise ValueError(busy(held))
            if text is not None:  # else it is gone already
                _break_lock(lock, text)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(mine)
        break
    else:
        raise ValueError(f"could not take the lock {lock}: other runs keep taking it; try again")
    try:
        yield
    finally:
        if _read_lock(lock) == mine:
            lock.unlink()


def _break_lock(lock, text):
    """Remove the stale lock whose content is ``text`` (not a fresh lock taken meanwhile)."""
    grave = lock.with_name(f"{lock.name}.stale-{os.getpid()}")
    try:
        os.rename(lock, grave)
    except FileNotFoundError:
        return
    if _read_lock(grave) != text:  # another run replaced the stale lock first: give it back
        with contextlib.suppress(FileExistsError):
            os.link(grave, lock)
    grave.unlink()


@contextlib.contextmanager
def quiet_consolidated():
    """Silence zarr's warning that consolidated metadata (written so that a plain ``xr.open_zarr``
    reads a store, as the data sets, studies and prediction stores are) is not in the Zarr v3
    specification."""
    import zarr

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", zarr.errors.ZarrUserWarning)
        yield


def wait_zarr_io(timeout=60.0):
    """Wait (at most ``timeout`` seconds) until zarr's IO thread has no call left running.

    Zarr (3) runs every call as a coroutine on its own event loop, in the thread ``zarr_io``, and
    the caller waits for it; an interrupt (Ctrl-C) ends that wait at once, and the call goes on,
    writing into the store afterwards. A run that lets go of a store after an interrupt waits here
    first, else an immediate rerun could clear the store and then meet the late write (xarray:
    "variable 'input' already exists").
    """
    import asyncio
    import concurrent.futures

    try:
        from zarr.core.sync import (
            loop as loops,
        )  # [the loop or None] (zarr 3; called in an except clause: no errors)
    except ImportError:
        return
    loop = loops[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def others():
        me = asyncio.current_task()
        running = [task for task in asyncio.all_tasks() if task is not me]
        if running:
            await asyncio.wait(running, timeout=timeout)

    with contextlib.suppress(concurrent.futures.TimeoutError):
        asyncio.run_coroutine_threadsafe(others(), loop).result(timeout + 5)


def flags_key(group):
    """Where the ``block_done`` flags sit in the Zarr ``group`` of a data-set store: in the
    bookkeeping group, or (stores written before it) a top-level array."""
    return f"{BOOKKEEPING_GROUP}/block_done" if BOOKKEEPING_GROUP in group else "block_done"


def block_flags(path):
    """The ``block_done`` flags (bool, one per block) of the data-set store at ``path``, or None
    if it has none (a store not written by ``datasets.generate``)."""
    import zarr

    try:
        group = zarr.open_group(os.fspath(path), mode="r")
        return np.asarray(group[flags_key(group)][...]).astype(bool)
    except Exception:  # noqa: BLE001  (no such group or array)
        return None


_ZARR_META = {"zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata"}


def zarr_parents(path):
    """The folders above ``path`` that are Zarr stores (hold Zarr metadata), nearest first."""
    return (p for p in Path(path).parents if any((p / name).is_file() for name in _ZARR_META))


MODEL_KEY = "rfol_dask_model"  # the root attribute of a saved model, written last: its presence marks a complete one
PREDICTION_KEY = (
    "rfol_dask_prediction"  # the root attribute of a prediction store: the JSON list of its arrays
)
PREDICTION_STORE = "an rfol_dask prediction store"  # what :func:`describe_path` calls one


def group_attrs(path):
    """Root attributes of the Zarr group at ``path``, or None if it is not a readable group."""
    import zarr

    try:
        return dict(zarr.open_group(str(path), mode="r").attrs)
    except Exception:  # noqa: BLE001  (anything unreadable is "not a group")
        return None


def _unreadable_json(path):
    """True for a file at ``path`` that is not JSON (Zarr metadata cut short or edited)."""
    try:
        json.loads(Path(path).read_text())
    except FileNotFoundError:
        return False
    except (ValueError, OSError):
        return True
    return False


def describe_path(path):
    """What is at ``path``: None (nothing), ``"model"``, ``"empty"`` (an empty directory) or a
    phrase for anything else (``"a file"``, ``"an rfol_dask data set"``, :data:`PREDICTION_STORE`, ...)."""
    path = Path(os.fspath(path))
    if path.is_symlink():
        return "a symbolic link"
    if not path.exists():
        return None
    if not path.is_dir():
        return "a file"
    attrs = group_attrs(path)
    if attrs is not None and MODEL_KEY in attrs:
        return "model"
    if not any(path.iterdir()):
        return "empty"
    if attrs is not None and "rfol_dask_meta" in attrs:
        return "an rfol_dask data set"
    if attrs is not None and PREDICTION_KEY in attrs:
        return PREDICTION_STORE
    if attrs is not None:
        return "a Zarr store of other data"
    if any(_unreadable_json(path / name) for name in ("zarr.json", ".zgroup")):
        return "a Zarr store whose metadata cannot be read (damaged: a model or data set cut short or edited?)"
    return "a directory holding other files"


def load_hint(path):
    """How to load the model saved at ``path``, for messages: ``"RandomFeatureOperator.load"``
    (the estimator class it records), else the words for it."""
    try:
        return f"{json.loads(group_attrs(path)[MODEL_KEY])['estimator']}.load"
    except (TypeError, KeyError, ValueError):  # a model saved before it recorded its class
        return "the load method of the estimator class that saved it"


def check_outside_stores(path, action="save a model"):
    """ValueError when ``path`` is inside a Zarr store (a model, a data set; :func:`zarr_parents`):
    what ``action`` ("save a model", "write a data set") puts there would be deleted when that
    store is replaced or regenerated, and a model holding it could no longer be replaced."""
    path = Path(os.path.abspath(path))
    outer = next(reversed(list(zarr_parents(path))), None)  # the outermost
    if outer is None:
        return
    kind = describe_path(outer)
    if kind == "model":
        raise ValueError(
            f"cannot {action} at {path}: it is inside the model at {outer}, which could then no "
            "longer be replaced; choose a path outside it"
        )
    raise ValueError(
        f"cannot {action} at {path}: it is inside the Zarr store {outer} ({kind}), which replacing "
        f"or regenerating it would delete; {action.split()[0]} it beside the store (e.g. "
        f"{outer.parent / path.name})"
    )


def foreign_entries(path, arrays):
    """What the Zarr directory ``path`` holds beyond its own arrays ``arrays`` (paths such as
    ``"coef"`` or ``"_rfol_dask/block_done"``): files or folders a user put there, sorted. That is
    every entry that is neither Zarr metadata nor the first part of one of ``arrays``, and inside
    such a folder anything but metadata, the names on the way to the arrays and chunk keys
    (digits and dots, under ``c/``). A store about to be replaced is refused when this is not empty."""
    path = Path(path)
    chunk = re.compile(r"[0-9.]+")
    foreign = []
    for entry in path.iterdir():
        if entry.name in _ZARR_META:
            continue
        keys = [n.split("/") for n in arrays if n.split("/")[0] == entry.name]
        if not keys or entry.is_symlink() or not entry.is_dir():
            foreign.append(entry.name)
            continue
        allowed = (
            _ZARR_META | {"c"} | {part for k in keys for part in k[1:]}
        )  # metadata, chunks, nested arrays
        foreign += [
            str(sub.relative_to(path))
            for sub in entry.rglob("*")
            if not all(p in allowed or chunk.fullmatch(p) for p in sub.relative_to(entry).parts)
        ]
    return sorted(foreign)
