"""Clients of clusters: use the active Dask client, or start one from a configuration when asked.

Library calls never start a cluster; the CLI and user code call :func:`local_client` or
:func:`start_client`. A configuration (a shipped name such as ``"slurm"``, a YAML path or a dict)
names its ``kind``, which picks the cluster manager, and that manager's keywords::

    kind: slurm        # local | cuda-local | slurm | pbs | kubernetes | mpi
    scale: 4           # worker processes (local kinds), jobs (slurm/pbs), pods, or MPI worker ranks
    blas_threads: 1    # BLAS threads per worker process
    options: {...}     # keywords of LocalCluster / LocalCUDACluster / SLURMCluster / PBSCluster /
                       # make_cluster_spec, or flags of the dask-mpi command

MPI configurations also take ``scheduler_file``, ``scheduler_timeout``, ``launcher``,
``node_cores``, ``ranks_per_node``, ``python`` and ``prologue`` (see ``clusters/mpi.yaml``).
Options a configuration leaves out come from dask's configuration (``jobqueue.slurm.*`` ...), as
dask-jobqueue reads it. Every node should run ``processes x threads x blas_threads <= cores``;
:func:`job_script`, :func:`make_cluster` and :func:`start_client` warn where it does not.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import numbers
import os
import shlex
import time
import warnings
from importlib import resources
from pathlib import Path

from distributed.core import Status

from .exceptions import ClusterStartError, ClusterWarning, SettingWarning
from .linalg import host_cores
from .progress import active_client
from .stacklevel import user_stacklevel

__all__ = [
    "active_client",
    "local_client",
    "local_cluster",
    "local_cuda_cluster",
    "load_config",
    "job_script",
    "make_cluster",
    "start_client",
    "close_client",
    "blas_env",
    "shipped_configs",
    "gpu_config",
    "node_threads",
    "dashboard_link",
    "KINDS",
]

KINDS = ("local", "cuda-local", "slurm", "pbs", "kubernetes", "mpi")
_MPI_KEYS = {"scheduler_timeout", "launcher", "node_cores", "ranks_per_node", "python", "prologue"}
_KEYS = {"kind", "scale", "blas_threads", "options", "scheduler_file"} | _MPI_KEYS
#: keywords of a dask-jobqueue cluster that its job class does not take
_CLUSTER_ONLY = {"n_workers", "job_cls", "loop", "shared_temp_directory", "silence_logs"}
_CLUSTER_ONLY |= {"asynchronous", "dashboard_address", "host", "scheduler_options", "scheduler_cls"}
#: seconds :func:`start_client` waits for an MPI job's scheduler file (``scheduler_timeout``)
SCHEDULER_TIMEOUT = 600.0
#: seconds a cluster's close may take before it is given up with a warning
CLOSE_TIMEOUT = 60.0
logger = logging.getLogger("rfol_dask")


def blas_env(blas_threads):
    """Environment variables that fix the BLAS threads of a worker process."""
    n = str(int(blas_threads))
    return {"OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n}


def _owning_client(cluster=None, **connect):
    """A ``Client`` of ``cluster`` that closes the cluster when it closes (a plain
    ``Client(cluster)`` leaves it running); without one, a client of ``connect`` (an MPI job's
    scheduler file) whose close shuts its scheduler and workers down, which ends the MPI job."""
    from distributed import Client

    class OwningClient(Client):
        def close(self, *args, **kwargs):
            if cluster is None and self.status == "running":
                return self.shutdown()
            try:
                return super().close(*args, **kwargs)
            finally:
                if cluster is not None:
                    _close_cluster(cluster)

    return OwningClient(cluster, **connect)


def local_client(
    n_workers=None, threads_per_worker=1, memory_limit="auto", processes=True, blas_threads=1, **kw
):
    """A ``Client`` of a new :func:`local_cluster`; closing the client closes both."""
    cluster = local_cluster(
        n_workers, threads_per_worker, memory_limit, processes, blas_threads, **kw
    )
    return _owning_client(cluster)


def _check_count(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _without_sigint(start):
    """``start()`` with SIGINT blocked meanwhile in this thread, hence in the worker processes it
    spawns: a terminal's Ctrl-C then interrupts only this process, whose KeyboardInterrupt closes
    the cluster, instead of every worker printing a traceback of its own. A Ctrl-C pressed during
    the start is raised once it is done (the cluster closed)."""
    import signal
    import threading
    from multiprocessing import resource_tracker

    if threading.current_thread() is not threading.main_thread() or os.name == "nt":
        return start()
    resource_tracker.ensure_running()  # else started from a worker thread, SIGINT unblocked
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        cluster = start()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C pressed meanwhile: here
    except BaseException:
        cluster.close()
        raise
    return cluster


def local_cluster(
    n_workers=None, threads_per_worker=1, memory_limit="auto", processes=True, blas_threads=1, **kw
):
    """A ``distributed.LocalCluster``: by default one single-threaded worker process per core,
    ``blas_threads`` BLAS threads each, the dashboard on a free port."""
    from distributed import LocalCluster

    _check_count("threads_per_worker", threads_per_worker)
    n_workers = n_workers or max(1, host_cores() // threads_per_worker)
    _check_count("n_workers", n_workers)
    if processes:
        kw["env"] = {**blas_env(blas_threads), **kw.get("env", {})}
    kw.setdefault("dashboard_address", ":0")
    kw.update(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=processes)
    return _without_sigint(functools.partial(LocalCluster, memory_limit=memory_limit, **kw))


def _cuda_threads(value, gpus):
    """Task threads per GPU worker: ``value``, or for "auto" the host cores per GPU, at most 8."""
    return int(value) if value != "auto" else max(1, min(8, host_cores() // max(1, int(gpus))))


def _gpus(options):
    """GPUs a ``cuda-local`` configuration uses: ``n_workers``, else those named visible."""
    visible = options.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if isinstance(visible, str):
        visible = [d for d in visible.split(",") if d.strip()]
    return options.get("n_workers") or len(visible or ())


def local_cuda_cluster(blas_threads=1, **kwargs):
    """A ``dask_cuda.LocalCUDACluster``: one worker process per visible GPU, BLAS threads set."""
    try:
        from dask_cuda import LocalCUDACluster
        from dask_cuda.utils import get_n_gpus
    except ImportError as exc:
        raise ImportError(
            "kind 'cuda-local' needs dask-cuda: pip install 'rfol-dask[gpu]'"
        ) from exc
    kwargs["env"] = {**blas_env(blas_threads), **kwargs.get("env", {})}
    threads = kwargs.get("threads_per_worker", "auto")
    kwargs["threads_per_worker"] = _cuda_threads(threads, _gpus(kwargs) or get_n_gpus())
    kwargs.setdefault("dashboard_address", ":0")
    return _without_sigint(functools.partial(LocalCUDACluster, **kwargs))


def shipped_configs():
    """Names of the configurations shipped with the package (``load_config`` accepts them)."""
    folder = resources.files("rfol_dask").joinpath("clusters")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def gpu_config(config):
    """True where the configuration's workers run on GPUs (``cuda-local``, ``dask cuda worker``)."""
    config = load_config(config)
    command = str(config["options"].get("worker_command", ""))
    return config["kind"] == "cuda-local" or "cuda" in command.split()


def load_config(config):
    """Read and check a cluster configuration: a shipped name (see :func:`shipped_configs`), a
    path to a YAML file (``~`` is the home folder), or a dict; returns a dict."""
    import yaml

    where = f"cluster configuration {config if isinstance(config, (str, Path)) else '(a dict)'}"
    if isinstance(config, (str, os.PathLike)):
        path = Path(os.path.expanduser(config))
        if os.fspath(config) in shipped_configs():
            path = resources.files("rfol_dask").joinpath("clusters", f"{os.fspath(config)}.yaml")
        elif not path.is_file():
            raise FileNotFoundError(f"no {where}: give a YAML file or one of {shipped_configs()}")
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{where} is not valid YAML: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("options") or {}, dict):
        raise ValueError(f"{where} must be a mapping (kind: ..., options: a mapping)")
    config = {"blas_threads": 1, **config, "options": dict(config.get("options") or {})}
    if config.get("kind") not in KINDS:
        raise ValueError(f"{where} needs kind in {KINDS}, got {config.get('kind')!r}")
    unknown = set(config) - (_KEYS if config["kind"] == "mpi" else _KEYS - _MPI_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} for kind {config['kind']}")
    for key in ("scale", "blas_threads", "node_cores", "ranks_per_node"):
        if config.get(key) is not None:
            _check_count(f"{where}: {key}", config[key])
    n_workers = config["options"].get("n_workers")
    if config["kind"] in ("local", "cuda-local") and config.get("scale") is not None:
        if n_workers not in (None, config["scale"]):
            raise ValueError(f"{where}: scale and options.n_workers disagree; give one of them")
        config["options"]["n_workers"] = config["scale"]  # the number of worker processes
    return config


def _dask_jobqueue():
    """``dask_jobqueue``, imported without the SIGINT handler its import installs (``sys.exit``,
    which turns a Ctrl-C into a silent exit with status 0)."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise ImportError(
            "kinds 'slurm' and 'pbs' need dask-jobqueue: pip install 'rfol-dask[hpc]'"
        ) from exc
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)
    return dask_jobqueue


def _jobqueue(config):
    """``(manager class, keywords)`` of a slurm/pbs configuration: the BLAS exports first in the
    job's prologue (after the site's, from dask's configuration, where the file gives none), and
    a prologue without ``python`` runs the ``python`` it puts on the PATH."""
    import dask

    kind, opts = config["kind"], dict(config["options"])
    manager = getattr(_dask_jobqueue(), "SLURMCluster" if kind == "slurm" else "PBSCluster")
    prologue = opts.get("job_script_prologue") or dask.config.get(
        f"jobqueue.{kind}.job-script-prologue", []
    )
    if prologue and not opts.get("python") and not dask.config.get(f"jobqueue.{kind}.python"):
        opts["python"] = "python"
    exports = [f"export {k}={v}" for k, v in blas_env(config["blas_threads"]).items()]
    opts["job_script_prologue"] = exports + list(prologue or [])
    return manager, opts


def _job(config):
    """The dask-jobqueue job of one job of ``config`` (renders its script; submits nothing)."""
    manager, opts = _jobqueue(config)
    job_cls = opts.get("job_cls") or manager.job_cls
    opts = {k: v for k, v in opts.items() if k not in _CLUSTER_ONLY}
    return job_cls(scheduler="tcp://SCHEDULER:8786", name="rfol-dask", **opts)


def node_threads(config):
    """``{"processes", "threads", "blas", "cores"}`` of one node of ``config`` (worker processes,
    task threads of each, BLAS threads, cores), or None where the configuration does not say."""
    config = load_config(config)
    kind, opts, blas = config["kind"], config["options"], config["blas_threads"]
    if kind == "local":
        threads = int(opts.get("threads_per_worker", 1))
        workers = opts.get("n_workers") or max(1, host_cores() // threads)
        if not opts.get("processes", True):  # one process: the BLAS variables are not set
            return {"processes": 1, "threads": workers * threads, "blas": 1, "cores": host_cores()}
        return {"processes": workers, "threads": threads, "blas": blas, "cores": host_cores()}
    if kind == "cuda-local":
        gpus = _gpus(opts)
        threads = _cuda_threads(opts.get("threads_per_worker", "auto"), gpus)
        return {"processes": gpus, "threads": threads, "blas": blas, "cores": host_cores()}
    if kind in ("slurm", "pbs"):
        job = _job(config)
        spec = dict(p.split("=") for p in str(opts.get("resource_spec", "")).split(":") if "=" in p)
        cores = opts.get("job_cpu") or spec.get("ncpus") or job.worker_cores
        p, t = job.worker_processes, job.worker_process_threads
        return {"processes": p, "threads": t, "blas": blas, "cores": int(cores)}
    if kind == "kubernetes":
        command = str(opts.get("worker_command", "")).split()
        flag = {a: int(b) for a, b in zip(command, command[1:], strict=False) if b.isdigit()}
        res = opts.get("resources") or {}
        cpu = str((res.get("limits") or res.get("requests") or {}).get("cpu", ""))
        if not cpu:
            return None
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
        p, t = flag.get("--nworkers", 1), flag.get("--nthreads", 1)
        return {"processes": p, "threads": t, "blas": blas, "cores": cores}
    if config.get("node_cores") is None:
        return None
    p, t = config.get("ranks_per_node") or 1, opts.get("nthreads") or 1
    return {"processes": p, "threads": t, "blas": blas, "cores": config["node_cores"]}


def _check_threads(config):
    """Warn when a node of ``config`` runs more threads than it has cores."""
    n = node_threads(config)
    if n is None or n["processes"] * n["threads"] * n["blas"] <= n["cores"]:
        return
    total, tasks = n["processes"] * n["threads"] * n["blas"], n["processes"] * n["threads"]
    fix = f"set blas_threads: {max(1, int(n['cores'] // tasks))}"
    warnings.warn(
        f"the {config['kind']} cluster configuration oversubscribes each node: {n['processes']} "
        f"worker processes x {n['threads']} task threads x {n['blas']} BLAS threads = {total} "
        f"threads on {n['cores']:g} cores; "
        f"{fix if tasks <= n['cores'] else 'use fewer worker processes or task threads per node'}",
        SettingWarning,
        stacklevel=user_stacklevel(),
    )


def _mpi_script(config):
    """Launch script of the dask-mpi command (scheduler on rank 0, ``scale`` workers after it).
    It deletes an earlier scheduler file first, and where the launch fails writes the failure
    into the file, so that :func:`start_client` reports it at once."""
    sched = shlex.quote(config.get("scheduler_file", "scheduler.json"))
    ranks = int(config.get("scale") or 1) + 1
    launcher = config.get("launcher", "mpirun -n {ranks}")
    launcher = launcher.format(ranks=ranks, ranks_per_node=config.get("ranks_per_node", ""))
    args = " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in config["options"].items()
    )
    blas = " ".join(f"{k}={v}" for k, v in blas_env(config["blas_threads"]).items())
    python = config.get("python")
    command = f"{shlex.quote(python)} -m dask_mpi.cli" if python else "dask-mpi"
    lines = [f"export {v}" for v in blas.split()] + list(config.get("prologue") or [])
    failed = '{"error": "the MPI launch failed with exit status $status (see its output)"}'
    return (
        "\n".join(
            [
                "#!/usr/bin/env bash",
                f"# rfol_dask on MPI: {ranks} ranks; start_client reads {sched}",
            ]
            + lines
            + [f"rm -f {sched}", f"{launcher} env {blas} {command} --scheduler-file {sched} {args}"]
            + [
                "status=$?",
                f'if [ $status -ne 0 ]; then echo "{failed}" > {sched}; fi',
                "exit $status",
            ]
        )
        + "\n"
    )


def _kubernetes_spec(config):
    from dask_kubernetes.operator import make_cluster_spec

    opts = dict(config["options"])
    env = {**blas_env(config["blas_threads"]), **opts.pop("env", {})}
    return make_cluster_spec(n_workers=int(config.get("scale") or 1), env=env, **opts)


def make_cluster(config):
    """The cluster manager of ``config``: ``LocalCluster``, ``LocalCUDACluster``,
    ``SLURMCluster`` / ``PBSCluster`` (no job submitted until it is scaled) or ``KubeCluster``.
    An MPI cluster is started by its launcher (:func:`job_script`), not from Python."""
    name, config = config, load_config(config)
    kind = config["kind"]
    if kind == "mpi":
        raise ValueError("an MPI cluster is started by running job_script(config) with mpirun")
    _check_threads(config)
    try:
        if kind in ("local", "cuda-local"):
            start = local_cluster if kind == "local" else local_cuda_cluster
            return start(blas_threads=config["blas_threads"], **config["options"])
        if kind in ("slurm", "pbs"):
            manager, options = _jobqueue(config)
            return manager(**options)
        try:
            from dask_kubernetes.operator import KubeCluster
        except ImportError as exc:
            raise ImportError(
                "kind 'kubernetes' needs dask-kubernetes: pip install 'rfol-dask[cloud]'"
            ) from exc
        return KubeCluster(custom_cluster_spec=_kubernetes_spec(config))
    except (RuntimeError, OSError, ValueError) as exc:
        raise ClusterStartError(f"the {kind} cluster of {name!r} did not start: {exc}") from exc


def job_script(config):
    """What would be submitted for ``config``, as text: the batch script of one SLURM/PBS job,
    the Kubernetes cluster spec (YAML), the MPI launch script, or the local settings."""
    import yaml

    config = load_config(config)
    _check_threads(config)
    kind = config["kind"]
    if kind in ("slurm", "pbs"):
        return _job(config).job_script()
    if kind == "kubernetes":
        return yaml.safe_dump(_kubernetes_spec(config), sort_keys=False)
    if kind == "mpi":
        return _mpi_script(config)
    manager = "LocalCUDACluster" if kind == "cuda-local" else "LocalCluster"
    return yaml.safe_dump({manager: config["options"], "env": blas_env(config["blas_threads"])})


def _wait_for_jobs(client, cluster, kind, jobs):
    """Wait for the first worker of ``jobs`` submitted jobs, logging the wait once a minute;
    ClusterStartError as soon as every submission has failed (the batch system refused them)."""
    start = last = time.monotonic()
    while not client.scheduler_info()["workers"]:
        tried = list(cluster.workers.values())  # dask-jobqueue adds the jobs once all were tried
        queued = sum(job.job_id is not None for job in tried)
        if len(tried) >= jobs and not queued:
            raise ClusterStartError(
                f"the batch system refused every {kind.upper()} job (its message is logged "
                "above): check the configuration's queue, account and resources"
            )
        if time.monotonic() - last >= 60:
            last = time.monotonic()
            logger.info(
                "waiting for the first worker: %d of %d jobs queued, %.0f s so far",
                queued,
                jobs,
                last - start,
            )
        del tried
        time.sleep(0.5)


def _mpi_client(config):
    """A client of the MPI job's scheduler, once its scheduler file appears (the wait logged
    once a minute, at most ``scheduler_timeout`` s); its close ends the MPI job."""
    import dask

    path = os.path.abspath(config.get("scheduler_file", "scheduler.json"))
    timeout = config.get("scheduler_timeout", SCHEDULER_TIMEOUT)
    start = last = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - start > timeout:
            raise ClusterStartError(
                f"no scheduler file {path} after {timeout:g} s: run the MPI job first "
                "(job_script(config)), or raise scheduler_timeout while it waits in a queue"
            )
        if time.monotonic() - last >= 60:
            last = time.monotonic()
            logger.info("waiting for the MPI scheduler file %s, %.0f s so far", path, last - start)
        time.sleep(0.5)
    try:
        with open(path) as f:
            error = json.load(f).get("error")
    except (OSError, ValueError, AttributeError):  # rank 0 still writing it: the client retries
        error = None
    if error:
        raise ClusterStartError(f"{error}; {path} says so: fix the launch and run it again")
    connect = dask.config.get("distributed.comm.timeouts.connect")
    try:
        return _owning_client(scheduler_file=path, timeout=connect)
    except OSError as exc:
        raise ClusterStartError(
            f"the scheduler of {path} does not answer ({exc}): a file of an earlier MPI job? "
            "run the MPI job again"
        ) from exc


def start_client(config):
    """Start (for MPI, connect to) the cluster of ``config``; returns a ``Client`` whose close
    (or :func:`close_client`) closes the cluster, for MPI by shutting its scheduler down.

    SLURM/PBS/Kubernetes clusters are scaled to ``scale`` jobs/pods and the call waits for the
    first worker, logging the wait once a minute (logger ``rfol_dask``, level INFO). Raises
    :class:`ClusterStartError` where the cluster cannot start: every SLURM/PBS submission
    refused, no Kubernetes cluster reached, no MPI scheduler file within ``scheduler_timeout``
    seconds or an MPI launch that failed. A start that fails or is interrupted closes its cluster.
    """
    given, config = config, load_config(config)
    if config["kind"] == "mpi":
        _check_threads(config)
        client = _mpi_client(config)
    else:
        cluster = make_cluster(given)
        client = _owning_client(cluster)
        try:
            if config["kind"] in ("slurm", "pbs"):
                cluster.scale(jobs=config.get("scale") or 1)
                _wait_for_jobs(client, cluster, config["kind"], config.get("scale") or 1)
            elif config["kind"] == "kubernetes":
                cluster.scale(config.get("scale") or 1)
                client.wait_for_workers(1)
        except BaseException:
            client.close()
            raise
    logger.debug("%s cluster started, dashboard: %s", config["kind"], dashboard_link(client))
    return client


def _close_cluster(cluster):
    """Close ``cluster`` within :data:`CLOSE_TIMEOUT` s, else warn, naming its jobs to check.
    dask-jobqueue's close fails on any job object still in memory and not closed or failed: the
    refused jobs are marked failed, the others cancelled, and those in reference cycles (moved to
    the oldest garbage collector generation during a long queue wait) collected."""
    if cluster.status == Status.closed:
        return
    deadline = time.monotonic() + CLOSE_TIMEOUT
    if hasattr(cluster, "job_cls"):
        for job in cluster.workers.values():  # refused by the batch system: never started
            job.status = Status.failed if job.job_id is None else job.status
        job = None  # no reference left to a job object (see above)
        cluster.scale(0)
        while cluster.workers and time.monotonic() < deadline:
            time.sleep(0.05)
        gc.collect()
    try:
        cluster.close(timeout=max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        name = shlex.quote(str(getattr(cluster, "job_name", None) or "dask-worker"))
        warnings.warn(
            f"the cluster did not close in {CLOSE_TIMEOUT:g} s; its jobs may still be queued: "
            f"`squeue -u $USER --name {name}` (SLURM) or `qselect -u $USER -N {name}` (PBS)",
            ClusterWarning,
            stacklevel=user_stacklevel(),
        )


def close_client(client):
    """Close ``client`` and the cluster it started (None: nothing to do)."""
    if client is not None:
        client.close()


def dashboard_link(client):
    """The dashboard URL of ``client``'s scheduler, or None when it has none (bokeh missing)."""
    try:
        return client.dashboard_link
    except (KeyError, AttributeError, TypeError):
        return None
