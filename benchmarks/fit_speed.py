"""Fit speed against the flop bound and against plain numpy (issue: core solver).

Cases (n = m = 1024 grid points in and out):
  dual   M = 5000 samples,  N = 5000 Cauchy features
  primal M = 20000 samples, N = 4000 Cauchy features

For each: rfol_dask on numpy input (float64 and float32), plain numpy (the textbook formulas with
np.linalg.solve), and rfol_dask on dask input on a LocalCluster (data persisted on the workers
first). Times are medians of --repeats runs; the flop bound is the flop count of
docs/background/algorithms.md divided by the matrix-multiply rate measured in the same run; peak
memory is the growth of the resident memory of this process and its children (the LocalCluster
workers) during the first run.

    python benchmarks/fit_speed.py          # full sizes, writes benchmarks/results/fit_speed.json
    python benchmarks/fit_speed.py --quick         # small sizes, a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PeakMemory, blas_info, dual_flops, matmul_rate, primal_flops, synthetic_operator  # noqa: E402

from rfol_dask import RandomFeatureOperator  # noqa: E402
from rfol_dask.cluster import local_client  # noqa: E402

ALPHA = 1e-4


def median_heuristic_gamma(U, pairs=500, seed=0):
    """``1 / median ||u_i - u_j||_1`` over random pairs: kernel values of order exp(-1)."""
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(U), (2, pairs))
    return float(1.0 / np.median(np.abs(U[i] - U[j]).sum(axis=1)))


def plain_numpy_fit(U, V, omega, b, alpha, solver):
    """Textbook random-feature ridge with plain numpy (centred features, np.linalg.solve)."""
    N = omega.shape[1]
    A = np.sqrt(2.0 / N) * np.cos(U @ omega + b)
    mu, vbar = A.mean(axis=0), V.mean(axis=0)
    Ac, Vc = A - mu, V - vbar
    if solver == "dual":
        C = Ac.T @ np.linalg.solve(Ac @ Ac.T + alpha * np.eye(len(A)), Vc)
    else:
        C = np.linalg.solve(Ac.T @ Ac + alpha * np.eye(N), Ac.T @ Vc)
    return C, vbar - mu @ C


def timed(fn, repeats, memory=False):
    times, peak = [], None
    for r in range(repeats):
        if memory and r == 0:
            with PeakMemory() as pm:
                t0 = time.perf_counter()
                out = fn()
                times.append(time.perf_counter() - t0)
            peak = pm.increase
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), peak, out


def run_case(name, M, n, N, m, repeats, clusters):
    solver = name
    U, V = synthetic_operator(M, n, seed=0)
    Ut, Vt = synthetic_operator(500, n, seed=1)
    gamma = median_heuristic_gamma(U)
    rate = matmul_rate()
    flops = (dual_flops if solver == "dual" else primal_flops)(M, n, N, m)
    bound = flops / rate
    rows = {
        "case": name,
        "M": M,
        "n": n,
        "N": N,
        "m": m,
        "gamma": gamma,
        "alpha": ALPHA,
        "flops": flops,
        "matmul_gflops": rate / 1e9,
        "flop_bound_s": bound,
    }
    print(
        f"\n== {name}: M={M} n={n} N={N} m={m}; {flops / 1e9:.0f} Gflop, matmul {rate / 1e9:.0f} "
        "GF/s, "
        f"flop bound {bound:.2f} s",
        flush=True,
    )

    def model(**kw):
        return RandomFeatureOperator(
            n_features=N, gamma=gamma, alpha=ALPHA, solver=solver, random_state=0, **kw
        )

    t, peak, m64 = timed(lambda: model().fit(U, V), repeats, memory=True)
    rows["numpy_f64"] = {"time_s": t, "ratio_to_bound": t / bound, "peak_bytes": peak}
    print(
        f"rfol_dask numpy float64 : {t:7.2f} s  ({t / bound:.2f} x bound)  peak "
        f"+{peak / 2**30:.2f} GiB",
        flush=True,
    )

    c = m64.input_centre_  # the model's phases b_ are those of the inputs measured from it
    t, peak, (C, c0) = timed(
        lambda: plain_numpy_fit(U - c, V, m64.omega_, m64.b_, ALPHA, solver), repeats, memory=True
    )
    rows["plain_numpy"] = {"time_s": t, "ratio_to_bound": t / bound, "peak_bytes": peak}
    p_ref = (np.sqrt(2.0 / N) * np.cos((Ut - c) @ m64.omega_ + m64.b_)) @ C + c0
    p64 = m64.predict(Ut)
    rows["numpy_vs_plain_rel_diff"] = float(np.linalg.norm(p64 - p_ref) / np.linalg.norm(p_ref))
    print(
        f"plain numpy             : {t:7.2f} s  ({t / bound:.2f} x bound)  peak "
        f"+{peak / 2**30:.2f} GiB"
        f"  (predictions differ by {rows['numpy_vs_plain_rel_diff']:.1e})",
        flush=True,
    )

    U32, V32 = U.astype(np.float32), V.astype(np.float32)
    t32, peak, m32 = timed(lambda: model().fit(U32, V32), repeats, memory=True)
    p32 = m32.predict(Ut.astype(np.float32))
    err64 = float(np.mean(np.linalg.norm(p64 - Vt, axis=1) / np.linalg.norm(Vt, axis=1)))
    err32 = float(np.mean(np.linalg.norm(p32 - Vt, axis=1) / np.linalg.norm(Vt, axis=1)))
    diff = float(np.linalg.norm(p32 - p64) / np.linalg.norm(p64))
    rows["numpy_f32"] = {
        "time_s": t32,
        "ratio_to_f64": t32 / rows["numpy_f64"]["time_s"],
        "peak_bytes": peak,
        "pred_rel_diff_to_f64": diff,
        "test_error_f32": err32,
        "test_error_f64": err64,
    }
    print(
        f"rfol_dask numpy float32 : {t32:7.2f} s  ({t32 / rows['numpy_f64']['time_s']:.2f} x "
        "float64)  "
        f"predictions differ from float64 by {diff:.1e}; test error {err32:.4e} vs {err64:.4e}",
        flush=True,
    )

    for kind in clusters:
        workers, threads, processes = {"processes": (2, 1, True), "threads": (1, 2, False)}[kind]
        with local_client(
            n_workers=workers, threads_per_worker=threads, processes=processes
        ) as client:
            import dask.array as da

            Ud = da.from_array(U, chunks=(1000, -1)).persist()
            Vd = da.from_array(V, chunks=(1000, -1)).persist()
            client.wait_for_workers(workers)
            t, peak, md = timed(lambda: model().fit(Ud, Vd), repeats, memory=True)
            pd = md.predict(Ut)
            d = float(np.linalg.norm(pd - p64) / np.linalg.norm(p64))
            rows[f"dask_{kind}"] = {
                "time_s": t,
                "ratio_to_bound": t / bound,
                "peak_bytes": peak,
                "workers": workers,
                "threads_per_worker": threads,
                "pred_rel_diff_to_numpy": d,
            }
            print(
                f"rfol_dask dask {kind:9s}: {t:7.2f} s  ({t / bound:.2f} x bound)  peak "
                f"+{peak / 2**30:.2f} GiB"
                f"  ({workers} workers x {threads} threads; predictions differ from numpy by "
                f"{d:.1e})",
                flush=True,
            )
            client.cluster.close()
    return rows


def profile_case(solver, M, n, N, m):
    """Where the numpy fit spends its time: cProfile of one warm fit, top 10 by own time."""
    import cProfile
    import pstats

    U, V = synthetic_operator(M, n, seed=0)
    model = RandomFeatureOperator(
        n_features=N, gamma=median_heuristic_gamma(U), alpha=ALPHA, solver=solver, random_state=0
    )
    model.fit(U, V)  # warm-up
    prof = cProfile.Profile()
    prof.runcall(model.fit, U, V)
    print(f"\n== profile of the numpy float64 fit, {solver}: M={M} n={n} N={N} m={m}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(10)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--cases", default="dual,primal")
    parser.add_argument("--clusters", default="processes,threads")
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "results" / "fit_speed.json")
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only profile the numpy float64 fit of each case (cProfile, top functions)",
    )
    args = parser.parse_args(argv)
    sizes = {"dual": (5000, 1024, 5000, 1024), "primal": (20000, 1024, 4000, 1024)}
    if args.quick:
        sizes = {"dual": (600, 64, 800, 64), "primal": (2000, 64, 300, 64)}
    if args.profile:
        return [profile_case(c, *sizes[c]) for c in args.cases.split(",")]
    info = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "blas": blas_info(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "python": platform.python_version(),
    }
    print("machine:", info)
    results = [
        run_case(c, *sizes[c], args.repeats, [k for k in args.clusters.split(",") if k])
        for c in args.cases.split(",")
    ]
    if not args.quick:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps({"info": info, "results": results}, indent=1, default=str)
        )
        print(f"\nwrote {args.out}")
    return results


if __name__ == "__main__":
    main()
