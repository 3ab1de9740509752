"""Shared benchmark helpers: synthetic operator data, matmul rate, peak memory of a process tree."""

from __future__ import annotations

import os
import statistics
import threading
import time

import numpy as np
import psutil


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


class PeakMemory:
    """Peak resident memory of this process and its children (e.g. LocalCluster workers),
    sampled every ``interval`` seconds, minus the resident memory at entry."""

    def __init__(self, interval=0.005):
        self.interval = interval
        self.peak = 0

    def _rss(self):
        proc = psutil.Process(os.getpid())
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self):
        self.base = self._rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())
        self.increase = self.peak - self.base
        return False


def blas_info():
    from threadpoolctl import threadpool_info

    return [(i["internal_api"], i.get("architecture"), i["num_threads"]) for i in threadpool_info()]
