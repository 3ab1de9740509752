"""GPU cluster configurations: rendered and checked on a machine without GPUs or dask-cuda."""

import importlib.util
import warnings

import pytest

from rfol_dask import cluster

pytest.importorskip("dask_jobqueue")


def test_slurm_gpu_job_runs_dask_cuda_worker_with_gres_and_fits_its_node():
    script = cluster.job_script("slurm-gpu")
    assert "#SBATCH --gres=gpu:4" in script
    assert "python -m dask cuda worker tcp://SCHEDULER:8786" in script
    assert "--nthreads 2" in script and "--nworkers" not in script  # dask-cuda: one process per GPU
    assert "export OMP_NUM_THREADS=1" in script
    t = cluster.node_threads("slurm-gpu")
    assert t == {"processes": 4, "threads": 2, "blas": 1, "cores": 32}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cluster.job_script("slurm-gpu")


def test_cuda_local_kind_counts_one_worker_per_gpu(monkeypatch):
    config = cluster.load_config("local-cuda")
    assert config["kind"] == "cuda-local" and "cuda-local" in cluster.KINDS
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "LocalCUDACluster" in cluster.job_script("local-cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    t = cluster.node_threads("local-cuda")
    assert (t["processes"], t["threads"], t["blas"]) == (3, max(1, min(8, t["cores"] // 3)), 1)
    assert cluster._cuda_threads("auto", 1) == max(1, min(8, t["cores"]))
    assert cluster._cuda_threads(2, 1) == 2
    named = {"kind": "cuda-local", "options": {"CUDA_VISIBLE_DEVICES": [0, 1]}}
    assert cluster.node_threads(named)["processes"] == 2
    many = {"kind": "cuda-local", "options": {"n_workers": 2, "threads_per_worker": 64}}
    with pytest.warns(UserWarning, match="oversubscribes"):
        cluster.job_script(many)


@pytest.mark.skipif(
    importlib.util.find_spec("dask_cuda") is not None, reason="dask-cuda is installed here"
)
def test_cuda_local_without_dask_cuda_says_what_to_install():
    with pytest.raises(ImportError, match=r"pip install 'rfol-dask\[gpu\]'"):
        cluster.make_cluster("local-cuda")
