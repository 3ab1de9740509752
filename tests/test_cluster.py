"""Cluster configurations: shipped ones load and render their job script or spec without a
scheduler; local clusters start and close; a batch system's refusal and an MPI launch's failure
are errors at once (a real SLURM: tests/test_slurm.py)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import dask
import pytest

from rfol_dask import cluster, datasets

CONFIGS = Path(cluster.__file__).parent / "clusters"  # shipped as package data
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.cluster
@pytest.mark.slow
def test_local_config_starts_a_local_cluster_with_blas_threads():
    cfg = cluster.load_config(CONFIGS / "local.yaml")
    assert cfg["kind"] == "local" and cfg["blas_threads"] == 1
    with cluster.start_client({**cfg, "scale": 1, "options": {}}) as client:
        env = client.run(lambda: os.environ.get("OPENBLAS_NUM_THREADS"))
        assert list(env.values()) == ["1"]
        assert len(client.scheduler_info()["workers"]) == 1  # scale: the worker processes
    assert client.cluster.status.name == "closed"


@pytest.mark.parametrize("name,marker", [("slurm", "#SBATCH"), ("pbs", "#PBS")])
def test_jobqueue_scripts(name, marker):
    pytest.importorskip("dask_jobqueue")
    script = cluster.job_script(CONFIGS / f"{name}.yaml")
    assert marker in script and "tcp://SCHEDULER:8786" in script
    assert "export OPENBLAS_NUM_THREADS=1" in script
    assert re.search(r"^python -m distributed.cli.dask_worker", script, re.M), script
    assert script.index("export OMP") < script.index("activate") < script.index("python -m")
    assert sys.executable not in script  # the prologue's python, not this machine's
    if name == "slurm":
        assert "#SBATCH -p compute" in script and "--nworkers 4" in script


def test_job_scripts_take_the_python_and_the_site_defaults_of_dasks_configuration():
    pytest.importorskip("dask_jobqueue")
    import dask

    config = cluster.load_config("slurm")
    config["options"]["python"] = "/opt/env/bin/python3"
    assert "/opt/env/bin/python3 -m distributed.cli.dask_worker" in cluster.job_script(config)
    site = {"kind": "slurm", "options": {"cores": 2, "memory": "1GB"}}
    with dask.config.set(
        {
            "jobqueue.slurm.account": "site-acct",
            "jobqueue.slurm.job-script-prologue": ["module load x"],
        }
    ):
        script = cluster.job_script(site)
    assert "#SBATCH -A site-acct" in script and "module load x" in script
    assert script.index("export OMP") < script.index("module load x")
    assert re.search(r"^python -m distributed", script, re.M)  # a prologue: its python


def test_a_misspelt_option_is_the_managers_own_error():
    pytest.importorskip("dask_jobqueue")
    with pytest.raises(TypeError, match="quene"):
        cluster.job_script(
            {"kind": "slurm", "options": {"quene": "x", "cores": 1, "memory": "1GB"}}
        )


@pytest.mark.slow
def test_kubernetes_spec():
    pytest.importorskip("dask_kubernetes")
    import yaml

    spec = yaml.safe_load(cluster.job_script(CONFIGS / "kubernetes.yaml"))
    assert spec["kind"] == "DaskCluster" and spec["metadata"]["name"] == "rfol-dask"
    worker = spec["spec"]["worker"]
    assert worker["replicas"] == 8
    env = {e["name"]: e["value"] for e in worker["spec"]["containers"][0]["env"]}
    assert env["OPENBLAS_NUM_THREADS"] == "4" and env["EXTRA_PIP_PACKAGES"] == "rfol-dask"
    # the scheduler pod fails tasks once every worker pod is gone, as a local scheduler does
    sched = spec["spec"]["scheduler"]["spec"]["containers"][0]["env"]
    assert {"name": "DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT", "value": "300s"} in sched


def test_kubernetes_without_a_reachable_cluster_is_a_cluster_start_error(monkeypatch):
    pytest.importorskip("dask_kubernetes")
    import dask_kubernetes.operator

    def refuse(**kwargs):
        raise ValueError("Unable to find valid credentials")

    monkeypatch.setattr(dask_kubernetes.operator, "KubeCluster", refuse)
    with pytest.raises(cluster.ClusterStartError, match="valid credentials"):
        cluster.start_client("kubernetes")


def test_mpi_script():
    script = cluster.job_script(CONFIGS / "mpi.yaml")
    launch = next(line for line in script.splitlines() if line.startswith("mpirun"))
    assert launch.startswith("mpirun -n 64 --map-by ppr:8:node env OMP_NUM_THREADS=4")
    assert "python -m dask_mpi.cli --scheduler-file scheduler.json" in launch
    assert "--memory-limit 15GB" in launch and "export OMP_NUM_THREADS=4" in script
    assert script.index("activate") < script.index("rm -f scheduler.json") < script.index(launch)
    with pytest.raises(ValueError, match="started by running job_script"):
        cluster.make_cluster(CONFIGS / "mpi.yaml")


def test_config_mistakes_are_refused_naming_the_file(tmp_path, monkeypatch):
    cases = [
        ("kind: yarn\n", "needs kind in"),
        ("kind: local\nworkers: 3\n", r"unknown keys \['workers'\]"),
        ("kind: slurm\nprologue: [a]\n", r"unknown keys \['prologue'\] for kind slurm"),
        ("kind: slurm\nscale: 2.7\n", "scale must be a whole number >= 1, got 2.7"),
        ("kind: local\nscale: 0\n", "scale must be a whole number >= 1, got 0"),
        ("kind: slurm\nblas_threads: four\n", "blas_threads must be a whole number"),
        ("kind: slurm\noptions: [cores, 32]\n", "must be a mapping"),
        ("- kind\n- local\n", "must be a mapping"),
        (": : :\n  - [\n", "is not valid YAML"),
        ("kind: mpi\nscheduler_timeout: 0\n", "scheduler_timeout must be a number of seconds"),
        ("kind: local\nscale: 2\noptions: {n_workers: 4}\n", "scale and options.n_workers"),
    ]
    for i, (text, message) in enumerate(cases):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"{re.escape(str(path))}.*{message}"):
            cluster.load_config(path)
    with pytest.raises(FileNotFoundError, match=r"one of \['kubernetes', 'local'"):
        cluster.load_config("slurmm")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local").write_text("kind: slurm\n")  # does not shadow the shipped name
    assert cluster.load_config("local")["kind"] == "local"
    assert cluster.load_config("./local")["kind"] == "slurm"
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "site.yaml").write_text("kind: local\noptions: {n_workers: 3}\n")
    assert cluster.load_config("~/site.yaml")["options"] == {"n_workers": 3}
    assert cluster.load_config({"kind": "local", "options": None})["options"] == {}
    config = cluster.load_config({"kind": "local", "scale": 3})
    assert config["options"]["n_workers"] == 3 and cluster.load_config(config) == config


def test_shipped_configurations_are_package_data_kept_once():
    import tomllib
    from fnmatch import fnmatch

    assert cluster.load_config("slurm-dual")["options"]["processes"] == 1
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for path in CONFIGS.glob("*.yaml"):
        assert any(fnmatch(f"clusters/{path.name}", g) for g in globs["package-data"]["rfol_dask"])
        assert path.stem in cluster.shipped_configs()
    assert not list((ROOT / "cluster").glob("*.yaml"))  # no second copy beside its README


@pytest.mark.cluster
def test_start_client_logs_the_dashboard_and_its_with_block_closes_the_cluster():
    import logging

    logger, records = logging.getLogger("rfol_dask"), []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with cluster.start_client({"kind": "local", "options": {"processes": False}}) as client:
            assert client.submit(sum, [1, 2]).result() == 3
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert "dashboard" in "\n".join(r.getMessage() for r in records)
    assert client.cluster.status.name == "closed"
    with cluster.local_client(n_workers=1, processes=False) as client:
        pass
    assert client.cluster.status.name == "closed"


def _fake_sbatch(tmp_path, text):
    (tmp_path / "sbatch").write_text(text)
    (tmp_path / "sbatch").chmod(0o755)
    return f"{tmp_path}:{Path(sys.executable).parent}:/usr/bin:/bin"


@pytest.mark.parametrize("sbatch", ["refuses", "missing"])
@pytest.mark.slow
def test_jobs_the_batch_system_refuses_are_an_error_at_once(monkeypatch, tmp_path, sbatch):
    """Reported once every submission has failed, not after a fixed 60 s (issue 38.6)."""
    pytest.importorskip("dask_jobqueue")
    refuse = "#!/bin/sh\necho 'sbatch: error: invalid partition specified' >&2\nexit 1\n"
    path = _fake_sbatch(tmp_path, refuse) if sbatch == "refuses" else str(tmp_path)
    monkeypatch.setenv("PATH", path)
    config = {"kind": "slurm", "scale": 2, "options": {"cores": 1, "memory": "1GB"}}
    start = time.monotonic()
    message = "refused every SLURM job" if sbatch == "refuses" else "'sbatch' is not on PATH"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor a close given up with a warning
        with pytest.raises(cluster.ClusterStartError, match=message):
            cluster.start_client(config)
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_a_queue_wait_is_logged_once_a_minute(monkeypatch, tmp_path):
    """A job accepted and never started: the wait goes on and says so; a Ctrl-C ends it."""
    pytest.importorskip("dask_jobqueue")
    import logging

    monkeypatch.setenv("PATH", _fake_sbatch(tmp_path, "#!/bin/sh\necho 'Submitted batch job 7'\n"))
    (tmp_path / "scancel").write_text("#!/bin/sh\n")
    (tmp_path / "scancel").chmod(0o755)
    monkeypatch.setattr(cluster, "LOG_EVERY", 1)
    logger, records = logging.getLogger("rfol_dask"), []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: (
        records.append(record.getMessage()),
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT),  # a Ctrl-C
    )
    monkeypatch.setattr(logger, "level", logging.INFO)
    logger.addHandler(handler)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster.start_client({"kind": "slurm", "options": {"cores": 1, "memory": "1GB"}})
    finally:
        logger.removeHandler(handler)
        signal.signal(signal.SIGINT, previous)
    assert records[0].startswith("waiting for the first worker of 1 SLURM jobs"), records


def test_mpi_without_a_scheduler_file_is_a_bounded_wait(tmp_path):
    path = tmp_path / "scheduler.json"
    config = {"kind": "mpi", "scheduler_file": str(path), "scheduler_timeout": 0.5}
    with pytest.raises(
        cluster.ClusterStartError, match=f"no scheduler file {re.escape(str(path))}"
    ):
        cluster.start_client(config)


def test_an_mpi_launch_that_fails_is_an_error_at_once(tmp_path):
    """The launch script writes its failure into the scheduler file (issue 38.6): no 600 s wait."""
    path = tmp_path / "scheduler.json"
    config = {"kind": "mpi", "scheduler_file": str(path), "launcher": "false", "scale": 1}
    script = tmp_path / "launch.sh"
    script.write_text(cluster.job_script(config))
    assert subprocess.run(["bash", str(script)], cwd=tmp_path).returncode == 1
    start = time.monotonic()
    with pytest.raises(cluster.ClusterStartError, match="MPI launch failed with exit status 1"):
        cluster.start_client({**config, "scheduler_timeout": 600})
    assert time.monotonic() - start < 5


@pytest.mark.cluster
@pytest.mark.slow
def test_closing_an_mpi_client_ends_the_mpi_jobs_dask(tmp_path):
    """The MPI job's scheduler (here a dask scheduler process) ends with the client, so the MPI
    job does not keep its allocation until its walltime (issue 38.6)."""
    path = tmp_path / "scheduler.json"
    command = [
        sys.executable,
        "-m",
        "distributed.cli.dask_scheduler",
        "--scheduler-file",
        str(path),
    ]
    scheduler = subprocess.Popen(command + ["--port", "0", "--dashboard-address", ":0"])
    try:
        config = {"kind": "mpi", "scheduler_file": str(path), "scheduler_timeout": 60}
        with cluster.start_client(config) as client:
            assert client.scheduler_info()["address"]
        assert scheduler.wait(timeout=30) is not None
    finally:
        scheduler.kill()


@pytest.mark.cluster
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal masks from /proc")
@pytest.mark.slow
def test_local_workers_leave_ctrl_c_to_this_process():
    """A terminal's Ctrl-C goes to the whole process group: the workers block SIGINT (none dies with
    a KeyboardInterrupt traceback of its own), this process keeps it and closes the cluster."""

    def blocks_sigint(pid):
        mask = next(
            line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("SigBlk")
        )
        return bool(int(mask, 16) >> (signal.SIGINT - 1) & 1)

    with cluster.local_client(n_workers=1) as client:
        (pid,) = client.run(os.getpid).values()
        assert blocks_sigint(pid) and not blocks_sigint(os.getpid())


@pytest.mark.slow
def test_rendering_a_jobqueue_script_keeps_the_ctrl_c_handler():
    """dask_jobqueue's import makes SIGINT call sys.exit(): a Ctrl-C ended ``rfol-dask fit --cluster
    slurm`` with status 0, without its clean-up."""
    pytest.importorskip("dask_jobqueue")
    code = (
        "import signal; from rfol_dask import cluster; cluster.job_script('slurm'); "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.stdout.strip() == "True", res.stderr[-2000:]


def test_a_cluster_kind_without_its_package_says_what_to_install(monkeypatch, tmp_path, capsys):
    from rfol_dask.cli import main

    for module in ("dask_jobqueue", "dask_kubernetes", "dask_kubernetes.operator"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails
    with pytest.raises(ImportError, match=r"needs dask-jobqueue: pip install 'rfol-dask\[hpc\]'"):
        cluster.job_script({"kind": "pbs", "options": {"cores": 2, "memory": "1GB"}})
    with pytest.raises(ImportError, match=r"dask-kubernetes: pip install 'rfol-dask\[cloud\]'"):
        cluster.start_client({"kind": "kubernetes"})
    datasets.generate("advection1", 4, store=tmp_path / "data.zarr")
    assert main(["fit", str(tmp_path / "data.zarr"), "--cluster", "slurm"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("rfol-dask fit: error: kind 'slurm' needs dask-jobqueue")
        and err.count("\n") == 1
    )


@pytest.mark.cluster
def test_a_local_cluster_that_cannot_start_is_a_cluster_start_error(capsys, tmp_path):
    """distributed's bare RuntimeError ("Cluster failed to start") was a traceback from the CLI
    (here: a dashboard address of a documentation network, not this machine's)."""
    from rfol_dask.cli import main

    config = tmp_path / "site.yaml"
    config.write_text(
        "kind: local\nscale: 1\noptions: {processes: false, dashboard_address: '198.51.100.7:0'}\n"
    )
    with pytest.raises(cluster.ClusterStartError, match="the local cluster of .*site.yaml"):
        cluster.start_client(config)
    datasets.generate("advection1", 4, store=tmp_path / "data.zarr")
    assert main(["fit", str(tmp_path / "data.zarr"), "--cluster", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rfol-dask fit: error: the local cluster") and err.count("\n") == 1, err


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
@pytest.mark.slow
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


@pytest.mark.slow  # starts the shared process cluster (cluster_client)
def test_a_float32_search_on_a_cluster_refuses_alphas_its_refit_cannot_take(cluster_client):
    """A float32 search scores no alpha below float32's rounding floor of its Gram: the refit on
    a worker would have raised it (best_params_ then named a model that was never validated)."""
    from rfol_dask import RandomFeatureOperatorCV

    X, Y = _duplicated_samples()
    search = RandomFeatureOperatorCV(
        n_features=400,
        gammas=(1.0,),
        alphas=(1e-12,),
        stages={"coarse": None, "refine": (1,), "fine": None},
        random_state=0,
        dtype="float32",
    )
    with cluster_client.as_current(), pytest.raises(ValueError, match="below the rounding floor"):
        search.fit(X, Y)


def _open_mpi():
    import importlib.util

    if shutil.which("mpirun") is None or not all(
        importlib.util.find_spec(m) for m in ("mpi4py", "dask_mpi")
    ):
        return False
    out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True)
    return "Open MPI" in out.stdout + out.stderr


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.skipif(not _open_mpi(), reason="needs Open MPI's mpirun")
@pytest.mark.parametrize("slots", ["enough", "too few"])
def test_an_mpi_job_ends_with_its_client_and_a_failed_launch_is_seen_at_once(tmp_path, slots):
    """Issue 38.6 with a real mpirun: the job gives back its ranks when the client closes, and a
    launch short of slots is reported at once, not after scheduler_timeout."""
    flag = "--oversubscribe " if slots == "enough" else ""
    config = {
        "kind": "mpi",
        "scale": 1 if slots == "enough" else 64,
        "scheduler_file": str(tmp_path / "scheduler.json"),
        "python": sys.executable,
        "launcher": f"mpirun {flag}-n {{ranks}}",
        "options": {"nthreads": 1, "local_directory": str(tmp_path)},
        "scheduler_timeout": 120,
    }
    (tmp_path / "launch.sh").write_text(cluster.job_script(config))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = subprocess.Popen(["bash", "launch.sh"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL)
    try:
        start = time.monotonic()
        if slots == "too few":
            with pytest.raises(cluster.ClusterStartError, match="MPI launch failed"):
                cluster.start_client(config)
            assert time.monotonic() - start < 60
        else:
            with cluster.start_client(config) as client:
                assert client.submit(sum, [1, 2]).result() == 3
                # rank 0's scheduler, started by dask-mpi, fails tasks once no worker is left
                key = "distributed.scheduler.no-workers-timeout"
                assert client.run_on_scheduler(dask.config.get, key) == "300s"
            assert job.wait(timeout=60) == 0
    finally:
        job.kill()
