"""Store checks: what a path holds; the missing chunks (which read back as the fill value) and
unfinished blocks of the local Zarr stores an estimator reads, named by variable and samples."""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from dask.blockwise import Blockwise
from dask.highlevelgraph import MaterializedLayer

BOOKKEEPING_GROUP = "_rfol_dask"  # the Zarr group of a data-set store holding ``block_done``
FLAGS_KEY = f"{BOOKKEEPING_GROUP}/block_done"  # a flag per block, set once its data are written
MODEL_KEY = "rfol_dask_model"  # root attribute of a saved model, written last: marks a whole one
PREDICTION_KEY = "rfol_dask_prediction"  # root attribute of a prediction store: its arrays (JSON)
PREDICTION_STORE = "an rfol_dask prediction store"  # what :func:`describe_path` calls one
_ZARR_META = {"zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata"}


def group_attrs(path):
    """Root attributes of the Zarr group at ``path``, or None if it is not a readable group."""
    try:
        return dict(zarr.open_group(str(path), mode="r").attrs)
    except Exception:  # noqa: BLE001  (anything unreadable is "not a group")
        return None


def block_flags(path):
    """The ``block_done`` flags (bool, one per block) of the data-set store at ``path``, or None."""
    try:
        return np.asarray(zarr.open_group(os.fspath(path), mode="r")[FLAGS_KEY][...]).astype(bool)
    except Exception:  # noqa: BLE001  (no such group or array)
        return None


def check_sources(*operands, samples=None, sample_dim="sample"):
    """ValueError where an operand reads a local Zarr array lacking chunks or unfinished."""
    for arr in (a for X in operands for a in _stored_arrays(X)):
        st = arr.store_path.store  # a LocalStore, or the FsspecStore of da.from_zarr(path)
        root = getattr(st, "root", None) or getattr(st, "path", None)
        where = root and os.path.join(os.fspath(root), arr.store_path.path)
        if not where or not os.path.isdir(where):  # not a folder here: a remote store
            continue
        store, name = os.path.split(where)
        meta = json.loads((group_attrs(store) or {}).get("rfol_dask_meta", "{}"))
        done, bs = block_flags(store), int(meta.get("block_size", 1))
        done = done if done is None or samples is None else done[: -(-int(samples) // bs)]
        if done is not None and not done.all():
            first = int(np.flatnonzero(~done)[0]) * bs
            raise ValueError(
                f"data set at {store} is incomplete: {int((~done).sum())} of {len(done)} blocks "
                f"were never written (first missing samples {first}-{first + bs - 1}); rerun the "
                f"same generate command (rfol-dask generate {meta.get('dataset', 'NAME')} ...) to "
                "resume it"
            )
        if arr.nchunks_initialized == arr.nchunks:
            continue
        dims = arr.metadata.dimension_names if arr.metadata.zarr_format == 3 else None
        dims = tuple(dims or arr.attrs.get("_ARRAY_DIMENSIONS") or ())
        axis = dims.index(sample_dim) if sample_dim in dims else 0 if arr.ndim else None
        chunks = arr.shards or arr.chunks  # a file holds a shard
        grid = [-(-n // c) for n, c in zip(arr.shape, chunks, strict=True)]
        if samples is not None and axis is not None:
            grid[axis] = min(grid[axis], -(-int(samples) // chunks[axis]))
        key = arr.metadata.encode_chunk_key
        missing = [i for i in np.ndindex(*grid) if not os.path.exists(os.path.join(where, key(i)))]
        if not missing:
            continue
        first, fill, span, fix = missing[0], arr.fill_value, "all samples", "write the store again"
        if axis is not None:
            a = first[axis] * chunks[axis]
            span = f"samples {a}-{min(a + chunks[axis], arr.shape[axis]) - 1}"
        if "dataset" in meta:
            fix = f"regenerate it (rfol-dask generate {meta['dataset']} ... --overwrite)"
        if isinstance(fill, (int, float, np.number)) and not np.isnan(fill):
            fix += f"; or, if those chunks hold only the fill value {fill}, zarr left them out: "
            fix += "write the store with write_empty_chunks=True"
        raise ValueError(
            f"data set at {store}: {len(missing)} chunk(s) of variable {name!r} are missing from "
            f"the store (first: chunk {first}, {span}, file {os.path.join(where, key(first))}); "
            f"the store is damaged: restore the files or {fix}"
        )


def _stored_arrays(X):
    """The ``zarr.Array`` objects in the dask graph of ``X`` (xarray's adapters unwrapped)."""
    X = X.data if isinstance(X, xr.DataArray) and X.chunks is not None else X
    if not isinstance(X, da.Array):
        return
    for layer in X.__dask_graph__().layers.values():
        if isinstance(layer, Blockwise):  # literal arguments: da.from_zarr(..., inline_array=True)
            objects = (arg for arg, index in layer.indices if index is None)
        else:
            objects = layer.mapping.values() if isinstance(layer, MaterializedLayer) else ()
        for obj in objects:
            while type(obj).__module__.startswith("xarray.") and hasattr(obj, "array"):
                obj = obj.array
            if type(obj).__module__.startswith("xarray.") and hasattr(obj, "get_array"):
                obj = obj.get_array()  # xarray's ZarrArrayWrapper
            if isinstance(obj, zarr.Array):
                yield obj


@contextlib.contextmanager
def quiet_consolidated():
    """Silence zarr's warning that consolidated metadata is not in the Zarr v3 specification."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", zarr.errors.ZarrUserWarning)
        yield


def zarr_parents(path):
    """The folders above ``path`` that are Zarr stores (hold Zarr metadata), nearest first."""
    return (p for p in Path(path).parents if any((p / name).is_file() for name in _ZARR_META))


def check_parent_dir(path, what):
    """ValueError when the nearest existing folder above ``path`` is a file."""
    parent = next(p for p in Path(os.path.abspath(path)).parents if p.exists())
    if not parent.is_dir():
        raise ValueError(f"cannot write {what} at {path}: {parent} is a file, not a directory")


def describe_path(path):
    """What is at ``path``: None, ``"model"``, ``"empty"`` or a phrase (``"a file"``, ...)."""
    path = Path(os.fspath(path))
    if path.is_symlink() or not path.is_dir():
        return "a symbolic link" if path.is_symlink() else "a file" if path.exists() else None
    attrs = group_attrs(path)
    kinds = {MODEL_KEY: "model", "rfol_dask_meta": "an rfol_dask data set"}
    kinds[PREDICTION_KEY] = PREDICTION_STORE
    kind = next((v for k, v in kinds.items() if k in (attrs or ())), None)
    if kind != "model" and not any(path.iterdir()):
        return "empty"
    if attrs is not None:
        return kind or "a Zarr store of other data"
    for meta in (path / n for n in ("zarr.json", ".zgroup") if (path / n).exists()):
        try:  # Zarr metadata that zarr cannot read
            json.loads(meta.read_text())
        except (ValueError, OSError):
            return "a Zarr store whose metadata cannot be read (damaged: cut short or edited?)"
    return "a directory holding other files"


def use_hint(path, kind):
    """What to do with the ``kind`` of store at ``path`` (:func:`describe_path`), or ""."""
    if kind == "model":
        with contextlib.suppress(TypeError, KeyError, ValueError):  # saved before it recorded it
            cls = json.loads(group_attrs(path)[MODEL_KEY])["estimator"]
            return f"load it with {cls}.load to predict with it"
        return "load it with the load method of the estimator class that saved it"
    if kind == "an rfol_dask data set":
        return "open it with rfol_dask.datasets.open_dataset, or fit a model on it (fit(path))"
    return "read its predictions with xarray.open_zarr(path)['prediction']" * (
        kind == PREDICTION_STORE
    )


def check_outside_stores(path, action="save a model", cwd=True):
    """ValueError for a ``path`` inside a Zarr store or (``cwd``) holding the current directory."""
    path, here = Path(os.path.abspath(path)), Path(os.path.realpath("."))
    if cwd and Path(os.path.realpath(path)) in (here, *here.parents):
        raise ValueError(
            f"cannot {action} at {path}: it is the current directory or holds it, which writing "
            f"replaces; give another path (e.g. '../{path.name}') or work from another directory"
        )
    if outer := next(reversed(list(zarr_parents(path))), None):  # the outermost
        kind = "an rfol_dask model" if (kind := describe_path(outer)) == "model" else kind
        raise ValueError(
            f"cannot {action} at {path}: it is inside the Zarr store {outer} ({kind}), which "
            f"replacing or regenerating it would delete; {action.split()[0]} it beside the store "
            f"(e.g. {outer.parent / path.name})"
        )


def foreign_entries(path, arrays):
    """A user's entries in the Zarr directory ``path``: all beyond its own ``arrays``, sorted."""
    path, chunk, foreign = Path(path), re.compile(r"[0-9.]+"), []
    for entry in (e for e in path.iterdir() if e.name not in _ZARR_META):
        keys = [n.split("/") for n in arrays if n.split("/")[0] == entry.name]
        if not keys or entry.is_symlink() or not entry.is_dir():
            foreign.append(entry.name)
            continue
        allowed = _ZARR_META | {"c"} | {part for k in keys for part in k[1:]}
        foreign += [
            str(sub.relative_to(path))
            for sub in entry.rglob("*")
            if not all(p in allowed or chunk.fullmatch(p) for p in sub.relative_to(entry).parts)
        ]
    return sorted(foreign)


def refuse_foreign(foreign, owner, instead):
    """ValueError when the store ``owner`` ("the model at PATH") holds ``foreign`` entries."""
    if foreign:
        names = ", ".join(foreign[:5]) + ", ..." * (len(foreign) > 5)
        raise ValueError(
            f"{owner} also holds other files ({names}), which replacing it would delete; move them "
            f"away or {instead}"
        )
