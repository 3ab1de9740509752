"""GPU fit benchmark (issue: GPUs): the 20000-sample, 64 x 64 -> 64 x 64 in-memory fit on one GPU.

One command on a machine with a CUDA GPU and CuPy:

    python benchmarks/gpu.py                         # M = 20000, n = m = 4096, N = 20000 and 160000
    python benchmarks/gpu.py --size tiny --device cpu # smoke test without a GPU (seconds)

It writes ``benchmarks/results/gpu_<size>_<device>.json`` (``--out`` to change) with the device
name, and for each N: the fit time (median of ``--repeats`` after a warm-up fit that compiles the
CuPy kernels; the first, cold fit is reported too), the prediction time of the test samples, the
test error, the peak GPU memory and the model's memory. Also: the fit from numpy input with
``device="cuda"`` (host-to-device copies included), the streamed dask dual on the GPU (``--dask``:
dask arrays of numpy chunks, ``device="cuda"``, dask's threaded scheduler, no cluster), the fit from
a Zarr store through a one-GPU dask worker (``--zarr``; ``--zarr-codecs none,zstd``: stores written
uncompressed, as rfol_dask's data sets, and with zarr's default codec; ``--zarr-modes auto,slabs``:
the streamed dual's rows mode, where the GPU has room, and its slabs mode; one stage each), and the
equality of GPU and CPU predictions with the same seed at a small size (target 1e-8 relative,
float64).

Timing: every GPU timing ends with ``cupy.cuda.Device().synchronize()``. Peak GPU memory: the
CuPy memory pool is emptied (``free_all_blocks``) before each fit; the pool keeps the blocks
freed during the fit, so its reserved bytes afterwards (``total_bytes``) are the fit's
high-water mark (up to the pool's rounding; cuBLAS / cuSOLVER handles and cuBLAS's workspace are
not pool memory). TF32 stays off (CuPy's default; float64 is not affected by it anyway).

Memory model: the in-memory dual on a GPU never forms the features ``A`` (8 M N bytes): it sums
the Gram over feature slabs (``rfol_dask.slab-bytes``, 256 MiB), factorises it in place
(cuSOLVER ``potrf``), frees it and makes the slabs again for ``C = A^T Beta``
(``rfol_dask.solve.in_memory.dual_slabs``; on the CPU, numpy forms ``A`` whole, the bytes
``features_8MN_cpu_only``). ``peak_over_target`` is the peak over the issue's
``8 M^2 + slab + U + V`` (target <= 1.2; ``slab`` the widest slab's bytes,
``8 M width``). The fit also holds the model's own arrays, ``Omega`` (``8 n N``), ``b`` and the
coefficients it returns (``8 N m``), which that sum leaves out (at N = 160000 they are
5.2 GB each, more than the Gram): ``peak_less_model_arrays_over_target`` takes them out of the
peak first: the ratio that can stay within 1.2 at every N (not yet measured on a GPU).

Data: synthetic smooth periodic 64 x 64 fields (Gaussian random fields with a ``(1 + |k|^2)^-1.5``
spectrum) and outputs ``heat(u) + 0.3 u^2``, with the Navier-Stokes benchmark's shapes (20000
training and 2000 test samples of 4096 points in and out). The Navier-Stokes generator of
``rfol_dask.datasets`` needs dask and is slow to make 22000 solutions for; its test error is not
reproduced here, only the shapes and the flops.

Requirements on the GPU machine: numpy, scipy, cupy (``cupy-cuda12x``, or ``cupy-cuda13x`` for
CUDA 13). ``import rfol_dask`` also imports dask, xarray (pandas), scikit-learn (joblib,
threadpoolctl), psutil, pyyaml and array-api-compat (the in-memory GPU path computes with none of
them, but the package imports them). Where they are missing, build a wheelhouse on a machine with
the internet and carry it:

    pip download -d wheelhouse --only-binary=:all: --python-version 3.11 \\
        dask toolz cloudpickle partd locket fsspec xarray pandas python-dateutil tzdata \\
        scikit-learn joblib threadpoolctl psutil pyyaml array-api-compat
    # on the GPU machine:
    pip install --no-index --find-links wheelhouse dask xarray scikit-learn psutil pyyaml
    array-api-compat PYTHONPATH=$PWD python benchmarks/gpu.py

(zarr, distributed and dask-cuda are not needed.)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

SIZES = {  # (train samples, grid side, test samples, feature counts, equality-check samples)
    "tiny": (200, 8, 50, (200, 800), 100),
    "small": (2000, 32, 200, (2000, 8000), 500),
    "full": (20000, 64, 2000, (20000, 160000), 1000),
}


def synthetic_fields(n_samples, side, seed=0, batch=1000):
    """Smooth periodic fields ``U`` (M, side^2) and outputs ``V = heat(U) + 0.3 U^2``."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(side, 1.0 / side)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    amp = (1.0 + k2) ** -0.75
    heat = np.exp(-0.01 * k2)
    U = np.empty((n_samples, side * side))
    V = np.empty_like(U)
    for s in range(0, n_samples, batch):
        e = min(s + batch, n_samples)
        coef = (
            rng.standard_normal((e - s, side, side)) + 1j * rng.standard_normal((e - s, side, side))
        ) * amp
        u = np.fft.ifft2(coef).real
        u /= u.std(axis=(1, 2), keepdims=True)
        v = np.fft.ifft2(np.fft.fft2(u) * heat).real + 0.3 * u**2
        U[s:e], V[s:e] = u.reshape(e - s, -1), v.reshape(e - s, -1)
    return U, V


def median_gamma(U, pairs=500, seed=0):
    """``1 / median ||u_i - u_j||_1`` over random pairs (the fit_speed benchmark's heuristic)."""
    i, j = np.random.default_rng(seed).integers(0, len(U), (2, pairs))
    return float(1.0 / np.median(np.abs(U[i] - U[j]).sum(axis=1)))


class Device:
    """numpy or CuPy: moving arrays, synchronising, the memory pool."""

    def __init__(self, name):
        self.name = name
        if name == "cuda":
            import cupy

            self.cp = cupy
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            self.info = {
                "device": props["name"].decode()
                if isinstance(props["name"], bytes)
                else props["name"],
                "device_memory_bytes": int(props["totalGlobalMem"]),
                "cupy": cupy.__version__,
                "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
            }
        else:
            self.cp = None
            self.info = {"device": f"cpu ({platform.processor() or platform.machine()})"}

    def put(self, x):
        return self.cp.asarray(x) if self.cp is not None else x

    def get(self, x):
        return x.get() if self.cp is not None and hasattr(x, "get") else np.asarray(x)

    def sync(self):
        if self.cp is not None:
            self.cp.cuda.Device().synchronize()

    def reset_pool(self):
        if self.cp is not None:
            self.sync()
            self.cp.get_default_memory_pool().free_all_blocks()

    def pool_bytes(self):
        return int(self.cp.get_default_memory_pool().total_bytes()) if self.cp is not None else None


def slab_bytes(M, N):
    """Bytes of the widest feature slab of the in-memory GPU dual (float64), as it cuts them."""
    import dask

    from rfol_dask.memory import SLAB_BYTES
    from rfol_dask.solve.streamed import feature_slabs

    (slabs,) = feature_slabs(M, N, 1, 8, int(dask.config.get("rfol_dask.slab-bytes", SLAB_BYTES)))
    return 8 * M * max(f1 - f0 for f0, f1 in slabs)


def timed(dev, fn):
    dev.sync()
    t0 = time.perf_counter()
    out = fn()
    dev.sync()
    return time.perf_counter() - t0, out


def rel_l2(V, P):
    """Mean over samples of ``||v - v_hat|| / ||v||`` (numpy)."""
    return float(np.mean(np.linalg.norm(V - P, axis=1) / np.linalg.norm(V, axis=1)))


def _stage(report, name, fn, out):
    """Run one stage; its result (or the error's traceback) goes under ``report["stages"][name]``
    and the JSON is written again, so a stage that fails or a run cut off keeps what came before."""
    import traceback

    t0 = time.perf_counter()
    try:
        result = fn()
    except Exception:  # noqa: BLE001 - one broken stage must not lose the others' figures
        result = {"error": traceback.format_exc()}
    if isinstance(result, dict):
        result.setdefault("stage_seconds", time.perf_counter() - t0)
    report["stages"][name] = result
    print(name, json.dumps(result, default=str)[:2000], flush=True)
    if out is not None:
        out.write_text(json.dumps(report, indent=1, default=str))
    return result


def _with_task_stream(dev, client, fn):
    """``timed(fn)`` on ``client`` with the task stream recorded: per task name (``key_split``) the
    count, the seconds computing, moving and reading from disk, and the first start / last end
    after the call began; the call's seconds before the first task and after the last one (graph
    building, gathering the results, the client's own work), and the client thread's profile
    (cProfile, cumulative)."""
    import cProfile
    import io
    import logging
    import pstats

    from dask.utils import key_split
    from distributed import get_task_stream

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.lines = []

        def emit(self, record):
            self.lines.append(f"{time.time() - t0:.3f} {record.getMessage()}")

    logs, log = Lines(), logging.getLogger("rfol_dask")
    level, _ = log.level, log.addHandler(logs)
    log.setLevel(logging.DEBUG)
    profile = cProfile.Profile()
    try:
        with get_task_stream(client) as ts:
            t0 = time.time()
            t, out = timed(dev, lambda: profile.runcall(fn))
    finally:
        log.removeHandler(logs)
        log.setLevel(level)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(25)
    rows, first, last = {}, float("inf"), 0.0
    for task in ts.data:
        row = rows.setdefault(
            key_split(task["key"]),
            {
                "n": 0,
                "compute": 0.0,
                "transfer": 0.0,
                "disk-read": 0.0,
                "start": float("inf"),
                "stop": 0.0,
            },
        )
        row["n"] += 1
        for ss in task["startstops"]:
            row[ss["action"]] = row.get(ss["action"], 0.0) + ss["stop"] - ss["start"]
            row["start"], row["stop"] = (
                min(row["start"], ss["start"] - t0),
                max(row["stop"], ss["stop"] - t0),
            )
        first, last = min(first, row["start"]), max(last, row["stop"])
    tasks = {
        "seconds": t,
        "before_first_task": first,
        "after_last_task": t - last,
        "by_name": {
            k: {a: round(v, 4) for a, v in r.items()}
            for k, r in sorted(rows.items(), key=lambda kv: kv[1]["start"])
        },
        "client_log": logs.lines,
        "client_profile": [line for line in text.getvalue().splitlines() if line.strip()][-30:],
    }
    return t, out, tasks


def _one_gpu_cluster(device):
    """One dask worker process on the GPU: ``dask_cuda.LocalCUDACluster`` where dask-cuda is
    installed (cluster kind ``cuda-local``), else a one-worker ``LocalCluster``."""
    from rfol_dask import cluster

    if device == "cuda":
        try:
            return cluster.make_cluster("local-cuda"), "dask_cuda.LocalCUDACluster"
        except ImportError:
            pass
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True
    ), "distributed.LocalCluster"


def alpha_path(dev, U, V, sizes, n_alphas=18):
    """The ridge path's two methods on the device, for :func:`rfol_dask.tuning.eigh_pays` (measured
    with LAPACK on the CPU: ``eigh`` costs 9-24 Cholesky factorisations and solves there): per
    size M, the seconds of ``EigenPath`` (``eigh`` and its products) and of the path's scores, and
    of one alpha of ``cholesky_errors`` (factorisation, solve, score), on the centred Gram of M
    training and M / 4 validation rows with N = M Cauchy features."""
    from rfol_dask import backend
    from rfol_dask.features import draw_frequencies, feature_map
    from rfol_dask.tuning import EigenPath, cholesky_errors

    rows = []
    for M in sizes:
        Mv = M // 4
        if M + Mv > len(U):
            rows.append({"M": M, "skipped": f"needs {M + Mv} training rows, the size has {len(U)}"})
            continue
        X, Y = dev.put(U[: M + Mv]), dev.put(V[: M + Mv, :64])
        omega, b = (
            dev.put(a) for a in draw_frequencies(U.shape[1], M, "cauchy", 1.0 / U.shape[1], None, 0)
        )
        A = feature_map(X, omega, b, n_features=M)
        A -= A[:M].mean(axis=0)
        K = A[M:] @ A[:M].T
        alphas = 10.0 ** np.arange(-12, -12 + n_alphas)
        timed(
            dev, lambda: EigenPath(A[:M] @ A[:M].T, K, Y[:M]).errors(alphas[:1], Y[M:])
        )  # warm-up
        t_eigh, path = timed(dev, lambda: EigenPath(A[:M] @ A[:M].T, K, Y[:M]))
        t_scores, _ = timed(dev, lambda: path.errors(alphas, Y[M:]))
        G = backend.fortran_copy(A[:M] @ A[:M].T)
        t_chol, _ = timed(dev, lambda: cholesky_errors(G, K, Y[:M], Y[M:], [1e-6]))
        rows.append(
            {
                "M": M,
                "eigh_s": t_eigh,
                "path_scores_s": t_scores,
                "n_alphas": n_alphas,
                "cholesky_alpha_s": t_chol,
                "break_even_alphas": (t_eigh + t_scores) / t_chol,
                "cpu_rule_break_even": float(np.sqrt(M) / 3),
            }
        )
        print("alpha_path", json.dumps(rows[-1]), flush=True)
    return rows


def run(
    size,
    device,
    repeats,
    alpha,
    dask_mode,
    seed=0,
    zarr_mode=False,
    equal_full=False,
    select=0,
    out=None,
    features=None,
    zarr_codecs=("none",),
    zarr_modes=("auto",),
    alpha_sizes=(),
):
    from rfol_dask import RandomFeatureOperator

    M, side, M_test, feature_counts, M_eq = SIZES[size]
    feature_counts = tuple(features or feature_counts)
    N0 = feature_counts[0]
    dev = Device(device)
    t0 = time.perf_counter()
    U, V = synthetic_fields(M + M_test, side, seed)
    U_train, V_train, U_test, V_test = U[:M], V[:M], U[M:], V[M:]
    gamma = median_gamma(U_train)
    report = {
        **dev.info,
        "size": size,
        "M": M,
        "n": side * side,
        "m": side * side,
        "M_test": M_test,
        "gamma": gamma,
        "alpha": alpha,
        "dtype": "float64",
        "distribution": "cauchy",
        "data": "synthetic smooth 64x64-type fields (not the Navier-Stokes generator)",
        "data_seconds": time.perf_counter() - t0,
        "runs": [],
        "stages": {},
    }
    Ug, Vg, Ug_test = dev.put(U_train), dev.put(V_train), dev.put(U_test)
    kept = {}  # predictions of the in-memory fit at N0, and its time

    def model(N, **kw):
        return RandomFeatureOperator(
            n_features=N, gamma=gamma, alpha=alpha, random_state=seed, **kw
        )

    def warmup():  # compiles the CuPy kernels and creates the cuBLAS / cuSOLVER handles
        warm_N = min(N0, 2 * M_eq)
        return {
            "seconds": timed(
                dev, lambda: model(warm_N).fit(dev.put(U_train[:M_eq]), dev.put(V_train[:M_eq]))
            )[0]
        }

    _stage(report, "warmup", warmup, out)

    def in_memory(N):
        row = {"N": N}
        dev.reset_pool()
        times = []
        for r in range(max(1, repeats)):
            t, est = timed(dev, lambda: model(N).fit(Ug, Vg))
            times.append(t)
            if r == 0:
                row["peak_gpu_bytes"] = dev.pool_bytes()
        row.update(fit_seconds=statistics.median(times), fit_seconds_all=times, solver=est.solver_)
        predict = est.predict
        t, P = timed(dev, lambda: predict(Ug_test))
        P = dev.get(P)
        row.update(predict_seconds=t, test_rel_l2=rel_l2(V_test, P))
        row["model_bytes"] = b = {
            "gram_8M2": 8 * M * M,
            "slab": slab_bytes(M, N),
            "U": U_train.nbytes,
            "V": V_train.nbytes,
            "features_8MN_cpu_only": 8 * M * N,
            "coef_8Nm": 8 * N * V.shape[1],
            "omega_8nN": 8 * U.shape[1] * N,
            "b_8N": 8 * N,
        }
        if row["peak_gpu_bytes"]:
            target = b["gram_8M2"] + b["slab"] + b["U"] + b["V"]
            row["peak_over_target"] = row["peak_gpu_bytes"] / target
            row["peak_less_model_arrays_over_target"] = (
                row["peak_gpu_bytes"] - b["omega_8nN"] - b["b_8N"] - b["coef_8Nm"]
            ) / target
        if N == N0:
            kept.update(P=P, seconds=row["fit_seconds"])
        del est
        dev.reset_pool()
        report["runs"].append(row)
        return row

    for N in feature_counts:
        _stage(report, f"in_memory_N{N}", lambda N=N: in_memory(N), out)

    def against_in_memory(est, seconds):
        P = dev.get(est.predict(U_test))
        res = {"fit_seconds": seconds}
        if "P" in kept:
            res.update(
                over_in_memory=seconds / kept["seconds"],
                max_rel_diff_predictions=float(
                    np.abs(P - kept["P"]).max() / np.abs(kept["P"]).max()
                ),
            )
        return res

    if device == "cuda":

        def numpy_input():
            t, est = timed(dev, lambda: model(N0, device="cuda").fit(U_train, V_train))
            return against_in_memory(est, t)

        _stage(report, "numpy_input_device_cuda", numpy_input, out)
    if dask_mode:

        def dask_threads():
            import dask
            import dask.array as da

            Ud, Vd = (
                da.from_array(U_train, chunks=(2000, -1)),
                da.from_array(V_train, chunks=(2000, -1)),
            )
            with dask.config.set(scheduler="threads"):
                t, est = timed(dev, lambda: model(N0, device=device, solver="dual").fit(Ud, Vd))
            return against_in_memory(est, t)

        _stage(report, "dask_threads_streamed", dask_threads, out)
    if zarr_mode:

        def from_zarr(codec, mode):
            import tempfile

            import dask
            import dask.array as da
            from distributed import Client

            store = Path(tempfile.mkdtemp())
            # "none": uncompressed, as rfol_dask's data sets are stored; "zstd": zarr's default
            # codec
            kw = {"compressors": None} if codec == "none" else {}
            t_write = time.perf_counter()
            da.from_array(U_train, chunks=(2000, -1)).to_zarr(str(store / "U.zarr"), **kw)
            da.from_array(V_train, chunks=(2000, -1)).to_zarr(str(store / "V.zarr"), **kw)
            t_write = time.perf_counter() - t_write
            cluster, kind = _one_gpu_cluster(device)
            with (
                cluster,
                Client(cluster) as client,
                dask.config.set({"rfol_dask.device-features": mode}),
            ):
                Uz, Vz = da.from_zarr(str(store / "U.zarr")), da.from_zarr(str(store / "V.zarr"))
                times = []
                for r in range(max(2, repeats)):  # the first includes the worker's CUDA start-up
                    if r == max(2, repeats) - 1:  # the last fit: where its time goes, task by task
                        t, est, tasks = _with_task_stream(
                            dev, client, lambda: model(N0, device=device, solver="dual").fit(Uz, Vz)
                        )
                    else:
                        t, est = timed(
                            dev, lambda: model(N0, device=device, solver="dual").fit(Uz, Vz)
                        )
                    times.append(t)
                res = against_in_memory(est, statistics.median(times[1:]))
                # the floor of any fit from this store: reading (and decompressing) U and V on the
                # worker
                t_read, _ = timed(dev, lambda: client.compute([Uz.sum(), Vz.sum()], sync=True))
                # and of moving the coefficients (N0 x m float64) from the worker to the client
                made = client.submit(np.ones, (N0, V_train.shape[1]), pure=False)
                from distributed import wait

                wait(made)
                t_gather, _ = timed(dev, made.result)
                del made
                res.update(
                    cluster=kind,
                    worker_threads=sum(client.nthreads().values()),
                    fit_seconds_all=times,
                    zarr_codec=codec,
                    feature_mode=mode,
                    zarr_write_seconds=t_write,
                    zarr_read_seconds=t_read,
                    coef_gather_seconds=t_gather,
                    last_fit_tasks=tasks,
                    chunks=list(Uz.chunks[0]),
                    coef_type=type(est.coef_).__module__,
                )
            return res

        for codec in zarr_codecs:
            for mode in zarr_modes:
                name = (
                    "zarr_one_gpu_worker"
                    + ("" if codec == "none" else f"_{codec}")
                    + ("" if mode == "auto" else f"_{mode}")
                )
                _stage(report, name, lambda codec=codec, mode=mode: from_zarr(codec, mode), out)

    def equality_small():
        N_eq = 2 * M_eq
        cpu = model(N_eq).fit(U_train[:M_eq], V_train[:M_eq])
        here = model(N_eq).fit(dev.put(U_train[:M_eq]), dev.put(V_train[:M_eq]))
        P_cpu, P_dev = cpu.predict(U_test), dev.get(here.predict(dev.put(U_test)))
        return {
            "M": M_eq,
            "N": N_eq,
            "max_rel_diff_predictions": float(np.abs(P_dev - P_cpu).max() / np.abs(P_cpu).max()),
        }

    _stage(report, "equality_small", equality_small, out)
    if alpha_sizes:
        _stage(
            report,
            "alpha_path",
            lambda: {"sizes": alpha_path(dev, U_train, V_train, alpha_sizes)},
            out,
        )
    if equal_full and "P" in kept:

        def equality_full():  # the CPU fit at the full size (M, N0): minutes on a many-core host
            t, cpu = timed(dev, lambda: model(N0).fit(U_train, V_train))
            P_cpu = cpu.predict(U_test)
            return {
                "M": M,
                "N": N0,
                "cpu_fit_seconds": t,
                "cpu_test_rel_l2": rel_l2(V_test, P_cpu),
                "max_rel_diff_predictions": float(
                    np.abs(kept["P"] - P_cpu).max() / np.abs(P_cpu).max()
                ),
            }

        _stage(report, "equality_full", equality_full, out)
    if select:

        def selection():
            from rfol_dask import RandomFeatureOperatorCV

            k = min(select, M)
            Us, Vs = dev.put(U_train[:k]), dev.put(V_train[:k])
            cv = RandomFeatureOperatorCV(
                n_features=min(N0, 2 * k), random_state=seed, device=device
            )
            t, cv = timed(dev, lambda: cv.fit(Us, Vs))
            best = {key: cv.best_params_[key] for key in cv.best_params_}
            t_fit, _ = timed(
                dev, lambda: RandomFeatureOperator(random_state=seed, **best).fit(Us, Vs)
            )
            P = dev.get(cv.predict(Ug_test))
            res = {
                "train": k,
                "search_seconds": t,
                "fit_seconds_best": t_fit,
                "search_over_fit": t / t_fit,
                "best_params": best,
                "best_score": cv.best_score_,
                "test_rel_l2": rel_l2(V_test, P),
                "candidates": len(cv.cv_results_["alpha"]),
            }
            if (
                device == "cuda"
            ):  # the same search on the host's cores, for the ratio (numpy in, device="cpu")
                t_cpu, cpu = timed(
                    dev,
                    lambda: RandomFeatureOperatorCV(
                        n_features=min(N0, 2 * k), random_state=seed
                    ).fit(U_train[:k], V_train[:k]),
                )
                errs = np.asarray(cv.cv_results_["mean_test_score"])
                cpu_errs = np.asarray(cpu.cv_results_["mean_test_score"])
                res.update(
                    {
                        "cpu_search_seconds": t_cpu,
                        "gpu_over_cpu_search": t / t_cpu,
                        "same_best_params": cpu.best_params_ == cv.best_params_,
                    }
                )
                if (
                    errs.shape == cpu_errs.shape
                ):  # candidates under the rounding floor are NaN (not scored)
                    scored = np.isfinite(errs) & np.isfinite(cpu_errs)
                    res["same_unscored"] = bool(
                        np.array_equal(np.isfinite(errs), np.isfinite(cpu_errs))
                    )
                    rel = np.abs(errs[scored] - cpu_errs[scored]) / np.abs(errs[scored])
                    # the largest sits at the smallest alphas, where rounding decides (cond ~ |G| /
                    # alpha)
                    res["max_rel_diff_validation_errors"] = float(np.max(rel)) if rel.size else None
                    res["median_rel_diff_validation_errors"] = (
                        float(np.median(rel)) if rel.size else None
                    )
            return res

        _stage(report, "selection", selection, out)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=1e-6)
    parser.add_argument(
        "--dask",
        action="store_true",
        help="also time the streamed dask dual (threads, numpy chunks)",
    )
    parser.add_argument(
        "--zarr",
        action="store_true",
        help="also time the fit from a Zarr store through a one-GPU dask worker (dask-cuda if "
        "installed)",
    )
    parser.add_argument(
        "--zarr-codecs",
        type=lambda t: t.split(","),
        default=["none"],
        metavar="none,zstd",
        help="codecs of the Zarr stores, one timed stage each (none: uncompressed, as rfol_dask "
        "stores its data sets; zstd: zarr's default)",
    )
    parser.add_argument(
        "--zarr-modes",
        type=lambda t: t.split(","),
        default=["auto"],
        metavar="auto,slabs",
        help="rfol_dask.device-features of the Zarr fits, one timed stage each (auto: the rows "
        "mode "
        "where the GPU has room; slabs: the slabs of the stacked rows)",
    )
    parser.add_argument(
        "--equal-full",
        action="store_true",
        help="also compare with the CPU fit at the full size and the first N (minutes on the host)",
    )
    parser.add_argument(
        "--select",
        type=int,
        default=0,
        metavar="SAMPLES",
        help="also time RandomFeatureOperatorCV's default search on this many training samples "
        "(on the device, then on the host's cores for the ratio)",
    )
    parser.add_argument(
        "--alpha-path",
        type=lambda t: [int(x) for x in t.split(",")],
        default=(),
        metavar="M,M",
        help="also time the ridge path's eigh against one Cholesky per alpha on the device at "
        "these Gram sizes (the break-even of tuning.eigh_pays)",
    )
    parser.add_argument(
        "--features",
        type=lambda t: [int(x) for x in t.split(",")],
        default=None,
        metavar="N,N",
        help="feature counts of the in-memory fits (default: the size's; the first is also the "
        "Zarr and equality fits')",
    )
    parser.add_argument(
        "--out", default=None, help="results JSON (default benchmarks/results/gpu_SIZE_DEVICE.json)"
    )
    args = parser.parse_args(argv)
    out = Path(
        args.out
        or Path(__file__).resolve().parent / "results" / f"gpu_{args.size}_{args.device}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    report = run(
        args.size,
        args.device,
        args.repeats,
        args.alpha,
        args.dask,
        zarr_mode=args.zarr,
        equal_full=args.equal_full,
        select=args.select,
        out=out,
        features=args.features,
        zarr_codecs=tuple(args.zarr_codecs),
        zarr_modes=tuple(args.zarr_modes),
        alpha_sizes=tuple(args.alpha_path),
    )
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()
