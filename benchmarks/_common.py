"""Shared benchmark helpers: synthetic operator data, matmul rate, peak memory of a process tree."""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from rfol_dask.experiments.measure import PeakMemory  # noqa: F401  (the benchmarks import it from here)


def synthetic_operator(n_samples, n_points, seed=0, dtype=np.float64):
    """Smooth periodic inputs (20 Fourier modes) and outputs = heat smoothing + 0.3 u^2."""
    rng = np.random.default_rng(seed)
    x = np.arange(n_points) / n_points
    k = np.arange(1, 21)
    a = rng.standard_normal((n_samples, k.size)) / k
    basis = np.sin(2 * np.pi * np.outer(k, x))
    U = a @ basis
    V = (a * np.exp(-0.02 * k**2)) @ basis + 0.3 * U**2
    return U.astype(dtype), V.astype(dtype)


def matmul_rate(n=4000, repeats=3, dtype=np.float64):
    """Measured dense matrix-multiply rate in flop/s (median of ``repeats`` n x n products)."""
    a = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    a @ a
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def dual_flops(M, n, N, m):
    return 2 * M * n * N + M**2 * N + M**3 / 3 + 2 * M**2 * m + 2 * N * M * m


def primal_flops(M, n, N, m):
    return 2 * M * n * N + N**2 * M + N**3 / 3 + 2 * N**2 * m + 2 * N * M * m


def blas_info():
    from threadpoolctl import threadpool_info

    return [(i["internal_api"], i.get("architecture"), i["num_threads"]) for i in threadpool_info()]


def argv_or_usage(doc, n_positional, argv=None):
    """The script's arguments, or its docstring and an exit for ``-h`` / ``--help`` (status 0)
    and for fewer than ``n_positional`` positional arguments (status 2, the docstring on stderr)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        print(doc)
        raise SystemExit(0)
    if sum(not a.startswith("--") for a in argv) < n_positional:
        print(
            f"{doc}\nexpected at least {n_positional} positional arguments, got {argv}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return argv
