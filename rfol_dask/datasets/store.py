"""Generating a data set as a dask job into a chunked, resumable Zarr store, and reading it back.

Layout (docs/design.md): variables ``input`` (sample, <input grid dims>) and ``output``
(sample, <output grid dims>), grid coordinates with units, chunks along ``sample`` only,
attributes for every generator parameter, the seed and the package version. A
bookkeeping variable ``block_done`` (one int8 per block) is set only after a block's
data are written, so a killed run resumes where it stopped; arrays are created with a
NaN fill value so that a missing chunk is never read back as zeros.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np
import xarray as xr

from .._version import __version__
from ..io import open_dataset
from ..progress import compute
from .registry import get, resolve_params

if TYPE_CHECKING:  # annotations only: importing distributed here would slow every import
    import distributed

__all__ = ["generate", "open_dataset", "default_block_size"]


_TARGET_CHUNK_BYTES = 32 * 2**20
_META_KEYS = ("dataset", "n_samples", "seed", "block_size", "params")


def default_block_size(spec, params, n_samples):
    """Samples per block: chunks of about 32 MiB, at most 1000 samples, at most ``n_samples``."""
    gin, gout = spec.grids(**params)
    per_sample = 8 * (np.prod([len(c) for c in gin.values()]) + np.prod([len(c) for c in gout.values()]))
    return int(max(1, min(n_samples, 1000, _TARGET_CHUNK_BYTES // per_sample)))


def _check_count(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _blocks(n_samples, block_size):
    return [(s, min(s + block_size, n_samples)) for s in range(0, n_samples, block_size)]


def _template(spec, params, n_samples, block_size, seed):
    gin, gout = spec.grids(**params)
    for dim in set(gin) & set(gout):
        if not np.array_equal(gin[dim], gout[dim]):
            raise ValueError(f"{spec.name}: input and output share dim {dim!r} with different coordinates")
    shape_in = (n_samples, *(len(c) for c in gin.values()))
    shape_out = (n_samples, *(len(c) for c in gout.values()))
    chunks_in = (block_size, *shape_in[1:])
    chunks_out = (block_size, *shape_out[1:])
    n_blocks = len(_blocks(n_samples, block_size))
    ds = xr.Dataset(
        {
            "input": (("sample", *gin), da.full(shape_in, np.nan, chunks=chunks_in)),
            "output": (("sample", *gout), da.full(shape_out, np.nan, chunks=chunks_out)),
            "block_done": (("block",), np.zeros(n_blocks, dtype="int8")),
        },
        coords={"sample": np.arange(n_samples), **gin, **gout},
    )
    for dim in {**gin, **gout}:
        ds[dim].attrs.update(spec.coord_attrs(dim))
    meta = {"dataset": spec.name, "n_samples": n_samples, "seed": int(seed),
            "block_size": block_size, "params": params}
    ds.attrs.update(
        {
            "title": spec.description,
            "rfol_dask_version": __version__,
            "rfol_dask_meta": json.dumps(meta, sort_keys=True),
            "dataset": spec.name,
            "seed": int(seed),
            **{f"param_{k}": v for k, v in params.items()},
        }
    )
    encoding = {
        "input": {"chunks": chunks_in, "fill_value": np.nan},
        "output": {"chunks": chunks_out, "fill_value": np.nan},
        "block_done": {"chunks": (1,), "fill_value": 0},
    }
    return ds, meta, encoding


def _stored_meta(path):
    try:
        attrs = xr.open_zarr(path, consolidated=False).attrs
    except Exception:
        return None
    raw = attrs.get("rfol_dask_meta")
    return None if raw is None else json.loads(raw)


def _write_block(path, name, seed, start, stop, block, params):
    """Make samples ``start:stop`` on a worker and write them into their region, then mark the block."""
    import zarr

    spec = get(name)
    inputs, outputs = spec.make_block(seed, start, stop, **params)
    group = zarr.open_group(path, mode="r+")
    for var, values in (("input", inputs), ("output", outputs)):
        if not np.isfinite(values).all():
            raise FloatingPointError(f"{name}: generator produced NaN/Inf in {var} of samples {start}-{stop - 1}")
        group[var][start:stop] = values
    group["block_done"][block] = 1
    return stop - start


def generate(name: str, n_samples: int, store: str | os.PathLike | None = None, *, seed: int = 0,
             client: distributed.Client | None = None, block_size: int | None = None,
             overwrite: bool = False, progress: bool = False, **params) -> xr.Dataset:
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
        Samples per task (default: chunks of about 32 MiB, at most 1000 samples).
    overwrite : bool, default=False
        Replace a store that holds another data set (or anything else).
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
        If the name or a parameter is unknown, a size or the seed is not a positive integer,
        or ``store`` holds another data set (pass ``overwrite=True`` to replace it).

    Notes
    -----
    Memory: one block of inputs and outputs per worker thread with ``store``; the whole
    data set (``8 M (n + m)`` bytes, twice while the blocks are joined) without.
    """
    spec = get(name)
    n_samples = _check_count(n_samples, "n_samples")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    params = resolve_params(spec, params)
    if block_size is None:
        block_size = default_block_size(spec, params, n_samples)
    block_size = _check_count(block_size, "block_size")
    ds, meta, encoding = _template(spec, params, n_samples, block_size, seed)
    blocks = _blocks(n_samples, block_size)

    if store is None:
        tasks = [dask.delayed(spec.make_block)(seed, a, b, **params) for a, b in blocks]
        parts = compute(*tasks, client=client, progress=progress, desc=f"generate {name}")
        ds["input"].data = np.concatenate([p[0] for p in parts])
        ds["output"].data = np.concatenate([p[1] for p in parts])
        return ds.drop_vars("block_done")

    path = os.fspath(store)
    existing = _stored_meta(path) if Path(path).exists() else None
    if Path(path).exists() and (overwrite or existing is None):
        if not overwrite and any(Path(path).iterdir()):
            raise ValueError(f"{path} exists and is not an rfol_dask data set; pick another path "
                             "or pass overwrite=True (--overwrite) to replace it")
        shutil.rmtree(path)
        existing = None
    if existing is not None and existing != json.loads(json.dumps(meta, sort_keys=True)):
        diff = {k: (existing.get(k), meta[k]) for k in _META_KEYS if existing.get(k) != meta[k]}
        raise ValueError(f"{path} holds another data set (stored vs requested: {diff}); pass "
                         "overwrite=True (--overwrite) to replace it, or use another path")
    if existing is None:
        ds.to_zarr(path, mode="w", compute=False, encoding=encoding, consolidated=False)
        done = np.zeros(len(blocks), dtype=bool)
    else:
        done = xr.open_zarr(path, consolidated=False)["block_done"].values.astype(bool)
    todo = [(k, a, b) for k, (a, b) in enumerate(blocks) if not done[k]]
    tasks = [dask.delayed(_write_block)(path, name, seed, a, b, k, params, dask_key_name=f"generate-{name}-{k}")
             for k, a, b in todo]
    if tasks:
        compute(*tasks, client=client, progress=progress, desc=f"generate {name} ({len(todo)} blocks)")
    return open_dataset(path)
