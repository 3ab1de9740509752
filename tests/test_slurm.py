"""Through a real SLURM (one node: ``ci/slurm.sh start``, which ``.ci/run`` runs): the shipped
``slurm`` configuration, edited for that node, fits, predicts and generates as a local run does,
and leaves no job behind, whether the command ends, is interrupted or loses a worker job."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import yaml

from rfol_dask import cluster

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]
JOB = "rfol-test"  # the job name of these tests' jobs


def _controller_answers():
    if shutil.which("sbatch") is None:
        return False
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "UP" in ping.stdout


if not _controller_answers():
    pytest.skip("no SLURM controller answers (ci/slurm.sh start)", allow_module_level=True)


def _jobs(states="PD,R,CF,S"):
    """Job ids of these tests' jobs still pending or running."""
    out = subprocess.run(["squeue", "-h", "-n", JOB, "-t", states, "-o", "%i"], capture_output=True)
    return out.stdout.decode().split()


def _no_job_left(timeout=20):
    deadline = time.monotonic() + timeout
    while _jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _jobs()


def _config(path, scale=1, **changes):
    """The shipped slurm configuration, edited for this one node."""
    config = cluster.load_config("slurm")
    partition = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True)
    options = config["options"]
    del options["account"], options["job_script_prologue"]
    options.update(queue=partition.stdout.split()[0].rstrip("*"), cores=1, processes=1)
    options.update(memory="1GB", python=sys.executable, local_directory=str(path.parent))
    options.update(job_name=JOB, walltime="00:10:00", log_directory=str(path.parent), **changes)
    path.write_text(yaml.safe_dump({**config, "scale": scale}))
    return path


def _cli(*args, cwd, **popen):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    command = [sys.executable, "-m", "rfol_dask.cli", *map(str, args)]
    return subprocess.Popen(command, cwd=cwd, env=env, text=True, **popen)


def _run(*args, cwd):
    proc = _cli(*args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return out


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A folder with a store and a model made without a cluster."""
    folder = tmp_path_factory.mktemp("local")
    _run("generate", "advection2", "--samples", 48, "--out", "d.zarr", cwd=folder)
    _run("fit", "d.zarr", "--n-features", 40, "--train", 40, "--out", "m", cwd=folder)
    return folder


def test_generate_fit_and_predict_on_slurm_equal_local_runs(tmp_path, local):
    import xarray as xr

    from rfol_dask import RandomFeatureOperator

    flags = ["--cluster", _config(tmp_path / "slurm.yaml", scale=2)]
    _run("generate", "advection2", "--samples", 48, "--out", "d.zarr", *flags, cwd=tmp_path)
    assert _no_job_left()
    fit = ("fit", local / "d.zarr", "--n-features", 40, "--train", 40, "--out", "m")
    _run(*fit, *flags, cwd=tmp_path)
    assert _no_job_left()
    _run("predict", "m", local / "d.zarr", "--out", "p.zarr", *flags, cwd=tmp_path)
    assert _no_job_left()
    slurm, here = xr.open_zarr(tmp_path / "d.zarr"), xr.open_zarr(local / "d.zarr")
    for var in here.data_vars:
        np.testing.assert_array_equal(slurm[var].values, here[var].values)
    X = here["input"].values
    model, same = (RandomFeatureOperator.load(folder / "m") for folder in (tmp_path, local))
    np.testing.assert_allclose(model.predict(X), same.predict(X), rtol=1e-9, atol=1e-12)
    predicted = xr.open_zarr(tmp_path / "p.zarr")["prediction"].values
    np.testing.assert_allclose(predicted, same.predict(X), rtol=1e-9, atol=1e-12)


def _fit_until_jobs_run(tmp_path, local, scale):
    """``rfol-dask fit`` on SLURM, returned once ``scale`` of its jobs run."""
    config = _config(tmp_path / "slurm.yaml", scale=scale)
    flags = ["--n-features", 600, "--tune", "--out", "m", "--cluster", config]
    fit = _cli("fit", local / "d.zarr", *flags, cwd=tmp_path, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(_jobs("R")) < scale and fit.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return fit


def test_a_ctrl_c_mid_fit_leaves_no_job(tmp_path, local):
    fit = _fit_until_jobs_run(tmp_path, local, scale=1)
    fit.send_signal(signal.SIGINT)
    _, err = fit.communicate(timeout=90)
    assert fit.returncode != 0 and "interrupted" in err, err[-3000:]
    assert _no_job_left()


def test_a_worker_job_cancelled_mid_fit_is_survived_or_one_line_and_no_job_left(tmp_path, local):
    fit = _fit_until_jobs_run(tmp_path, local, scale=2)
    time.sleep(2)
    subprocess.run(["scancel", _jobs("R")[0]], check=True)
    _, err = fit.communicate(timeout=240)
    if fit.returncode:
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("rfol-dask fit: ")
    assert _no_job_left()


def _scontrol_node(state):
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True)
    command = ["scontrol", "update", f"nodename={node.stdout.split()[0]}", f"state={state}"]
    subprocess.run(command + (["reason=rfol-test"] if state == "drain" else []), check=True)


def test_closing_after_a_queue_wait_is_quick_and_does_not_warn(tmp_path):
    """Issue 38.4: after 15 s in the queue, the close took 60 s and warned that jobs may be left."""
    config = _config(tmp_path / "slurm.yaml")
    _scontrol_node("drain")
    resume = threading.Timer(15, _scontrol_node, ["resume"])
    resume.start()
    try:
        client = cluster.start_client(config)
        assert client.submit(sum, [1, 2]).result() == 3
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cluster.close_client(client)
        assert time.monotonic() - start < 20
    finally:
        resume.join()
    assert _no_job_left()


def test_a_partition_the_scheduler_refuses_is_reported_at_once(tmp_path):
    """Issue 38.6: ``sbatch: invalid partition specified`` was reported after 60 s."""
    config = _config(tmp_path / "slurm.yaml", queue="no-such-partition")
    start = time.monotonic()
    with pytest.raises(cluster.ClusterStartError, match="refused every SLURM job"):
        cluster.start_client(config)
    assert time.monotonic() - start < 20 and _no_job_left()
