"""Where tasks run: values shipped once to every worker, tasks pinned (loosely) to a worker,
and the worker a task runs on."""

from __future__ import annotations

import contextlib
import uuid

import dask

from .linalg import factor_threads
from .progress import active_client, scheduler_workers

__all__ = ["EMBED_BYTES", "broadcast", "pinned", "on_one_worker", "worker_addresses", "current_worker", "worker_threads"]


def _identity(x):
    return x


#: values of fewer bytes (all together) stay in the graph rather than being scattered: a lazy
#: result that uses them can then be computed after its client has closed, or by another one.
#: Below distributed's large-graph warning (``admin.large-graph-warning-threshold``, 10 MB),
#: which a graph holding the values would give at every compute, with room for the rest of it.
EMBED_BYTES = 8 * 2**20


def _nbytes(value):
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return int(getattr(value, "nbytes", 0))


def broadcast(client, *values):
    """Delayed handles of values every task needs (frequencies, fitted arrays): scattered to
    every worker once with a distributed client (when they hold :data:`EMBED_BYTES` or more),
    else kept as single graph values; never copied into each task. The handles serve as
    arguments of delayed calls and map_blocks. A result built on scattered values needs that
    client until it is computed (or persisted)."""
    if client is not None and _nbytes(values) >= EMBED_BYTES:
        # named keys: computed without that client, the graph fails naming what it missed
        # ("Missing dependency arrays-scattered-by-the-client-of-this-result-...")
        names = [f"arrays-scattered-by-the-client-of-this-result-{uuid.uuid4().hex}" for _ in values]
        futures = client.scatter(dict(zip(names, values)), broadcast=True)
        return [dask.delayed(_identity, pure=True)(futures[k]) for k in names]
    return [dask.delayed(v, pure=True, traverse=False) for v in values]


def pinned(worker):
    """``dask.annotate`` preferring ``worker`` (loosely: another takes over if it dies); a
    no-op for ``None``."""
    if worker is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[worker], allow_other_workers=True)


def worker_addresses(client):
    """The client's worker addresses, sorted; ``[None]`` without a client (one local "worker")."""
    return sorted(scheduler_workers(client)) if client is not None else [None]


def on_one_worker():
    """``dask.annotate`` preferring one worker of the active distributed client (else a no-op)."""
    return pinned(worker_addresses(active_client())[0])


def current_worker():
    """The distributed worker running this task, or None (local schedulers, the client)."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def worker_threads():
    """BLAS threads for a task that runs alone on its worker: the worker's task threads in a
    distributed worker, else every core (local schedulers run one chain at a time)."""
    worker = current_worker()
    return max(1, int(worker.state.nthreads)) if worker is not None else factor_threads()
