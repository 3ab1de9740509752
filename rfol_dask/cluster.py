"""Client helpers: use the active Dask client, or start a local one when asked.

Library calls never start a cluster on their own; the CLI and user code call
:func:`local_client` explicitly.
"""

from __future__ import annotations

import os

from .progress import active_client

__all__ = ["active_client", "local_client"]


def local_client(n_workers=None, threads_per_worker=1, memory_limit="auto", processes=True, **kwargs):
    """Start a ``distributed.LocalCluster`` and return a ``Client`` connected to it.

    Defaults: one worker per core with one thread each (BLAS runs one thread per worker,
    distributed's default), no dashboard. Close it with ``client.close(); client.cluster.close()``
    or use it as a context manager.
    """
    from distributed import Client, LocalCluster

    if n_workers is None:
        n_workers = max(1, (os.cpu_count() or 1) // threads_per_worker)
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                           memory_limit=memory_limit, processes=processes,
                           dashboard_address=kwargs.pop("dashboard_address", None), **kwargs)
    return Client(cluster)
