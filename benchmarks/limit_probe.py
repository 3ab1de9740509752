"""Which gamma wins as N grows? (issue 10, the growth stage's limit anchor)

    OPENBLAS_NUM_THREADS=1 python benchmarks/limit_probe.py 5000 64000
    benchmarks/results/limit_probe_5000.json [--kernel]

On the first M training samples of the Navier-Stokes-high store (the 20000 / 2000 benchmark's
``results/data/navier_stokes_high_22000.zarr``; the search's default split, 80 / 20 % of these M,
no test data): rational-quadratic random features at gamma = 1.22e-4 (the multiple of the median
value the default search chose at N = 4000 on all 20000 samples) and 1/256 ... 1/4 of the median
value, scored at nested N = Nmax / 16, Nmax / 4, Nmax (one draw, one pass; alphas 1e-18 ... 1e-6,
a sketch of 512 output combinations). ``--kernel`` also runs ``KernelOperatorCV`` with the
inverse-quadratic kernel (the law's N -> infinity limit) over length scales 4^-1 ... 4^5 of the
median one and nuggets 1e-18 ... 1e-5, one stage.

    OPENBLAS_NUM_THREADS=2 python benchmarks/limit_probe.py --limit-rows 0.125,0.25
    benchmarks/results/limit_rows.json

``--limit-rows F1,F2,...``: the growth's limit stage alone, as ``RandomFeatureOperatorCV`` runs it
on all 20000 training samples (default split, search of 1.22e-4 x median at N = 4000, growth to
160000), with at least the fraction F of the 16000 training rows (``LIMIT_ROWS_FRACTION``) and the
gamma multiples 1/1024 ... 1/16 of the default grid: which gamma it would grow. A fourth
argument names another law than the rational quadratic one (e.g. ``gaussian``; ``student_t:5``
for a law with its ``nu``).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from rfol_dask import RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperatorCV

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import argv_or_usage  # noqa: E402
from scale_ns import ns_data  # noqa: E402


def best_per(res, keys):
    """Best validation error (and its ridge) per value of ``keys`` of a ``cv_results_`` table."""
    err = np.asarray(res["mean_relative_l2"], dtype=float)
    ridge = np.asarray(res["alpha"] if "alpha" in res else res["nugget"])
    groups = {}
    for i, key in enumerate(zip(*(np.asarray(res[k]) for k in keys))):
        if np.isfinite(err[i]) and err[i] < groups.get(key, (np.inf,))[0]:
            groups[key] = (float(err[i]), float(ridge[i]))
    return {
        " ".join(f"{k}={float(v):.4g}" for k, v in zip(keys, key)): v
        for key, v in sorted(groups.items())
    }


def _training_samples(M):
    """The first M samples of the Navier-Stokes-high store (made when missing), in memory."""
    ds = ns_data(HERE / "results" / "data" / "navier_stokes_high_22000.zarr", 20000, 2000, 2)
    return ds.isel(sample=slice(0, M)).load()


class LimitStageOnly(RandomFeatureOperatorCV):
    """The limit stage of a search whose N = 4000 winner is given: no search, no growth."""

    def _search(self, X, Y, splits, client):
        return self._limit_stage(X, Y, splits, client, {"n_features": 4000})

    def _extend(self, X, Y, splits, client, rows):
        return []


def limit_rows(fractions, out, law="rational_quadratic"):
    """The limit stage's choice per ``LIMIT_ROWS_FRACTION`` (see the module docstring); ``law``
    may carry its ``nu`` after a colon (``"student_t:5"``)."""
    import rfol_dask.rf_operator_cv as cv_module

    law, _, nu = law.partition(":")
    nu = float(nu) if nu else None
    train = _training_samples(20000)
    rows = []
    for frac in fractions:
        cv_module.LIMIT_ROWS_FRACTION = frac
        t0 = time.perf_counter()
        cv = LimitStageOnly(
            n_features=4000,
            max_features=160000,
            distributions=(law,),
            nu=nu,
            gammas=(1.220703125e-4,),
            alphas=tuple(10.0 ** np.arange(-18, -3)),
            stages={
                "coarse": None,
                "limit_gammas": tuple(4.0 ** np.arange(-5, -1)),
                "score_outputs": 512,
            },
            random_state=0,
            refit=False,
        ).fit(train)
        res = cv.cv_results_
        rows.append(
            {
                "law": law,
                "nu": nu,
                "fraction": frac,
                "n_train_rows": int(res["n_train_rows"][0]),
                "n_features": int(res["n_features"][0]),
                "best": best_per(res, ("scale_multiple",)),
                "seconds": time.perf_counter() - t0,
            }
        )
        print(json.dumps(rows[-1], indent=1), flush=True)
    out.write_text(json.dumps({"limit_rows": rows}, indent=1))


def main(argv=None):
    argv = argv_or_usage(__doc__, 2, argv)
    if argv[0] == "--limit-rows":
        return limit_rows([float(f) for f in argv[1].split(",")], Path(argv[2]), *argv[3:4])
    M, N_max, out = int(argv[0]), int(argv[1]), Path(argv[2])
    train = _training_samples(M)
    row = {"M": M, "N": [N_max // 16, N_max // 4, N_max]}
    t0 = time.perf_counter()
    rf = RandomFeatureOperatorCV(
        distributions=("rational_quadratic",),
        stages={"coarse": None, "score_outputs": 512},
        n_features=row["N"],
        gammas=(1.220703125e-4, 1 / 256, 1 / 64, 1 / 16, 1 / 4),
        alphas=tuple(10.0 ** np.arange(-18, -5)),
        random_state=0,
        refit=False,
    ).fit(train)
    row["rf"] = {
        "best": best_per(rf.cv_results_, ("scale_multiple", "n_features")),
        "median_gamma": rf.median_scales_["rational_quadratic"],
        "seconds": time.perf_counter() - t0,
    }
    print(json.dumps(row["rf"], indent=1), flush=True)
    if "--kernel" in argv:
        t0 = time.perf_counter()
        kern = KernelOperatorCV(
            kernels=("inverse_quadratic",),
            length_scales=tuple(4.0 ** np.arange(-1, 6)),
            nuggets=tuple(10.0 ** np.arange(-18, -4)),
            stages={"coarse": None},
            refit=False,
        ).fit(train)
        row["kernel"] = {
            "best": best_per(kern.cv_results_, ("length_scale",)),
            "median_length_scale": kern.median_scales_["inverse_quadratic"],
            "seconds": time.perf_counter() - t0,
        }
        print(json.dumps(row["kernel"], indent=1), flush=True)
    out.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
