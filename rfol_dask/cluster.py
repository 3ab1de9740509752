"""Client helpers: use the active Dask client, or start one from a configuration when asked.

Library calls never start a cluster on their own; the CLI and user code call
:func:`local_client` or :func:`start_client` explicitly.

A configuration (a YAML file under ``cluster/`` or a dict) names its ``kind`` and the
keywords of the matching cluster manager::

    kind: slurm            # local | slurm | pbs | kubernetes | mpi
    scale: 4               # jobs (slurm/pbs) or workers (kubernetes) to start
    blas_threads: 8        # BLAS threads per worker process, set deliberately
    options: {...}         # keywords of LocalCluster / SLURMCluster / PBSCluster / make_cluster_spec / dask-mpi

``job_script(config)`` renders what would be submitted (batch script, Kubernetes spec or
MPI launch script) without contacting any scheduler.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .progress import active_client

__all__ = ["active_client", "local_client", "local_cluster", "load_config", "job_script", "make_cluster", "start_client",
           "blas_env", "KINDS"]

KINDS = ("local", "slurm", "pbs", "kubernetes", "mpi")
_KEYS = {"kind", "scale", "blas_threads", "options", "scheduler_file", "launcher"}
_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def blas_env(blas_threads):
    """Environment variables that fix the BLAS threads of a worker process."""
    return {var: str(int(blas_threads)) for var in _BLAS_VARS}


def local_client(n_workers=None, threads_per_worker=1, memory_limit="auto", processes=True,
                 blas_threads=1, **kwargs):
    """Start a ``distributed.LocalCluster`` (see :func:`local_cluster`) and return a ``Client``
    connected to it. Close both with ``client.close(); client.cluster.close()``."""
    from distributed import Client

    return Client(local_cluster(n_workers, threads_per_worker, memory_limit, processes, blas_threads, **kwargs))


def local_cluster(n_workers=None, threads_per_worker=1, memory_limit="auto", processes=True,
                  blas_threads=1, **kwargs):
    """A ``distributed.LocalCluster``: by default one worker process per core with one task
    thread and one BLAS thread each (distributed's own default BLAS setting, made explicit)
    and no dashboard."""
    from distributed import LocalCluster

    if n_workers is None:
        n_workers = max(1, (os.cpu_count() or 1) // threads_per_worker)
    if processes:
        kwargs["env"] = {**blas_env(blas_threads), **kwargs.get("env", {})}
    return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                        memory_limit=memory_limit, processes=processes,
                        dashboard_address=kwargs.pop("dashboard_address", ":0"), **kwargs)


def load_config(config):
    """Read and check a cluster configuration (a path to YAML, or a dict); returns a dict."""
    if isinstance(config, (str, os.PathLike)):
        import yaml

        path = Path(config)
        if not path.exists():
            raise FileNotFoundError(f"no cluster configuration at {path}; see the files in cluster/")
        config = yaml.safe_load(path.read_text()) or {}
    config = dict(config)
    kind = config.get("kind")
    if kind not in KINDS:
        raise ValueError(f"cluster configuration needs kind in {KINDS}, got {kind!r}")
    unknown = sorted(set(config) - _KEYS)
    if unknown:
        raise ValueError(f"unknown cluster configuration keys {unknown}; allowed: {sorted(_KEYS)}")
    config.setdefault("options", {})
    config.setdefault("blas_threads", 1)
    config.setdefault("scale", 1)
    if int(config["blas_threads"]) < 1 or int(config["scale"]) < 1:
        raise ValueError("blas_threads and scale must be positive integers")
    return config


def _jobqueue_options(config):
    opts = dict(config["options"])
    exports = [f"export {k}={v}" for k, v in blas_env(config["blas_threads"]).items()]
    opts["job_script_prologue"] = exports + list(opts.get("job_script_prologue", []))
    return opts


def _kubernetes_spec(config):
    from dask_kubernetes.operator import make_cluster_spec

    opts = dict(config["options"])
    env = {**blas_env(config["blas_threads"]), **opts.pop("env", {})}
    return make_cluster_spec(n_workers=int(config["scale"]), env=env, **opts)


def _mpi_script(config):
    opts = dict(config["options"])
    sched = config.get("scheduler_file", "scheduler.json")
    ranks = int(config["scale"]) + 2  # rank 0 scheduler, rank 1 client, the rest workers
    launcher = config.get("launcher", "mpirun -n {ranks}").format(ranks=ranks)
    args = " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in opts.items())
    exports = "\n".join(f"export {k}={v}" for k, v in blas_env(config["blas_threads"]).items())
    return (f"#!/usr/bin/env bash\n# rfol_dask on MPI: dask-mpi starts the scheduler and {ranks - 2} workers;\n"
            f"# connect with rfol_dask.cluster.start_client(config) (it reads {sched}).\n{exports}\n"
            f"{launcher} dask-mpi --no-nanny --scheduler-file {shlex.quote(sched)} {args}\n")


def make_cluster(config):
    """The cluster manager object for ``config`` (nothing is submitted until it is scaled).

    ``local``: ``LocalCluster``; ``slurm``/``pbs``: ``dask_jobqueue.SLURMCluster``/``PBSCluster``;
    ``kubernetes``: ``dask_kubernetes.operator.KubeCluster`` (needs a reachable cluster).
    ``mpi`` has no manager object: launch :func:`job_script` with ``mpirun``.
    """
    config = load_config(config)
    kind = config["kind"]
    if kind == "local":
        return local_cluster(blas_threads=config["blas_threads"], **config["options"])
    if kind in ("slurm", "pbs"):
        import dask_jobqueue

        cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
        return cls(**_jobqueue_options(config))
    if kind == "kubernetes":
        from dask_kubernetes.operator import KubeCluster

        return KubeCluster(custom_cluster_spec=_kubernetes_spec(config))
    raise ValueError("an MPI cluster is started by mpirun, not from Python: run the script of "
                     "rfol_dask.cluster.job_script(config), then start_client(config)")


def job_script(config):
    """What would be submitted for ``config``, as text: the batch script of one SLURM/PBS job,
    the Kubernetes cluster spec (YAML), the MPI launch script, or the local settings."""
    config = load_config(config)
    kind = config["kind"]
    if kind in ("slurm", "pbs"):
        import dask_jobqueue

        cls = dask_jobqueue.slurm.SLURMJob if kind == "slurm" else dask_jobqueue.pbs.PBSJob
        return cls(scheduler="tcp://SCHEDULER:8786", name="rfol-dask", **_jobqueue_options(config)).job_script()
    if kind == "kubernetes":
        import yaml

        return yaml.safe_dump(_kubernetes_spec(config), sort_keys=False)
    if kind == "mpi":
        return _mpi_script(config)
    import yaml

    return yaml.safe_dump({"LocalCluster": config["options"], "env": blas_env(config["blas_threads"])})


def start_client(config):
    """Start (or, for MPI, connect to) the cluster of ``config`` and return a ``Client``.

    SLURM/PBS/Kubernetes clusters are scaled to ``scale`` jobs/workers and the call waits
    for the first worker.
    """
    from distributed import Client

    config = load_config(config)
    if config["kind"] == "mpi":
        return Client(scheduler_file=config.get("scheduler_file", "scheduler.json"))
    if config["kind"] == "local":
        return local_client(blas_threads=config["blas_threads"], **config["options"])
    cluster = make_cluster(config)
    if config["kind"] in ("slurm", "pbs"):
        cluster.scale(jobs=int(config["scale"]))
    else:
        cluster.scale(int(config["scale"]))
    client = Client(cluster)
    client.wait_for_workers(1)
    return client
