"""Memory policy of the fits: budgets, the Gram pre-check, the layout of the dask dual fit, and
the sizes of the blocks the algorithms hold at a time.

A budget is ``max_gram_bytes`` when the user gives one, else, for the workers of a distributed
client that have memory limits, the smallest of ``min(0.6 limit, 0.8 limit - used)`` (``used``
the memory the worker process holds once it has imported this package: a small worker's own
footprint is a large share of its limit, and dask pauses a worker at 80 %), else 60 % of this
machine's available memory. A Gram on GPUs has :data:`DEVICE_SHARE` (60 %) of the GPU's free
memory instead: an in-memory fit of CuPy arrays this process's GPU, a dask fit or a search on
GPU workers (``device="cuda"``) the least free GPU memory of the client's workers (of this
process without a client), whatever their host memory. A ``max_gram_bytes`` beyond what the
Gram's memory holds in all (the smallest worker limit, this machine's memory, or the smallest
total memory of the GPUs) is kept, with a warning.
"""

from __future__ import annotations

import os
import types
import warnings
from dataclasses import dataclass

import dask
import numpy as np

from . import backend
from .exceptions import MemoryPlanWarning, SettingWarning
from .progress import scheduler_workers
from .stacklevel import user_stacklevel

__all__ = [
    "ROW_BLOCK_BYTES",
    "SLAB_BYTES",
    "MIN_SLAB_COLUMNS",
    "DEVICE_SHARE",
    "Budget",
    "memory_budget",
    "free_bytes",
    "device_free_bytes",
    "device_total_bytes",
    "gram_device",
    "check_gram_memory",
    "check_host_memory",
    "check_prediction_memory",
    "check_tile_memory",
    "DualPlan",
    "dual_plan",
    "MemoryPlan",
    "memory_plan",
    "gram_slots",
    "n_slots",
]

#: bytes of the rows of ``A`` formed at once by the in-memory primal path and by ``predict``
ROW_BLOCK_BYTES = 128 * 2**20

#: bytes of one feature slab ``A[:, f0:f1]`` in the streamed dual (dask config
#: ``rfol_dask.slab-bytes`` overrides it); smaller where the worker memory asks for it
SLAB_BYTES = 256 * 2**20

#: the narrowest feature slab the streamed dual uses before it factorises blocked instead
MIN_SLAB_COLUMNS = 64

#: share of a GPU's free memory that a fit or a search on it may take
DEVICE_SHARE = 0.6


@dataclass(frozen=True)
class Budget:
    """Bytes one process may give to a fit.

    Attributes
    ----------
    bytes : float
        The budget.
    where : str
        Where it comes from, for messages (``"max_gram_bytes"``, a share of worker memory...).
    peak_room : float or None
        What a worker may hold at the brief peak of a step that holds more than the budget (the
        sum of the workers' Grams): from worker limits, the least over the workers of what a
        worker may still take before dask pauses it (``0.8 limit - used``; None when the workers
        do not pause, ``distributed.worker.memory.pause: false``); for Grams on GPUs, the least
        free GPU memory of a client's workers, in full (dask pauses on host memory only; beyond
        it the allocation fails). None otherwise (``max_gram_bytes``, no client).
    peak_line : str
        What ``peak_room`` is, for messages (after the number of bytes).
    workers : int
        Workers of the client (1 without one).
    """

    bytes: float
    where: str
    peak_room: float | None = None
    workers: int = 1
    peak_line: str = "it has before dask pauses it"


def _worker_limits(client):
    """Memory limits {address: bytes} of the client's workers; empty unless every worker has one."""
    workers = scheduler_workers(client) if client is not None else {}
    limits = {a: w.get("memory_limit") or 0 for a, w in workers.items()}
    return limits if limits and min(limits.values()) > 0 else {}


def _process_memory():
    """Bytes this process holds (run on the workers, where it first imports this package, as a fit will)."""
    import psutil

    return psutil.Process().memory_info().rss


def _warn_above_limit(max_bytes, limits, xp=None, device=None, client=None):
    """A warning when ``max_gram_bytes`` is more than a worker (or, without workers, this
    machine) can hold, or, for a Gram on GPUs (``xp`` CuPy, or ``device`` ``"cuda"``), the
    smallest total memory of the client's workers' GPUs (:func:`device_total_bytes` run on each;
    of this process's GPU without a client or with ``xp``): it overrides the memory checks, so the
    fit would get workers killed."""
    on_gpu = device not in (None, "cpu")
    if (xp is not None and backend.is_cupy(xp)) or (on_gpu and client is None):
        cap, what = device_total_bytes(device if on_gpu else "cuda"), "the GPU's memory"
    elif on_gpu:
        from .placement import worker_addresses

        totals = client.run(device_total_bytes, device, workers=worker_addresses(client))
        address = min(totals, key=totals.get)
        cap, what = totals[address], f"the total GPU memory of worker {address}"
    elif limits:
        address = min(limits, key=limits.get)
        cap, what = limits[address], f"the memory limit of worker {address}"
    else:
        import psutil

        cap, what = psutil.virtual_memory().total, "this machine's memory"
    if max_bytes > cap:
        warnings.warn(
            f"max_gram_bytes={int(max_bytes):,} is more than {what} ({int(cap):,} bytes); it "
            "overrides the memory checks, so a Gram of that size gets the process killed, not "
            "refused",
            SettingWarning,
            stacklevel=user_stacklevel(),
        )


def memory_budget(max_bytes=None, client=None, xp=None, device=None):
    """The :class:`Budget` of one process (see the module docstring for the rule); with ``xp``
    CuPy (an in-memory fit on this process's GPU) :data:`DEVICE_SHARE` of the GPU's free memory;
    with ``device`` ``"cuda"`` (a Gram on the GPUs of the client's workers, or of this process
    without a client) :data:`DEVICE_SHARE` of the least free GPU memory among them
    (:func:`device_free_bytes` run on each), and on a client's workers that least free GPU memory
    in full as its :attr:`Budget.peak_room` (dask pauses on host memory only)."""
    limits = _worker_limits(client)
    if max_bytes is not None:
        _warn_above_limit(float(max_bytes), limits, xp, device, client)
        return Budget(float(max_bytes), "max_gram_bytes")
    if xp is not None and backend.is_cupy(xp):
        return Budget(DEVICE_SHARE * free_bytes(xp), f"{DEVICE_SHARE:.0%} of the GPU's free memory")
    if device not in (None, "cpu"):
        if client is None:
            return Budget(
                DEVICE_SHARE * device_free_bytes(device),
                f"{DEVICE_SHARE:.0%} of the GPU's free memory",
            )
        from .placement import worker_addresses  # waits for a first worker, else NoWorkersError

        free = client.run(device_free_bytes, device, workers=worker_addresses(client))
        return Budget(
            DEVICE_SHARE * min(free.values()),
            f"{DEVICE_SHARE:.0%} of the least free GPU memory of the {len(free)} worker(s)",
            peak_room=min(free.values()),
            workers=len(free),
            peak_line="bytes of GPU memory free on the least free worker",
        )
    if limits:
        used = client.run(_process_memory)
        to_pause = {
            a: 0.8 * limit - used.get(a, 0) for a, limit in limits.items()
        }  # room below the pause line
        tightest = min(to_pause, key=to_pause.get)
        peak_room = to_pause[tightest]
        if not dask.config.get(
            "distributed.worker.memory.pause", 0.8
        ):  # False: workers never pause
            peak_room = None
        elif peak_room <= 0:
            raise ValueError(
                f"the workers have no memory to spare: worker {tightest} holds "
                f"{int(used.get(tightest, 0)):,} bytes of its {int(limits[tightest]):,}-byte limit, and "
                "dask pauses a worker at 80 % of it; give the workers more memory (memory_limit), or "
                "fewer, larger workers"
            )
        room = min(min(0.6 * limit, to_pause[a]) for a, limit in limits.items())
        return Budget(
            room,
            "60% of the smallest worker memory limit, less what the worker uses beyond 20%",
            peak_room=peak_room,
            workers=len(limits),
        )
    import psutil

    return Budget(0.6 * psutil.virtual_memory().available, "60% of the available memory")


def free_bytes(X):
    """Bytes that the memory holding ``X`` (an array, or a namespace) still has free: the GPU's
    (CuPy: free device memory plus the pool's free blocks), else the host's available memory."""
    if backend.is_cupy(X if isinstance(X, types.ModuleType) else backend.namespace(X)):
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[0]) + int(
            cupy.get_default_memory_pool().free_bytes()
        )
    import psutil

    return int(psutil.virtual_memory().available)


def device_free_bytes(device):
    """:func:`free_bytes` of ``device`` ("cpu": the host; "cuda": this process's GPU) where this
    runs (``client.run`` it on the workers)."""
    return free_bytes(backend.device_namespace(device))


def device_total_bytes(device):
    """Total bytes of the memory of ``device`` ("cpu": the host's; "cuda": this process's GPU's)
    where this runs (``client.run`` it on the workers)."""
    if backend.is_cupy(backend.device_namespace(device)):
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[1])
    import psutil

    return int(psutil.virtual_memory().total)


def gram_device(device, meta=None):
    """``"cuda"`` where a dask fit's or a search's Gram lives on the workers' GPUs (``device``
    ``"cuda"``, or CuPy chunks: ``meta`` is the dask array's ``_meta``), else None (the host)."""
    on_gpu = backend.is_array_api(meta) and backend.is_cupy(backend.namespace(meta))
    return "cuda" if device == "cuda" or on_gpu else None


def _shortfall(size, need, budget, extra=""):
    return (
        f"the {size} x {size} Gram matrix needs {need:,} bytes ({need / 2**30:.2f} GiB){extra} but the "
        f"budget ({budget.where}) is {int(budget.bytes):,} bytes"
    )


_ADVICE = {
    "dual": "use fewer samples, solver='primal' (an n_features x n_features Gram) if n_features < n_samples, "
    "or pass a larger max_gram_bytes",
    "primal": "use fewer features, solver='dual' (an n_samples x n_samples Gram) if n_samples < n_features, "
    "or pass a larger max_gram_bytes",
    "kernel": "use fewer samples, pass dask arrays (the Gram is then factorised blocked across the workers), "
    "or pass a larger max_gram_bytes",
    "linear": "reduce the inputs (n_components: input PCA), or pass a larger max_gram_bytes",
    "recovery": "use recovery 'cubic', 'linear' or 'spectral' (maps of n_in x n_out bytes, for fine grids), "
    "the separable map (separable=True: one Gram per grid axis), fewer features (n_features; 16 per "
    "grid point by default) or a coarser grid",
    "search": "search on fewer samples (the final stage scores whole training splits; fit the winner's "
    "parameters on all of them), use a cv with smaller training splits, or pass a larger max_gram_bytes",
    None: "use a smaller problem or pass a larger max_gram_bytes",
}


def _listing(held):
    """``{what: bytes}`` as words: "A (1 bytes), B (2 bytes) and C (3 bytes)"."""
    parts = [f"{what} ({int(n):,} bytes)" for what, n in held.items()]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def check_gram_memory(
    size,
    dtype,
    max_bytes=None,
    client=None,
    solver=None,
    peak_copies=1,
    xp=None,
    beside=0,
    held=None,
    device=None,
    budget=None,
):
    """Raise ValueError if a ``size x size`` Gram of ``dtype`` exceeds the :func:`memory_budget`,
    or if ``peak_copies`` of it (a sum of several workers' Grams held on one) exceed what a worker
    has at a peak (:attr:`Budget.peak_room`, when known: before dask pauses it, or on GPUs their
    least free memory); returns the bytes one needs. ``solver`` (``"dual"``, ``"primal"``,
    ``"kernel"``, ``"linear"`` (the linear kernel's primal), ``"recovery"``, ``"search"`` or None)
    picks the advice; ``xp`` the namespace of an in-memory fit (CuPy: the GPU's budget);
    ``device``: ``"cuda"`` for a Gram on the GPUs of the client's workers (their budget);
    ``beside``: bytes the worker holds with the Gram (the primal's frequencies), counted against the pause line; ``held``:
    ``{what: bytes}`` an in-memory fit holds with the Gram (its features, frequencies...), the
    Gram and those together checked against the budget (the message names each). ``budget``: the
    :class:`Budget` to check against, when the caller has it already (else :func:`memory_budget`, which
    asks the workers)."""
    need = int(size) ** 2 * np.dtype(dtype).itemsize
    budget = budget if budget is not None else memory_budget(max_bytes, client, xp, device)
    extra = int(sum((held or {}).values()))
    if need + extra > budget.bytes:
        advice = _ADVICE[solver]
        if (
            extra > need
        ):  # what the Gram holds with it sets the size: its features grow with n_features
            advice = f"use fewer features, or {advice}" if solver in ("dual", "primal") else advice
        with_it = f", and {extra:,} more bytes for {_listing(held)} held with it," if extra else ""
        raise ValueError(f"{_shortfall(size, need, budget, with_it)}; {advice}")
    total = peak_copies * need + int(beside)
    if total > need and budget.peak_room is not None and total > budget.peak_room:
        held = (
            f"the worker that sums the workers' Grams holds {peak_copies}"
            if peak_copies > 1
            else "a worker holds one"
        )
        raise ValueError(
            f"the {size} x {size} Gram matrix needs {need:,} bytes, and {held}"
            + (f" beside {int(beside):,} bytes of frequencies" if beside else "")
            + f": {total:,} bytes against the {int(budget.peak_room):,} {budget.peak_line}; "
            f"{_ADVICE[solver]}, or give the workers more memory"
        )
    return need


def check_host_memory(held, dtype, fewer="features (n_features)"):
    """ValueError when the arrays this process must hold once a fit is done, ``held`` (``{what:
    bytes}``: the model's arrays in ``dtype``, e.g. its frequencies and coefficients, which a dask
    fit gathers here from the workers), exceed its available memory (:func:`free_bytes`): numpy
    would fail to allocate them at the end of the fit. ``max_gram_bytes`` (a budget for the Gram)
    does not lift it. ``fewer``: what the advice says to use fewer of (the model's size). Returns
    their bytes."""
    need = int(sum(held.values()))
    available = free_bytes(np)
    if need > available:
        half = ", dtype='float32' (half the bytes)" if np.dtype(dtype).itemsize > 4 else ""
        raise ValueError(
            f"the fitted model needs {need:,} bytes ({need / 2**30:.2f} GiB) in this process for "
            f"{_listing(held)}, but it has {available:,} bytes ({available / 2**30:.2f} GiB) available; "
            f"use fewer {fewer}{half} or fewer output points: these arrays are the model, "
            "whichever the solver"
        )
    return need


def check_prediction_memory(M, m, dtype, m_out=None):
    """ValueError when an in-memory ``predict`` of ``M`` samples would not fit this process's
    available memory (:func:`free_bytes`, read once): its ``M x m`` predictions in ``dtype`` and,
    with ``m_out`` (the points of an ``output_grid`` other than the training one), their values
    resampled there (in float64, as the recovery maps work). At least these are allocated whole;
    the row blocks of the features and the recovery's intermediates come on top. Without it
    numpy's MemoryError ended the prediction. Returns their bytes."""
    held = {f"the {M} x {m} predictions": int(M) * int(m) * np.dtype(dtype).itemsize}
    if m_out is not None:
        held[f"their {M} x {m_out} values on output_grid"] = int(M) * int(m_out) * 8
    need = int(sum(held.values()))
    available = free_bytes(np)
    if need > available:
        raise ValueError(
            f"predicting {M} samples in memory needs {need:,} bytes ({need / 2**30:.2f} GiB) for "
            f"{_listing(held)}, but this process has {available:,} bytes ({available / 2**30:.2f} GiB) "
            "available; predict in parts (a slice of the samples at a time, X[i:j]), or pass a dask "
            "array (dask.array.from_array(X, chunks=...)) for a lazy prediction"
        )
    return need


def check_tile_memory(rows, n_features, dtype, max_gram_bytes=None, client=None, n_inputs=0):
    """ValueError when one Gram tile task of the blocked dual, two row blocks of ``rows`` x
    ``n_features`` features and their ``rows x rows`` tile, with the frequencies (``n_inputs x
    n_features``, which its worker holds), exceeds what a worker has before dask pauses it
    (:attr:`Budget.peak_room`; not checked without worker limits or with ``max_gram_bytes``);
    returns its bytes."""
    itemsize = np.dtype(dtype).itemsize
    freq = (int(n_inputs) + 1) * int(n_features) if n_inputs else 0  # Omega and b
    need = (2 * int(rows) * int(n_features) + int(rows) ** 2 + freq) * itemsize
    budget = memory_budget(max_gram_bytes, client)
    if budget.peak_room is not None and need > budget.peak_room:
        what = (
            f", their tile and the {n_inputs} x {n_features} frequencies"
            if n_inputs
            else " and their tile"
        )
        raise ValueError(
            f"a Gram tile of the blocked dual needs {need:,} bytes (two blocks of {rows} rows x "
            f"{n_features} features{what}) but a worker has {int(budget.peak_room):,} before dask "
            "pauses it: use fewer features, smaller sample chunks, or more memory per worker"
        )
    return need


@dataclass(frozen=True)
class DualPlan:
    """How a dask dual fit holds the M x M Gram.

    Attributes
    ----------
    blocked : bool
        The Gram (with what a worker holds alongside it) does not fit one worker: it is
        factorised blocked across the workers (tiles of row blocks) instead.
    slab_bytes : int
        Bytes of one feature slab (M x slab width) of the streamed dual (0 when blocked or
        when the fit has no feature slabs).
    reason : str
        Why the plan is blocked, the sizes against the budget, for messages ("" when not).
    """

    blocked: bool
    slab_bytes: int
    reason: str = ""


def dual_plan(
    M,
    dtype,
    max_gram_bytes=None,
    client=None,
    *,
    held_bytes=0,
    n_features=0,
    n_inputs=0,
    device=None,
    warn=True,
    summed=True,
    held_what="the data",
):
    """The :class:`DualPlan` of a dask dual fit of ``M`` samples.

    A worker of the streamed dual holds its Gram (``M^2``), ``held_bytes`` besides (the inputs
    and outputs) and up to two feature slabs (the slab and its temporaries) of ``n_features``
    columns in all: the slab is shrunk (from ``SLAB_BYTES``) to what the budget leaves, down to
    :data:`MIN_SLAB_COLUMNS` columns. Without ``n_features`` (a kernel fit) only the Gram and
    ``held_bytes`` count. With several workers (limits known) and ``summed`` (the streamed dual:
    each worker makes a Gram; not a kernel fit, whose Gram is assembled from tiles on one worker)
    a worker that sums two Grams (a pairwise tree) holds the second while it adds it: ``2 M^2 + held_bytes`` must stay below the
    pause line (:attr:`Budget.peak_room`); on GPUs, where the Grams are added on the workers' GPUs,
    below the least free GPU memory of the workers in full (an in-place sum: a brief peak with no
    workspace, where :data:`DEVICE_SHARE` leaves room for the steady state's temporaries). If
    they do not fit, a :class:`~rfol_dask.exceptions.MemoryPlanWarning` says so (unless not ``warn``) and the plan is blocked.
    ``device`` ``"cuda"``: the Gram lives on the workers' GPUs, the budget is theirs
    (:func:`memory_budget`).
    ``held_what``: what ``held_bytes`` are, for the message (a kernel fit: a row of Gram tiles).
    A slab's column costs its ``M`` features and its ``n_inputs + 1`` frequencies (at n = 6250
    inputs and M = 3000 samples the frequencies are twice the features: uncounted, they killed
    the workers of a plan that fitted on paper).
    """
    itemsize = np.dtype(dtype).itemsize
    budget = memory_budget(max_gram_bytes, client, device=device)
    gram = int(M) ** 2 * itemsize
    column = (
        int(M) + (int(n_inputs) + 1 if n_inputs else 0)
    ) * itemsize  # features and frequencies
    smallest = column * min(int(n_features), MIN_SLAB_COLUMNS)
    reduction_fits = (
        not summed
        or budget.peak_room is None
        or budget.workers < 2
        or 2 * gram + held_bytes <= budget.peak_room
    )
    steady_fits = gram + held_bytes + 2 * smallest <= budget.bytes
    if steady_fits and reduction_fits:
        room = max(int((budget.bytes - gram - held_bytes) / 2), smallest)
        room = (
            room * int(M) * itemsize // column
        )  # the features' share of it: slab_bytes counts them
        slab = (
            min(int(dask.config.get("rfol_dask.slab-bytes", SLAB_BYTES)), room) if n_features else 0
        )
        return DualPlan(blocked=False, slab_bytes=slab)
    extra = ""
    if held_bytes or smallest:
        held = (
            f"{held_what} and the feature slabs" if smallest else held_what
        )  # a kernel fit has no slabs
        extra = f", and {held_bytes + 2 * smallest:,} more bytes for {held} held with it,"
    reduction = (
        ""
        if reduction_fits
        else (
            f"a worker that sums the {budget.workers} workers' Grams holds two: {2 * gram + held_bytes:,} "
            f"bytes against the {int(budget.peak_room):,} {budget.peak_line}"
        )
    )
    if steady_fits:  # the sum alone does not fit: the budget holds one Gram
        reason = f"the {M} x {M} Gram matrix needs {gram:,} bytes ({gram / 2**30:.2f} GiB), but {reduction}"
    else:
        reason = _shortfall(M, gram, budget, extra) + (
            "" if reduction_fits else f"; and {reduction}"
        )
    if warn:
        warnings.warn(
            f"{reason}: factorising it blocked, across the workers",
            MemoryPlanWarning,
            stacklevel=user_stacklevel(),
        )
    return DualPlan(blocked=True, slab_bytes=0, reason=reason)


@dataclass(frozen=True)
class MemoryPlan:
    """How the tiled dask dual fit uses memory.

    Attributes
    ----------
    keep_features : bool
        The row blocks of ``A`` (M x N in all) stay in memory for ``C = A^T Beta``; otherwise
        they are made again from the inputs (``2 M n N`` more flops instead of holding ``A``).
    """

    keep_features: bool


def memory_plan(client, M, N, dtype):
    """The :class:`MemoryPlan` of a tiled dual fit of ``M`` samples and ``N`` features: the
    features are kept if ``A`` takes at most 30 % of the cluster's memory (all worker limits,
    else this machine's available memory)."""
    limits = list(_worker_limits(client).values())
    if not limits:
        import psutil

        limits = [psutil.virtual_memory().available]
    return MemoryPlan(keep_features=M * N * np.dtype(dtype).itemsize <= 0.3 * sum(limits))


def gram_slots(size, dtype, max_gram_bytes=None, client=None, beside=0, with_each=0, budget=None):
    """How many ``size x size`` Grams of ``dtype``, each with ``with_each`` more bytes, a worker
    (without a client, this process) may hold at once beside ``beside`` bytes within its
    :func:`memory_budget` (or the given :class:`Budget` ``budget``: the one a fit checked its Gram
    against, without asking the workers again), at least 1: the chains of the primal's sum each hold
    one with its ``N x m`` cross sum (:func:`rfol_dask.placement.worker_slots`); one per thread of a
    16-thread worker held 16."""
    each = int(size) ** 2 * np.dtype(dtype).itemsize + int(with_each)
    budget = budget if budget is not None else memory_budget(max_gram_bytes, client)
    return max(1, int((budget.bytes - beside) // max(each, 1)))


def n_slots(client):
    """Task threads of the client's workers (this machine's cores without a client)."""
    if client is not None:
        return max(1, sum(w["nthreads"] for w in scheduler_workers(client).values()))
    return os.cpu_count() or 1
