"""Client helpers: use the active Dask client, or start one from a configuration when asked.

Library calls never start a cluster on their own; the CLI and user code call
:func:`local_client` or :func:`start_client` explicitly.

A configuration (a shipped name such as ``"slurm"``, a path to a YAML file, or a dict) names
its ``kind`` and the keywords of the matching cluster manager::

    kind: slurm            # local | cuda-local | slurm | pbs | kubernetes | mpi
    scale: 4               # worker processes (local, cuda-local), jobs (slurm/pbs), worker pods
                           # (kubernetes) or worker ranks (mpi)
    blas_threads: 1        # BLAS threads per worker process, set deliberately
    options: {...}         # keywords of LocalCluster / SLURMCluster / PBSCluster / make_cluster_spec / dask-mpi

``cuda-local`` starts ``dask_cuda.LocalCUDACluster`` (one worker process per GPU; ``pip install
'rfol-dask[gpu]'``); on GPU nodes of a SLURM / PBS cluster the jobs run ``dask cuda worker``
(``options.worker_command``, see the shipped ``slurm-gpu``). MPI configurations also take ``node_cores`` and ``ranks_per_node`` (placement, for the core
check and the launcher's ``{ranks_per_node}``), ``python`` and ``prologue`` (shell lines run
first), and ``scheduler_timeout`` (seconds :func:`start_client` waits for the scheduler file, default
:data:`SCHEDULER_TIMEOUT`). The shipped configurations live in ``rfol_dask/clusters/`` (see :func:`shipped_configs`).

Every node must satisfy ``processes x threads_per_worker x blas_threads <= cores``;
:func:`job_script`, :func:`make_cluster` and :func:`start_client` warn when a configuration
oversubscribes its nodes. ``job_script(config)`` renders what would be submitted (batch
script, Kubernetes spec or MPI launch script) without contacting any scheduler.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import numbers
import os
import re
import shlex
import shutil
import time
import warnings
from importlib import resources
from pathlib import Path

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
    "blas_env",
    "shipped_configs",
    "gpu_config",
    "node_threads",
    "dashboard_link",
    "close_client",
    "KINDS",
]

KINDS = ("local", "cuda-local", "slurm", "pbs", "kubernetes", "mpi")
_MPI_KEYS = {
    "scheduler_file",
    "scheduler_timeout",
    "launcher",
    "node_cores",
    "ranks_per_node",
    "python",
    "prologue",
}
_KEYS = {"kind", "scale", "blas_threads", "options"} | _MPI_KEYS
_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_SCHEDULER = "tcp://SCHEDULER:8786"  # placeholder address of rendered job scripts

logger = logging.getLogger("rfol_dask")


def blas_env(blas_threads):
    """Environment variables that fix the BLAS threads of a worker process."""
    return {var: str(int(blas_threads)) for var in _BLAS_VARS}


def _owning_client(cluster):
    """A ``distributed.Client`` of ``cluster`` that also closes the cluster when it closes (as
    ``with local_client() as client:`` expects; a plain ``Client(cluster)`` leaves it running)."""
    from distributed import Client

    class OwningClient(Client):
        def close(self, *args, **kwargs):
            try:
                return super().close(*args, **kwargs)
            finally:
                with contextlib.suppress(Exception):  # already closed, or gone
                    _close_cluster(cluster)

    return OwningClient(cluster)


def local_client(
    n_workers=None,
    threads_per_worker=1,
    memory_limit="auto",
    processes=True,
    blas_threads=1,
    **kwargs,
):
    """Start a ``distributed.LocalCluster`` (see :func:`local_cluster`) and return a ``Client``
    connected to it; closing the client (or leaving its ``with`` block) closes both."""
    return _owning_client(
        local_cluster(
            n_workers, threads_per_worker, memory_limit, processes, blas_threads, **kwargs
        )
    )


def _check_count(name, value):
    """ValueError unless ``value`` is a whole number >= 1 (a cluster of no workers waits forever)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def _without_sigint(start):
    """``start()`` (a cluster of local worker processes) with SIGINT blocked in this thread
    meanwhile, hence in the threads it starts and the worker processes these spawn, which inherit
    the signal mask: a terminal's Ctrl-C, sent to the whole process group, then interrupts only
    this process, whose KeyboardInterrupt closes the cluster (its nannies end the workers),
    instead of every worker dying with a KeyboardInterrupt traceback of its own. A Ctrl-C during
    the start is raised once it is done (closing the cluster). Off the main thread, or without
    ``signal.pthread_sigmask`` (Windows): just ``start()``."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        return start()
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # started from the cluster's threads, it would unblock SIGINT in them
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        cluster = start()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        raise
    try:
        signal.pthread_sigmask(
            signal.SIG_SETMASK, previous
        )  # a Ctrl-C pressed meanwhile is raised here
    except BaseException:
        cluster.close()
        raise
    return cluster


def local_cluster(
    n_workers=None,
    threads_per_worker=1,
    memory_limit="auto",
    processes=True,
    blas_threads=1,
    **kwargs,
):
    """A ``distributed.LocalCluster``: by default one worker process per core with one task
    thread and one BLAS thread each (distributed's own default BLAS setting, made explicit)
    and the dashboard on a free port. Worker processes leave Ctrl-C to this one (:func:`_without_sigint`)."""
    from distributed import LocalCluster

    _check_count("threads_per_worker", threads_per_worker)
    if n_workers is None:
        n_workers = max(1, host_cores() // threads_per_worker)
    _check_count("n_workers", n_workers)
    if processes:
        kwargs["env"] = {**blas_env(blas_threads), **kwargs.get("env", {})}
    return _without_sigint(
        functools.partial(
            LocalCluster,
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            memory_limit=memory_limit,
            processes=processes,
            dashboard_address=kwargs.pop("dashboard_address", ":0"),
            **kwargs,
        )
    )


def shipped_configs():
    """Names of the configurations shipped with the package (``load_config`` accepts them)."""
    return sorted(
        p.name[:-5]
        for p in resources.files("rfol_dask").joinpath("clusters").iterdir()
        if p.name.endswith(".yaml")
    )


def gpu_config(config):
    """True where the configuration's workers run on GPUs: kind ``cuda-local``, or jobs whose
    ``worker_command`` is dask-cuda's (``dask cuda worker``)."""
    config = load_config(config)
    command = str(config["options"].get("worker_command", ""))
    return config["kind"] == "cuda-local" or "cuda" in command.split()


def _read_config(config):
    """The YAML text of a shipped name or a path (a shipped name wins over a file of that name in
    the working directory; ``./local`` reads the file; a leading ``~`` is the home folder, as for
    the package's other paths)."""
    path, name = Path(os.path.expanduser(config)), os.fspath(config)
    if name in shipped_configs():
        return resources.files("rfol_dask").joinpath("clusters", f"{name}.yaml").read_text()
    if path.is_file():
        return path.read_text()
    raise FileNotFoundError(
        f"no cluster configuration at {path}: give a YAML file or one of the shipped "
        f"configurations {shipped_configs()}"
    )


def _config_name(config):
    """How errors name a configuration: its shipped name or path, or 'given as a dict'."""
    return os.fspath(config) if isinstance(config, (str, os.PathLike)) else "given as a dict"


@functools.lru_cache(maxsize=None)
def _option_keywords(kind):
    """``(keywords, what)``: the keywords ``options`` of ``kind`` may hold (those of the cluster
    manager and of the classes it forwards ``**kwargs`` to) and how to describe them; None where
    they are not checked (MPI: flags of the dask-mpi command) or the package is not installed."""
    try:
        if kind in ("local", "cuda-local"):
            from distributed import LocalCluster, Nanny, Worker
            from distributed.node import ServerNode

            callables = [
                LocalCluster,
                Nanny,
                Worker,
                ServerNode,
            ]  # LocalCluster -> Nanny -> Worker -> ServerNode
            what = "distributed.LocalCluster and its Nanny/Worker"
            if kind == "cuda-local":
                from dask_cuda import LocalCUDACluster

                callables.insert(0, LocalCUDACluster)
                what = "dask_cuda.LocalCUDACluster, " + what
        elif kind in ("slurm", "pbs"):
            dask_jobqueue = _dask_jobqueue()

            cluster, job = (
                (dask_jobqueue.SLURMCluster, dask_jobqueue.slurm.SLURMJob)
                if kind == "slurm"
                else (dask_jobqueue.PBSCluster, dask_jobqueue.pbs.PBSJob)
            )
            callables = [cluster, job, dask_jobqueue.core.Job]  # cluster -> job class -> Job
            what = f"dask_jobqueue.{cluster.__name__} and its {job.__name__}"
        elif kind == "kubernetes":
            from dask_kubernetes.operator import make_cluster_spec

            callables, what = [make_cluster_spec], "dask_kubernetes.operator.make_cluster_spec"
        else:
            return None
    except ImportError:
        return None
    ours = {"self", "blas_threads"} | (
        {"n_workers"} if kind in ("slurm", "pbs", "kubernetes") else set()
    )
    return frozenset(
        _signature_keywords(callables) - ours
    ), what  # (top-level keys set those of ours)


def _signature_keywords(callables):
    """The names that ``callables`` take as keywords."""
    import inspect

    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {
        name
        for c in callables
        for name, p in inspect.signature(c).parameters.items()
        if p.kind in named
    }


def _check_options(where, kind, options):
    """ValueError naming the first option that the cluster manager of ``kind`` does not take,
    with the nearest keyword it does."""
    import difflib

    checked = _option_keywords(kind)
    if checked is None:
        return
    keywords, what = checked
    for key in options:
        if key not in keywords:
            top = {"blas_threads": "blas_threads", "n_workers": "scale"}.get(key)
            close = difflib.get_close_matches(str(key), sorted(keywords), n=1)
            hint = (
                f"set the top-level key {top} instead"
                if top
                else f"did you mean {close[0]!r}?"
                if close
                else "check its spelling"
            )
            raise ValueError(
                f"{where}: unknown option {key!r} for kind {kind}; {hint} (options take the "
                f"keywords of {what})"
            )


def load_config(config):
    """Read and check a cluster configuration: a shipped name (``"slurm"``, see
    :func:`shipped_configs`), a path to YAML, or a dict; returns a dict."""
    name = _config_name(config)
    where = f"cluster configuration {name}"
    if isinstance(config, (str, os.PathLike)):
        import yaml

        try:
            config = yaml.safe_load(_read_config(config)) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{where} is not valid YAML: {exc}") from None
        if not isinstance(config, dict):
            raise ValueError(
                f"{where} must be a YAML mapping (kind: ..., options: ...), "
                f"got a {type(config).__name__}"
            )
    config = dict(config)
    kind = config.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where} needs kind in {KINDS}, got {kind!r}")
    unknown = sorted(set(config) - _KEYS)
    if unknown:
        raise ValueError(
            f"unknown cluster configuration keys {unknown} in {name}; allowed: {sorted(_KEYS)}"
        )
    misplaced = sorted(set(config) & (_MPI_KEYS - {"scheduler_file"})) if kind != "mpi" else []
    if misplaced:
        hint = (
            " (for slurm/pbs set options.python and options.job_script_prologue)"
            if kind in ("slurm", "pbs")
            else ""
        )
        raise ValueError(f"{where}: keys {misplaced} are for kind mpi only{hint}")
    if config.get("options") is None:
        config["options"] = {}
    if not isinstance(config["options"], dict):
        raise ValueError(
            f"{where}: options must be a mapping of keyword: value (one per line under "
            f"'options:'), got a {type(config['options']).__name__}"
        )
    config.setdefault("blas_threads", 1)
    if kind in ("local", "cuda-local"):
        _local_scale(where, kind, config)
    elif config.get("scale") is None:
        config["scale"] = 1
    for key in ("scale", "blas_threads", "node_cores", "ranks_per_node"):
        if key == "blas_threads" or config.get(key) is not None:
            _check_count(f"{where}: {key}", config[key])
    timeout = config.get("scheduler_timeout", SCHEDULER_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise ValueError(
            f"{where}: scheduler_timeout must be a number of seconds > 0, got {timeout!r}"
        )
    _check_options(where, kind, config["options"])
    if kind == "kubernetes":
        _check_pod_memory(where, config["options"])
    return config


def _local_scale(where, kind, config):
    """``scale`` of a ``local`` / ``cuda-local`` configuration: its worker processes, as for the
    other kinds, hence ``options.n_workers`` (a different ``options.n_workers`` is refused). The
    number is then in ``options`` and ``scale`` None (the default: ``options`` or one worker per
    core / GPU), so that a configuration read once reads again the same."""
    scale = config.get("scale")
    if scale is None:
        config["scale"] = None
        return
    _check_count(f"{where}: scale", scale)
    n_workers = config["options"].get("n_workers")
    if n_workers is not None and n_workers != scale:
        raise ValueError(
            f"{where}: scale {scale} and options.n_workers {n_workers} disagree; for kind {kind} both "
            "are the number of worker processes: give one of them (scale, as for the other kinds)"
        )
    config["options"] = {**config["options"], "n_workers": scale}
    config["scale"] = None


def _check_pod_memory(where, options):
    """ValueError where the workers' ``--memory-limit`` (in ``worker_command``) is above the
    pod's memory limit (``resources.limits.memory``): Kubernetes would kill the pod (OOMKilled)
    before dask's memory manager spills, pauses or restarts the worker."""
    import re

    from dask.utils import parse_bytes

    limits = (options.get("resources") or {}).get("limits") or {}
    command = options.get("worker_command") or ""
    command = " ".join(map(str, command)) if isinstance(command, (list, tuple)) else str(command)
    found = re.search(r"--memory-limit[= ]+(\S+)", command)
    if limits.get("memory") is None or found is None:
        return
    try:
        pod, worker = parse_bytes(str(limits["memory"])), parse_bytes(found.group(1))
    except (ValueError, TypeError):
        return  # 'auto', a fraction of the pod's memory, or a quantity dask does not read
    if worker > pod:
        raise ValueError(
            f"{where}: the workers' --memory-limit {found.group(1)} is above the pod's memory limit "
            f"{limits['memory']} (resources.limits.memory), so Kubernetes would kill a worker pod before "
            "dask spills or pauses it; set --memory-limit to about 90 % of the pod's"
        )


def _jobqueue_options(config):
    """SLURMCluster/PBSCluster keywords: the BLAS exports go first in the prologue, and a
    prologue without ``python`` runs the ``python`` it puts on the PATH (not this machine's)."""
    opts = dict(config["options"])
    if opts.get("job_script_prologue") and not opts.get("python"):
        opts["python"] = "python"
    exports = [f"export {k}={v}" for k, v in blas_env(config["blas_threads"]).items()]
    opts["job_script_prologue"] = exports + list(opts.get("job_script_prologue", []))
    return opts


def _dask_jobqueue():
    """``dask_jobqueue``, imported without the SIGINT handler its import installs (``sys.exit()``,
    which turned a Ctrl-C into a silent exit with status 0, past every ``except KeyboardInterrupt``)."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise ImportError(
            "cluster kinds 'slurm' and 'pbs' need dask-jobqueue: pip install 'rfol-dask[hpc]'"
        ) from exc
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)
    return dask_jobqueue


def _kubernetes_operator():
    """``dask_kubernetes.operator``; ImportError saying what to install where it is missing."""
    try:
        from dask_kubernetes import operator
    except ImportError as exc:
        raise ImportError(
            "cluster kind 'kubernetes' needs dask-kubernetes: pip install 'rfol-dask[cloud]'"
        ) from exc
    return operator


def _jobqueue_job(config):
    """The dask-jobqueue job object of one job (renders the script, submits nothing)."""
    dask_jobqueue = _dask_jobqueue()

    cls = dask_jobqueue.slurm.SLURMJob if config["kind"] == "slurm" else dask_jobqueue.pbs.PBSJob
    takes = _signature_keywords([cls, dask_jobqueue.core.Job])
    opts = {
        k: v for k, v in _jobqueue_options(config).items() if k in takes
    }  # not the cluster's own keywords
    return cls(scheduler=_SCHEDULER, name="rfol-dask", **opts)


def _cpu_count(text):
    """Kubernetes CPU quantity ("4", "3500m", 2) as a number of cores."""
    text = str(text)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _flag(command, name, default):
    match = re.search(rf"--{name}[ =](\d+)", command)
    return int(match.group(1)) if match else default


def node_threads(config):
    """Threads per node of ``config``: a dict ``processes``, ``threads`` (task threads per
    worker process), ``blas`` and ``cores`` (of a node), or None where the configuration
    does not say (an MPI one without ``node_cores``)."""
    config = load_config(config)
    kind, opts, blas = config["kind"], config["options"], int(config["blas_threads"])
    if (
        kind == "cuda-local"
    ):  # one worker process per GPU: the GPUs named, or counted on this machine
        gpus = opts.get("n_workers") or _visible_gpus(
            opts.get("CUDA_VISIBLE_DEVICES")
        )  # 0: none visible
        return {
            "processes": int(gpus),
            "threads": _cuda_threads(opts.get("threads_per_worker", "auto"), gpus),
            "blas": blas,
            "cores": host_cores(),
        }
    if kind == "local":
        threads = int(opts.get("threads_per_worker", 1))
        workers = opts.get("n_workers") or max(1, host_cores() // threads)
        if not opts.get("processes", True):  # one process: the BLAS variables are not set
            return {
                "processes": 1,
                "threads": int(workers) * threads,
                "blas": 1,
                "cores": host_cores(),
            }
        return {"processes": int(workers), "threads": threads, "blas": blas, "cores": host_cores()}
    if kind in ("slurm", "pbs"):
        job = _jobqueue_job(config)
        cores = job.worker_cores
        if kind == "slurm" and opts.get("job_cpu"):
            cores = int(opts["job_cpu"])
        match = re.search(r"ncpus=(\d+)", str(opts.get("resource_spec", "")))
        if kind == "pbs" and match:
            cores = int(match.group(1))
        return {
            "processes": int(job.worker_processes),
            "threads": int(job.worker_process_threads),
            "blas": blas,
            "cores": int(cores),
        }
    if kind == "kubernetes":
        command = str(opts.get("worker_command", "dask-worker"))
        res = opts.get("resources") or {}
        cpu = (res.get("limits") or {}).get("cpu") or (res.get("requests") or {}).get("cpu")
        if cpu is None:
            return None
        return {
            "processes": _flag(command, "nworkers", 1),
            "threads": _flag(command, "nthreads", 1),
            "blas": blas,
            "cores": _cpu_count(cpu),
        }
    if config.get("node_cores") is None:
        return None
    ranks = int(config.get("ranks_per_node") or 1)
    return {
        "processes": ranks,
        "threads": int(config["options"].get("nthreads") or 1),
        "blas": blas,
        "cores": int(config["node_cores"]),
    }


def _visible_gpus(visible=None):
    """GPUs a LocalCUDACluster uses: those of its ``CUDA_VISIBLE_DEVICES`` option (a list or a
    comma-separated string), else of the environment variable; 0 when neither names any."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if isinstance(visible, (list, tuple)):
        return len(visible)
    return len([d for d in str(visible).split(",") if d.strip()]) if visible else 0


#: the most task threads of a GPU worker under ``threads_per_worker: auto``
CUDA_WORKER_THREADS = 8


def _cuda_threads(value, gpus):
    """Task threads of each GPU worker: ``value``, or for ``"auto"`` the host cores per GPU, at
    most :data:`CUDA_WORKER_THREADS` (the threads read and check chunks in parallel and feed
    the GPU, whose tasks run one after another along the fit's chains)."""
    if value != "auto":
        return int(value)
    return max(1, min(CUDA_WORKER_THREADS, host_cores() // max(1, int(gpus))))


def local_cuda_cluster(blas_threads=1, **kwargs):
    """A ``dask_cuda.LocalCUDACluster``: one worker process per visible GPU (``n_workers`` /
    ``CUDA_VISIBLE_DEVICES`` choose), ``threads_per_worker`` task threads each (default
    ``"auto"``: :func:`_cuda_threads`), BLAS threads set; its workers leave Ctrl-C to this process
    (:func:`_without_sigint`)."""
    try:
        from dask_cuda import LocalCUDACluster
        from dask_cuda.utils import get_n_gpus
    except ImportError as exc:
        raise ImportError(
            "cluster kind 'cuda-local' needs dask-cuda (and CuPy): pip install 'rfol-dask[gpu]'; "
            "or use kind 'local'"
        ) from exc
    if kwargs.get("n_workers") is not None:
        _check_count("n_workers", kwargs["n_workers"])
    kwargs["env"] = {**blas_env(blas_threads), **kwargs.get("env", {})}
    if kwargs.get("threads_per_worker", "auto") == "auto":
        gpus = (
            kwargs.get("n_workers")
            or _visible_gpus(kwargs.get("CUDA_VISIBLE_DEVICES"))
            or get_n_gpus()
        )
        kwargs["threads_per_worker"] = _cuda_threads("auto", gpus)
    return _without_sigint(
        functools.partial(
            LocalCUDACluster, dashboard_address=kwargs.pop("dashboard_address", ":0"), **kwargs
        )
    )


def _check_threads(config):
    """Warn when a node of ``config`` runs more threads than it has cores."""
    t = node_threads(config)
    if t is None or t["processes"] * t["threads"] * t["blas"] <= t["cores"]:
        return
    total = t["processes"] * t["threads"] * t["blas"]
    fit = max(1, int(t["cores"] // (t["processes"] * t["threads"])))
    fix = (
        f"set blas_threads: {fit}"
        if t["processes"] * t["threads"] <= t["cores"]
        else "use fewer worker processes or task threads per node"
    )
    warnings.warn(
        f"the {config['kind']} cluster configuration oversubscribes each node {total / t['cores']:.3g}x: "
        f"{t['processes']} worker processes x {t['threads']} task threads x {t['blas']} BLAS threads = {total} "
        f"threads on {t['cores']:g} cores; {fix} so that processes x threads x blas_threads <= cores",
        SettingWarning,
        stacklevel=user_stacklevel(),
    )


def _kubernetes_spec(config):
    opts = dict(config["options"])
    env = {**blas_env(config["blas_threads"]), **opts.pop("env", {})}
    return _kubernetes_operator().make_cluster_spec(n_workers=int(config["scale"]), env=env, **opts)


def _mpi_script(config):
    """Launch script of the dask-mpi command: rank 0 runs the scheduler, ranks 1.. the
    ``scale`` workers; ``env`` sets the BLAS variables on every rank, local or remote."""
    opts = dict(config["options"])
    sched = config.get("scheduler_file", "scheduler.json")
    ranks = int(config["scale"]) + 1
    launcher = config.get("launcher", "mpirun -n {ranks}").format(
        ranks=ranks, ranks_per_node=config.get("ranks_per_node", "")
    )
    args = " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in opts.items())
    blas = blas_env(config["blas_threads"]).items()
    env = " ".join(f"{k}={v}" for k, v in blas)
    exports = "".join(f"export {k}={v}\n" for k, v in blas)
    python = config.get("python")
    command = f"{shlex.quote(python)} -m dask_mpi.cli" if python else "dask-mpi"
    prologue = "".join(f"{line}\n" for line in config.get("prologue") or [])
    return (
        f"#!/usr/bin/env bash\n# rfol_dask on MPI: {ranks} ranks, dask-mpi runs the scheduler on rank 0 and "
        f"{ranks - 1} workers on ranks 1-{ranks - 1};\n"
        f"# connect with rfol_dask.cluster.start_client(config) (it reads {sched}).\n{exports}{prologue}"
        f"{launcher} env {env} {command} --scheduler-file {shlex.quote(sched)} {args}\n"
    )


def make_cluster(config):
    """The cluster manager object for ``config`` (nothing is submitted until it is scaled).

    ``local``: ``LocalCluster``; ``cuda-local``: ``dask_cuda.LocalCUDACluster``; ``slurm``/``pbs``: ``dask_jobqueue.SLURMCluster``/``PBSCluster``;
    ``kubernetes``: ``dask_kubernetes.operator.KubeCluster`` (needs a reachable cluster with the Dask
    operator; :class:`ClusterStartError` without).
    ``mpi`` has no manager object: launch :func:`job_script` with ``mpirun``.
    """
    name, config = _config_name(config), load_config(config)
    kind = config["kind"]
    if kind == "mpi":
        raise ValueError(
            "an MPI cluster is started by mpirun, not from Python: run the script of "
            "rfol_dask.cluster.job_script(config), then start_client(config)"
        )
    _check_threads(config)
    if kind == "kubernetes":
        return _kube_cluster(config, name)
    if kind in ("local", "cuda-local"):
        start = functools.partial(
            local_cluster if kind == "local" else local_cuda_cluster,
            blas_threads=config["blas_threads"],
            **config["options"],
        )
    else:
        dask_jobqueue = _dask_jobqueue()
        manager = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
        options = _jobqueue_options(config)
        options["job_cls"] = _tracked_job_class(options.get("job_cls") or manager.job_cls)
        start = functools.partial(manager, **options)
    try:
        return start()
    except (
        RuntimeError
    ) as exc:  # distributed's "Cluster failed to start: ..." (its scheduler, a local worker)
        raise ClusterStartError(
            f"the {kind} cluster of cluster configuration {name} did not start "
            f"({exc.__cause__ or exc}): check its options"
        ) from exc


def _kube_cluster(config, name):
    """``KubeCluster`` of ``config``; ClusterStartError when it cannot start (no credentials, no
    reachable cluster, no Dask operator), the half-built cluster closed (else dask-kubernetes
    retries the close at exit and prints the same error again)."""
    KubeCluster = _kubernetes_operator().KubeCluster
    spec = _kubernetes_spec(config)
    before = set(KubeCluster._instances)  # the operator's registry of clusters it closes at exit
    try:
        _check_kubernetes_api(_connect_timeout())
        return KubeCluster(custom_cluster_spec=spec)
    except Exception as exc:
        for half in set(KubeCluster._instances) - before:
            with contextlib.suppress(Exception):
                half.close(timeout=10)
            KubeCluster._instances.discard(half)
        raise ClusterStartError(
            f"could not start the Kubernetes cluster of cluster configuration {name} ({type(exc).__name__}: {exc}): "
            "it needs credentials of a reachable cluster (a kubeconfig at $KUBECONFIG or ~/.kube/config, as "
            "kubectl uses, or a pod's in-cluster service account) and the Dask operator installed in it "
            "(helm install --repo https://helm.dask.org -n dask-operator --create-namespace dask-kubernetes-operator "
            "--generate-name); rfol_dask.cluster.job_script(config) renders the spec without a cluster"
        ) from exc


def _check_kubernetes_api(timeout):
    """TimeoutError unless the Kubernetes API of the credentials found (as dask-kubernetes finds
    them: kr8s) answers within ``timeout`` s: ``KubeCluster`` waits for ever for an API server
    that takes the connection and never answers. Its other errors are left to ``KubeCluster``,
    which meets them too."""
    import kr8s

    async def version():
        api = await kr8s.asyncio.api()
        await api.version()

    try:
        _within(timeout, version)
    except TimeoutError:
        raise TimeoutError(
            f"the Kubernetes API server did not answer in {timeout:g} s "
            "(dask's connect timeout, distributed.comm.timeouts.connect)"
        ) from None
    except Exception:
        pass


def job_script(config):
    """What would be submitted for ``config``, as text: the batch script of one SLURM/PBS job,
    the Kubernetes cluster spec (YAML), the MPI launch script, or the local settings.
    Warns when the configuration oversubscribes its nodes."""
    config = load_config(config)
    _check_threads(config)
    kind = config["kind"]
    if kind in ("slurm", "pbs"):
        return _jobqueue_job(config).job_script()
    if kind == "kubernetes":
        import yaml

        return yaml.safe_dump(_kubernetes_spec(config), sort_keys=False)
    if kind == "mpi":
        return _mpi_script(config)
    import yaml

    manager = "LocalCUDACluster" if kind == "cuda-local" else "LocalCluster"
    return yaml.safe_dump({manager: config["options"], "env": blas_env(config["blas_threads"])})


def close_client(client):
    """Close ``client`` and the cluster it started (None: nothing to do), the cluster within
    :data:`CLOSE_TIMEOUT` seconds (:func:`_close_cluster`)."""
    if client is not None:
        client.close()
        if getattr(client, "cluster", None) is not None:
            with contextlib.suppress(Exception):  # a cluster already gone
                _close_cluster(client.cluster)


#: seconds a cluster's close may take (a batch system that answers neither a submission nor a
#: cancellation holds it for ever); after them the cluster is given up, with a warning
CLOSE_TIMEOUT = 60.0


def _jobqueue_kind(cluster):
    """'slurm' or 'pbs' for a dask-jobqueue cluster of those batch systems, else None."""
    return getattr(getattr(cluster, "job_cls", None), "config_name", None)


def _queued_jobs_hint(cluster, kind):
    """How to list and cancel the jobs of ``cluster`` by their name (``options.job_name``)."""
    name = shlex.quote(str(cluster.job_name))
    if kind == "slurm":
        return f"list them with `squeue -u $USER --name {name}` and cancel them with `scancel -u $USER --name {name}`"
    return (
        f"list them with `qselect -u $USER -N {name}` and cancel them with "
        f"`qdel $(qselect -u $USER -N {name})`"
    )


def _close_cluster(cluster, timeout=None):
    """Close ``cluster`` within ``timeout`` s (default :data:`CLOSE_TIMEOUT`); a close that does not
    end then is given up with a warning (for SLURM/PBS naming the jobs that may still be queued),
    and the cluster is not closed again at exit (distributed would wait 10 s more for it)."""
    from distributed.core import Status
    from distributed.deploy.spec import SpecCluster

    if (
        getattr(cluster, "_rfol_given_up", False)
        or getattr(cluster, "status", None) == Status.closed
    ):
        return
    timeout = CLOSE_TIMEOUT if timeout is None else timeout
    try:
        cluster.close(timeout=timeout)
    except TimeoutError:
        cluster._rfol_given_up = True
        SpecCluster._instances.discard(cluster)
        kind = _jobqueue_kind(cluster)
        if kind:
            jobs = f"; jobs named {cluster.job_name} may still be queued or running: {_queued_jobs_hint(cluster, kind)}"
        elif getattr(cluster, "namespace", None):  # a KubeCluster
            jobs = (
                f"; its pods may still be running: kubectl delete daskcluster {cluster.name} "
                f"-n {cluster.namespace}"
            )
        else:
            jobs = "; its workers may still be running"
        warnings.warn(
            f"the cluster did not close in {timeout:g} s and is left as it is{jobs}",
            ClusterWarning,
            stacklevel=user_stacklevel(),
        )


def dashboard_link(client):
    """The dashboard URL of ``client``'s scheduler, or None when it has none (bokeh missing)."""
    try:
        return client.dashboard_link
    except (KeyError, AttributeError, TypeError):
        return None


#: seconds within which a SLURM/PBS job must have been accepted by the batch system (submission
#: itself is quick; the time a job then waits in the queue is not limited)
SUBMIT_TIMEOUT = 60.0


def _submit_command(cluster):
    """The program that submits the jobs of a dask-jobqueue ``cluster`` (``sbatch``, ``qsub``)."""
    return shlex.split(cluster.job_cls.submit_command)[0]


class _SubmissionAbandoned(RuntimeError):
    """A submission not made: the start it belonged to had failed or was interrupted."""


def _tracked_job_class(job_cls):
    """A subclass of the dask-jobqueue job class ``job_cls``, made for one cluster, that knows its
    submissions: each runs the submit command (whatever it is called: ``sbatch``, a site's wrapper)
    with the job's script, a temporary file, as last argument, so the processes whose command line
    holds a script of ``_submitting`` (those under way) are the ones this cluster started.
    ``_cut_off`` counts the submissions ended by a signal (:func:`_ended_by_signal`: stopped here,
    or by a terminal's Ctrl-C, which reaches them too), each of which may have queued its job.
    Once ``_abandoned`` it submits nothing more. Anything but a class is left as it is
    (dask-jobqueue refuses it)."""
    from distributed.core import Status

    if not isinstance(job_cls, type):
        return job_cls

    class Tracked(job_cls):
        _submitting = set()  # this class's own: one per cluster
        _cut_off = 0
        _abandoned = False

        async def _submit_job(self, script_filename):
            cls = type(self)
            cls._submitting.add(script_filename)
            try:
                if cls._abandoned:  # failed, as _mark_unsubmitted_failed marks those created before
                    self.status = Status.failed
                    raise _SubmissionAbandoned("the cluster's start was given up: no job submitted")
                return await super()._submit_job(script_filename)
            except RuntimeError as exc:
                if _ended_by_signal(exc):
                    cls._cut_off += 1
                raise
            finally:
                cls._submitting.discard(script_filename)

    Tracked.__name__, Tracked.__qualname__ = job_cls.__name__, job_cls.__qualname__
    return Tracked


def _ended_by_signal(exc):
    """True for dask-jobqueue's error of a submission that a signal ended (an exit code below 0)."""
    return isinstance(exc, RuntimeError) and "Exit code: -" in str(exc)


def _submitting(cluster):
    """The job scripts of the submissions of ``cluster`` under way."""
    return set(getattr(cluster.job_cls, "_submitting", ()))


def _submission_processes(cluster):
    """The child processes of this one that run a submission of ``cluster`` (dask-jobqueue runs
    each as a subprocess that it does not expose): ``psutil.Process`` objects, found by the job
    script on their command line (:func:`_tracked_job_class`)."""
    import psutil

    scripts, found = _submitting(cluster), []
    for child in psutil.Process().children() if scripts else ():
        with contextlib.suppress(psutil.Error):  # ended meanwhile
            if any(script in arg for arg in child.cmdline() for script in scripts):
                found.append(child)
    return found


def _stop_submissions(cluster, timeout=5.0):
    """Stop the submissions of ``cluster``: none more is made, and those under way are stopped
    (:func:`_stop_processes`; one whose process starts meanwhile too) until none is left in the
    cluster's event loop, whose close waits for them (a lock they hold), for at most ``timeout`` s.
    Returns how many processes were stopped."""
    if hasattr(
        cluster.job_cls, "_abandoned"
    ):  # a class of _tracked_job_class, not dask-jobqueue's own
        cluster.job_cls._abandoned = True
    stopped, deadline = set(), time.monotonic() + timeout
    while _submitting(cluster) and time.monotonic() < deadline:
        found = [p for p in _submission_processes(cluster) if p.pid not in stopped]
        _stop_processes(found)
        stopped |= {p.pid for p in found}
        time.sleep(0.02)
    return len(stopped)


def _stop_processes(processes, grace=2.0):
    """Terminate ``processes`` and their children; kill those still there after ``grace`` s. None
    is reaped here: a submission's exit status is collected by its own wait (asyncio's child
    watcher, which otherwise logs "Unknown child process" and reports exit code 255, not the signal)."""
    import psutil

    every = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            every += [process, *process.children(recursive=True)]
    for process in every:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    deadline = time.monotonic() + grace
    while (left := [p for p in every if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _alive(process):
    """True while ``process`` (a ``psutil.Process``) runs: neither gone nor a zombie left to reap."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _end_failed_start(client, cluster, kind, quiet=False):
    """Close the cluster of a start that failed or was interrupted, within :data:`CLOSE_TIMEOUT`
    s: for SLURM/PBS the submissions still running are stopped first (a batch system that does
    not answer would hold the close for ever), and the jobs never accepted marked failed. Unless
    ``quiet`` (the error says so), a warning names the jobs to check where a submission was cut
    off: stopped here, or ended by a signal (a terminal's Ctrl-C reaches the submit command too,
    which may then be gone before this runs)."""
    if kind not in ("slurm", "pbs"):
        close_client(client)
        return
    cut_off = max(_stop_submissions(cluster), getattr(cluster.job_cls, "_cut_off", 0))
    if cut_off and not quiet:
        warnings.warn(
            f"{cut_off} {kind.upper()} submissions were cut off before they answered (stopped as the "
            f"start ended, or by a signal such as Ctrl-C); a job named {cluster.job_name} may have been "
            f"queued all the same: {_queued_jobs_hint(cluster, kind)}",
            ClusterWarning,
            stacklevel=user_stacklevel(),
        )
    _mark_unsubmitted_failed(cluster)
    close_client(client)  # no jobs left queued behind an error or a Ctrl-C


class _StoppedSubmissions(logging.Filter):
    """Drops the tracebacks that the event loop logs (logger ``tornado.application``) for
    submissions ended by a signal (dask-jobqueue's RuntimeError with an exit code below 0):
    those :func:`_end_failed_start` stopped, or a Ctrl-C did; and for those it no longer made
    (:class:`_SubmissionAbandoned`); those of a batch system's rejection stay (its message is the
    reason of the error)."""

    def filter(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, _SubmissionAbandoned) or _ended_by_signal(exc))


@contextlib.contextmanager
def _quiet_stopped_submissions():
    """:class:`_StoppedSubmissions` on the event loop's logger meanwhile."""
    tornado, stopped = logging.getLogger("tornado.application"), _StoppedSubmissions()
    tornado.addFilter(stopped)
    try:
        yield
    finally:
        tornado.removeFilter(stopped)


def _check_submit_command(cluster, kind):
    """ClusterStartError (the cluster closed) when the batch system's submit command is not on PATH."""
    command = _submit_command(cluster)
    if shutil.which(command) is None:
        cluster.close()
        raise ClusterStartError(
            f"{command!r} is not on PATH: this machine cannot submit {kind.upper()} jobs; "
            "start from a login node of the cluster, or use the 'local' configuration"
        )


def _mark_unsubmitted_failed(cluster):
    """Mark the jobs the batch system never accepted (no job id) as failed: a jobqueue cluster's
    close asserts that each job it created has started, closed or failed, and a failed close
    leaves it 'closing', so every later close (the client's too) waits forever. The jobs whose
    submission is still under way are among those created, not yet among its workers."""
    from distributed.core import Status

    for job in set(getattr(cluster, "workers", {}).values()) | set(
        getattr(cluster, "_created", ())
    ):
        if hasattr(job, "job_id") and job.job_id is None and job.status == Status.created:
            job.status = Status.failed


def _wait_for_first_worker(client, cluster, kind, poll=5.0):
    """Wait for one worker; for SLURM/PBS, ClusterStartError when no job has a job id (none was
    accepted) after :data:`SUBMIT_TIMEOUT` seconds. Logs the wait every minute."""
    poll = min(poll, SUBMIT_TIMEOUT / 4)  # the check comes soon after the time limit
    start = last_log = time.monotonic()
    while True:
        try:
            client.wait_for_workers(1, timeout=poll)
            return
        except TimeoutError:
            pass
        now = time.monotonic()
        jobs = list(getattr(cluster, "workers", {}).values())
        submitted = [j for j in jobs if getattr(j, "job_id", None)]
        if kind in ("slurm", "pbs") and not submitted and now - start > SUBMIT_TIMEOUT:
            command, waiting = _submit_command(cluster), _submitting(cluster)
            if waiting:
                raise ClusterStartError(
                    f"the {kind.upper()} submit command {command!r} did not answer in {SUBMIT_TIMEOUT:.0f} s "
                    f"({len(waiting)} submissions still waiting): is the batch system's controller "
                    f"down (does `{'squeue' if kind == 'slurm' else 'qstat'}` answer)? The waiting submissions are "
                    f"stopped and the cluster closed, but a job named {cluster.job_name} may have been queued all "
                    f"the same: {_queued_jobs_hint(cluster, kind)}"
                )
            raise ClusterStartError(
                f"no {kind.upper()} job was accepted in {SUBMIT_TIMEOUT:.0f} s (see the batch "
                "system's message logged above): check the configuration's queue, account and "
                "resources (rfol_dask.cluster.job_script(config) gives the job script)"
            )
        if now - last_log >= 60:
            last_log = now
            logger.info(
                "waiting for the first worker: %d of %d jobs submitted, %.0f s so far",
                len(submitted),
                len(jobs),
                now - start,
            )


#: seconds :func:`start_client` waits for the scheduler file of an MPI job (configuration key
#: ``scheduler_timeout``; raise it where the MPI job may still wait in a batch queue)
SCHEDULER_TIMEOUT = 600.0


def _scheduler_address(path):
    """The address in the scheduler file ``path``; None while there is none (no file yet, or one
    that rank 0 is still writing)."""
    import json

    try:
        with open(path) as f:
            address = json.load(f).get("address")
    except (OSError, ValueError, AttributeError):  # missing, not yet JSON, not a mapping
        return None
    return address if isinstance(address, str) and address else None


def _check_scheduler(address, timeout):
    """OSError unless a dask scheduler at ``address`` answers within ``timeout`` s. A
    ``distributed.Client`` waits for ever for one that takes the connection and never answers
    (its handshake has no time limit): a port that another program holds, a stopped scheduler;
    and fails with whatever reading another program's answer raised (a MemoryError for an HTTP
    server's, read as frame lengths)."""
    from distributed import Security
    from distributed.comm import connect

    tls = Security().get_connection_args("client")  # dask's TLS configuration, as a Client's

    async def identity():
        comm = await connect(address, timeout=timeout, **tls)
        try:
            await comm.write({"op": "identity", "reply": True})
            await comm.read()
        finally:
            await comm.close()

    try:
        _within(timeout, identity)  # TimeoutError (an OSError) after it
    except OSError:
        raise
    except Exception as exc:
        raise OSError(f"its answer is not a dask scheduler's ({type(exc).__name__})") from exc


def _within(timeout, function):
    """``await function()`` in an event loop of its own, for at most ``timeout`` s (TimeoutError)."""
    from distributed.utils import LoopRunner, sync

    runner = LoopRunner(asynchronous=False)
    runner.start()
    try:
        return sync(runner.loop, function, callback_timeout=timeout)
    finally:
        runner.stop()


def _connect_timeout():
    """dask's connect timeout in seconds (``distributed.comm.timeouts.connect``, 30 s by default)."""
    import dask
    from dask.utils import parse_timedelta

    return parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")


def _mpi_client(config, poll=0.5, log_every=60.0):
    """A ``Client`` of the scheduler that the MPI job's rank 0 announces in ``scheduler_file``:
    waits for the file and its address (logged every ``log_every`` s) for at most
    ``scheduler_timeout`` s, then connects; ClusterStartError when no address appears, or its
    scheduler does not answer within dask's connect timeout (``distributed.comm.timeouts.connect``)."""
    from distributed import Client

    path = os.path.abspath(config.get("scheduler_file", "scheduler.json"))
    timeout = config.get("scheduler_timeout", SCHEDULER_TIMEOUT)
    start = last_log = time.monotonic()
    if not os.path.exists(path):
        logger.info(
            "waiting up to %g s for the MPI job to write its scheduler file %s", timeout, path
        )
    while (address := _scheduler_address(path)) is None:
        now = time.monotonic()
        if now - start >= timeout:
            if os.path.exists(path):
                raise ClusterStartError(
                    f"the scheduler file {path} holds no scheduler address after {timeout:g} s (a dask scheduler "
                    "file is JSON with an 'address'): delete it and start the MPI job again"
                )
            raise ClusterStartError(
                f"no scheduler file {path} after {timeout:g} s: start the MPI job first (run the script of "
                "rfol_dask.cluster.job_script(config) with its launcher, from this directory or with an absolute "
                "scheduler_file), or raise the configuration's scheduler_timeout while the job waits in a queue"
            )
        if now - last_log >= log_every:
            last_log = now
            logger.info(
                "waiting for the MPI scheduler file %s: %.0f s of at most %g s",
                path,
                now - start,
                timeout,
            )
        time.sleep(poll)
    connect = _connect_timeout()
    try:
        _check_scheduler(address, connect)
        return Client(address, timeout=connect)
    except OSError as exc:
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, TimeoutError) else str(exc)
        raise ClusterStartError(
            f"could not connect to the scheduler named in {path} ({address}: {reason}): a file "
            "left by an earlier MPI job? delete it and start the MPI job again"
        ) from exc


def start_client(config):
    """Start (or, for MPI, connect to) the cluster of ``config`` and return a ``Client``.

    SLURM/PBS/Kubernetes clusters are scaled to ``scale`` jobs/workers and the call waits
    for the first worker (queued jobs may take long: the wait is logged every minute, logger
    ``rfol_dask``, level INFO). The dashboard link is logged at level DEBUG. Warns when the configuration
    oversubscribes its nodes. :class:`ClusterStartError` (a RuntimeError) when SLURM/PBS jobs
    cannot be submitted: the submit command is not on ``PATH``, or no job was accepted within
    :data:`SUBMIT_TIMEOUT` seconds (the scheduler's rejection is in the log above the error), or
    the submit command did not answer in that time (the batch system's controller down: the
    submissions are stopped, and the error names the jobs to check for); when no Kubernetes
    cluster with the Dask operator can be reached; when no MPI scheduler file appears within the
    configuration's ``scheduler_timeout`` (:data:`SCHEDULER_TIMEOUT`) seconds, the wait logged
    every minute. A start that fails or is interrupted closes its cluster within
    :data:`CLOSE_TIMEOUT` seconds (else warns, naming the jobs that may still be queued); for
    SLURM/PBS it first stops the submissions that the cluster started (found by their job script,
    whatever the submit command), and an interrupted one (Ctrl-C, raised again) warns naming the
    jobs that a submission cut off may have queued.
    """
    given, config = config, load_config(config)
    if config["kind"] == "mpi":
        _check_threads(config)
        client = _mpi_client(config)
    else:
        cluster = make_cluster(given)  # names the file in its errors
        if config["kind"] in ("slurm", "pbs"):
            _check_submit_command(cluster, config["kind"])
        # the client before the jobs: a client of a cluster waits until the cluster's workers
        # have been started, which for SLURM/PBS means submitted, for ever where that hangs
        client = _owning_client(cluster)
        if config["kind"] not in ("local", "cuda-local"):
            with _quiet_stopped_submissions():
                try:
                    if config["kind"] == "kubernetes":
                        cluster.scale(int(config["scale"]))
                    else:
                        cluster.scale(jobs=int(config["scale"]))
                    _wait_for_first_worker(client, cluster, config["kind"])
                except BaseException as exc:
                    _end_failed_start(
                        client, cluster, config["kind"], quiet=isinstance(exc, ClusterStartError)
                    )
                    raise
    logger.debug(
        "%s cluster started, dashboard: %s",
        config["kind"],
        dashboard_link(client) or "none (needs bokeh: pip install 'rfol-dask[diagnostics]')",
    )
    return client
