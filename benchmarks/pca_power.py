"""Choosing ``pca_power`` on Navier-Stokes high from training samples only (issue 10).

For each power, a ``RandomFeatureOperatorCV(pca_power=q)`` search on the first ``M`` training
samples of the 22000-sample store (its own validation split: the last 20 % of them), refit off;
prints and writes the validation error and the chosen law, gamma and alpha per power. The
test samples (20000 onwards) are never read.

    OPENBLAS_NUM_THREADS=2 python benchmarks/pca_power.py 5000 16000 none,0.5,0.75,1,1.5,2,3 results/pca_power_16000.json
    OPENBLAS_NUM_THREADS=2 python benchmarks/pca_power.py 5000 64000 1,1.5 results/pca_power_64000.json gaussian
    OPENBLAS_NUM_THREADS=2 python benchmarks/pca_power.py 3000 kernel none,0.75,-0.5 results/pca_power_kernel.json

``kernel`` in place of N: the exact kernel (``KernelOperatorCV``, RBF, Matern 5/2 and inverse
quadratic) on the same metric, applied by hand: the inputs' principal coordinates (from the
rows the search trains on) times ``(s_j / s_1)^q``; ``none`` there is the plain distance.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from _common import argv_or_usage
from limit_probe import _training_samples

from rfol_dask import RandomFeatureOperatorCV


def kernel(ds, M, powers, out):
    """The exact-kernel probe (see the module docstring)."""
    from rfol_dask.baselines import KernelOperatorCV
    from rfol_dask.tuning import pca_metric

    U, V = ds["input"].values.reshape(M, -1), ds["output"].values.reshape(M, -1)
    n_fit = int(round(0.8 * M))  # the rows the search trains on (its validation: the last 20 %)
    res = {"M": M, "model": "KernelOperatorCV", "powers": {}}
    for q in powers:
        X = U if q is None else (U - U[:n_fit].mean(axis=0)) @ pca_metric(U[:n_fit], q)
        t0 = time.perf_counter()
        cv = KernelOperatorCV(kernels=("rbf", "matern52", "inverse_quadratic"), refit=False).fit(
            X, V
        )
        res["powers"][str(q)] = {
            "validation_error": -cv.best_score_,
            "best_params": cv.best_params_,
            "seconds": time.perf_counter() - t0,
        }
        print(q, json.dumps(res["powers"][str(q)], default=float), flush=True)
        out.write_text(json.dumps(res, indent=1, default=float))
    return res


def main(argv=None):
    argv = argv_or_usage(__doc__, 4, argv)
    M = int(argv[0])
    powers = [None if p == "none" else float(p) for p in argv[2].split(",")]
    if argv[1] == "kernel":
        return kernel(_training_samples(M), M, powers, Path(argv[3]))
    N = int(argv[1])
    out = Path(argv[3])
    laws = {"distributions": tuple(argv[4].split(","))} if len(argv) > 4 else {}
    ds = _training_samples(M)
    res = {"M": M, "N": N, "laws": laws.get("distributions", "default"), "powers": {}}
    for q in powers:
        t0 = time.perf_counter()
        cv = RandomFeatureOperatorCV(
            n_features=N,
            pca_power=q,
            random_state=0,
            refit=False,
            stages={"score_outputs": 512},
            **laws,
        ).fit(ds)
        res["powers"][str(q)] = {
            "validation_error": -cv.best_score_,
            "best_params": cv.best_params_,
            "median_scales": cv.median_scales_,
            "seconds": time.perf_counter() - t0,
        }
        print(q, json.dumps(res["powers"][str(q)], default=float), flush=True)
        out.write_text(json.dumps(res, indent=1, default=float))
    return res


if __name__ == "__main__":
    main()
