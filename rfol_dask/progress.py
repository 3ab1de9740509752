"""Running dask collections with a progress bar that works on the local and distributed schedulers.

Progress never goes to stdout (which carries results): the text bars write to stderr, and in
a Jupyter kernel with ``ipywidgets`` installed the distributed bar is a widget.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import logging
import sys
import time

import dask

from .exceptions import NoWorkersError, WorkersKilledError

__all__ = ["active_client", "scheduler_workers", "compute", "WorkersKilledError", "NoWorkersError"]


logger = logging.getLogger("rfol_dask")


def active_client():
    """The active ``distributed.Client`` or ``None`` (never starts one). A scheduler chosen
    with ``dask.config.set(scheduler=...)`` wins, as it does for dask's own collections:
    ``"sync"``, ``"threads"``, ``"processes"`` (or a get function) give None, a Client (or
    its ``get``) that Client."""
    chosen = dask.config.get("scheduler", None)
    chosen = getattr(chosen, "__self__", chosen)  # a Client's bound ``get`` stands for the Client
    if chosen is not None and not (
        isinstance(chosen, str) and chosen.lower() in ("dask.distributed", "distributed")
    ):
        return chosen if hasattr(chosen, "submit") and hasattr(chosen, "scatter") else None
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return get_client()
    except ValueError:
        return None


def scheduler_workers(client):
    """``{address: info}`` of the client's workers (``nthreads``, ``memory_limit``, ...), asked of
    the scheduler itself: a synchronous client's ``scheduler_info()`` returns a cache that its
    periodic refresh can empty between the update and the read (then a fit saw no workers)."""
    if getattr(client, "asynchronous", False) or not hasattr(client, "sync"):
        return client.scheduler_info()["workers"]
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def _memory_limits(client):
    """`` (memory limit per worker: N bytes)`` for a message, from the workers there or restarted
    within 10 s (their nannies restart killed ones); "" when they cannot be asked."""
    try:
        workers = scheduler_workers(client)
        if not workers:
            client.wait_for_workers(1, timeout=10)
            workers = scheduler_workers(client)
        limits = sorted({int(w.get("memory_limit") or 0) for w in workers.values()})
    except Exception:  # noqa: BLE001  (a cluster going down: the message goes without it)
        return ""
    if not limits:
        return ""
    if limits[0] == 0:
        return " (the workers have no memory limit: the machine's memory ran out)"
    return f" (memory limit per worker: {limits[0]:,} bytes{' or more' if len(limits) > 1 else ''})"


def _widgets_available():
    """True in a Jupyter kernel that can show ipywidgets."""
    from distributed.utils import is_kernel

    return is_kernel() and importlib.util.find_spec("ipywidgets") is not None


def _redraw_seconds(out):
    """How often a text bar on ``out`` is drawn again: 0.1 s on a terminal; 10 s into a file or
    a pipe (a log), where every drawing stays (a long fit wrote a line a tenth of a second). The
    bars still look every 0.1 s, so that they end when the work ends; they skip drawings."""
    try:
        return 0.1 if out.isatty() else 10.0
    except (AttributeError, ValueError):  # no isatty, or closed
        return 10.0


def _local_bar(out):
    """dask's local-scheduler ``ProgressBar`` on ``out``, drawn every :func:`_redraw_seconds`
    (it polls every 0.1 s: its end waits for the poll, so a long poll would delay every compute)."""
    from dask.diagnostics import ProgressBar

    every = _redraw_seconds(out)

    class Bar(ProgressBar):
        _last = -float("inf")

        def _draw_bar(self, frac, elapsed):
            if frac < 1 and elapsed - self._last < every:
                return  # into a log: not yet
            self._last = elapsed
            super()._draw_bar(frac, elapsed)

    return Bar(out=out)


def _text_bar(futures, scheduler, desc, out, drawn=None):
    """Block until ``futures`` (or their keys) finish, drawing distributed's text bar to ``out``;
    ``drawn`` (a ``threading.Event``) is set at its first drawing, when the scheduler tracks them."""
    from distributed.diagnostics.progressbar import TextProgressBar

    every, last = _redraw_seconds(out), [-float("inf")]

    class Bar(TextProgressBar):  # distributed's bar writes to sys.stdout; this one to ``out``
        def _draw_bar(self, remaining, all, **kwargs):
            if drawn is not None:
                drawn.set()
            if remaining and self.elapsed - last[0] < every:
                return  # into a log: not yet
            last[0] = self.elapsed
            frac = (1 - remaining / all) if all else 1.0
            with contextlib.suppress(ValueError):
                out.write(
                    f"\r{desc}: [{'#' * int(self.width * frac):<{self.width}}] | {int(100 * frac)}% Completed"
                    f" | {self.elapsed:.1f}s"
                )
                out.flush()

        def _draw_stop(self, **kwargs):
            with contextlib.suppress(ValueError):
                out.write("\n")
                out.flush()

    Bar(futures, scheduler=scheduler, complete=True)


def _widget_bar(futures, client, desc):
    """Show distributed's progress widget for ``futures``; it updates from the client's loop
    (the kernel's own loop is blocked while the cell waits). Returns the concurrent future
    of the updating coroutine."""
    import asyncio

    from distributed.diagnostics.progressbar import MultiProgressWidget
    from IPython.display import display
    from ipywidgets import HTML, VBox

    bar = MultiProgressWidget(futures, scheduler=client.scheduler.address, complete=True)
    display(VBox([HTML(f"<b>{desc}</b>"), bar.widget]))
    return asyncio.run_coroutine_threadsafe(bar.listen(), client.loop.asyncio_loop)


def show_progress(futures, client, desc="rfol_dask"):
    """Progress of distributed ``futures``: a widget in a notebook with ipywidgets (returns at
    once, with a ``concurrent.futures.Future`` that ends when the widget shows the end), else a
    text bar on stderr (returns None when the futures are done)."""
    if _widgets_available():
        return _widget_bar(futures, client, desc)
    _text_bar(futures, client.scheduler.address, desc, sys.stderr)
    return None


def release(futures):
    """Tell the cluster that this client no longer wants ``futures`` (their tasks, and those only
    they need, are forgotten; running ones end on their workers unseen), as when the futures are
    garbage-collected, but now: an interrupted compute's traceback keeps them alive in a notebook.
    Not ``client.cancel``: distributed (2026.8) cancels the dependents of a cancelled task too and
    fails an assertion on one that no client wants (an inner task of the graph); the scheduler then
    closes the client's stream and drops the client with every future it holds (a Ctrl-C during a
    fit lost the user's persisted data: FutureCancelledError, lost dependencies)."""
    for future in list(futures):
        future.release()


def compute(
    *collections, progress=False, client=None, desc="rfol_dask", consume=None, settle=False
):
    """``dask.compute(*collections)`` with an optional progress bar.

    With a distributed client (given, or the active one) the collections run there under
    :func:`show_progress`; otherwise dask's local scheduler runs them under
    ``dask.diagnostics.ProgressBar`` on stderr. A task that keeps killing its workers
    (``distributed.KilledWorker``) becomes a RuntimeError saying so.

    ``consume(i, result)``, if given, receives the result of ``collections[i]`` as soon as it
    is computed, and nothing is returned: with a client each result is gathered while the others
    still run and then released on the cluster, so a large result that comes in parts (the
    coefficient rows of a fit) moves to the client during the computation and never lies
    whole on the workers; the local scheduler hands the results over at the end, in order.

    ``settle``: when the computation fails or is interrupted (Ctrl-C), the tasks already running
    end before the exception propagates, so that none still writes (into a store) once the caller
    has let go (of its lock); tasks not yet started never start. Without it they end unseen
    afterwards: dask's local scheduler leaves its pool threads running, and a distributed
    worker finishes a released task. A second interrupt stops the wait.
    """
    client = client if client is not None else active_client()
    if client is not None:
        from distributed import KilledWorker

        pending = dict(enumerate(client.compute(list(collections))))
        ended = False
        try:
            results = _collect(pending, client, desc, progress, consume)  # logs its times
            ended = True
            return results
        except KilledWorker as exc:
            raise WorkersKilledError(
                f"{desc}: task {exc.task!r} killed the workers it ran on ({exc.last_worker.address} last); "
                "the computation was abandoned and nothing was written. A task that kills its worker "
                f"usually ran out of memory{_memory_limits(client)}: use smaller chunks, more memory per worker, "
                "or fewer features"
            ) from exc
        finally:
            if settle and not ended:
                _let_running_end(client, list(pending.values()), desc)
            release(pending.values())
    ctx = contextlib.nullcontext()
    if progress:
        sys.stderr.write(f"{desc}:\n")
        ctx = _local_bar(sys.stderr)
    pool, results = (_own_pool(collections) if settle else None), None
    try:
        with ctx, contextlib.nullcontext() if pool is None else dask.config.set(pool=pool):
            results = dask.compute(*collections)
    finally:
        if (
            pool is not None
        ):  # after an interrupt: the running tasks end here, the queued ones are dropped
            _close_pool(pool, None if results is not None else desc)
    if consume is None:
        return results
    for i, result in enumerate(results):
        consume(i, result)
    return None


_pools = itertools.count()  # names the threads of each pool of :func:`_own_pool`


def _own_pool(collections):
    """A thread pool of its own for one compute on dask's threaded scheduler (the default), so
    that its threads can be waited for after an interrupt (the shared pool's go on); None for
    another local scheduler (``sync`` runs in the caller's thread)."""
    import dask.threaded
    from dask.base import get_scheduler

    if get_scheduler(collections=collections) is not dask.threaded.get:
        return None
    from concurrent.futures import ThreadPoolExecutor

    from dask.system import CPU_COUNT

    executor = getattr(dask.threaded, "ContextAwareThreadPoolExecutor", ThreadPoolExecutor)
    return executor(
        dask.config.get("num_workers", None) or CPU_COUNT,
        thread_name_prefix=f"rfol-compute-{next(_pools)}",
    )


def _close_pool(pool, desc=None):
    """Drop the tasks ``pool`` has queued and wait for those running: join every thread of the
    pool by its name, as an interrupt during a thread's start leaves it running but off the
    executor's own list, which ``shutdown(wait=True)`` joins. With ``desc`` (a compute that
    failed), a line on stderr says so if some still run."""
    import threading

    pool.shutdown(wait=False, cancel_futures=True)
    prefix = f"{pool._thread_name_prefix}_"
    threads = [t for t in threading.enumerate() if t.name.startswith(prefix)]
    for thread in threads:
        thread.join(0.05)  # idle ones end at once
    busy = [t for t in threads if t.is_alive()]
    if busy and desc is not None:
        _say_waiting(desc, len(busy))
    for thread in busy:
        thread.join()


def _say_waiting(desc, n):
    """Tell on stderr why an interrupted compute does not return at once."""
    with contextlib.suppress(ValueError):  # a closed stderr
        sys.stderr.write(
            f"{desc}: stopping; waiting for the {n} running task{'s' if n > 1 else ''} to end "
            "(interrupt again to stop at once)\n"
        )
        sys.stderr.flush()


def _let_running_end(client, futures, desc):
    """Release those of ``futures`` that no worker runs yet, then wait for the others' tasks to
    end (``compute(settle=True)`` after a failure or an interrupt)."""
    from distributed import as_completed

    futures = [f for f in futures if not f.done()]
    if not futures:
        return
    try:
        running = {key for keys in client.processing().values() for key in keys}
    except Exception:  # noqa: BLE001  (a cluster going down: nothing to wait for)
        return
    release([f for f in futures if f.key not in running])
    busy = [f for f in futures if f.key in running]
    if busy:
        _say_waiting(desc, len(busy))
    for _ in as_completed(busy, loop=client.loop):  # (``distributed.wait`` needs a default client)
        pass


def _collect(pending, client, desc, progress, consume):
    """Wait for the futures ``pending`` (``{index: future}``) under a progress bar; gather them
    all at the end, or hand each to ``consume`` as it finishes (popped from ``pending``, so that
    the cluster forgets it)."""
    import threading

    from distributed import as_completed

    futures = list(pending.values())
    widget = bar = None
    if progress and (consume is None or _widgets_available()):
        widget = show_progress(futures, client, desc)  # the text bar returns at the end
    elif progress:  # the text bar blocks until the end: in a thread beside the streamed gathers
        keys = [f.key for f in futures]  # keys, not futures: a gathered result is forgotten at once
        drawn = threading.Event()
        bar = threading.Thread(
            target=_text_bar,
            args=(keys, client.scheduler.address, desc, sys.stderr, drawn),
            daemon=True,
            name="rfol-progress",
        )
        bar.start()
        # wait until the bar tracks the keys, before any is forgotten (at most 10 s: else no bar)
        deadline = time.monotonic() + 10
        while bar.is_alive() and not drawn.wait(0.05) and time.monotonic() < deadline:
            pass
    t0 = time.perf_counter()
    if consume is None:
        for _ in as_completed(futures, loop=client.loop):  # wait (without a default client)
            pass
        t1 = time.perf_counter()
        results = tuple(client.gather(futures))
        logger.debug(
            "%s: computed in %.3f s, results gathered in %.3f s",
            desc,
            t1 - t0,
            time.perf_counter() - t1,
        )
    else:
        index = {f.key: i for i, f in pending.items()}
        done = as_completed(futures, with_results=True, loop=client.loop)
        del futures
        for future, result in done:
            i = index[future.key]
            if isinstance(
                result, BaseException
            ):  # a cancelled future comes with its CancelledError
                raise RuntimeError(
                    f"{desc}: task {future.key!r} was cancelled ({type(result).__name__}: {result}); "
                    "was the cluster restarted or the client closed during the computation? "
                    "Run it again"
                ) from result
            del pending[i], future
            consume(i, result)
            del result
        results = None
        logger.debug(
            "%s: computed, results streamed to the client in %.3f s", desc, time.perf_counter() - t0
        )
    if bar is not None:
        bar.join(timeout=5)
    if widget is not None:  # let the widget draw the end before the futures go
        with contextlib.suppress(Exception):
            widget.result(timeout=5)
    return results
