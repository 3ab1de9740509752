"""Memory policy of the fits: budgets, the Gram pre-checks, the layout of the dask dual fit.

A budget is ``max_gram_bytes`` when given; else the least ``min(0.6 limit, 0.8 limit - used)`` of
the client's workers with memory limits (dask pauses a worker at 80 %); else 60 % of this machine's
available memory; on GPUs :data:`DEVICE_SHARE` of the least free GPU memory."""

from __future__ import annotations

import os
import types
import warnings
from dataclasses import dataclass

import dask
import numpy as np
import psutil

from . import backend
from .exceptions import MemoryPlanWarning, SettingWarning
from .placement import ask_workers
from .progress import scheduler_workers
from .stacklevel import user_stacklevel

#: bytes of the rows of ``A`` formed at once by the in-memory primal path and by ``predict``
ROW_BLOCK_BYTES = 128 * 2**20
#: bytes of one feature slab of the streamed dual (dask config ``rfol_dask.slab-bytes``)
SLAB_BYTES = 256 * 2**20
#: the narrowest feature slab the streamed dual uses before it factorises blocked instead
MIN_SLAB_COLUMNS = 64
#: share of a GPU's free memory that a fit or a search on it may take
DEVICE_SHARE = 0.6


@dataclass(frozen=True)
class Budget:
    """Bytes one process may give to a fit: ``bytes``, from ``where`` (for messages)."""

    bytes: float
    where: str
    #: a worker's room at a step's peak (a sum of Grams): least 0.8 limit - used, or free GPU memory
    peak_room: float | None = None
    workers: int = 1  #: workers of the client
    peak_line: str = "it has before dask pauses it"  #: what ``peak_room`` is, for messages


def _worker_limits(client):  # memory limits {address: bytes} of the workers, if all have one
    workers = scheduler_workers(client) if client is not None else {}
    limits = {a: w.get("memory_limit") or 0 for a, w in workers.items()}
    return limits if limits and min(limits.values()) > 0 else {}


def _process_memory():  # bytes this process holds (run on the workers, having imported rfol_dask)
    return psutil.Process().memory_info().rss


def _warn_above_limit(max_bytes, limits, xp, device, client):
    """Warn when ``max_gram_bytes`` exceeds the Gram's memory: the fit would get killed."""
    on_gpu = device not in (None, "cpu")
    if (xp is not None and backend.is_cupy(xp)) or (on_gpu and client is None):
        cap, what = device_total_bytes(device if on_gpu else "cuda"), "the GPU's memory"
    elif on_gpu or limits:
        caps = ask_workers(client, device_total_bytes, device) if on_gpu else limits
        address = min(caps, key=caps.get)
        cap, what = caps[address], f"the {'total GPU memory' if on_gpu else 'memory limit'} of"
        what += f" worker {address}"
    else:
        cap, what = device_total_bytes("cpu"), "this machine's memory"
    if max_bytes > cap:
        msg = f"max_gram_bytes={int(max_bytes):,} is more than {what} ({int(cap):,} bytes); it "
        msg += "overrides the memory checks, so a Gram of that size gets the process killed, not "
        warnings.warn(msg + "refused", SettingWarning, stacklevel=user_stacklevel())


def memory_budget(max_bytes=None, client=None, xp=None, device=None):
    """The :class:`Budget` of a process (module docstring); ``xp``, ``device``: of a GPU's Gram."""
    limits = _worker_limits(client)
    if max_bytes is not None:
        _warn_above_limit(float(max_bytes), limits, xp, device, client)
        return Budget(float(max_bytes), "max_gram_bytes")
    here = xp if xp is not None and backend.is_cupy(xp) else None  # this process's GPU
    if here is not None or (device not in (None, "cpu") and client is None):
        free = free_bytes(here) if here is not None else device_free_bytes(device)
        return Budget(DEVICE_SHARE * free, f"{DEVICE_SHARE:.0%} of the GPU's free memory")
    if device not in (None, "cpu"):
        free = ask_workers(client, device_free_bytes, device)
        least, n = min(free.values()), len(free)
        where = f"{DEVICE_SHARE:.0%} of the least free GPU memory of the {n} worker(s)"
        line = "bytes of GPU memory free on the least free worker"
        return Budget(DEVICE_SHARE * least, where, peak_room=least, workers=n, peak_line=line)
    if not limits:
        return Budget(0.6 * psutil.virtual_memory().available, "60% of the available memory")
    answers = ask_workers(client, _process_memory)
    # a worker that did not answer (lost, or new) counts as the fullest that did
    used = {a: answers.get(a, max(answers.values())) for a in limits}
    to_pause = {a: 0.8 * limit - used[a] for a, limit in limits.items()}  # below the pause line
    peak_room = to_pause[tightest := min(to_pause, key=to_pause.get)]
    if not dask.config.get("distributed.worker.memory.pause", 0.8):  # workers never pause
        peak_room = None
    elif peak_room <= 0:
        raise ValueError(
            f"the workers have no memory to spare: worker {tightest} holds {int(used[tightest]):,}"
            f" bytes of its {int(limits[tightest]):,}-byte limit, and dask pauses a worker at 80 %"
            " of it; give the workers more memory (memory_limit), or fewer, larger workers"
        )
    where = "60% of the smallest worker memory limit, less what the worker uses beyond 20%"
    least = min(min(0.6 * limit, to_pause[a]) for a, limit in limits.items())
    return Budget(least, where, peak_room=peak_room, workers=len(limits))


def free_bytes(X):
    """Bytes free where ``X`` (array or namespace) lives: a GPU's (with CuPy's pool), the host's."""
    if backend.is_cupy(X if isinstance(X, types.ModuleType) else backend.namespace(X)):
        import cupy

        pool = cupy.get_default_memory_pool()
        return int(cupy.cuda.runtime.memGetInfo()[0]) + int(pool.free_bytes())
    return int(psutil.virtual_memory().available)


def device_free_bytes(device):
    """:func:`free_bytes` of ``device`` ("cpu": the host; "cuda": this process's GPU) here."""
    return free_bytes(backend.device_namespace(device))


def device_total_bytes(device):
    """Total bytes of the memory of ``device`` ("cpu": the host's; "cuda": the GPU's) here."""
    if backend.is_cupy(backend.device_namespace(device)):
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[1])
    return int(psutil.virtual_memory().total)


def gram_device(device, meta=None):
    """``"cuda"`` where a dask fit's Gram is on the GPUs (device, or CuPy ``meta``), else None."""
    on_gpu = backend.is_array_api(meta) and backend.is_cupy(backend.namespace(meta))
    return "cuda" if device == "cuda" or on_gpu else None


def _shortfall(size, need, budget, extra=""):
    msg = f"the {size} x {size} Gram matrix needs {need:,} bytes ({need / 2**30:.2f} GiB){extra} "
    return msg + f"but the budget ({budget.where}) is {int(budget.bytes):,} bytes"


_LARGER = "or pass a larger max_gram_bytes"
_ADVICE = {
    "dual": "use fewer samples, solver='primal' (an n_features x n_features Gram) if "
    f"n_features < n_samples, {_LARGER}",
    "primal": "use fewer features, solver='dual' (an n_samples x n_samples Gram) if "
    f"n_samples < n_features, {_LARGER}",
    "kernel": "use fewer samples, pass dask arrays (the Gram is then factorised blocked across "
    f"the workers), {_LARGER}",
    "linear": f"reduce the inputs (n_components: input PCA), {_LARGER}",
    "recovery": "use recovery 'cubic', 'linear' or 'spectral' (maps of n_in x n_out bytes, for "
    "fine grids), the separable map (separable=True: one Gram per grid axis), fewer features "
    "(n_features; 16 per grid point by default) or a coarser grid",
    "search": "search on fewer samples (the final stage scores whole training splits; fit the "
    f"winner's parameters on all of them), use a cv with smaller training splits, {_LARGER}",
    None: f"use a smaller problem {_LARGER}",
}


def _listing(held):
    """``{what: bytes}`` as words: "A (1 bytes), B (2 bytes) and C (3 bytes)"."""
    parts = [f"{what} ({int(n):,} bytes)" for what, n in held.items()]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def check_gram_memory(size, dtype, max_bytes=None, client=None, solver=None, peak_copies=1,
                      xp=None, beside=0, held=None, device=None, budget=None):  # fmt: skip
    """ValueError if a ``size x size`` Gram and ``held`` ({what: bytes}) exceed the budget, or
    ``peak_copies`` of it and ``beside`` bytes :attr:`Budget.peak_room`; returns its bytes."""
    need = int(size) ** 2 * np.dtype(dtype).itemsize
    budget = budget if budget is not None else memory_budget(max_bytes, client, xp, device)
    extra = int(sum((held or {}).values()))
    if need + extra > budget.bytes:
        advice = _ADVICE[solver]
        if extra > need and solver in ("dual", "primal"):  # the features set the size
            advice = f"use fewer features, or {advice}"
        with_it = f", and {extra:,} more bytes for {_listing(held)} held with it," if extra else ""
        raise ValueError(f"{_shortfall(size, need, budget, with_it)}; {advice}")
    total = peak_copies * need + int(beside)
    if total > need and budget.peak_room is not None and total > budget.peak_room:
        holds = "a worker holds one"
        if peak_copies > 1:
            holds = f"the worker that sums the workers' Grams holds {peak_copies}"
        if beside:
            holds += f" beside {int(beside):,} bytes of frequencies"
        raise ValueError(
            f"the {size} x {size} Gram matrix needs {need:,} bytes, and {holds}: {total:,} bytes "
            f"against the {int(budget.peak_room):,} {budget.peak_line}; {_ADVICE[solver]}, or "
            "give the workers more memory"
        )
    return need


def _check_available(held, what, owner, advice, where=""):
    """ValueError when ``held`` (``{what: bytes}``) exceed the available memory; returns bytes."""
    need, available = int(sum(held.values())), free_bytes(np)
    if need > available:
        raise ValueError(
            f"{what} needs {need:,} bytes ({need / 2**30:.2f} GiB){where} for {_listing(held)}, "
            f"but {owner} has {available:,} bytes ({available / 2**30:.2f} GiB) available; {advice}"
        )
    return need


def check_host_memory(held, dtype, fewer="features (n_features)"):
    """ValueError when the model's arrays ``held`` exceed the available memory; returns bytes."""
    half = ", dtype='float32' (half the bytes)" if np.dtype(dtype).itemsize > 4 else ""
    advice = f"use fewer {fewer}{half} or fewer output points: these arrays are the model, "
    advice += "whichever the solver"
    return _check_available(held, "the fitted model", "it", advice, " in this process")


def check_prediction_memory(M, m, dtype, m_out=None):
    """ValueError when in-memory predictions (and values on an output grid) would not fit."""
    held = {f"the {M} x {m} predictions": int(M) * int(m) * np.dtype(dtype).itemsize}
    if m_out is not None:
        held[f"their {M} x {m_out} values on output_grid"] = int(M) * int(m_out) * 8
    advice = "predict in parts (a slice of the samples at a time, X[i:j]), or pass a dask array "
    advice += "(dask.array.from_array(X, chunks=...)) for a lazy prediction"
    return _check_available(held, f"predicting {M} samples in memory", "this process", advice)


def check_tile_memory(rows, n_features, dtype, max_gram_bytes=None, client=None, n_inputs=0):
    """ValueError when a blocked dual's Gram tile task exceeds :attr:`Budget.peak_room`."""
    freq = (int(n_inputs) + 1) * int(n_features) if n_inputs else 0  # Omega and b
    need = (2 * int(rows) * int(n_features) + int(rows) ** 2 + freq) * np.dtype(dtype).itemsize
    if (room := memory_budget(max_gram_bytes, client).peak_room) is not None and need > room:
        what = f", their tile and the {n_inputs} x {n_features} frequencies" if n_inputs else ""
        what = what or " and their tile"
        raise ValueError(
            f"a Gram tile of the blocked dual needs {need:,} bytes (two blocks of {rows} rows x "
            f"{n_features} features{what}) but a worker has {int(room):,} before "
            "dask pauses it: use fewer features, smaller sample chunks, or more memory per worker"
        )
    return need


@dataclass(frozen=True)
class DualPlan:
    """A dask dual fit's Gram: ``blocked`` (``reason``) or streamed in ``slab_bytes`` slabs."""

    blocked: bool
    slab_bytes: int
    reason: str = ""


def dual_plan(M, dtype, max_gram_bytes=None, client=None, *, held_bytes=0, n_features=0,
              n_inputs=0, device=None, warn=True, summed=True, held_what="the data"):  # fmt: skip
    """The :class:`DualPlan` of a dask dual of ``M`` samples: streamed where a worker holds a Gram,
    ``held_bytes`` and two feature slabs (and, ``summed``, two Grams below ``peak_room``), else
    blocked, with a :class:`~rfol_dask.exceptions.MemoryPlanWarning` if ``warn``."""
    itemsize = np.dtype(dtype).itemsize
    budget = memory_budget(max_gram_bytes, client, device=device)
    gram = int(M) ** 2 * itemsize
    column = (int(M) + (int(n_inputs) + 1 if n_inputs else 0)) * itemsize
    smallest = column * min(int(n_features), MIN_SLAB_COLUMNS)
    pair = 2 * gram + held_bytes
    room = budget.peak_room
    reduction_fits = not summed or room is None or budget.workers < 2 or pair <= room
    steady_fits = gram + held_bytes + 2 * smallest <= budget.bytes
    if steady_fits and reduction_fits:
        room = max(int((budget.bytes - gram - held_bytes) / 2), smallest)
        room = room * int(M) * itemsize // column  # the features' share: slab_bytes counts them
        slab = int(dask.config.get("rfol_dask.slab-bytes", SLAB_BYTES))
        return DualPlan(blocked=False, slab_bytes=min(slab, room) if n_features else 0)
    extra = ""
    if held_bytes or smallest:
        held = f"{held_what} and the feature slabs" if smallest else held_what
        extra = f", and {held_bytes + 2 * smallest:,} more bytes for {held} held with it,"
    reduction = f"a worker that sums the {budget.workers} workers' Grams holds two: {pair:,} "
    reduction += f"bytes against the {int(room or 0):,} {budget.peak_line}"
    if steady_fits:  # the budget holds one Gram, the sum does not fit
        reason = f"the {M} x {M} Gram matrix needs {gram:,} bytes ({gram / 2**30:.2f} GiB), but "
        reason += reduction
    else:
        reason = _shortfall(M, gram, budget, extra)
        reason += "" if reduction_fits else f"; and {reduction}"
    if warn:
        msg = f"{reason}: factorising it blocked, across the workers"
        warnings.warn(msg, MemoryPlanWarning, stacklevel=user_stacklevel())
    return DualPlan(blocked=True, slab_bytes=0, reason=reason)


def keeps_features(client, M, N, dtype):
    """Whether the tiled dual keeps ``A`` (M x N) for ``C``: <= 30 % of the cluster's memory."""
    limits = list(_worker_limits(client).values()) or [psutil.virtual_memory().available]
    return M * N * np.dtype(dtype).itemsize <= 0.3 * sum(limits)


def gram_slots(size, dtype, max_gram_bytes=None, client=None, beside=0, with_each=0, budget=None):
    """How many Grams (each with ``with_each`` bytes) a worker holds beside ``beside`` (>= 1)."""
    each = int(size) ** 2 * np.dtype(dtype).itemsize + int(with_each)
    budget = budget if budget is not None else memory_budget(max_gram_bytes, client)
    return max(1, int((budget.bytes - beside) // max(each, 1)))


def n_slots(client):
    """Task threads of the client's workers (this machine's cores without a client)."""
    if client is not None:
        return max(1, sum(w["nthreads"] for w in scheduler_workers(client).values()))
    return os.cpu_count() or 1
