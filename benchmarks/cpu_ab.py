"""CPU timings for before / after comparisons of the code: run alternately from two checkouts,

    PYTHONPATH=<checkout> python benchmarks/cpu_ab.py search   # the default CV searches
    PYTHONPATH=<checkout> python benchmarks/cpu_ab.py stream   # the dask fits (local threads)
    PYTHONPATH=<checkout> python benchmarks/cpu_ab.py cluster  # dask fits, search: LocalCluster

``search``: RandomFeatureOperatorCV (n_features=1000) and KernelOperatorCV on 2000 synthetic smooth
1-D samples (256 points in and out). ``stream``: the streamed dask dual (N = 6000) and the dask
primal (N = 1500) on 2000 random samples of 1024 points in and out, chunks of 500 rows, dask's
threaded scheduler. ``cluster``: the same two fits and ``RandomFeatureOperatorCV(n_features=1000)``
on ``search``'s data as dask arrays (chunks of 500 rows), on a LocalCluster of 2 worker processes x
1 thread started first (not timed). One line of JSON per run: the times (and the searches' winners).
"""

import json
import time

import numpy as np


def _smooth(M=2000, n=256):
    """``search``'s data: smooth 1-D fields (M, n) and a pointwise map of them."""
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, n, endpoint=False)
    c = rng.standard_normal((M, 8)) / (1 + np.arange(8))
    U = sum(c[:, [k]] * np.sin(2 * np.pi * (k + 1) * x) for k in range(8))
    return U, np.tanh(U) + 0.3 * U**2


def search():
    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperatorCV

    U, V = _smooth()
    out = {}
    t = time.perf_counter()
    rf = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(U, V)
    out["rf_cv"] = time.perf_counter() - t
    t = time.perf_counter()
    kc = KernelOperatorCV().fit(U, V)
    out["kernel_cv"] = time.perf_counter() - t
    out["rf_best"], out["kernel_best"] = rf.best_params_, kc.best_params_
    return out


def stream():
    import dask.array as da

    from rfol_dask import RandomFeatureOperator

    rng = np.random.default_rng(0)
    M, n = 2000, 1024
    U = rng.standard_normal((M, n))
    V = np.tanh(U @ rng.standard_normal((n, n)) / 32)
    Ud, Vd = da.from_array(U, chunks=(500, -1)), da.from_array(V, chunks=(500, -1))
    out = {}
    for solver, N in (("dual", 6000), ("primal", 1500)):
        t = time.perf_counter()
        RandomFeatureOperator(
            n_features=N, gamma=1e-3, alpha=1e-6, random_state=0, solver=solver
        ).fit(Ud, Vd)
        out[solver] = time.perf_counter() - t
    return out


def cluster():
    import dask.array as da
    from distributed import Client, LocalCluster

    from rfol_dask import RandomFeatureOperatorCV

    U, V = _smooth()
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as c,
        Client(c),
    ):
        out = stream()
        t = time.perf_counter()
        cv = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(
            da.from_array(U, chunks=(500, -1)), da.from_array(V, chunks=(500, -1))
        )
        out["rf_cv"], out["rf_best"] = time.perf_counter() - t, cv.best_params_
    return out


if __name__ == "__main__":
    from _common import argv_or_usage

    argv = argv_or_usage(__doc__, 0)
    what = argv[0] if argv else "search"
    if what not in ("search", "stream", "cluster"):
        raise SystemExit(f"unknown case {what!r}: search, stream or cluster")
    print(
        json.dumps({"search": search, "stream": stream, "cluster": cluster}[what](), default=float)
    )
