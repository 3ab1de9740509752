#!/usr/bin/env bash
# One prepared run on a borrowed GPU machine (issue: GPUs): the GPU tests, then benchmarks/gpu.py at
# full size with every stage, each step under its own time limit, results written as they come.
#
#   OUT=/some/dir bash benchmarks/gpu_session.sh        # results in $OUT (default benchmarks/results)
#
# GPU_STAGES picks the optional stages (default "--dask --zarr --equal-full"), GPU_SELECT the search size (0: none).
# Packages the machine lacks (dask, distributed, zarr, dask-cuda, array-api-compat, ...) can be carried as
# wheels in ./.whl (git-ignored); they are installed into /tmp/site without touching the image.
set -u
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site:$PWD
fi
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    nproc
    python3 -c 'import sys, numpy, scipy, cupy, dask, distributed, zarr, sklearn; print(sys.version); print({m.__name__: m.__version__ for m in (numpy, scipy, cupy, dask, distributed, zarr, sklearn)}); print(cupy.cuda.runtime.runtimeGetVersion())'
    python3 -c 'import threadpoolctl, numpy; print(threadpoolctl.threadpool_info())'
} > "$OUT/machine.txt" 2>&1
timeout "${GPU_TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_cluster_gpu.py \
    > "$OUT/gpu_tests.log" 2>&1
echo "tests rc=$?" >> "$OUT/gpu_tests.log"
timeout "${GPU_BENCH_S:-420}" python3 -u benchmarks/gpu.py --size "${GPU_SIZE:-full}" --device "${GPU_DEVICE:-cuda}" ${GPU_STAGES---dask --zarr --equal-full} \
    --select "${GPU_SELECT:-3000}" --out "$OUT/gpu_full_cuda.json" > "$OUT/gpu_bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/gpu_bench.log"
