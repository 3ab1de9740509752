"""Each ready cluster configuration loads and renders a valid job script or spec, no scheduler needed."""

import re
import sys
import warnings
from pathlib import Path

import pytest

from rfol_dask import cluster

CONFIGS = Path(cluster.__file__).parent / "clusters"  # shipped as package data


@pytest.mark.cluster
def test_local_config_starts_a_local_cluster_with_blas_threads():
    import os

    cfg = cluster.load_config(CONFIGS / "local.yaml")
    assert cfg["kind"] == "local" and cfg["blas_threads"] == 1
    with cluster.start_client({**cfg, "options": {**cfg["options"], "n_workers": 1}}) as client:
        env = client.run(lambda: os.environ.get("OPENBLAS_NUM_THREADS"))
        assert list(env.values()) == ["1"]
        client.cluster.close()


@pytest.mark.parametrize("name,marker", [("slurm", "#SBATCH"), ("pbs", "#PBS")])
def test_jobqueue_scripts(name, marker):
    pytest.importorskip("dask_jobqueue")
    script = cluster.job_script(CONFIGS / f"{name}.yaml")
    assert marker in script
    assert "export OPENBLAS_NUM_THREADS=" in script and "dask_jobqueue" not in script.split("\n")[0]
    assert (
        "distributed.cli.dask_worker" in script
        or "dask worker" in script
        or "dask-worker" in script
    )
    assert "tcp://SCHEDULER:8786" in script
    if name == "slurm":
        assert "#SBATCH -p compute" in script and "--nworkers 4" in script


def test_kubernetes_spec():
    pytest.importorskip("dask_kubernetes")
    import yaml

    spec = yaml.safe_load(cluster.job_script(CONFIGS / "kubernetes.yaml"))
    assert spec["kind"] == "DaskCluster" and spec["metadata"]["name"] == "rfol-dask"
    worker = spec["spec"]["worker"]
    assert worker["replicas"] == 8
    env = {e["name"]: e["value"] for e in worker["spec"]["containers"][0]["env"]}
    assert env["OPENBLAS_NUM_THREADS"] == "4" and env["EXTRA_PIP_PACKAGES"] == "rfol-dask"


@pytest.mark.parametrize(
    "limit, worker, refused",
    [
        ("16G", "15GB", False),
        ("16Gi", "17GB", False),
        ("16G", "17GB", True),
        ("8Gi", "--memory-limit=9GiB", True),
        ("16G", "auto", False),
        ("16G", "0.9", False),
    ],
)
def test_a_worker_memory_limit_above_the_pods_is_refused(limit, worker, refused):
    import yaml

    config = yaml.safe_load((CONFIGS / "kubernetes.yaml").read_text())
    config["options"]["resources"]["limits"]["memory"] = limit
    flag = worker if worker.startswith("--") else f"--memory-limit {worker}"
    config["options"]["worker_command"] = f"dask worker --nthreads 1 {flag}"
    if not refused:
        assert cluster.load_config(config)["options"]["worker_command"].endswith(flag)
        return
    with pytest.raises(
        ValueError, match=r"--memory-limit \S+ is above the pod's memory limit .* would kill"
    ):
        cluster.load_config(config)


def test_kubernetes_without_a_reachable_cluster_is_a_cluster_start_error(monkeypatch):
    """The operator's bare error becomes one that says what is missing; the half-built cluster is
    closed and dropped from the operator's registry (else it is closed again at exit, noisily)."""
    pytest.importorskip("dask_kubernetes")
    import weakref

    import dask_kubernetes.operator

    class HalfBuilt:
        _instances = weakref.WeakSet()
        closed = []

        def __init__(self, **kwargs):
            self._instances.add(self)
            raise ValueError("Unable to find valid credentials")

        def close(self, timeout=None):
            self.closed.append(self)

    monkeypatch.setattr(dask_kubernetes.operator, "KubeCluster", HalfBuilt)
    with pytest.raises(
        cluster.ClusterStartError,
        match="Kubernetes cluster of cluster configuration kubernetes "
        r"\(ValueError: Unable to find valid credentials\).*kubeconfig.*Dask operator",
    ) as info:
        cluster.start_client("kubernetes")
    assert isinstance(info.value.__cause__, ValueError)
    assert len(HalfBuilt.closed) == 1 and not list(HalfBuilt._instances)


def test_mpi_script():
    script = cluster.job_script(CONFIGS / "mpi.yaml")
    # dask-mpi's command runs the scheduler on rank 0 and a worker on every other rank
    assert (
        "mpirun -n 64 " in script
        and "63 workers" in script
        and "--scheduler-file scheduler.json" in script
    )
    assert "--memory-limit 15GB" in script and "export OMP_NUM_THREADS=4" in script
    with pytest.raises(ValueError, match="started by mpirun"):
        cluster.make_cluster(CONFIGS / "mpi.yaml")


def test_bad_configs():
    with pytest.raises(ValueError, match="needs kind in"):
        cluster.load_config({"kind": "yarn"})
    with pytest.raises(ValueError, match="unknown cluster configuration keys \\['workers'\\]"):
        cluster.load_config({"kind": "local", "workers": 3})
    with pytest.raises(FileNotFoundError, match="no cluster configuration"):
        cluster.load_config("cluster/none.yaml")


def test_config_mistakes_are_refused_naming_the_file_key_and_allowed_values(tmp_path):
    cases = [
        (
            "kind: local\noptions: {n_worker: 2}\n",
            "unknown option 'n_worker' for kind local; did you mean 'n_workers'",
        ),
        ("kind: slurm\nscale: 2.7\n", "scale must be a whole number >= 1, got 2.7"),
        (
            "kind: slurm\nblas_threads: four\n",
            "blas_threads must be a whole number >= 1, got 'four'",
        ),
        (
            "kind: slurm\noptions: [cores, 32]\n",
            "options must be a mapping of keyword: value .*got a list",
        ),
        (
            "kind: local\noptions: {blas_threads: 2}\n",
            "unknown option .*set the top-level key blas_threads",
        ),
    ]
    for i, (text, message) in enumerate(cases):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        with pytest.raises(
            ValueError, match=f"cluster configuration {re.escape(str(path))}: {message}"
        ):
            cluster.load_config(path)
    # LocalCluster's keywords, and those it forwards to its Nanny and Worker
    forwarded = {
        "n_workers": 2,
        "scheduler_kwargs": {},
        "dashboard_address": ":0",
        "memory_limit": "1GB",
        "env": {},
        "lifetime": "1h",
        "death_timeout": 5,
        "local_directory": "/tmp",
        "resources": {"GPU": 1},
        "connection_limit": 64,
    }
    assert cluster.load_config({"kind": "local", "options": forwarded})["options"] == forwarded
    assert cluster.load_config({"kind": "local", "options": None})["options"] == {}
    if __import__("importlib").util.find_spec("dask_jobqueue"):
        with pytest.raises(
            ValueError, match="unknown option 'quene' for kind slurm; did you mean 'queue'"
        ):
            cluster.load_config({"kind": "slurm", "options": {"quene": "compute"}})
        valid = {
            "job_cpu": 8,
            "walltime": "1:00:00",
            "scheduler_options": {},
        }  # SLURMJob's, the cluster's
        cluster.load_config({"kind": "slurm", "options": valid})


def test_every_shipped_configuration_fits_its_nodes():
    """processes x task threads x BLAS threads <= cores, and rendering it raises no warning."""
    names = cluster.shipped_configs()
    assert {"local", "slurm", "slurm-dual", "pbs", "kubernetes", "mpi"} <= set(names)
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == names
    for name in names:
        if name == "kubernetes" and not __import__("importlib").util.find_spec("dask_kubernetes"):
            continue
        t = cluster.node_threads(name)
        assert t["processes"] * t["threads"] * t["blas"] <= t["cores"], (name, t)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cluster.job_script(name)


def test_dual_configuration_runs_one_worker_per_node_with_all_cores():
    pytest.importorskip("dask_jobqueue")
    t = cluster.node_threads("slurm-dual")
    assert t["processes"] == 1 and t["threads"] == t["cores"] == 32
    script = cluster.job_script("slurm-dual")
    assert (
        "--nthreads 32" in script and "--nworkers" not in script and "--cpus-per-task=32" in script
    )


@pytest.mark.parametrize(
    "kind,options,fix",
    [
        ("slurm", {"cores": 32, "processes": 4, "memory": "180GB"}, "set blas_threads: 1"),
        (
            "pbs",
            {"cores": 24, "processes": 4, "memory": "96GB", "resource_spec": "select=1:ncpus=24"},
            "set blas_threads: 1",
        ),
    ],
)
def test_oversubscribed_user_config_warns_with_numbers_and_fix(kind, options, fix):
    pytest.importorskip("dask_jobqueue")
    config = {"kind": kind, "blas_threads": 8, "options": options}
    with pytest.warns(UserWarning, match="oversubscribes") as record:
        cluster.job_script(config)
    message = str(record[0].message)
    assert f"4 worker processes x {options['cores'] // 4} task threads x 8 BLAS threads" in message
    assert f"on {options['cores']} cores" in message and fix in message


@pytest.mark.cluster
def test_oversubscribed_mpi_and_local_configs_warn(monkeypatch):
    with pytest.warns(
        UserWarning, match="8 worker processes x 2 task threads x 4 BLAS threads = 64 threads on 32"
    ):
        cluster.job_script(
            {
                "kind": "mpi",
                "scale": 15,
                "blas_threads": 4,
                "node_cores": 32,
                "ranks_per_node": 8,
                "options": {"nthreads": 2},
            }
        )
    cores = cluster.node_threads("local")["cores"]
    with pytest.warns(UserWarning, match="use fewer worker processes"):
        cluster.start_client(
            {
                "kind": "local",
                "options": {"n_workers": cores + 1, "threads_per_worker": 1, "processes": False},
            }
        ).close()


def test_job_scripts_run_the_configured_python():
    """The worker command runs the environment the prologue activates, not this machine's interpreter."""
    pytest.importorskip("dask_jobqueue")
    for name in ("slurm", "slurm-dual", "pbs"):
        script = cluster.job_script(name)
        assert sys.executable not in script
        assert re.search(r"^python -m distributed.cli.dask_worker", script, re.M), script
        assert script.index("activate") < script.index("python -m distributed")
    config = cluster.load_config("slurm")
    config["options"]["python"] = "/opt/env/bin/python3"
    assert "/opt/env/bin/python3 -m distributed.cli.dask_worker" in cluster.job_script(config)
    # a prologue without python: the python it puts on the PATH
    del config["options"]["python"]
    assert sys.executable not in cluster.job_script(config)


def test_mpi_without_a_scheduler_file_is_a_logged_bounded_wait(tmp_path, caplog):
    import json
    import logging

    import dask

    path = tmp_path / "scheduler.json"
    config = {"kind": "mpi", "scheduler_file": str(path), "scheduler_timeout": 0.3}
    with caplog.at_level(logging.INFO, logger="rfol_dask"):
        with pytest.raises(
            cluster.ClusterStartError,
            match=f"no scheduler file {re.escape(str(path))} after 0.3 s: "
            "start the MPI job first.*job_script.*scheduler_timeout",
        ):
            cluster._mpi_client(cluster.load_config(config), poll=0.02, log_every=0.1)
    assert (
        "waiting up to 0.3 s" in caplog.text and "waiting for the MPI scheduler file" in caplog.text
    )
    path.write_text(
        json.dumps({"address": "tcp://127.0.0.1:1"})
    )  # left by an earlier job, nothing listens
    with dask.config.set({"distributed.comm.timeouts.connect": "0.5s"}):
        with pytest.raises(
            cluster.ClusterStartError,
            match="could not connect to the scheduler named in .*delete it",
        ):
            cluster.start_client(config)
    for bad in (0, -5, "10m", True):
        with pytest.raises(ValueError, match="scheduler_timeout must be a number of seconds > 0"):
            cluster.load_config({**config, "scheduler_timeout": bad})
    assert cluster.load_config("mpi")["scheduler_timeout"] == cluster.SCHEDULER_TIMEOUT


@pytest.mark.cluster
def test_mpi_start_client_connects_once_the_scheduler_file_appears(tmp_path):
    import threading

    path = tmp_path / "scheduler.json"
    with cluster.local_client(n_workers=1, processes=False) as local:
        threading.Timer(0.5, local.write_scheduler_file, [str(path)]).start()
        client = cluster.start_client(
            {"kind": "mpi", "scheduler_file": str(path), "scheduler_timeout": 30}
        )
        try:
            assert (
                client.scheduler.address == local.scheduler.address
                and client.submit(sum, [1, 2]).result() == 3
            )
        finally:
            client.close()


def test_mpi_script_counts_ranks_forwards_blas_and_uses_python():
    script = cluster.job_script("mpi")
    launch = [line for line in script.splitlines() if line.startswith("mpirun")][0]
    assert launch.startswith(
        "mpirun -n 64 --map-by ppr:8:node env OMP_NUM_THREADS=4 OPENBLAS_NUM_THREADS=4 "
        "MKL_NUM_THREADS=4 python -m dask_mpi.cli "
    )
    assert "--no-nanny" not in launch  # dask-mpi's command rejects it today
    assert script.index("activate") < script.index("mpirun")
    small = cluster.job_script({"kind": "mpi", "scale": 3, "launcher": "srun -n {ranks}"})
    assert "srun -n 4 env OMP_NUM_THREADS=1" in small and "dask-mpi --scheduler-file" in small
    with pytest.raises(ValueError, match="are for kind mpi only"):
        cluster.load_config({"kind": "slurm", "python": "python"})


def test_shipped_names_and_unknown_name():
    assert cluster.load_config("slurm-dual")["options"]["processes"] == 1
    with pytest.raises(FileNotFoundError, match="shipped configurations \\['kubernetes', 'local'"):
        cluster.load_config("slurmm")


@pytest.mark.cluster
def test_start_client_logs_the_dashboard():
    """At DEBUG (the CLI shows the link itself). Read by a handler on the package's logger: caplog's
    handlers on the root logger were set to WARNING while the LocalCluster started (pytest 9.2)."""
    import logging

    logger, records = logging.getLogger("rfol_dask"), []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        client = cluster.start_client(
            {"kind": "local", "options": {"n_workers": 1, "processes": False}}
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    text = "\n".join(r.getMessage() for r in records)
    try:
        assert (cluster.dashboard_link(client) or "needs bokeh") in text and "dashboard" in text
    finally:
        client.close()
        client.cluster.close()


def test_configurations_are_package_data_kept_once():
    """The YAML files live only in the package and pyproject ships them in the wheel."""
    import tomllib
    from fnmatch import fnmatch

    root = Path(__file__).resolve().parents[1]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["rfol_dask"]
    for path in CONFIGS.glob("*.yaml"):
        assert any(fnmatch(f"clusters/{path.name}", g) for g in globs), path
    assert not list((root / "cluster").glob("*.yaml"))  # no second copy beside cluster/README.md


@pytest.mark.cluster
def test_leaving_the_with_block_of_a_client_closes_its_cluster():
    with cluster.local_client(n_workers=1, processes=False) as client:
        assert client.submit(sum, [1, 2]).result() == 3
    assert client.cluster.status.name == "closed"
    with cluster.start_client(
        {"kind": "local", "options": {"n_workers": 1, "processes": False}}
    ) as client:
        pass
    assert client.cluster.status.name == "closed"


def test_a_cluster_of_no_workers_is_refused_not_waited_for():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=f"n_workers must be a whole number >= 1, got {bad!r}"):
            cluster.local_cluster(n_workers=bad)
    with pytest.raises(ValueError, match="n_workers must be a whole number >= 1, got 0"):
        cluster.start_client({"kind": "local", "options": {"n_workers": 0}})


def test_bad_yaml_and_a_file_named_like_a_shipped_configuration(tmp_path, monkeypatch):
    (tmp_path / "broken.yaml").write_text(": : :\n  - [\n")
    with pytest.raises(ValueError, match="broken.yaml is not valid YAML"):
        cluster.load_config(tmp_path / "broken.yaml")
    (tmp_path / "list.yaml").write_text("- kind\n- local\n")
    with pytest.raises(ValueError, match="must be a YAML mapping.*got a list"):
        cluster.load_config(tmp_path / "list.yaml")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local").write_text(
        "kind: slurm\n"
    )  # a stray file does not shadow the shipped name
    assert cluster.load_config("local")["kind"] == "local"
    assert cluster.load_config("./local")["kind"] == "slurm"


def test_a_configuration_path_starting_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """``start_client("~/site.yaml")`` said there was no configuration at ~/site.yaml, where the
    package's other paths (save, load, open_dataset, generate) read '~' as the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "site.yaml").write_text("kind: local\nblas_threads: 1\noptions: {n_workers: 3}\n")
    assert cluster.load_config("~/site.yaml")["options"] == {"n_workers": 3}
    assert cluster.node_threads("~/site.yaml")["processes"] == 3


def test_jobqueue_without_its_submit_command_is_an_error_not_a_hang(monkeypatch, tmp_path):
    pytest.importorskip("dask_jobqueue")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch / qsub here
    for name, command in (("slurm", "sbatch"), ("pbs", "qsub")):
        with pytest.raises(RuntimeError, match=f"'{command}' is not on PATH"):
            cluster.start_client(name)


def test_jobs_the_batch_system_rejects_are_an_error_not_a_hang(monkeypatch, tmp_path):
    pytest.importorskip("dask_jobqueue")
    fake = tmp_path / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(cluster, "SUBMIT_TIMEOUT", 2.0)
    with pytest.raises(RuntimeError, match="no SLURM job was accepted in 2 s"):
        cluster.start_client("slurm")


@pytest.mark.cluster
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal masks from /proc")
def test_local_workers_leave_ctrl_c_to_this_process():
    """A terminal's Ctrl-C goes to the whole process group: the workers block SIGINT (none dies with
    a KeyboardInterrupt traceback of its own), this process keeps it and closes the cluster."""
    import os
    import signal

    def blocks_sigint(pid):
        mask = next(
            line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("SigBlk")
        )
        return bool(int(mask, 16) >> (signal.SIGINT - 1) & 1)

    with cluster.local_client(n_workers=1) as client:
        (pid,) = client.run(os.getpid).values()
        assert blocks_sigint(pid) and not blocks_sigint(os.getpid())


def test_a_ctrl_c_while_the_cluster_starts_is_raised_once_it_is_up_and_closes_it():
    import signal
    import threading

    class Started:
        closed = False

        def close(self):
            self.closed = True

    started = Started()

    def start():  # Ctrl-C meanwhile: held until the start is done
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return started

    handler = signal.signal(
        signal.SIGINT, signal.default_int_handler
    )  # whatever an import installed
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster._without_sigint(start)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert started.closed and signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_reading_a_jobqueue_configuration_keeps_the_ctrl_c_handler():
    """dask_jobqueue's import makes SIGINT call sys.exit(): a Ctrl-C ended ``rfol-dask fit --cluster
    slurm`` with status 0, without its clean-up. Loading the configuration keeps Python's handler."""
    pytest.importorskip("dask_jobqueue")
    import os
    import subprocess

    code = (
        "import signal; from rfol_dask import cluster; cluster.load_config('slurm'); "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.stdout.strip() == "True", res.stderr[-2000:]


def _duplicated_samples(M=100, n=16):
    """Every sample twice: an exactly singular Gram, factorised with a raised ridge."""
    import dask.array as da
    import numpy as np

    X = np.random.default_rng(0).standard_normal((M, n))
    X = np.vstack([X, X])
    return da.from_array(X, chunks=50), da.from_array(np.sin(X), chunks=50)


def _duplicated_inputs(M=200, n=8):
    """Every input column twice, fewer inputs than samples: the linear kernel's primal Gram
    (2n x 2n) is exactly singular."""
    import dask.array as da
    import numpy as np

    X = np.random.default_rng(0).standard_normal((M, n))
    return da.from_array(np.hstack([X, X]), chunks=50), da.from_array(np.sin(X), chunks=50)


@pytest.mark.parametrize("make", ["rf dual", "rf primal", "kernel", "linear kernel primal"])
def test_a_ridge_raised_on_a_worker_is_warned_at_the_users_line(cluster_client, make):
    """The factorisation runs in a task on a worker process, whose warning stayed there: the user
    never learnt that the ridge was raised, and a search's refit could not record it. The ridge
    used now comes back with the fit and is warned on the client, at the caller's line."""
    from rfol_dask import RandomFeatureOperator
    from rfol_dask.baselines import KernelOperator
    from rfol_dask.linalg import RidgeRaised

    X, Y = _duplicated_inputs() if make == "linear kernel primal" else _duplicated_samples()
    model = {
        "rf dual": lambda: RandomFeatureOperator(
            n_features=400, alpha=1e-30, solver="dual", random_state=0
        ),
        "rf primal": lambda: RandomFeatureOperator(
            n_features=150, alpha=1e-30, solver="primal", random_state=0
        ),
        "kernel": lambda: KernelOperator(nugget=1e-30),
        "linear kernel primal": lambda: KernelOperator(kernel="linear", nugget=1e-30),
    }[make]()
    name = "nugget" if "kernel" in make else "alpha"
    with cluster_client.as_current(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, Y)
    raised = [w for w in caught if issubclass(w.category, RidgeRaised)]
    assert len(raised) == 1, [str(w.message) for w in caught]
    assert re.search(
        rf"{name}=1e-30 is not numerically positive definite in float64; used ridge",
        str(raised[0].message),
    )
    assert raised[0].filename == __file__ and raised[0].message.ridge > 1e-30
    if make == "linear kernel primal":
        assert model.coef_.shape == (16, 8) and model.dual_coef_ is None


def test_a_search_records_the_ridge_its_refit_raised_on_a_worker(cluster_client):
    """A search's refit on the cluster records the ridge it used in best_params_ (the refit's
    factorisation task warned on its worker, where the search could not see it)."""
    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.linalg import RidgeRaised

    X, Y = _duplicated_samples()
    # (an alpha above the rounding floor of the search's float64 Gram, which a float32 refit raises)
    search = RandomFeatureOperatorCV(
        n_features=400,
        gammas=(1.0,),
        alphas=(1e-12,),
        stages={"coarse": None, "refine": (1,), "fine": None},
        random_state=0,
        dtype="float32",
    )
    with cluster_client.as_current(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X, Y)
    assert not [w for w in caught if issubclass(w.category, RidgeRaised)], [
        str(w.message) for w in caught
    ]
    assert search.best_params_["alpha"] > 1e-12
    assert search.best_estimator_.alpha == search.best_params_["alpha"]


def _hanging_sbatch(tmp_path):
    """A fake ``sbatch`` of a SLURM controller that is down: it never answers; each one appends
    its pid to ``pids`` (the test ends any left)."""
    bin_dir, pids = tmp_path / "bin", tmp_path / "pids"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 60\n")  # (exec would rename the process)
    fake.chmod(0o755)
    return bin_dir, pids


def _end_processes(pids):
    import contextlib

    import psutil

    for pid in map(int, pids.read_text().split() if pids.exists() else ()):
        with contextlib.suppress(psutil.NoSuchProcess):
            for process in [*psutil.Process(pid).children(recursive=True), psutil.Process(pid)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()


def _running(pid):
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_submit_command_that_never_answers_is_an_error_naming_the_jobs_not_a_hang(
    monkeypatch, tmp_path
):
    """With the SLURM controller down, ``sbatch`` hangs: start_client waited for ever inside
    ``Client(cluster)`` (and its clean-up waited for ever on the hanging submissions). Now the
    submissions are stopped after SUBMIT_TIMEOUT, the cluster is closed, and the error says what
    hung and how to find a job that may have been queued all the same."""
    pytest.importorskip("dask_jobqueue")
    import time

    bin_dir, pids = _hanging_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(cluster, "SUBMIT_TIMEOUT", 2.0)
    config = cluster.load_config("slurm")
    config["scale"], config["options"]["job_name"] = 2, "rfol-test"
    start = time.monotonic()
    try:
        with pytest.raises(
            cluster.ClusterStartError,
            match=r"the SLURM submit command 'sbatch' did not answer in 2 s "
            r"\(2 submissions still waiting\).*controller down.*a job named rfol-test may have been "
            r"queued.*`squeue -u \$USER --name rfol-test`.*`scancel -u \$USER --name rfol-test`",
        ):
            cluster.start_client(config)
        assert time.monotonic() - start < 30
        started = list(map(int, pids.read_text().split()))
        assert len(started) == 2 and not any(
            map(_running, started)
        )  # the hanging submissions were stopped
    finally:
        _end_processes(pids)


@pytest.mark.parametrize("terminal", [False, True])
def test_a_ctrl_c_while_submissions_hang_warns_naming_the_jobs_and_is_raised(
    monkeypatch, tmp_path, ctrl_c, terminal
):
    """Ctrl-C while ``sbatch`` hangs: the KeyboardInterrupt goes on, the submissions are stopped, and
    a warning names the jobs they may have queued. A terminal's Ctrl-C reaches the submit commands
    too (one process group), which may be gone before this process handles its own: then no
    warning came (the submissions were looked for among the running processes only)."""
    try:
        cluster._dask_jobqueue()  # (whose import, unlike pytest.importorskip's, keeps ctrl_c's SIGINT handler)
    except ImportError:
        pytest.skip("needs dask-jobqueue")
    import signal
    import threading
    import time

    import psutil

    bin_dir, pids = _hanging_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    config = cluster.load_config("slurm")
    config["scale"], config["options"]["job_name"] = 2, "rfol-test"

    def press_ctrl_c():  # once both submissions hang
        while len(pids.read_text().split() if pids.exists() else ()) < 2:
            time.sleep(0.02)
        time.sleep(0.2)  # (their sh waits in sleep)
        if terminal:
            started = list(map(int, pids.read_text().split()))
            for process in [
                p for pid in started for p in (psutil.Process(pid), *psutil.Process(pid).children())
            ]:
                process.send_signal(signal.SIGINT)
            while any(map(_running, started)):
                time.sleep(0.02)
            time.sleep(0.5)  # their end seen by the cluster's event loop
        ctrl_c()

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    start = time.monotonic()
    try:
        with pytest.warns(
            RuntimeWarning,
            match=r"2 SLURM submissions were cut off before they answered.*a job named "
            r"rfol-test may have been queued.*`squeue -u \$USER --name rfol-test`.*"
            r"`scancel -u \$USER --name rfol-test`",
        ):
            with pytest.raises(KeyboardInterrupt):
                presser.start()
                cluster.start_client(config)
        assert time.monotonic() - start < 30
        assert not any(map(_running, map(int, pids.read_text().split())))
    finally:
        presser.join(5)
        _end_processes(pids)


def test_a_ctrl_c_before_the_submissions_start_submits_nothing(monkeypatch, tmp_path, ctrl_c):
    """A Ctrl-C after the cluster was scaled, before its jobs were submitted: the submissions were
    still made as the cluster closed, and with the batch system not answering they held the close
    for CLOSE_TIMEOUT. Now the cluster whose start was given up submits nothing more."""
    try:
        dask_jobqueue = cluster._dask_jobqueue()  # (keeps ctrl_c's SIGINT handler)
    except ImportError:
        pytest.skip("needs dask-jobqueue")
    import threading
    import time

    bin_dir, pids = _hanging_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(cluster, "CLOSE_TIMEOUT", 5.0)

    class InterruptedJob(dask_jobqueue.slurm.SLURMJob):
        pressed = False

        def __init__(
            self, *args, **kwargs
        ):  # in the cluster's event loop, before the job is submitted
            super().__init__(*args, **kwargs)
            if (
                not InterruptedJob.pressed
                and threading.current_thread() is not threading.main_thread()
            ):
                InterruptedJob.pressed = True
                ctrl_c()
                time.sleep(0.5)  # this process handles it meanwhile

    config = {
        "kind": "slurm",
        "scale": 2,
        "options": {"cores": 1, "memory": "1GB", "job_cls": InterruptedJob},
    }
    start = time.monotonic()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(KeyboardInterrupt):
                cluster.start_client(config)
        assert InterruptedJob.pressed and not pids.exists()  # no sbatch ran
        assert not [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert time.monotonic() - start < 5
    finally:
        _end_processes(pids)


def test_stopping_a_submission_leaves_its_exit_status_to_the_code_that_waits_for_it():
    """dask-jobqueue waits for each submission (asyncio); _stop_processes reaped the processes it
    stopped itself, so that asyncio logged "Unknown child process pid ..., will report returncode
    255" and the submission failed with exit code 255 instead of the signal that ended it."""
    import signal
    import subprocess

    import psutil

    child = subprocess.Popen(["sleep", "60"])
    try:
        cluster._stop_processes([psutil.Process(child.pid)])
        assert child.wait(timeout=5) == -signal.SIGTERM  # (0 where another wait had reaped it)
    finally:
        child.kill()
        child.wait()


def test_a_site_submit_command_of_another_name_that_never_answers_is_stopped_too(
    monkeypatch, tmp_path
):
    """A site's wrapper (``site-sbatch``, which runs the real ``sbatch`` in its place: exec) set as
    the job class's submit command: its hanging submissions were looked for by that name, which no
    process bore, so none was found (the error said no job was accepted, and the close waited for
    CLOSE_TIMEOUT). They are now found by what the cluster started: stopped, and named in the error."""
    dask_jobqueue = pytest.importorskip("dask_jobqueue")
    import time

    bin_dir, pids = _hanging_sbatch(tmp_path)
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    wrapper = site_dir / "site-sbatch"
    wrapper.write_text(f'#!/bin/sh\nexec {bin_dir / "sbatch"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv(
        "PATH", f"{site_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"
    )  # no sbatch on it
    monkeypatch.setattr(cluster, "SUBMIT_TIMEOUT", 2.0)
    monkeypatch.setattr(cluster, "CLOSE_TIMEOUT", 2.0)

    class SiteJob(dask_jobqueue.slurm.SLURMJob):
        submit_command = "site-sbatch"

    config = {
        "kind": "slurm",
        "scale": 2,
        "options": {"cores": 1, "memory": "1GB", "job_cls": SiteJob, "job_name": "rfol-test"},
    }
    start = time.monotonic()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(
                cluster.ClusterStartError,
                match=r"the SLURM submit command 'site-sbatch' did not answer "
                r"in 2 s \(2 submissions still waiting\).*`scancel -u \$USER --name rfol-test`",
            ):
                cluster.start_client(config)
        assert not [str(w.message) for w in caught if "did not close" in str(w.message)]
        assert time.monotonic() - start < 30
        started = list(map(int, pids.read_text().split()))
        assert len(started) == 2 and not any(
            map(_running, started)
        )  # the hanging submissions were stopped
    finally:
        _end_processes(pids)


def test_a_failed_start_stops_only_the_submissions_of_its_own_cluster(monkeypatch, tmp_path):
    """The submissions to stop were every child process named like the submit command: an
    ``sbatch`` this process ran for something else was stopped too. Now only those of the cluster."""
    pytest.importorskip("dask_jobqueue")
    import subprocess

    bin_dir, pids = _hanging_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(cluster, "SUBMIT_TIMEOUT", 1.0)
    other = subprocess.Popen(
        [str(bin_dir / "sbatch"), str(tmp_path / "another-job.sh")]
    )  # not the cluster's
    try:
        with pytest.raises(
            cluster.ClusterStartError,
            match=r"did not answer in 1 s \(1 submissions still waiting\)",
        ):
            cluster.start_client({"kind": "slurm", "options": {"cores": 1, "memory": "1GB"}})
        assert other.poll() is None
        assert (
            len(pids.read_text().split()) == 2
            and sum(map(_running, map(int, pids.read_text().split()))) == 1
        )
    finally:
        _end_processes(pids)  # other's too (its pid is there), with its child
        other.wait()


def test_a_close_held_by_a_hanging_submission_is_given_up_with_a_warning(monkeypatch, tmp_path):
    """Where the hanging submissions cannot be stopped, the close of the failed start is bounded
    by CLOSE_TIMEOUT and warns how to find the jobs, instead of waiting for ever."""
    pytest.importorskip("dask_jobqueue")
    import time

    bin_dir, pids = _hanging_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(cluster, "SUBMIT_TIMEOUT", 1.0)
    monkeypatch.setattr(cluster, "CLOSE_TIMEOUT", 1.0)
    monkeypatch.setattr(cluster, "_submission_processes", lambda cluster: [])  # none found to stop
    start = time.monotonic()
    try:
        with pytest.warns(
            RuntimeWarning,
            match=r"did not close in 1 s.*jobs named dask-worker may still be queued.*"
            r"scancel -u \$USER --name dask-worker",
        ):
            with pytest.raises(
                cluster.ClusterStartError,
                match=r"SLURM submit command .sbatch. did not answer in 1 s",
            ):
                cluster.start_client({"kind": "slurm", "options": {"cores": 1, "memory": "1GB"}})
        assert time.monotonic() - start < 30
    finally:
        _end_processes(pids)


def test_the_cli_reports_a_hanging_submit_command_in_one_line(monkeypatch, tmp_path, capsys):
    """``rfol-dask fit --cluster slurm`` with the SLURM controller down printed nothing and never
    ended; now one error line and exit status 2."""
    pytest.importorskip("dask_jobqueue")
    from rfol_dask.cli import main

    bin_dir, pids = _hanging_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(cluster, "SUBMIT_TIMEOUT", 1.0)
    try:
        code = main(["fit", str(tmp_path / "data.zarr"), "--cluster", "slurm"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(
            "rfol-dask fit: error: the SLURM submit command 'sbatch' did not answer in 1 s"
        ), err
        assert "scancel -u $USER --name dask-worker" in err
    finally:
        _end_processes(pids)


def test_scale_is_the_number_of_workers_of_a_local_cluster_too():
    """``scale: 2`` of a local configuration started one worker per core (the top-level key was
    read only for the other kinds); now it is LocalCluster's n_workers, and a different
    ``options.n_workers`` is refused."""
    config = cluster.load_config(
        {"kind": "local", "scale": 3, "options": {"threads_per_worker": 1}}
    )
    assert config["options"]["n_workers"] == 3 and cluster.node_threads(config)["processes"] == 3
    assert cluster.load_config(config) == config  # read again, the same
    assert (
        cluster.load_config({"kind": "local", "scale": 2, "options": {"n_workers": 2}})["options"][
            "n_workers"
        ]
        == 2
    )
    assert (
        cluster.load_config("local")["options"]["n_workers"] == 2
    )  # the shipped file says scale: 2
    assert (
        "n_workers" not in cluster.load_config({"kind": "local"})["options"]
    )  # default: one per core
    with pytest.raises(
        ValueError,
        match="given as a dict: scale 2 and options.n_workers 4 disagree; for kind local "
        "both are the number of worker processes",
    ):
        cluster.load_config({"kind": "local", "scale": 2, "options": {"n_workers": 4}})
    with pytest.raises(ValueError, match="scale must be a whole number >= 1, got 0"):
        cluster.load_config({"kind": "cuda-local", "scale": 0})
    assert cluster.node_threads({"kind": "cuda-local", "scale": 2})["processes"] == 2


@pytest.mark.cluster
def test_a_local_configuration_with_scale_starts_that_many_workers():
    with cluster.start_client(
        {"kind": "local", "scale": 1, "options": {"processes": False}}
    ) as client:
        assert len(client.scheduler_info()["workers"]) == 1  # not one per core


def test_an_mpi_scheduler_that_does_not_answer_is_an_error_not_a_hang(tmp_path):
    """A scheduler file naming a port that takes connections and never answers (another program,
    a stopped scheduler) kept start_client waiting for ever in distributed's handshake; one that
    answers like an HTTP server raised a MemoryError; a file that never holds an address gave
    a JSON traceback. Each is a ClusterStartError within the timeouts now."""
    import contextlib
    import json
    import socket
    import threading
    import time

    import dask

    silent = socket.create_server(("127.0.0.1", 0))
    talker = socket.create_server(("127.0.0.1", 0))

    def answer_http():
        with contextlib.suppress(OSError):
            conn, _ = talker.accept()
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)

    threading.Thread(target=answer_http, daemon=True).start()
    path = tmp_path / "scheduler.json"
    config = {"kind": "mpi", "scheduler_file": str(path), "scheduler_timeout": 0.5}
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            for server, says in (
                (silent, r"TimeoutError: timed out after 1 s"),
                (talker, r"its answer is not a dask scheduler's"),
            ):
                address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
                path.write_text(json.dumps({"address": address}))
                start = time.monotonic()
                with pytest.raises(
                    cluster.ClusterStartError,
                    match=f"could not connect to the scheduler named in "
                    f"{re.escape(str(path))} \\({address}: {says}.*delete it",
                ):
                    cluster.start_client(config)
                assert time.monotonic() - start < 10
        path.write_text('{"addr')  # never completed
        with pytest.raises(
            cluster.ClusterStartError, match="holds no scheduler address after 0.5 s.*delete it"
        ):
            cluster._mpi_client(cluster.load_config(config), poll=0.02)
    finally:
        silent.close()
        talker.close()


def test_jobqueue_options_of_the_cluster_itself_render_and_n_workers_is_refused():
    """Options that SLURMCluster / PBSCluster take for themselves (scheduler_options,
    shared_temp_directory, ...) passed the check and then failed with a TypeError of the job
    (job_script, the core check of make_cluster and start_client); n_workers submitted jobs
    apart from scale."""
    pytest.importorskip("dask_jobqueue")
    for kind, marker in (("slurm", "#SBATCH"), ("pbs", "#PBS")):
        config = {
            "kind": kind,
            "options": {
                "cores": 2,
                "memory": "1GB",
                "scheduler_options": {"port": 0},
                "shared_temp_directory": "/tmp",
                "job_name": "rfol-site",
            },
        }
        script = cluster.job_script(config)
        assert (
            marker in script
            and "rfol-site" in script
            and cluster.node_threads(config)["cores"] == 2
        )
        with pytest.raises(
            ValueError,
            match=f"unknown option 'n_workers' for kind {kind}; set the top-level key scale",
        ):
            cluster.load_config({"kind": kind, "options": {"n_workers": 2}})


def test_a_cluster_kind_without_its_package_says_what_to_install(monkeypatch, tmp_path, capsys):
    """Without dask-jobqueue / dask-kubernetes the start failed with "No module named
    'dask_jobqueue'"; now the error names the extra to install (the CLI: one line, status 2)."""
    from rfol_dask.cli import main

    for module in ("dask_jobqueue", "dask_kubernetes", "dask_kubernetes.operator"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails
    try:
        with pytest.raises(
            ImportError,
            match=r"cluster kinds 'slurm' and 'pbs' need dask-jobqueue: pip install "
            r"'rfol-dask\[hpc\]'",
        ):
            cluster.job_script({"kind": "pbs", "options": {"cores": 2, "memory": "1GB"}})
        with pytest.raises(
            ImportError,
            match=r"cluster kind 'kubernetes' needs dask-kubernetes: pip install "
            r"'rfol-dask\[cloud\]'",
        ):
            cluster.start_client({"kind": "kubernetes"})
        assert main(["fit", str(tmp_path / "data.zarr"), "--cluster", "slurm"]) == 2
    finally:
        cluster._option_keywords.cache_clear()  # (it remembers "not installed")
    err = capsys.readouterr().err
    assert (
        err
        == "rfol-dask fit: error: cluster kinds 'slurm' and 'pbs' need dask-jobqueue: pip install 'rfol-dask[hpc]'\n"
    )


def test_a_kubernetes_api_server_that_does_not_answer_is_an_error_not_a_hang(monkeypatch, tmp_path):
    """Credentials of an API server that takes connections and never answers kept KubeCluster
    (hence start_client) waiting for ever; now a ClusterStartError after dask's connect timeout."""
    pytest.importorskip("dask_kubernetes")
    import socket
    import time

    import dask

    silent = socket.create_server(("127.0.0.1", 0))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{silent.getsockname()[1]}', "
        "insecure-skip-tls-verify: true}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    start = time.monotonic()
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            with pytest.raises(
                cluster.ClusterStartError,
                match=r"Kubernetes cluster of cluster configuration "
                r"kubernetes \(TimeoutError: the Kubernetes API server did not answer in 1 s",
            ):
                cluster.start_client("kubernetes")
        assert time.monotonic() - start < 30
    finally:
        silent.close()


@pytest.mark.cluster
def test_a_local_cluster_that_cannot_start_is_a_cluster_start_error(capsys, tmp_path):
    """distributed's bare RuntimeError ("Cluster failed to start") was a traceback from the CLI
    (here: a dashboard address of a documentation network, not this machine's)."""
    from rfol_dask.cli import main

    config = tmp_path / "site.yaml"
    config.write_text(
        "kind: local\nscale: 1\noptions: {processes: false, dashboard_address: '198.51.100.7:0'}\n"
    )
    with pytest.raises(
        cluster.ClusterStartError,
        match=f"the local cluster of cluster configuration "
        f"{re.escape(str(config))} did not start .*: check its options",
    ):
        cluster.start_client(config)
    assert main(["fit", str(tmp_path / "data.zarr"), "--cluster", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rfol-dask fit: error: the local cluster") and err.count("\n") == 1, err
    if __import__("importlib").util.find_spec("dask_jobqueue"):  # a SLURM cluster's scheduler alike
        with pytest.raises(
            cluster.ClusterStartError,
            match="the slurm cluster of cluster configuration given as a dict did not start",
        ):
            cluster.make_cluster(
                {
                    "kind": "slurm",
                    "options": {
                        "cores": 1,
                        "memory": "1GB",
                        "scheduler_options": {"dashboard_address": "198.51.100.7:0"},
                    },
                }
            )


def test_a_kubernetes_cluster_whose_close_is_given_up_says_how_to_delete_it():
    import warnings as w

    class StuckKubeCluster:  # what _close_cluster reads of a KubeCluster
        status, name, namespace, tries = None, "rfol-dask", "science", 0

        def close(self, timeout=None):
            self.tries += 1
            raise TimeoutError

    stuck = StuckKubeCluster()
    with pytest.warns(
        RuntimeWarning,
        match="did not close in 0.5 s.*pods may still be running: kubectl delete "
        "daskcluster rfol-dask -n science",
    ):
        cluster._close_cluster(stuck, timeout=0.5)
    with w.catch_warnings():
        w.simplefilter("error")
        cluster._close_cluster(stuck)  # given up: not tried again
    assert stuck.tries == 1


@pytest.mark.cluster
def test_mpi_start_client_checks_a_tls_scheduler_with_dasks_tls_configuration(tmp_path):
    """The check that the scheduler answers connects as the Client does, with dask's TLS settings."""
    pytest.importorskip("cryptography")
    import json

    import dask
    from distributed import LocalCluster, Security

    sec = Security.temporary()
    tls = {
        "distributed.comm.tls.ca-file": sec.tls_ca_file,
        "distributed.comm.tls.client.cert": sec.tls_client_cert,
        "distributed.comm.tls.client.key": sec.tls_client_key,
    }
    path = tmp_path / "scheduler.json"
    with LocalCluster(
        n_workers=1, processes=False, security=sec, protocol="tls://", dashboard_address=":0"
    ) as local:
        path.write_text(json.dumps({"address": local.scheduler_address}))
        with dask.config.set(tls):
            client = cluster.start_client(
                {"kind": "mpi", "scheduler_file": str(path), "scheduler_timeout": 5}
            )
            try:
                assert (
                    client.scheduler.address.startswith("tls://")
                    and client.submit(sum, [1, 2]).result() == 3
                )
            finally:
                client.close()
