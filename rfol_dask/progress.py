"""Running dask collections with a progress bar that works on the local and distributed schedulers."""

from __future__ import annotations

import contextlib
import sys

import dask

__all__ = ["active_client", "compute"]


def active_client():
    """The active ``distributed.Client`` or ``None`` (never starts one)."""
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return get_client()
    except ValueError:
        return None


def compute(*collections, progress=False, client=None, desc="rfol_dask"):
    """``dask.compute(*collections)`` with an optional progress bar.

    With a distributed client (given, or the active one) the collections run there and
    ``distributed.progress`` draws the bar; otherwise dask's local scheduler runs them
    under ``dask.diagnostics.ProgressBar``. Progress goes to stderr. A task that keeps
    killing its workers (``distributed.KilledWorker``) becomes a RuntimeError saying so.
    """
    client = client if client is not None else active_client()
    if client is not None:
        from distributed import KilledWorker

        futures = client.compute(list(collections))
        try:
            if progress:
                from distributed import progress as dprogress

                print(f"{desc}:", file=sys.stderr)
                dprogress(futures, notebook=False)
            return tuple(client.gather(futures))
        except KilledWorker as exc:
            raise RuntimeError(
                f"{desc}: task {exc.task!r} killed the workers it ran on ({exc.last_worker.address} last); "
                "the computation was abandoned and nothing was written. A task that kills its worker "
                "usually ran out of memory: use smaller chunks, more memory per worker, or fewer features"
            ) from exc
        finally:
            client.cancel(futures)
    ctx = contextlib.nullcontext()
    if progress:
        from dask.diagnostics import ProgressBar

        print(f"{desc}:", file=sys.stderr)
        ctx = ProgressBar(out=sys.stderr)
    with ctx:
        return dask.compute(*collections)
