"""The figure of README.md's "Choosing gamma, alpha and N": error vs N with the median default and
with the parameters a validation search chose (on the training split only).

Data: the first ``--train`` + ``--test`` samples of the seed-0 data set (generated into
``benchmarks/results/data/subsets`` when missing). Steps:

1. ``RandomFeatureOperatorCV(n_features=--search-n, random_state=0)`` on the training samples
   (law x gamma x alpha on the last 20 % of them);
2. :func:`rfol_dask.curves.error_curves` (doubling N, ``--seeds`` seeds) with the chosen law,
   gamma and alpha, and with the defaults (Cauchy, ``gamma="median"``, alpha 1e-10);
3. ``benchmarks/results/choosing.png`` (error and fit time vs N) and ``choosing.json``.

    OPENBLAS_NUM_THREADS=1 python benchmarks/choosing.py  # burgers, 500 / 200, N 250-32000 (10 s)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from rfol_dask import RandomFeatureOperatorCV, curves
from rfol_dask.experiments import arrays, load_subset
from rfol_dask.metrics import relative_l2_error
from rfol_dask.plotting import plot_curves
from rfol_dask.tuning import median_gamma

HERE = Path(__file__).resolve().parent


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", nargs="?", default="burgers")
    parser.add_argument("--train", type=int, default=500)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--search-n", type=int, default=2000, help="N of the search")
    parser.add_argument("--stop", type=int, default=32000, help="largest N of the curves")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", default=str(HERE / "results" / "data"))
    parser.add_argument("--out", default=str(HERE / "results" / "choosing"))
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    train, test = load_subset(args.name, args.train, args.test, args.data)
    U, V = arrays(train)
    Ut, Vt = arrays(test)
    search = RandomFeatureOperatorCV(n_features=args.search_n, random_state=0).fit(U, V)
    best = search.best_params_
    print(
        f"search: {best}, validation error {-search.best_score_:.3e} ({search.search_time_:.1f} s)",
        flush=True,
    )
    ladder = curves.doubling(250, args.stop)
    seeds = range(args.seeds)
    settings = {
        "median default (Cauchy, alpha 1e-10)": dict(
            distribution="cauchy", gamma=median_gamma(U, "cauchy", random_state=0), alpha=1e-10
        ),
        f"searched ({best['distribution']}, alpha {best['alpha']:.0e})": dict(
            distribution=best["distribution"], gamma=best["gamma"], alpha=best["alpha"]
        ),
    }
    res = {
        "name": args.name,
        "train": len(U),
        "test": len(Ut),
        "search": {
            "n_features": args.search_n,
            "best_params": best,
            "validation_error": -search.best_score_,
            "search_s": search.search_time_,
            "test_error": relative_l2_error(Vt, search.predict(Ut)),
        },
        "curves": {},
    }
    for label, kw in settings.items():
        c = curves.error_curves(U, V, Ut, Vt, ladder, seeds=seeds, **kw)
        sat = c["slope"]["saturated_at"]
        res["curves"][label] = {
            "settings": kw,
            "n_features": c["n_features"].tolist(),
            "error": c["error"].tolist(),
            "fit_time": c["fit_time"].tolist(),
            "slope": c["slope"],
            "saturated_at": None if sat is None else int(sat),
        }
        mean = np.exp(np.log(c["error"]).mean(axis=0))
        print(
            f"{label}: error "
            + ", ".join(f"N={n}: {e:.3%}" for n, e in zip(c["n_features"], mean))
            + f"; saturated at N = {sat}",
            flush=True,
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_curves(
        out.with_suffix(".png"),
        res["curves"],
        title=f"{args.name}, {len(U)} train / {len(Ut)} test: error and fit time vs N",
    )
    res.update(wall_s=time.perf_counter() - t0, load_avg=os.getloadavg()[0])
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=float))
    print(f"{out.with_suffix('.png')} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
