"""Clients of clusters started from a configuration (a shipped name, a YAML path or a dict)::

    kind: slurm      # local | cuda-local | slurm | pbs | kubernetes | mpi (+ keys of mpi.yaml)
    scale: 4         # worker processes (local kinds), jobs (slurm/pbs), pods, or MPI worker ranks
    blas_threads: 1  # BLAS threads per worker process
    options: {...}   # keywords of the cluster manager, or flags of the dask-mpi command

(options left out: dask's configuration, ``jobqueue.slurm.*`` ...)."""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import json
import logging
import numbers
import os
import shlex
import shutil
import signal
import threading
import time
import warnings
from importlib import resources
from pathlib import Path

import dask
from distributed.core import Status

from . import progress  # noqa: F401  (the package's no-workers timeout: a default of dask's)
from .exceptions import ClusterStartError, ClusterWarning
from .stacklevel import user_stacklevel

#: the manager of each kind: (module, class, the extra of rfol-dask that installs it)
_MANAGERS = {
    "local": ("distributed", "LocalCluster", ""),
    "cuda-local": ("dask_cuda", "LocalCUDACluster", "gpu"),
    "slurm": ("dask_jobqueue", "SLURMCluster", "hpc"),
    "pbs": ("dask_jobqueue", "PBSCluster", "hpc"),
    "kubernetes": ("dask_kubernetes.operator", "KubeCluster", "cloud"),
}
KINDS = (*_MANAGERS, "mpi")
_MPI_KEYS = {"scheduler_timeout", "launcher", "node_cores", "ranks_per_node", "python", "prologue"}
_KEYS = {"kind", "scale", "blas_threads", "options", "scheduler_file"} | _MPI_KEYS
_CLUSTER_ONLY = {"n_workers", "job_cls", "loop", "shared_temp_directory", "silence_logs"}
_CLUSTER_ONLY |= {"asynchronous", "dashboard_address", "host", "scheduler_options", "scheduler_cls"}
SCHEDULER_TIMEOUT = 600.0  # s waited for an MPI job's scheduler file (``scheduler_timeout``)
CLOSE_TIMEOUT = 60.0  # s a cluster's close may take before it is given up with a warning
LOG_EVERY = 60  # s between two lines of a wait's log
logger = logging.getLogger("rfol_dask")


def process_env(blas_threads):
    """Environment variables of a cluster's processes: a worker's BLAS threads, and the no-workers
    timeout (the package's default) for a scheduler started elsewhere (MPI rank 0, a pod)."""
    env = {f"{k}_NUM_THREADS": str(int(blas_threads)) for k in ("OMP", "OPENBLAS", "MKL")}
    timeout = dask.config.get("distributed.scheduler.no-workers-timeout")
    return {**env, "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": str(timeout)}


def _owning_client(cluster=None, **connect):
    """A ``Client`` whose close closes ``cluster`` (without one: shuts the MPI job's dask down)."""
    from distributed import Client

    class OwningClient(Client):
        def close(self, *args, **kwargs):
            if cluster is None and self.status == "running":
                return self.shutdown()
            super().close(*args, **kwargs)
            if cluster is not None:
                _close_cluster(cluster)

    return OwningClient(cluster, **connect)


def local_client(blas_threads=1, **kwargs):
    """A ``Client`` of a new ``distributed.LocalCluster`` (its keywords; by default one
    single-threaded worker process per core, ``blas_threads`` BLAS threads each); its close closes
    both."""
    return _owning_client(_local("local", blas_threads, **kwargs))


def _local(kind, blas_threads=1, **kwargs):
    """The local cluster of ``kind`` (BLAS threads set, dashboard on a free port) started with
    SIGINT blocked, hence in its workers: a Ctrl-C interrupts only this process, which closes it."""
    from multiprocessing import resource_tracker

    if kwargs.get("processes", True):  # worker processes of their own: their environment
        kwargs["env"] = {**process_env(blas_threads), **kwargs.get("env", {})}
    if kind == "local":
        kwargs.setdefault("threads_per_worker", 1)
    kwargs.setdefault("dashboard_address", ":0")
    start = functools.partial(_manager(kind), **kwargs)
    if threading.current_thread() is not threading.main_thread() or os.name == "nt":
        return start()
    resource_tracker.ensure_running()  # else started from a worker thread, SIGINT unblocked
    previous, cluster = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}), None
    try:
        cluster = start()
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C meanwhile: here
        except BaseException:
            if cluster is not None:
                cluster.close()
            raise
    return cluster


def shipped_configs():
    """Names of the configurations shipped with the package (``load_config`` accepts them)."""
    folder = resources.files("rfol_dask").joinpath("clusters")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def gpu_config(config):
    """True where the configuration's workers run on GPUs (``cuda-local``, ``dask cuda worker``)."""
    config = load_config(config)
    command = str(config["options"].get("worker_command", "")).split()
    return config["kind"] == "cuda-local" or "cuda" in command


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
    if unknown := set(config) - (_KEYS if config["kind"] == "mpi" else _KEYS - _MPI_KEYS):
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} for kind {config['kind']}")
    for key in ("scale", "blas_threads", "node_cores", "ranks_per_node"):
        value = 1 if config.get(key) is None else config[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{where}: {key} must be a whole number >= 1, got {value!r}")
    t = config.get("scheduler_timeout", 1)
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or t <= 0:
        raise ValueError(f"{where}: scheduler_timeout must be a number of seconds > 0")
    if config["kind"] in ("local", "cuda-local") and config.get("scale") is not None:
        if config["options"].get("n_workers") not in (None, config["scale"]):
            raise ValueError(f"{where}: scale and options.n_workers disagree; give one of them")
        config["options"]["n_workers"] = config["scale"]  # the number of worker processes
    return config


def _manager(kind):
    """The manager class of ``kind`` (ImportError: what to install), the SIGINT handler that
    dask_jobqueue's import replaces with a silent ``sys.exit`` put back."""
    (module, name, extra), previous = _MANAGERS[kind], signal.getsignal(signal.SIGINT)
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        pkg = module.split(".")[0].replace("_", "-")
        raise ImportError(f"kind {kind!r} needs {pkg}: pip install 'rfol-dask[{extra}]'") from exc
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)


def _jobqueue(config):
    """``(manager class, keywords)`` of a slurm/pbs configuration: the BLAS exports, then the
    prologue (the site's where the file gives none), whose ``python`` runs the workers."""
    kind, opts, manager = config["kind"], dict(config["options"]), _manager(config["kind"])
    key = f"jobqueue.{kind}"
    prologue = opts.get("job_script_prologue") or dask.config.get(f"{key}.job-script-prologue", [])
    if prologue and not opts.get("python") and not dask.config.get(f"{key}.python"):
        opts["python"] = "python"
    exports = [f"export {k}={v}" for k, v in process_env(config["blas_threads"]).items()]
    opts["job_script_prologue"] = exports + list(prologue or [])
    return manager, opts


def _kubernetes_spec(config):
    opts = dict(config["options"])
    env = {**process_env(config["blas_threads"]), **opts.pop("env", {})}
    _manager("kubernetes")  # ImportError saying what to install
    spec = importlib.import_module(_MANAGERS["kubernetes"][0]).make_cluster_spec
    return spec(n_workers=config.get("scale") or 1, env=env, **opts)


def make_cluster(config):
    """The cluster manager of ``config`` (a SLURM/PBS one submits no job until it is scaled); an
    MPI cluster is started by its launcher (:func:`job_script`), not from Python."""
    name, config = config, load_config(config)
    if (kind := config["kind"]) == "mpi":
        raise ValueError("an MPI cluster is started by running job_script(config) with mpirun")
    try:
        if kind in ("local", "cuda-local"):
            return _local(kind, config["blas_threads"], **config["options"])
        if kind in ("slurm", "pbs"):
            manager, options = _jobqueue(config)
            return manager(**options)
        return _manager(kind)(custom_cluster_spec=_kubernetes_spec(config))
    except (RuntimeError, OSError, ValueError) as exc:
        raise ClusterStartError(f"the {kind} cluster of {name!r} did not start: {exc}") from exc


def job_script(config):
    """What would be submitted for ``config``, as text: the batch script of one SLURM/PBS job,
    the Kubernetes cluster spec (YAML), the MPI launch script, or the local settings."""
    import yaml

    config = load_config(config)
    if (kind := config["kind"]) in ("slurm", "pbs"):  # one job's, rendered by its job class
        manager, opts = _jobqueue(config)
        job_cls = opts.get("job_cls") or manager.job_cls
        opts = {k: v for k, v in opts.items() if k not in _CLUSTER_ONLY}
        return job_cls(scheduler="tcp://SCHEDULER:8786", name="rfol-dask", **opts).job_script()
    if kind == "kubernetes":
        return yaml.safe_dump(_kubernetes_spec(config), sort_keys=False)
    if kind == "mpi":  # a failed launch writes its error into the scheduler file: reported at once
        sched = shlex.quote(config.get("scheduler_file", "scheduler.json"))
        ranks = int(config.get("scale") or 1) + 1
        launcher = config.get("launcher", "mpirun -n {ranks}")
        launcher = launcher.format(ranks=ranks, ranks_per_node=config.get("ranks_per_node", ""))
        opts = config["options"].items()
        args = "".join(f" --{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in opts)
        blas = " ".join(f"{k}={v}" for k, v in process_env(config["blas_threads"]).items())
        python = config.get("python")
        command = f"{shlex.quote(python)} -m dask_mpi.cli" if python else "dask-mpi"
        prologue = "".join(f"{line}\n" for line in config.get("prologue") or [])
        failed = "the MPI launch failed with exit status $status (see its output)"
        failed = f'{{\\"error\\": \\"{failed}\\"}}'
        return f"""#!/usr/bin/env bash
# rfol_dask on MPI: {ranks} ranks, the scheduler on rank 0; start_client reads {sched}
export {blas}
{prologue}rm -f {sched}
{launcher} env {blas} {command} --scheduler-file {sched}{args}
status=$?
if [ $status -ne 0 ]; then echo "{failed}" > {sched}; fi
exit $status
"""
    manager = "LocalCUDACluster" if kind == "cuda-local" else "LocalCluster"
    return yaml.safe_dump({manager: config["options"], "env": process_env(config["blas_threads"])})


def _wait(ready, what, timeout=float("inf")):
    """Poll ``ready()`` every 0.5 s, logging ``what`` once a minute; False after ``timeout`` s."""
    start = time.monotonic()
    while not ready():
        if time.monotonic() - start > timeout:
            return False
        time.sleep(0.5)
        if int(time.monotonic() - start) % LOG_EVERY == LOG_EVERY - 1:
            logger.info(f"waiting for {what}, {time.monotonic() - start:.0f} s so far")
            time.sleep(1)
    return True


def start_client(config):
    """Start (MPI: connect to) the cluster of ``config``: a ``Client`` whose close closes it (MPI:
    ends the job's dask), after a first SLURM/PBS worker; :class:`ClusterStartError` if it can't."""
    given, config = config, load_config(config)
    kind, jobs, up = config["kind"], config.get("scale") or 1, config["kind"].upper()
    if kind == "mpi":  # a client of the MPI job's scheduler once its scheduler file appears
        timeout = config.get("scheduler_timeout", SCHEDULER_TIMEOUT)
        path = os.path.abspath(config.get("scheduler_file", "scheduler.json"))
        what = f"the MPI job to write its scheduler file {path}"
        if not os.path.exists(path):
            logger.info(f"waiting up to {timeout:g} s for {what}")
        if not _wait(lambda: os.path.exists(path), what, timeout):
            msg = "run the MPI job first, or raise scheduler_timeout while it is queued"
            raise ClusterStartError(f"no scheduler file {path} after {timeout:g} s: {msg}")
        with open(path) as f, contextlib.suppress(ValueError, AttributeError):  # rank 0 writing
            if error := json.load(f).get("error"):  # a failed launch's (see job_script)
                raise ClusterStartError(f"{error}; fix the MPI launch and run it again")
        try:
            connect = dask.config.get("distributed.comm.timeouts.connect")
            client = _owning_client(scheduler_file=path, timeout=connect)
        except OSError as exc:
            msg = f"no scheduler answers at {path}: run the MPI job again"
            raise ClusterStartError(msg) from exc
        logger.debug("%s cluster started, dashboard: %s", kind, dashboard_link(client))
        return client
    client = _owning_client(cluster := make_cluster(given))

    def ready():  # a worker is there; ClusterStartError once every submission failed
        ids = [job.job_id for job in cluster.workers.values()]  # no reference to a job is kept
        if len(ids) >= jobs and not any(ids):
            msg = "(logged above): check the configuration's queue, account and resources"
            raise ClusterStartError(f"the batch system refused every {up} job {msg}")
        return bool(client.scheduler_info(n_workers=1)["workers"])

    try:
        if kind in ("slurm", "pbs"):
            if shutil.which(submit := shlex.split(cluster.job_cls.submit_command)[0]) is None:
                msg = f"this machine cannot submit {up} jobs; start from a login node"
                raise ClusterStartError(f"{submit!r} is not on PATH: {msg}")
            cluster.scale(jobs=jobs)
            _wait(ready, f"the first worker of {jobs} {up} jobs")
        elif kind == "kubernetes":
            cluster.scale(jobs)
            client.wait_for_workers(1)
    except BaseException:
        client.close()
        raise
    logger.debug("%s cluster started, dashboard: %s", kind, dashboard_link(client))
    return client


def _close_cluster(cluster):
    """Close ``cluster`` within :data:`CLOSE_TIMEOUT` s, else warn naming its jobs; refused jobs
    are marked failed, the rest cancelled and collected (dask-jobqueue waits on every one alive)."""
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
        msg = f"the cluster did not close in {CLOSE_TIMEOUT:g} s; its jobs may still be queued: "
        msg += f"`squeue -u $USER --name {name}` (SLURM) or `qselect -u $USER -N {name}` (PBS)"
        warnings.warn(msg, ClusterWarning, stacklevel=user_stacklevel())


def close_client(client):
    """Close ``client`` and the cluster it started (None: nothing to do)."""
    if client is not None:
        client.close()


def dashboard_link(client):
    """The dashboard URL of ``client``'s scheduler, or None when it has none (bokeh missing)."""
    with contextlib.suppress(KeyError, AttributeError, TypeError):
        return client.dashboard_link
