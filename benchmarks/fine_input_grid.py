"""Predicting from a fine input grid: the memory and time of resampling one sample onto a
model's 64-point training grid, by the length ``n`` of the input grid. Each axis map of the
interpolation kinds is ``n_out x n_in`` (here 64 x n); it used to be built by interpolating
``eye(n)``, an ``n x n`` array and a spline solve.

One run per process (the peak RSS is the process's):

    python benchmarks/fine_input_grid.py 8000 periodic
    python benchmarks/fine_input_grid.py 8000 open
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from rfol_dask import RandomFeatureOperator


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int, help="points of the input grid")
    p.add_argument("grid", choices=("periodic", "open"), help="a periodic axis or an open one")
    args = p.parse_args(argv)
    n, kind = args.n, args.grid
    periodic = kind == "periodic"
    x = np.arange(64) / 64
    U = np.random.default_rng(0).standard_normal((40, 64))
    model = RandomFeatureOperator(n_features=100, random_state=0).fit(
        U, U, input_grid=[x], output_grid=[x], periods=1.0 if periodic else None
    )
    g = np.arange(n) / n if periodic else np.linspace(0, 63 / 64, n)
    X = np.sin(2 * np.pi * g)[None] + 0.1 * np.cos(6 * np.pi * g)[None]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    model.predict(X, input_grid=[g])
    seconds = time.perf_counter() - t0
    extra = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # KiB -> MiB
    print(
        json.dumps(
            {
                "n": n,
                "grid": kind,
                "extra_peak_rss_mib": round(extra, 1),
                "seconds": round(seconds, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
