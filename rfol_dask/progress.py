"""``dask.compute`` on dask's local scheduler or a distributed client, with a progress bar that
never goes to stdout (which carries results: stderr, or a widget in a notebook), and with the
cluster's failures said in one line."""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import itertools
import logging
import sys
import threading
import time
import uuid

import dask
import distributed  # noqa: F401  (its configuration defaults first: NO_WORKERS_TIMEOUT overrides one)

from .exceptions import NoWorkersError, WorkersKilledError

logger = logging.getLogger("rfol_dask")

#: how long tasks wait on a cluster without workers (jobs ended) before they fail; upstream they
#: wait for ever (a value the user configures wins)
NO_WORKERS_TIMEOUT = "300s"
dask.config.update_defaults(
    {"distributed": {"scheduler": {"no-workers-timeout": NO_WORKERS_TIMEOUT}}}
)


def active_client():
    """The active ``distributed.Client`` or None (never starts one); a scheduler chosen with
    ``dask.config.set(scheduler=...)`` wins: a Client (or its ``get``) that Client, else None."""
    chosen = dask.config.get("scheduler", None)
    chosen = getattr(chosen, "__self__", chosen)  # a Client's bound ``get`` stands for it
    if chosen is not None and str(chosen).lower() not in ("dask.distributed", "distributed"):
        return chosen if hasattr(chosen, "submit") and hasattr(chosen, "scatter") else None
    from distributed import get_client

    with contextlib.suppress(ValueError):  # no client
        return get_client()


def scheduler_workers(client):
    """``{address: info}`` of every worker of ``client``, asked of the scheduler
    (``scheduler_info()`` lists 5 workers, from a cache)."""
    if getattr(client, "asynchronous", False) or not hasattr(client, "sync"):
        return client.scheduler_info()["workers"]
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def _memory_limits(client):
    """`` (memory limit per worker: N bytes)`` for a message; "" when the cluster cannot say."""
    try:
        client.wait_for_workers(1, timeout=10)  # killed workers: their nannies restart them
        workers = scheduler_workers(client)
    except (OSError, RuntimeError):  # (TimeoutError is an OSError) a cluster going down
        return ""
    limits = sorted({int(w.get("memory_limit") or 0) for w in workers.values()})
    if not limits:
        return ""
    if limits[0] == 0:
        return " (the workers have no memory limit: the machine's memory ran out)"
    more = " or more" if len(limits) > 1 else ""
    return f" (memory limit per worker: {limits[0]:,} bytes{more})"


def _redraw_seconds(out):
    """Seconds between drawings of a text bar on ``out``: 0.1 on a terminal, 10 into a file."""
    with contextlib.suppress(AttributeError, ValueError):  # no isatty, or closed
        return 0.1 if out.isatty() else 10.0
    return 10.0


def _draw(out, desc, frac, elapsed, end=False):
    with contextlib.suppress(ValueError):  # a closed stream
        out.write(f"\r{desc}: [{'#' * int(40 * frac):<40}] | {int(100 * frac)}% Completed")
        out.write(f" | {elapsed:.1f}s" + ("\n" if end else ""))
        out.flush()


def _compute_local(collections, progress, desc, settle):
    """``dask.compute`` on dask's local scheduler, a bar on stderr if ``progress``; ``settle``: on
    a pool of its own whose running tasks end before a failure propagates (queued ones dropped)."""
    import dask.threaded
    from dask.base import get_scheduler
    from dask.callbacks import Callback
    from dask.system import CPU_COUNT

    run, pool, ok = {"finished": (), "running": ()}, None, False  # the scheduler's state

    def share():  # of the tasks done
        done = len(run["finished"])
        total = done + sum(len(run.get(k, ())) for k in ("ready", "waiting", "running"))
        return done / total if total else None

    if settle and get_scheduler(collections=collections) is dask.threaded.get:
        workers = dask.config.get("num_workers", None) or CPU_COUNT
        prefix = f"rfol-compute-{next(_POOLS)}-"
        pool = dask.threaded.ContextAwareThreadPoolExecutor(workers, thread_name_prefix=prefix)
    bar = _bar(share, desc, sys.stderr) if progress else None
    watch = Callback(start_state=lambda dsk, state: run.update(state))  # updated in place
    try:
        with watch, dask.config.set(pool=pool) if pool else contextlib.nullcontext():
            results, ok = dask.compute(*collections), True
        return results
    finally:
        if bar is not None:
            bar(ok)
        if pool is not None and not ok and run["running"]:
            _say_waiting(desc, len(run["running"]))
        if pool is not None:  # by name: an interrupt in a thread's start leaves it off the pool
            pool.shutdown(wait=False, cancel_futures=True)
            for thread in threading.enumerate():
                if thread.name.startswith(prefix):
                    thread.join()


_POOLS = itertools.count()  # numbers the pools of :func:`_compute_local`


def _say_waiting(desc, n):
    with contextlib.suppress(ValueError):  # a closed stderr
        print(f"{desc}: stopping; waiting for the {n} running task{'s' if n > 1 else ''} to end "
              "(interrupt to stop at once)", file=sys.stderr, flush=True)  # fmt: skip


def _bar(share, desc, out):
    """Draw ``share()``, the share done (None: as before), on ``out`` from a thread, at once and
    every :func:`_redraw_seconds`; returns ``finish(ok)``, which draws the end (full if ``ok``)."""
    stop, ok = threading.Event(), []

    def draw():
        t0, every, frac = time.perf_counter(), _redraw_seconds(out), 0.0
        for n in itertools.count():
            end = stop.wait(every if n else 0)
            with contextlib.suppress(OSError, RuntimeError):  # a cluster going down
                frac = frac if (now := share()) is None else now
            _draw(out, desc, 1.0 if end and ok else frac, time.perf_counter() - t0, end)
            if end:
                return

    def finish(done):
        ok.extend([True] if done else [])
        stop.set()
        thread.join(timeout=5)

    thread = threading.Thread(target=draw, daemon=True, name="rfol-progress")
    thread.start()
    return finish


def _scheduler_bar(client, keys, desc, out):
    """:func:`_bar` of the tasks that ``keys`` need, tracked on the scheduler by distributed's
    ``Progress`` plugin (functions nested: pickled by value, the scheduler needs no rfol_dask)."""
    import asyncio

    name = f"rfol-progress-{uuid.uuid4().hex}"

    async def start(dask_scheduler):
        from distributed.diagnostics.progress import Progress

        bar = Progress(keys, dask_scheduler, complete=True, name=name)
        await asyncio.wait_for(bar.setup(), 10)  # (it ends itself when its tasks end or fail)

    def share(dask_scheduler):
        if (bar := dask_scheduler.plugins.get(name)) is None:  # its tasks ended
            return None
        return 1 - len(bar.keys) / len(bar.all_keys) if bar.all_keys else 1.0

    client.run_on_scheduler(start)
    return _bar(lambda: client.run_on_scheduler(share), desc, out)


def _widget_bar(futures, client, desc):
    """Show distributed's progress widget for ``futures``, updated from the client's loop (the
    kernel's is blocked while the cell waits); returns the future of its updating coroutine."""
    import asyncio

    from distributed.diagnostics.progressbar import MultiProgressWidget
    from IPython.display import display
    from ipywidgets import HTML, VBox

    bar = MultiProgressWidget(futures, scheduler=client.scheduler.address, complete=True)
    display(VBox([HTML(f"<b>{desc}</b>"), bar.widget]))
    return asyncio.run_coroutine_threadsafe(bar.listen(), client.loop.asyncio_loop)


def release(futures):
    """Tell the cluster now that this client no longer wants ``futures`` (not ``client.cancel``,
    which also cancels their dependents and can drop every future of the client)."""
    for future in list(futures):
        future.release()


def compute(
    *collections, progress=False, client=None, desc="rfol_dask", consume=None, settle=False
):
    """``dask.compute(*collections)`` on the given or active client (else dask's local
    scheduler), with a progress bar on stderr (a widget in a notebook) if ``progress``; a task
    that kills its workers raises :class:`WorkersKilledError`, a cluster whose workers all ended
    :class:`NoWorkersError`. ``consume(i, result)`` receives each result as soon as it is computed
    (nothing is returned). ``settle``: on a failure or an interrupt, the running tasks end before
    the exception propagates (none writes into a store after its lock); a second one stops it."""
    client = client if client is not None else active_client()
    if client is None:
        results = _compute_local(collections, progress, desc, settle)
        if consume is None:
            return results
        for i, result in enumerate(results):
            consume(i, result)
        return None
    from distributed import KilledWorker
    from distributed.scheduler import NoValidWorkerError, NoWorkerError

    pending, ended = dict(enumerate(client.compute(list(collections)))), False
    try:
        results = _collect(pending, client, desc, progress, consume)
        ended = True
        return results
    except KilledWorker as exc:
        raise WorkersKilledError(f"{desc}: task {exc.task!r} killed the workers it ran on "
                                 f"({exc.last_worker.address} last); the computation was abandoned "
                                 "and nothing was written. A task that kills its worker usually "
                                 f"ran out of memory{_memory_limits(client)}: use smaller chunks, "
                                 "more memory per worker, or fewer features") from exc  # fmt: skip
    except (NoWorkerError, NoValidWorkerError) as exc:
        raise NoWorkersError(f"{desc}: every worker of the cluster ended during the computation "
                             f"and none came back within {exc.timeout:g} s (batch jobs past their "
                             "walltime, preempted or cancelled); raise the jobs' walltime or start "
                             "more workers, and run it again") from None  # fmt: skip
    finally:
        if settle and not ended:
            _let_running_end(client, list(pending.values()), desc)
        release(pending.values())


def _let_running_end(client, futures, desc):
    """Release those of ``futures`` that no worker runs yet, and wait for the others to end."""
    from distributed import as_completed

    futures = [f for f in futures if not f.done()]
    try:
        running = {key for keys in client.processing().values() for key in keys}
    except OSError:  # a cluster going down: nothing to wait for
        return
    release([f for f in futures if f.key not in running])
    busy = [f for f in futures if f.key in running]
    if busy:
        _say_waiting(desc, len(busy))
    for _ in as_completed(busy, loop=client.loop):  # (``wait`` needs a default client)
        pass


def _collect(pending, client, desc, progress, consume):
    """Gather the futures ``pending`` (``{index: future}``) under a progress bar as each finishes
    (with ``consume``: popped, so that the cluster forgets it)."""
    from distributed import as_completed
    from distributed.utils import is_kernel

    futures, widget, bar = list(pending.values()), None, None
    if progress and is_kernel() and importlib.util.find_spec("ipywidgets") is not None:
        widget = _widget_bar(futures, client, desc)
    elif progress:  # keys, not futures: a consumed result is forgotten at once
        with contextlib.suppress(OSError, RuntimeError):  # TimeoutError: no bar
            bar = _scheduler_bar(client, [f.key for f in futures], desc, sys.stderr)
    t0, results, ok = time.perf_counter(), [None] * len(pending), False
    index = {f.key: i for i, f in pending.items()}
    done = as_completed(futures, with_results=True, loop=client.loop)
    del futures
    try:
        for future, result in done:  # a task's error is raised here
            if isinstance(result, BaseException):  # a cancelled future comes with its error
                what = f"{type(result).__name__}: {result}"
                raise RuntimeError(f"{desc}: task {future.key!r} was cancelled ({what}); was the "
                                   "cluster restarted or the client closed during the computation?"
                                   " Run it again") from result  # fmt: skip
            i = index[future.key]
            if consume is None:
                results[i] = result
            else:  # forgotten on the cluster before the next one comes
                del pending[i], future
                consume(i, result)
                del result
        ok = True
    finally:
        if bar is not None:
            bar(ok)
    logger.debug("%s: computed and gathered in %.3f s", desc, time.perf_counter() - t0)
    if widget is not None:  # let the widget draw the end before the futures go
        concurrent.futures.wait([widget], timeout=5)
    return tuple(results) if consume is None else None
