"""Generating a data set as a dask job into a chunked, resumable Zarr store, and reading it back.

Layout (docs/user_guide/data_model.md, "Stores"): variables ``input`` and ``output`` (sample,
<grid dims>) chunked along ``sample`` only, the parameters, seed and version as attributes; the
group ``_rfol_dask`` holds ``block_done``, a flag per block set after its data are written, so a
killed run resumes where it stopped (a NaN fill value: a missing chunk never reads as zeros). A run
holds the file lock ``.rfol_dask.lock``; a marker file exists while the template is written, so a
run killed then is restarted by the same command.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np
import xarray as xr

from .._version import __version__
from ..io import open_dataset
from ..persistence import path_lock
from ..progress import compute
from ..stores import (
    BOOKKEEPING_GROUP,
    FLAGS_KEY,
    block_flags,
    check_outside_stores,
    check_parent_dir,
    describe_path,
    foreign_entries,
    group_attrs,
    quiet_consolidated,
    refuse_foreign,
)
from .registry import get, resolve_params

if TYPE_CHECKING:  # annotations only: importing distributed here would slow every import
    import distributed

_TARGET_CHUNK_BYTES = 32 * 2**20
_LOCK = ".rfol_dask.lock"  # the file lock of the generate run writing the store
_TEMPLATE_MARK = ".rfol_dask.template"  # present while the store's template is being written


def default_block_size(spec, params, n_samples):
    """Samples per block: chunks of about 32 MiB, at most 1000 samples, at most ``n_samples``."""
    per_sample = 8 * sum(np.prod([len(c) for c in g.values()]) for g in spec.grids(**params))
    return int(max(1, min(n_samples, 1000, _TARGET_CHUNK_BYTES // per_sample)))


def _check_count(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _template(spec, params, n_samples, block_size, seed):
    """The store's Dataset (NaN dask arrays: nothing is computed), metadata and encoding."""
    gin, gout = spec.grids(**params)
    fields, encoding = {}, {}
    for var, grid, attrs in (("input", gin, spec.input_attrs), ("output", gout, spec.output_attrs)):
        shape = (n_samples, *(len(c) for c in grid.values()))
        chunks = (block_size, *shape[1:])
        fields[var] = (("sample", *grid), da.full(shape, np.nan, chunks=chunks), dict(attrs))
        # uncompressed: float64 fields shrink by 5-12 %, and decoding costs more than reading
        # those bytes from a local disk (benchmarks/README.md, "Reading")
        encoding[var] = {"chunks": chunks, "fill_value": np.nan, "compressors": None}
    ds = xr.Dataset(fields, coords={"sample": np.arange(n_samples), **gin, **gout})
    for dim in {**gin, **gout}:
        ds[dim].attrs.update(spec.coord_attrs(dim))
    ds["sample"].attrs["long_name"] = "sample index"
    meta = dict(dataset=spec.name, n_samples=n_samples, seed=int(seed), block_size=block_size)
    meta = json.loads(json.dumps({**meta, "params": params}, sort_keys=True))
    changed = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if v != spec.defaults.get(k))
    note = f" -- with non-default parameters {changed} (the description is for the defaults)"
    title = spec.description + (note if changed else "")
    ds.attrs.update(title=title, Conventions="CF-1.10", rfol_dask_version=__version__)
    ds.attrs.update(rfol_dask_meta=json.dumps(meta, sort_keys=True), dataset=spec.name)
    ds.attrs.update(seed=int(seed), **{f"param_{k}": v for k, v in params.items()})
    return ds, meta, encoding


def _write_template(path, ds, encoding, n_blocks):
    """Write the store's metadata, coordinates and zeroed block flags, all else but the lock
    cleared first; a marker file present meanwhile marks a template cut short."""
    import zarr

    mark = path / _TEMPLATE_MARK
    mark.write_text(ds.attrs["rfol_dask_meta"])
    for entry in path.iterdir():
        if entry.name not in (_LOCK, _TEMPLATE_MARK):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    with quiet_consolidated(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"Object at \.rfol_dask", zarr.errors.ZarrUserWarning)
        ds.to_zarr(path, mode="a", compute=False, encoding=encoding, consolidated=False)
        book = zarr.open_group(str(path), mode="r+").require_group(BOOKKEEPING_GROUP)
        book.create_array("block_done", shape=(n_blocks,), dtype="int8", chunks=(1,), fill_value=0)
        zarr.consolidate_metadata(str(path))
    mark.unlink()


def _store_state(path):
    """What the directory ``path`` holds: ``"new"`` (nothing, or a template cut short),
    ``"dataset"``, or a phrase for anything else."""
    entries = {e.name for e in path.iterdir()} - {_LOCK}
    if not entries or _TEMPLATE_MARK in entries:
        return "new"
    attrs = group_attrs(path)
    if attrs is None or "rfol_dask_meta" not in attrs:
        kind = describe_path(path)
        return "an rfol_dask model" if kind == "model" else kind
    if block_flags(path) is not None and all((path / v).is_dir() for v in ("input", "output")):
        return "dataset"
    # no bookkeeping or no variables: a template cut short (written again), unless it holds data
    meta_files = (".zarray", ".zattrs", "zarr.json")
    stored = [f for v in ("input", "output") for f in (path / v).rglob("*") if f.is_file()]
    if any(f.name not in meta_files for f in stored) or _foreign_files(path):
        return (
            "a copy of a data set without generate's bookkeeping, or holding other data "
            "(written by xarray or zarr)"
        )
    return "new"


def _stored_meta(path):
    """The ``rfol_dask_meta`` of the data-set store ``path``, read as JSON."""
    return json.loads(group_attrs(path)["rfol_dask_meta"])


def _checked_block(name, seed, start, stop, params):
    """Samples ``start:stop`` of data set ``name``; FloatingPointError for NaN / Inf."""
    inputs, outputs = get(name).make_block(seed, start, stop, **params)
    for var, values in (("input", inputs), ("output", outputs)):
        if not np.isfinite(values).all():
            raise FloatingPointError(
                f"{name}: generator produced NaN/Inf in {var} of samples {start}-{stop - 1}; "
                "check the parameters (a time stepper may need more steps)"
            )
    return inputs, outputs


def _write_block(path, name, seed, start, stop, block, params):
    """Make samples ``start:stop`` on a worker, write them into their region, then flag it."""
    import zarr

    inputs, outputs = _checked_block(name, seed, start, stop, params)
    group = zarr.open_group(path, mode="r+")
    group["input"][start:stop], group["output"][start:stop] = inputs, outputs
    group[FLAGS_KEY][block] = 1
    return stop - start


def generate(
    name: str,
    n_samples: int,
    store: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    client: distributed.Client | None = None,
    block_size: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    **params,
) -> xr.Dataset:
    """Make ``n_samples`` samples of a benchmark data set as a dask job.

    Samples are made in blocks of ``block_size`` as dask tasks; sample ``i`` depends only on
    ``(seed, i)``. With ``store`` every block is written into its region of a Zarr store, and a
    run killed at any point is resumed by the same call.

    Parameters
    ----------
    name : str
        A registered data set (``rfol_dask.datasets.names()``), e.g. ``"advection1"``.
    n_samples : int
        Number of samples ``M`` (>= 1).
    store : str or os.PathLike, optional
        Zarr store to write into (a relative path is the caller's, wherever the workers run);
        without it the samples are made in memory.
    seed : int, default=0
        Non-negative seed of the samples.
    client : distributed.Client, optional
        Cluster to run on (default: the active client, else dask's local scheduler).
    block_size : int, optional
        Samples per task (default: a resumed store's own, else chunks of about 32 MiB, at most
        1000 samples).
    overwrite : bool, default=False
        Replace a store that holds another rfol_dask data set (nothing else is ever
        replaced: a file or another directory is refused and left untouched).
    progress : bool, default=False
        Show a progress bar on stderr.
    **params
        Generator parameters of the data set (see its :class:`DatasetSpec`), e.g. the grid size.

    Returns
    -------
    xarray.Dataset
        Variables ``input`` (sample, *input grid dims) and ``output`` (sample, *output grid
        dims), float64, with grid coordinates (units, ``period`` on periodic axes) and the
        parameters as attributes; read lazily from ``store`` (chunks of ``block_size``
        samples), or in memory without one.

    Raises
    ------
    ValueError
        If the name, a parameter, a size or the seed is invalid (checked before the store is
        touched), or ``store`` holds another data set (pass ``overwrite=True``) or anything
        else, is inside a Zarr store, or another run writes it.

    Notes
    -----
    Memory: one block per worker thread with ``store``; the whole data set (``8 M (n + m)``
    bytes, twice while the blocks are joined) without.
    """
    spec = get(name)
    n_samples = _check_count(n_samples, "n_samples")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    params = resolve_params(spec, params)
    # absolute on the client: workers in another folder write where the user meant ('~' expanded)
    path = None if store is None else Path(os.path.abspath(os.path.expanduser(os.fspath(store))))
    block_given = block_size is not None
    if block_size is None:  # a resumed store's own (the same request), else chunks of ~32 MiB
        stored, asked = _dataset_meta(path), _request(spec, params, seed)
        same = stored and not _mismatch(stored, {**asked, "n_samples": n_samples})
        block_size = (same and stored["block_size"]) or default_block_size(spec, params, n_samples)
    block_size = _check_count(block_size, "block_size")
    ds, meta, encoding = _template(spec, params, n_samples, block_size, seed)
    blocks = [(s, min(s + block_size, n_samples)) for s in range(0, n_samples, block_size)]
    if path is None:
        tasks = [dask.delayed(_checked_block)(name, seed, a, b, params) for a, b in blocks]
        parts = compute(*tasks, client=client, progress=progress, desc=f"generate {name}")
        ds["input"].data = np.concatenate([p[0] for p in parts])
        ds["output"].data = np.concatenate([p[1] for p in parts])
        return ds

    if path.is_symlink() and not path.exists() or path.exists() and not path.is_dir():
        what = "a file" if path.exists() else "a symbolic link to a missing target"
        raise ValueError(f"{path} is {what}, not a data-set store; pick another path (untouched)")
    check_parent_dir(path, "a data set")
    check_outside_stores(path, "write a data set", cwd=False)
    if path.exists():
        _check_store_kind(path)  # refuse a foreign directory before even taking the lock in it
    path.mkdir(parents=True, exist_ok=True)
    busy = f"{path} is being written by another generate run; wait for it or use another path"
    with path_lock(path / _LOCK, busy):
        done = _prepare_store(path, ds, meta, encoding, len(blocks), overwrite, block_given)
        todo = [(k, a, b) for k, (a, b) in enumerate(blocks) if not done[k]]
        key = f"generate-{name}-"
        write = dask.delayed(_write_block)
        tasks = [
            write(str(path), name, seed, a, b, k, params, dask_key_name=f"{key}{k}")
            for k, a, b in todo
        ]
        if tasks:  # settle: after an interrupt, no block is still being written once the lock goes
            desc = f"generate {name} ({len(todo)} blocks)"
            compute(*tasks, client=client, progress=progress, desc=desc, settle=True)
    return open_dataset(path)


def reuse_or_generate(
    name: str,
    n_samples: int,
    store: str | os.PathLike,
    *,
    seed: int = 0,
    client=None,
    progress: bool = False,
    **params,
) -> xr.Dataset:
    """The first ``n_samples`` samples of data set ``name`` from ``store``, made only when it does
    not hold them: a store of the same data (name, seed, parameters) is read, resumed, or made
    again larger; anything else is a ValueError and never replaced. ``client``: a client, or a
    callable returning one, called only when samples must be made."""
    spec = get(name)
    params = resolve_params(spec, params)
    n_samples = _check_count(n_samples, "n_samples")  # before a store is read
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(store))))
    overwrite, size, stored = False, n_samples, _dataset_meta(path)
    if stored is not None:
        other = _mismatch(stored, _request(spec, params, seed))
        if other:
            raise ValueError(
                f"{path} holds other data (stored vs needed: {other}); it is left untouched: use "
                "another folder, or move it away"
            )
        if stored["n_samples"] < n_samples:
            overwrite = True  # the same data, too few samples: made again, larger
        else:
            try:
                return open_dataset(path, samples=n_samples)  # its leading blocks, if written
            except ValueError:  # interrupted before the samples asked for: resumed
                size = stored["n_samples"]
    client = client() if callable(client) else client
    kw = dict(seed=seed, client=client, overwrite=overwrite, progress=progress)
    return generate(name, size, path, **kw, **params).isel(sample=slice(0, n_samples))


def _dataset_meta(path):
    """The ``rfol_dask_meta`` of the data-set store at ``path``; None if there is none."""
    ok = path is not None and path.is_dir() and _store_state(path) == "dataset"
    return _stored_meta(path) if ok else None


def _request(spec, params, seed):
    """What fixes a data set's samples, as its store's metadata records them: name, seed, params."""
    params = json.loads(json.dumps(params, sort_keys=True))
    return {"dataset": spec.name, "seed": int(seed), "params": params}


def _mismatch(stored, asked):
    """The entries of ``asked`` that the metadata ``stored`` lacks: ``{key: (stored, asked)}``."""
    return {k: (stored.get(k), v) for k, v in asked.items() if stored.get(k) != v}


def request_mismatch(meta: dict, name: str, *, seed: int = 0, **params) -> dict:
    """How a store's ``rfol_dask_meta`` ``meta`` differs from data set ``name`` made with ``seed``
    and ``params`` (defaults for the rest): ``{key: (stored, requested)}``, empty if the same."""
    spec = get(name)
    return _mismatch(meta, _request(spec, resolve_params(spec, params), seed))


def _prepare_store(path, ds, meta, encoding, n_blocks, overwrite, block_given):
    """Under the lock: keep a store of the same data set (to resume it), else write the template.
    Returns the block flags. ``block_given``: whether the caller chose the block size."""
    state = _check_store_kind(path)
    if state == "dataset" and not overwrite:
        existing = _stored_meta(path)
        if existing != meta:
            diff = _mismatch(existing, meta)
            if list(diff) == ["block_size"]:  # the same samples, written in other blocks
                raise ValueError(
                    f"{path} was started with block_size={existing['block_size']}: rerun with "
                    f"that block size (--block-size {existing['block_size']}), or without one, to "
                    "resume it"
                )
            if not block_given:  # not asked for: it follows from the sample count
                diff.pop("block_size", None)
            raise ValueError(
                f"{path} holds another data set (stored vs requested: {diff}); pass "
                "overwrite=True (--overwrite) to replace it, or use another path"
            )
        version = group_attrs(path).get("rfol_dask_version")
        if version != __version__ and not all(block_flags(path)):
            raise ValueError(
                f"{path} was started by rfol_dask {version or '(version not recorded)'} and this "
                f"is {__version__}: resuming could mix samples of two versions; pass "
                "overwrite=True (--overwrite) to start it again, or move it away"
            )
    elif state == "dataset":
        refuse_foreign(_foreign_files(path), f"the data set at {path}", "use another path")
    if state != "dataset" or overwrite:
        _write_template(path, ds, encoding, n_blocks)
    return block_flags(path)


def _foreign_files(path):
    """What the data-set store ``path`` holds beyond its template's arrays (all of it when its
    metadata names no data set this version knows)."""
    try:
        meta = _stored_meta(path)
        gin, gout = get(meta["dataset"]).grids(**meta["params"])
    except (KeyError, TypeError, ValueError):  # unreadable, or another version's data set
        return sorted(e.name for e in path.iterdir() if e.name not in (_LOCK, _TEMPLATE_MARK))
    foreign = foreign_entries(path, {"input", "output", "sample", *gin, *gout, FLAGS_KEY})
    return [f for f in foreign if f not in (_LOCK, _TEMPLATE_MARK)]


def _check_store_kind(path):
    """:func:`_store_state` of ``path``; ValueError unless it is new, partial or a data set."""
    state = _store_state(path)
    if state not in ("new", "dataset"):
        raise ValueError(
            f"{path} exists and is not an rfol_dask data set (it is {state}); pick another "
            "path (--overwrite replaces only an rfol_dask data set)"
        )
    return state
