"""Where tasks run: values shipped once to a cluster, tasks pinned (loosely) to a worker,
and the worker a task runs on."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
import warnings
import weakref

import dask
from distributed import futures_of, get_client, get_worker

from .exceptions import NoWorkersError
from .linalg import factor_threads
from .progress import scheduler_workers


def _identity(x):
    return x


#: values of fewer bytes (all together) stay in the graph, larger ones go once (:func:`broadcast`)
EMBED_BYTES = 8 * 2**20  # below distributed's large-graph warning (10 MB)
#: seconds :func:`worker_addresses` waits for a first worker on a cluster that has none
WORKER_WAIT_S = 10


def _leaves(value):
    if isinstance(value, (list, tuple, dict)):
        values = value.values() if isinstance(value, dict) else value
        return [leaf for v in values for leaf in _leaves(v)]
    return [value]


def _nbytes(value):
    return sum(int(getattr(leaf, "nbytes", 0)) for leaf in _leaves(value))


class _Shipped:
    """Values held on a cluster by the task ``key`` (``future``): pickled as the bare key when its
    client sends them, else (a pickled lazy result) as the values: it computes wherever it goes."""

    def __init__(self, values, key, future=None):
        self.values, self.key, self.future = values, key, future

    def __reduce__(self):
        held = self.future is not None and self.future.status not in (None, "cancelled")
        if self.values is None or held and _sent_by(self.future.client):
            return _Shipped, (None, self.key)
        return _identity, (self.values,)


def _sent_by(client):
    """Whether the pickling under way is ``client`` sending a graph (its method on the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        if "self" in frame.f_code.co_varnames[:1] and frame.f_locals.get("self") is client:
            return True
        frame = frame.f_back
    return False


#: ``{key: values}``: the last values :func:`_shipped_values` fetched in this worker process
_FETCHED = {}


def _shipped_values(values):
    """The values of a :class:`_Shipped` (a bare key, as ``to_zarr`` inlines it: fetched)."""
    if not isinstance(values, _Shipped) or values.values is not None:
        return getattr(values, "values", values)
    worker, key = current_worker(), values.key
    if worker is not None and key in worker.data:
        return worker.data[key]
    if key not in _FETCHED and worker is not None:
        client = get_client()  # the worker's; the scheduler knows who holds the key
        got = client.sync(client.scheduler.gather, keys=[key])
        if got.get("status") == "OK":
            _FETCHED.clear()
            _FETCHED[key] = got["data"][key]
    if key not in _FETCHED:
        raise RuntimeError(
            f"{key}: this lazy result was sent without its arrays to a scheduler that did not "
            "hold them (restarted while it was sent); compute it again, or make it again"
        )
    return _FETCHED[key]


def broadcast(client, *values):
    """Delayed handles of values every task needs: in the graph below :data:`EMBED_BYTES` or without
    a client, else persisted on the cluster once (remade if their workers are lost) and reused."""
    if client is None or _nbytes(values) < EMBED_BYTES:
        return [dask.delayed(v, pure=True, traverse=False) for v in values]
    handles = []
    for value in values:
        ids = (id(client), tuple(map(id, _leaves(value))))
        # a live copy holds its client and leaves: their ids are theirs while it lives
        ref = _SHIPPED.get(ids)
        shipped = ref() if ref is not None else None
        if shipped is None or shipped.future.status in (None, "cancelled"):  # or forgotten
            shipped = _Shipped(value, f"arrays-shipped-once-{uuid.uuid4().hex}")
        handles.append(dask.delayed(_shipped_values, pure=True)(shipped, dask_key_name=shipped.key))
        if shipped.future is None:  # new: sent once, on purpose
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Sending large graph")
                (shipped.future,) = futures_of(client.persist(handles[-1]))
            _SHIPPED[ids] = weakref.ref(shipped, lambda _, ids=ids: _SHIPPED.pop(ids, None))
    return handles


#: (id of the client, ids of the values' leaves) -> weak reference to their live :class:`_Shipped`
_SHIPPED = {}


def pinned(worker):
    """``dask.annotate`` preferring ``worker`` (another takes over if it dies); None: a no-op."""
    if worker is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[worker], allow_other_workers=True)


def worker_addresses(client):
    """The client's worker addresses, sorted (``[None]`` without one), waiting for a first one."""
    if client is None:
        return [None]
    workers = scheduler_workers(client)
    if not workers:
        with contextlib.suppress(TimeoutError):
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        workers = scheduler_workers(client)
    if not workers:
        raise NoWorkersError(
            f"the dask cluster of the client has no workers (none arrived within {WORKER_WAIT_S} "
            "s): start some (cluster.scale(n), or cluster.adapt with a minimum >= 1) or wait for "
            "them (client.wait_for_workers(n)) before the fit; a memory_limit below the few "
            "hundred MB a worker process takes restarts them again and again"
        )
    return sorted(workers)


def ask_workers(client, func, *args):
    """``{address: func(*args)}`` of the workers that answer (none: once more, NoWorkersError)."""
    for _ in range(2):
        answers = client.run(func, *args, workers=worker_addresses(client), on_error="return")
        for answer in answers.values():
            if isinstance(answer, BaseException) and not isinstance(answer, OSError):
                raise answer
        answers = {a: r for a, r in answers.items() if not isinstance(r, OSError)}
        if answers:
            return answers
    raise NoWorkersError(
        f"every worker of the dask cluster was lost while asked for its memory ({func.__name__})"
        ": check that the workers stay up (their logs say why they ended) and run it again"
    )


def worker_slots(client, per_worker=None):
    """A worker address per task thread (``per_worker`` at most), first threads first."""
    cap = per_worker or float("inf")
    if client is None:
        return [None] * int(min(os.cpu_count() or 1, cap))
    workers = scheduler_workers(client)
    addresses = worker_addresses(client)  # waits for a first worker, else NoWorkersError
    nthreads = {a: workers[a]["nthreads"] if a in workers else 1 for a in addresses}
    threads = {a: max(1, int(min(n, cap))) for a, n in nthreads.items()}
    return [a for t in range(max(threads.values())) for a in addresses if threads[a] > t]


def current_worker():
    """The distributed worker running this task, or None (local schedulers, the client)."""
    with contextlib.suppress(ValueError):
        return get_worker()


def worker_threads():
    """BLAS threads of a task alone on its worker: the worker's task threads, else every core."""
    worker = current_worker()
    return max(1, int(worker.state.nthreads)) if worker is not None else factor_threads()
