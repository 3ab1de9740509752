"""The 20000-sample Navier-Stokes fit from Zarr on a LocalCluster: error, wall time against the flop
bound, bytes moved between workers, peak memory of all processes (issue: scale out).

    python benchmarks/scale_ns.py --case n20000     # N = 20000 Cauchy features, dual
    python benchmarks/scale_ns.py --case n20000 --workers 1 --threads-per-worker 2  # 1 worker
    python benchmarks/scale_ns.py --case n150000    # N = 150000 features on the same samples
    python benchmarks/scale_ns.py --case primal  # synthetic M = 200000, N = 8000, primal, from Zarr

The data set (20000 train + 2000 test, 64 x 64) is generated once into --data with
`rfol-dask generate navier_stokes_high` semantics and reused. Results are appended to
results/scale_ns.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PeakMemory, blas_info, dual_flops, matmul_rate, primal_flops  # noqa: E402

from rfol_dask import RandomFeatureOperator, datasets  # noqa: E402
from rfol_dask.cluster import local_client  # noqa: E402
from rfol_dask.metrics import relative_l2_error  # noqa: E402

HERE = Path(__file__).resolve().parent


def ns_data(path, n_train, n_test, workers):
    try:
        ds = datasets.open(path)
        if ds.sizes["sample"] == n_train + n_test:
            return ds
    except (FileNotFoundError, ValueError):
        pass
    with local_client(n_workers=workers) as client:
        t0 = time.perf_counter()
        ds = datasets.generate(
            "navier_stokes_high",
            n_train + n_test,
            store=path,
            seed=0,
            client=client,
            block_size=500,
            progress=True,
        )
        print(
            f"generated {n_train + n_test} samples in {time.perf_counter() - t0:.0f} s", flush=True
        )
        client.cluster.close()
    return ds


def synthetic_store(path, M, n, m, chunk):
    """A smooth synthetic operator data set of M samples written to Zarr in chunks (never whole)."""
    import xarray as xr
    import zarr

    if Path(path).exists():
        return xr.open_zarr(path)
    x = np.arange(n) / n
    k = np.arange(1, 21)
    basis = np.sin(2 * np.pi * np.outer(k, x))
    g = zarr.open_group(str(path), mode="w")
    for name, width in (("input", n), ("output", m)):
        g.create_array(
            name,
            shape=(M, width),
            chunks=(chunk, width),
            dtype="f8",
            dimension_names=("sample", f"{name}_point"),
        )
    for s in range(0, M, chunk):
        a = np.random.default_rng(s).standard_normal((min(chunk, M - s), k.size)) / k
        U = a @ basis
        g["input"][s : s + len(a)] = U
        g["output"][s : s + len(a)] = ((a * np.exp(-0.02 * k**2)) @ basis + 0.3 * U**2)[:, :m]
    return xr.open_zarr(path)


def bytes_moved(client):
    """Bytes received by all workers so far (distributed's transfer bookkeeping)."""

    def incoming(dask_worker):
        return sum(t.get("total", 0) for t in dask_worker.transfer_incoming_log)

    return sum(client.run(incoming).values())


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--case", choices=["n20000", "n150000", "primal"], default="n20000")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--memory-limit", default="11GB", help="per worker")
    p.add_argument("--threads-per-worker", type=int, default=1)
    p.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads of each worker process (the Gram chain and factorisation set their own)",
    )
    p.add_argument(
        "--no-processes",
        dest="processes",
        action="store_false",
        help="workers as threads of this process (LocalCluster(processes=False))",
    )
    p.add_argument("--data", default=str(HERE / "results" / "data"))
    p.add_argument("--out", default=str(HERE / "results" / "scale_ns.json"))
    args = p.parse_args(argv)
    Path(args.data).mkdir(parents=True, exist_ok=True)

    if args.case == "primal":
        M, n, m, N = 200_000, 256, 256, 8000
        ds = synthetic_store(Path(args.data) / "synthetic_200000.zarr", M + 2000, n, m, chunk=5000)
        train, test = ds.isel(sample=slice(0, M)), ds.isel(sample=slice(M, None))
        params = dict(n_features=N, gamma=1.0 / 60, alpha=1e-4, solver="primal")
        flops = primal_flops(M, n, N, m)
    else:
        ds = ns_data(Path(args.data) / "navier_stokes_high_22000.zarr", 20000, 2000, args.workers)
        train, test = ds.isel(sample=slice(0, 20000)), ds.isel(sample=slice(20000, None))
        N = 20000 if args.case == "n20000" else 150000
        params = dict(n_features=N, gamma=1e-4, alpha=1e-12, solver="dual")
        M, n, m = 20000, 4096, 4096
        flops = dual_flops(M, n, N, m)
    rate = matmul_rate()
    bound = flops / rate
    print(
        f"{args.case}: M={M} n={n} m={m} N={N}: {flops / 1e12:.1f} Tflop, matmul {rate / 1e9:.0f} "
        "GF/s, "
        f"flop bound {bound:.0f} s",
        flush=True,
    )
    with local_client(
        n_workers=args.workers,
        threads_per_worker=args.threads_per_worker,
        memory_limit=args.memory_limit,
        processes=args.processes,
        blas_threads=args.blas_threads,
    ) as client:
        moved0 = bytes_moved(client)
        with PeakMemory(interval=0.05) as pm:
            t0 = time.perf_counter()
            model = RandomFeatureOperator(
                distribution="cauchy", random_state=0, progress=True, **params
            )
            model.fit(train)
            fit_s = time.perf_counter() - t0
        moved = bytes_moved(client) - moved0
        pred = model.predict(test["input"])
        err = relative_l2_error(test["output"], pred)
        client.cluster.close()
    row = {
        "case": args.case,
        "M": M,
        "n": n,
        "m": m,
        "N": N,
        "workers": args.workers,
        "threads_per_worker": args.threads_per_worker,
        "processes": args.processes,
        "blas": blas_info(),
        "memory_limit": args.memory_limit,
        "blas_threads": args.blas_threads,
        "fit_s": fit_s,
        "flop_bound_s": bound,
        "ratio": fit_s / bound,
        "matmul_gflops": rate / 1e9,
        "peak_bytes_all_processes": pm.peak,
        "peak_increase_bytes": pm.increase,
        "bytes_moved_between_workers": moved,
        "test_error": err,
        "solver": model.solver_,
    }
    print(json.dumps(row, indent=1), flush=True)
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps(rows + [row], indent=1))


if __name__ == "__main__":
    main()
