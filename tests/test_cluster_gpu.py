"""GPU cluster configurations: rendered and checked on a machine without GPUs or dask-cuda."""

import importlib.util

import pytest

from rfol_dask import cluster


def test_slurm_gpu_job_runs_dask_cuda_worker_with_gres():
    pytest.importorskip("dask_jobqueue")
    script = cluster.job_script("slurm-gpu")
    assert "#SBATCH --gres=gpu:4" in script and "#SBATCH --cpus-per-task=32" in script
    assert "python -m dask cuda worker tcp://SCHEDULER:8786" in script
    assert "--nthreads 2" in script and "--nworkers" not in script  # dask-cuda: one per GPU
    assert "export OMP_NUM_THREADS=1" in script
    assert cluster.gpu_config("slurm-gpu") and not cluster.gpu_config("slurm")


def test_cuda_local_kind_renders_its_local_cuda_cluster():
    config = cluster.load_config("local-cuda")
    assert config["kind"] == "cuda-local" and cluster.gpu_config(config)
    assert "LocalCUDACluster" in cluster.job_script("local-cuda")
    assert cluster.load_config({"kind": "cuda-local", "scale": 2})["options"]["n_workers"] == 2


@pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is not None, reason="dask-cuda here")
def test_cuda_local_without_dask_cuda_says_what_to_install():
    with pytest.raises(ImportError, match=r"pip install 'rfol-dask\[gpu\]'"):
        cluster.make_cluster("local-cuda")
