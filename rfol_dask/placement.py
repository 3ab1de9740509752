"""Where tasks run: values shipped once to a cluster, tasks pinned (loosely) to a worker,
and the worker a task runs on."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
import warnings

import dask

from .exceptions import NoWorkersError
from .linalg import factor_threads
from .progress import active_client, scheduler_workers

__all__ = [
    "EMBED_BYTES",
    "WORKER_WAIT_S",
    "broadcast",
    "pinned",
    "first_worker",
    "worker_addresses",
    "worker_slots",
    "current_worker",
    "worker_threads",
]


def _identity(x):
    return x


#: values of fewer bytes (all together) stay in the graph rather than being shipped to the cluster
#: once (:func:`broadcast`), where its scheduler holds them as long as a result uses them.
#: Below distributed's large-graph warning (``admin.large-graph-warning-threshold``, 10 MB),
#: which a graph holding the values would give at every compute, with room for the rest of it.
EMBED_BYTES = 8 * 2**20

#: seconds :func:`worker_addresses` waits for a first worker on a cluster that has none (workers
#: still starting after ``cluster.scale``, killed ones that their nannies restart)
WORKER_WAIT_S = 10


def _nbytes(value):
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return int(getattr(value, "nbytes", 0))


class _Shipped:
    """Values shipped once to a cluster: the argument of the task of their key (``key``),
    persisted there (``future``). Pickled by the client of ``future`` for its scheduler
    (:func:`_sent_by`: a compute, persist or get of that client) while ``future`` is held, they
    are the bare key (its scheduler has the task and its values already); pickled anywhere else
    (another client or scheduler, ``pickle`` / ``joblib`` of a lazy result, after
    ``client.restart()`` or with the client closed), the values themselves, so that the graph
    computes wherever it goes. A bare key pickles as itself. Local schedulers read them in process."""

    def __init__(self, values, key, future=None):
        self.values, self.key, self.future = values, key, future

    def __reduce__(self):
        held = self.future is not None and self.future.status not in (
            None,
            "cancelled",
        )  # held, lost or not
        if self.values is None or held and _sent_by(self.future.client):
            return _Shipped, (None, self.key)
        return _identity, (self.values,)


def _sent_by(client):
    """Whether the pickling under way is ``client`` sending a graph to its scheduler: a method of
    ``client`` (``compute``, ``persist``, ``get``, ...) on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if "self" in frame.f_code.co_varnames[:1] and frame.f_locals.get("self") is client:
            return True
        frame = frame.f_back
    return False


def _shipped_values(values):
    """The task of a :class:`_Shipped` key: its values. A bare key run as part of another task
    (dask's ``ProhibitReuse`` inlines every task of a lazy result passed to ``dask.delayed``, as
    ``to_zarr`` does) gets them from the cluster that holds the key (:func:`_held_values`)."""
    if not isinstance(values, _Shipped):
        return values
    if values.values is None:  # sent as the bare key
        held = _held_values(values.key)
        if held is None:  # to a scheduler that did not hold it
            raise RuntimeError(
                f"{values.key}: this lazy result was sent without its arrays to a scheduler that "
                "did not hold them (restarted while it was sent); compute it again, or make it again"
            )
        return held
    return values.values


#: ``{key: values}``: the last values :func:`_held_values` fetched in this worker process (one copy
#: for all the tasks of a prediction here, rather than one fetch per task)
_FETCHED = {}


def _held_values(key):
    """The values of the :class:`_Shipped` key ``key`` held by the cluster of the worker running
    this task, or None (not on a distributed worker, or the cluster does not hold them). Memory:
    the values, kept in this process until other values are fetched."""
    worker = current_worker()
    if worker is None:
        return None
    if key in worker.data:
        return worker.data[key]
    if key in _FETCHED:
        return _FETCHED[key]
    from distributed import get_client

    client = get_client()  # the worker's
    got = client.sync(
        client.scheduler.gather, keys=[key]
    )  # through the scheduler, which knows who holds it
    if got.get("status") != "OK":  # not held: no worker has it
        return None
    values = got["data"][key]
    _FETCHED.clear()
    _FETCHED[key] = values
    return values


def broadcast(client, *values):
    """Delayed handles of values every task needs (frequencies, fitted arrays), never copied into
    each task. The handles serve as arguments of delayed calls and map_blocks.

    Values of fewer than :data:`EMBED_BYTES` (all together), or without a distributed client, are
    single graph values. Larger ones are persisted on the client's cluster once, as a task that
    holds them (:class:`_Shipped`), and the graphs that use them carry only its key. Trade-off:
    the scheduler holds the values as long as such a graph lives (a scatter would not; the same
    objects shipped again while one lives reuse that copy), and in
    return makes them again when the workers holding them are lost, which it cannot do for
    scattered data. After ``client.restart()`` (the scheduler forgets every task) or with the
    client closed, such a graph still computes, carrying the values at each compute."""
    if client is not None and _nbytes(values) >= EMBED_BYTES:
        from distributed import futures_of

        handles = []
        for value in values:
            shipped = _shipped_before(client, value)
            if shipped is None:
                shipped = _Shipped(value, f"arrays-shipped-once-{uuid.uuid4().hex}")
                handle = dask.delayed(_shipped_values, pure=True)(
                    shipped, dask_key_name=shipped.key
                )
                with (
                    warnings.catch_warnings()
                ):  # sent once on purpose: distributed's large-graph warning
                    warnings.filterwarnings("ignore", "Sending large graph")
                    (shipped.future,) = futures_of(client.persist(handle))
                _remember(client, value, shipped)
            handles.append(
                dask.delayed(_shipped_values, pure=True)(shipped, dask_key_name=shipped.key)
            )
        return handles
    return [dask.delayed(v, pure=True, traverse=False) for v in values]


#: (id of the client, ids of the values' leaves) -> weak reference to their live :class:`_Shipped`:
#: the same fitted arrays, predicted on again, reuse the copy the cluster holds (a loop of lazy
#: predictions would otherwise leave one copy per prediction on the scheduler)
_SHIPPED = {}


def _leaves(value):
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


def _remember(client, value, shipped):
    import weakref

    key = (id(client), tuple(map(id, _leaves(value))))
    _SHIPPED[key] = weakref.ref(shipped, lambda _, key=key: _SHIPPED.pop(key, None))


def _shipped_before(client, value):
    """The live :class:`_Shipped` of these very objects on ``client``'s cluster, or None (never
    shipped, every graph using it gone, or its task forgotten: a restart)."""
    ref = _SHIPPED.get((id(client), tuple(map(id, _leaves(value)))))
    shipped = None if ref is None else ref()
    if (
        shipped is None
        or shipped.future.status in (None, "cancelled")
        or shipped.future.client is not client
    ):
        return None
    same = all(a is b for a, b in zip(_leaves(shipped.values), _leaves(value), strict=True))
    return shipped if same else None


def pinned(worker):
    """``dask.annotate`` preferring ``worker`` (loosely: another takes over if it dies); a
    no-op for ``None``."""
    if worker is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[worker], allow_other_workers=True)


def worker_addresses(client):
    """The client's worker addresses, sorted; ``[None]`` without a client (one local "worker").

    A cluster without workers (still starting, or restarted by their nannies) is given
    :data:`WORKER_WAIT_S` seconds for a first one, then NoWorkersError."""
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
    """``{address: func(*args)}`` run on every worker of ``client`` that answers: a worker lost
    meanwhile (killed, its job ended) is left out, and asked again once if none answers; then
    NoWorkersError. An error ``func`` raises is raised."""
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
    """One worker address per task thread of the client's workers (at most ``per_worker`` per
    worker): the first thread of every worker (sorted), then the second of those that have two,
    and so on, so that the first entries spread over the workers
    (:func:`rfol_dask.solve.graph.chained_sum` places chain ``c`` on entry ``c``); ``[None]`` per
    core (at most ``per_worker``) without a client (dask's local scheduler places nothing)."""
    cap = per_worker or float("inf")
    if client is None:
        return [None] * int(min(os.cpu_count() or 1, cap))
    threads = {
        a: max(1, int(min(w["nthreads"], cap))) for a, w in scheduler_workers(client).items()
    }
    addresses = worker_addresses(client)  # waits for a first worker, else NoWorkersError
    threads = {a: threads.get(a, 1) for a in addresses}
    return [a for t in range(max(threads.values())) for a in addresses if threads[a] > t]


def first_worker():
    """The first worker address of the active distributed client (None without one): where a task
    chain that must stay on one worker is pinned (:func:`pinned`)."""
    return worker_addresses(active_client())[0]


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
