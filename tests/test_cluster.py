"""Each ready cluster configuration loads and renders a valid job script or spec, no scheduler needed."""

from pathlib import Path

import pytest

from rfol_dask import cluster

CONFIGS = Path(__file__).resolve().parents[1] / "cluster"


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
    assert "distributed.cli.dask_worker" in script or "dask worker" in script or "dask-worker" in script
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


def test_mpi_script():
    script = cluster.job_script(CONFIGS / "mpi.yaml")
    assert "mpirun -n 64 dask-mpi" in script and "--scheduler-file scheduler.json" in script
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
