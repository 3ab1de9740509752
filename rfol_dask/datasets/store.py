"""Generating a data set as a dask job into a chunked, resumable Zarr store, and reading it back.

Layout (docs/design.md): variables ``input`` (sample, <input grid dims>) and
``output`` (sample, <output grid dims>) with ``long_name`` and ``units``, grid coordinates with
units, chunks along ``sample`` only, attributes for every generator parameter, the seed, the
package version and ``Conventions``; metadata consolidated (a plain ``xr.open_zarr`` reads it
without warnings). Bookkeeping lives in the Zarr group ``_rfol_dask``, which xarray does not
show: ``block_done`` (one int8 per block) is set only after a block's data are written, so a
killed run resumes where it stopped; arrays have a NaN fill value so that a missing chunk is
never read back as zeros.

A run holds a lock file ``.rfol_dask.lock`` in the store (created with ``O_EXCL``; it names
the process and host), so two runs never write one store; the lock of a dead process on this
host is taken over. A marker file exists while the template is written, so a run killed then
is restarted by the same command.
"""

from __future__ import annotations

import contextlib
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
from ..io import (
    BOOKKEEPING_GROUP,
    PREDICTION_KEY,
    PREDICTION_STORE,
    block_flags,
    check_outside_stores,
    check_parent_dir,
    flags_key,
    foreign_entries,
    lock_file,
    open_dataset,
    quiet_consolidated,
    user_path,
    wait_zarr_io,
)
from ..progress import compute
from .registry import get, resolve_params

if TYPE_CHECKING:  # annotations only: importing distributed here would slow every import
    import distributed

__all__ = [
    "generate",
    "reuse_or_generate",
    "request_mismatch",
    "open_dataset",
    "default_block_size",
    "store_lock",
]


_TARGET_CHUNK_BYTES = 32 * 2**20
_META_KEYS = ("dataset", "n_samples", "seed", "block_size", "params")
_LOCK = ".rfol_dask.lock"  # held by the generate run writing the store (see store_lock)
_TEMPLATE_MARK = ".rfol_dask.template"  # present while the store's template is being written


def _grids(spec, params):
    """``spec.grids(**params)``; ValueError if an axis has no points."""
    gin, gout = spec.grids(**params)
    for which, grid in (("input", gin), ("output", gout)):
        empty = [d for d, c in grid.items() if len(c) == 0]
        if empty:
            raise ValueError(
                f"{spec.name}: parameters {params} give an empty {which} grid (no points along "
                f"{empty}); choose larger grid sizes"
            )
    return gin, gout


def default_block_size(spec, params, n_samples):
    """Samples per block: chunks of about 32 MiB, at most 1000 samples, at most ``n_samples``."""
    gin, gout = _grids(spec, params)
    per_sample = 8 * (
        np.prod([len(c) for c in gin.values()]) + np.prod([len(c) for c in gout.values()])
    )
    return int(max(1, min(n_samples, 1000, _TARGET_CHUNK_BYTES // per_sample)))


def _title(spec, params):
    """The data set's description (written for its defaults), with the parameters that differ
    from them named after it."""
    changed = {k: v for k, v in params.items() if v != spec.defaults.get(k)}
    if not changed:
        return spec.description
    return (
        f"{spec.description} -- with non-default parameters "
        f"{', '.join(f'{k}={v}' for k, v in sorted(changed.items()))} (the description is for the defaults)"
    )


def _check_count(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _blocks(n_samples, block_size):
    return [(s, min(s + block_size, n_samples)) for s in range(0, n_samples, block_size)]


def _template(spec, params, n_samples, block_size, seed):
    gin, gout = _grids(spec, params)
    for dim in set(gin) & set(gout):
        if not np.array_equal(gin[dim], gout[dim]):
            raise ValueError(
                f"{spec.name}: input and output share dim {dim!r} with different coordinates"
            )
    shape_in = (n_samples, *(len(c) for c in gin.values()))
    shape_out = (n_samples, *(len(c) for c in gout.values()))
    chunks_in = (block_size, *shape_in[1:])
    chunks_out = (block_size, *shape_out[1:])
    ds = xr.Dataset(
        {
            "input": (
                ("sample", *gin),
                da.full(shape_in, np.nan, chunks=chunks_in),
                dict(spec.input_attrs),
            ),
            "output": (
                ("sample", *gout),
                da.full(shape_out, np.nan, chunks=chunks_out),
                dict(spec.output_attrs),
            ),
        },
        coords={"sample": np.arange(n_samples), **gin, **gout},
    )
    for dim in {**gin, **gout}:
        ds[dim].attrs.update(spec.coord_attrs(dim))
    ds["sample"].attrs["long_name"] = "sample index"
    meta = {
        "dataset": spec.name,
        "n_samples": n_samples,
        "seed": int(seed),
        "block_size": block_size,
        "params": params,
    }
    ds.attrs.update(
        {
            "title": _title(spec, params),
            "Conventions": "CF-1.10",
            "rfol_dask_version": __version__,
            "rfol_dask_meta": json.dumps(meta, sort_keys=True),
            "dataset": spec.name,
            "seed": int(seed),
            **{f"param_{k}": v for k, v in params.items()},
        }
    )
    # the fields are stored uncompressed: float64 solution fields shrink by 5 % (zstd) to 12 %
    # (blosc, byte shuffle), and decoding them costs more than reading those bytes from a local
    # disk (1.8-2.2 x the read time of Navier-Stokes 64 x 64 blocks; benchmarks/README.md, "Reading")
    encoding = {
        "input": {"chunks": chunks_in, "fill_value": np.nan, "compressors": None},
        "output": {"chunks": chunks_out, "fill_value": np.nan, "compressors": None},
    }
    return ds, meta, encoding


def store_lock(path, meta):
    """Hold the lock file of the store directory ``path`` for the generate run ``meta``
    (:func:`rfol_dask.io.lock_file`).

    Raises ValueError naming the holder (pid, host, data set, seed, start time) if another
    live run holds it. A lock whose process is gone (same host) is taken over; a lock of
    another host is reported with the command to remove it.
    """
    lock = Path(path) / _LOCK

    def busy(held):
        who = (
            "another run"
            if held is None
            else f"rfol-dask generate {held.get('dataset')} (seed {held.get('seed')}, pid {held.get('pid')} "
            f"on {held.get('host')}, started {held.get('started')})"
        )
        return (
            f"{path} is being written by {who}; wait for it to finish or use another path (if no such run is "
            f"alive, remove {lock})"
        )

    return lock_file(
        lock, {"dataset": meta["dataset"], "seed": meta["seed"], "params": meta["params"]}, busy
    )


@contextlib.contextmanager
def _quiet_zarr():
    """Silence zarr's warning that our lock / marker files are no Zarr nodes, and that
    consolidated metadata is not in the Zarr v3 specification (:func:`rfol_dask.io.quiet_consolidated`)."""
    import zarr

    with quiet_consolidated(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"Object at \.rfol_dask", zarr.errors.ZarrUserWarning)
        yield


def _write_template(path, ds, encoding, n_blocks):
    """Write the store's metadata, coordinates and zeroed block flags (no sample data).

    A marker file is present while this runs, so that a store whose template was cut short
    is recognised and restarted; everything but the lock is cleared first.
    """
    import zarr

    mark = path / _TEMPLATE_MARK
    mark.write_text(ds.attrs["rfol_dask_meta"])
    for entry in path.iterdir():
        if entry.name not in (_LOCK, _TEMPLATE_MARK):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    with _quiet_zarr():
        ds.to_zarr(path, mode="a", compute=False, encoding=encoding, consolidated=False)
        book = zarr.open_group(str(path), mode="r+").require_group(BOOKKEEPING_GROUP)
        book.create_array("block_done", shape=(n_blocks,), dtype="int8", chunks=(1,), fill_value=0)
        zarr.consolidate_metadata(str(path))
    mark.unlink()


def _store_state(path):
    """What the directory ``path`` holds: ``"new"`` (nothing but our lock), ``"partial"`` (a
    template cut short), ``"dataset"`` (an rfol_dask data set), or a phrase for anything else."""
    import zarr

    entries = {e.name for e in path.iterdir() if not e.name.startswith(f"{_LOCK}.stale-")} - {_LOCK}
    if not entries:
        return "new"
    if _TEMPLATE_MARK in entries:
        return "partial"
    try:
        group = zarr.open_group(str(path), mode="r")
        attrs = dict(group.attrs)
    except Exception:  # noqa: BLE001  (not a Zarr group)
        return "a directory holding other files"
    if "rfol_dask_meta" not in attrs:
        return (
            "an rfol_dask model"
            if "rfol_dask_model" in attrs
            else PREDICTION_STORE
            if PREDICTION_KEY in attrs
            else "a Zarr store of another kind"
        )
    with _quiet_zarr():
        arrays = {k for k, _ in group.arrays()}
    if block_flags(path) is not None and {"input", "output"} <= arrays:
        return "dataset"
    # no bookkeeping or no variables: a template cut short by a version without the marker (it
    # is cleared and written again), unless it holds data, which are someone's and never cleared
    stored = [
        f
        for var in ("input", "output")
        if (path / var).is_dir()
        for f in (path / var).rglob("*")
        if f.is_file() and f.name not in (".zarray", ".zattrs", "zarr.json")
    ]
    if stored or _foreign_files(path):
        return "a copy of a data set without generate's bookkeeping, or holding other data (written by xarray or zarr)"
    return "partial"


def _stored_meta(path):
    """The generation parameters recorded in the data-set store at ``path``."""
    import zarr

    return json.loads(zarr.open_group(str(path), mode="r").attrs["rfol_dask_meta"])


def _stored_version(path):
    """The rfol_dask version that wrote the data-set store at ``path``."""
    import zarr

    return zarr.open_group(str(path), mode="r").attrs.get("rfol_dask_version")


def _checked_block(name, seed, start, stop, params):
    """Samples ``start:stop`` of data set ``name``: ``(inputs, outputs)``; FloatingPointError
    when the generator produced NaN / Inf (in memory and in a store alike)."""
    inputs, outputs = get(name).make_block(seed, start, stop, **params)
    for var, values in (("input", inputs), ("output", outputs)):
        if not np.isfinite(values).all():
            raise FloatingPointError(
                f"{name}: generator produced NaN/Inf in {var} of samples {start}-{stop - 1}; "
                "check the parameters (a time stepper may need more steps)"
            )
    return inputs, outputs


def _write_block(path, name, seed, start, stop, block, params):
    """Make samples ``start:stop`` on a worker and write them into their region, then mark the block."""
    import zarr

    inputs, outputs = _checked_block(name, seed, start, stop, params)
    group = zarr.open_group(path, mode="r+")
    for var, values in (("input", inputs), ("output", outputs)):
        group[var][start:stop] = values
    group[flags_key(group)][block] = 1
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

    Samples are made in blocks of ``block_size`` as dask tasks (on ``client``, the active
    distributed client, or dask's local scheduler); sample ``i`` depends only on
    ``(seed, i)``, whatever the blocks. With ``store`` every block is written straight into
    its region of a Zarr store; rerunning the same call after an interruption skips the
    blocks already written.

    Parameters
    ----------
    name : str
        A registered data set (``rfol_dask.datasets.names()``), e.g. ``"advection1"``.
    n_samples : int
        Number of samples ``M`` (>= 1).
    store : str or os.PathLike, optional
        Zarr store to write into; without it the samples are made in memory.
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
        If the name or a parameter is unknown or a parameter is out of its range (the message
        names it, its value and the range; checked before the store is touched), a size or the
        seed is not a non-negative integer, ``store`` holds another data set (pass ``overwrite=True`` to
        replace it) or something that is not a data set, or is inside a Zarr store (a model, a
        data set: replacing that would delete it), or another run holds the store's lock (the
        message names it).

    Notes
    -----
    A run holds a lock file in the store, so two runs never write one store; a run killed at
    any point (even while creating the store) is resumed or restarted by the same call.

    Memory: one block of inputs and outputs per worker thread with ``store``; the whole
    data set (``8 M (n + m)`` bytes, twice while the blocks are joined) without.
    """
    spec = get(name)
    store = None if store is None else user_path(store)  # '~' expanded, as xarray and zarr read it
    n_samples = _check_count(n_samples, "n_samples")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    params = resolve_params(spec, params)
    block_given = block_size is not None
    if block_size is None:
        block_size = _resumed_block_size(
            store, spec, params, n_samples, seed
        ) or default_block_size(spec, params, n_samples)
    block_size = _check_count(block_size, "block_size")
    ds, meta, encoding = _template(spec, params, n_samples, block_size, seed)
    blocks = _blocks(n_samples, block_size)

    if store is None:
        tasks = [dask.delayed(_checked_block)(name, seed, a, b, params) for a, b in blocks]
        parts = compute(*tasks, client=client, progress=progress, desc=f"generate {name}")
        ds["input"].data = np.concatenate([p[0] for p in parts])
        ds["output"].data = np.concatenate([p[1] for p in parts])
        return ds

    path = Path(os.fspath(store))
    if path.is_symlink() and not path.exists():
        raise ValueError(
            f"{path} is a symbolic link to a missing target; pick another path (it was left untouched)"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{path} is a file, not a data-set store; pick another path (it was left untouched)"
        )
    check_parent_dir(path, "a data set")
    check_outside_stores(path, "write a data set")
    if path.exists():
        _check_store_kind(path)  # refuse a foreign directory before even taking the lock in it
    path.mkdir(parents=True, exist_ok=True)
    with store_lock(path, meta):
        try:
            done = _prepare_store(path, ds, meta, encoding, len(blocks), overwrite, block_given)
            todo = [(k, a, b) for k, (a, b) in enumerate(blocks) if not done[k]]
            tasks = [
                dask.delayed(_write_block)(
                    str(path), name, seed, a, b, k, params, dask_key_name=f"generate-{name}-{k}"
                )
                for k, a, b in todo
            ]
            if (
                tasks
            ):  # settle: after an interrupt, no block is still being written once the lock goes
                compute(
                    *tasks,
                    client=client,
                    progress=progress,
                    desc=f"generate {name} ({len(todo)} blocks)",
                    settle=True,
                )
        except BaseException:
            wait_zarr_io()  # nor a zarr call of this thread cut short by the interrupt
            raise
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
    """The first ``n_samples`` samples of data set ``name`` from the store ``store``, made only
    when it does not hold them: the store of a run that wants its data, whatever ran before.

    - A store of the same data (name, seed and parameters) with at least ``n_samples`` samples is
      read, if the blocks of its first ``n_samples`` samples are written (they are the ones asked
      for: sample ``i`` depends only on the seed and ``i``); an interrupted one is read so too.
    - An interrupted :func:`generate` of at least as many samples of the same data, short of those
      blocks, is resumed (all of it).
    - A store of the same data with fewer samples is made again, larger (nothing is lost: the
      same numbers come back).
    - Nothing there, or a template cut short: generated.
    - Anything else (other data, a copy without bookkeeping, a user's files) is a ValueError; it is
      never replaced.

    ``client`` is a distributed client, or a callable returning one (or None), called only when
    samples must be made (so that reading an existing store starts no cluster). Returns the lazily
    read data set, ``n_samples`` long.
    """
    spec = get(name)
    params = resolve_params(spec, params)
    n_samples = _check_count(
        n_samples, "n_samples"
    )  # before any store is read (a negative count sliced)
    path = Path(os.fspath(store))
    overwrite, size = False, n_samples
    if path.is_dir() and _store_state(path) == "dataset":
        stored = _stored_meta(path)
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
                return open_dataset(
                    path, samples=n_samples
                )  # its leading blocks, if they are written
            except ValueError:  # interrupted before the samples asked for: resumed
                size = stored["n_samples"]
    client = client() if callable(client) else client
    ds = generate(
        name, size, path, seed=seed, client=client, overwrite=overwrite, progress=progress, **params
    )
    return ds.isel(sample=slice(0, n_samples))


def _resumed_block_size(store, spec, params, n_samples, seed):
    """The block size of the store being resumed, when ``store`` holds this very request (the
    same data set, size, seed and parameters) started with another block size; else None."""
    path = None if store is None else Path(os.fspath(store))
    if path is None or not path.is_dir() or _store_state(path) != "dataset":
        return None
    stored = _stored_meta(path)
    asked = {**_request(spec, params, seed), "n_samples": n_samples}
    return None if _mismatch(stored, asked) else stored.get("block_size")


def _request(spec, params, seed):
    """What fixes a data set's samples, as its store's metadata records it: name, seed, parameters."""
    return {
        "dataset": spec.name,
        "seed": int(seed),
        "params": json.loads(json.dumps(params, sort_keys=True)),
    }


def _mismatch(stored, asked):
    """The entries of ``asked`` that the metadata ``stored`` does not hold: ``{key: (stored, asked)}``."""
    return {k: (stored.get(k), v) for k, v in asked.items() if stored.get(k) != v}


def request_mismatch(meta: dict, name: str, *, seed: int = 0, **params) -> dict:
    """How a data-set store's metadata ``meta`` (its ``rfol_dask_meta`` attribute, read as JSON)
    differs from data set ``name`` made with ``seed`` and ``params`` (the defaults for those not
    given): ``{key: (stored, requested)}`` over the data set, the seed and the parameters; empty
    when the store holds those samples (whatever its size)."""
    spec = get(name)
    return _mismatch(meta, _request(spec, resolve_params(spec, params), seed))


def _prepare_store(path, ds, meta, encoding, n_blocks, overwrite, block_given=True):
    """Under the lock: keep a store of the same data set (to resume it), else write the template
    (a new or cut-short store, or another data set with ``overwrite``). Returns the block flags.
    ``block_given``: whether the caller chose the block size (else the refusal leaves it out)."""
    state = _check_store_kind(path)
    if state == "dataset":
        existing = _stored_meta(path)
        if existing != json.loads(json.dumps(meta, sort_keys=True)) and not overwrite:
            diff = _mismatch(existing, {k: meta[k] for k in _META_KEYS})
            if list(diff) == ["block_size"]:  # the same samples, written in other blocks
                raise ValueError(
                    f"{path} was started with block_size={existing['block_size']}: rerun with that "
                    f"block size (--block-size {existing['block_size']}), or without one, to resume it"
                )
            if not block_given:  # not asked for: it follows from the sample count
                diff.pop("block_size", None)
            raise ValueError(
                f"{path} holds another data set (stored vs requested: {diff}); pass "
                "overwrite=True (--overwrite) to replace it, or use another path"
            )
        if overwrite:
            _check_own_files(path)
        else:
            version = _stored_version(path)
            if version != __version__ and not all(block_flags(path)):
                raise ValueError(
                    f"{path} was started by rfol_dask {version or '(version not recorded)'} and this is "
                    f"{__version__}: resuming could mix samples of two versions; pass overwrite=True "
                    "(--overwrite) to start it again, or move it away"
                )
    if state != "dataset" or overwrite:
        _write_template(path, ds, encoding, n_blocks)
    return block_flags(path)


def _foreign_files(path):
    """What the store ``path`` of a data set holds beyond the arrays its template defines (a
    user's files or arrays), as :func:`io.foreign_entries` lists them; everything when its
    metadata names no data set this version knows."""
    try:
        meta = _stored_meta(path)
        gin, gout = get(meta["dataset"]).grids(**meta["params"])
    except (KeyError, TypeError, ValueError):  # unreadable, or another version's data set
        return sorted(
            e.name for e in path.iterdir() if not e.name.startswith((_LOCK, _TEMPLATE_MARK))
        )
    arrays = {
        "input",
        "output",
        "sample",
        *gin,
        *gout,
        f"{BOOKKEEPING_GROUP}/block_done",
        "block_done",
    }
    return [f for f in foreign_entries(path, arrays) if not f.startswith((_LOCK, _TEMPLATE_MARK))]


def _check_own_files(path):
    """ValueError if the data-set store ``path`` holds anything beyond the arrays its template
    defines (a user's files or arrays), which replacing it would delete."""
    foreign = _foreign_files(path)
    if foreign:
        raise ValueError(
            f"the data set at {path} also holds other files ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}), which replacing it would delete; move them "
            "away or use another path"
        )


def _check_store_kind(path):
    """:func:`_store_state` of ``path``; ValueError unless it is new, partial or a data set."""
    state = _store_state(path)
    if state not in ("new", "partial", "dataset"):
        raise ValueError(
            f"{path} exists and is not an rfol_dask data set (it is {state}); pick another "
            "path (--overwrite replaces only an rfol_dask data set)"
        )
    return state
