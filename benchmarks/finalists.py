"""Does the coarse stage pick the law that wins at full size? (issue 10, the search's finalists)

    OPENBLAS_NUM_THREADS=1 python benchmarks/finalists.py all results/finalists.json
    OPENBLAS_NUM_THREADS=1 python benchmarks/finalists.py all results/finalists_default.json
    --default

Without ``--default``: on each set, at the size of its full reproduction
(``results/reproduce/<set>.json``: train / test samples and the tuned row's N), the default search
with every law in the fine stage (``finalists=3`` and no tie rule: ``stages.FINALIST_TIE = inf``;
no refit), the coarse and fine best validation errors per law, and the test error of each law's fine
best refitted at N. With ``--default``: the default ``RandomFeatureOperatorCV`` (refitted) against
the reproduction's recorded ``rf_tuned`` row: chosen parameters, test error, the laws that reached
the fine stage, seconds. ``all``: the eight sets the full reproduction ran on this machine.
"""

import json
import time
from pathlib import Path

import numpy as np
from _common import argv_or_usage

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, stages
from rfol_dask.experiments import arrays, load_subset
from rfol_dask.metrics import relative_l2_error

HERE = Path(__file__).resolve().parent
ALL = (
    "advection1,advection2,advection3,burgers,darcy,helmholtz_low,structural_mechanics_low,"
    "navier_stokes_low"
)


TIE = stages.FINALIST_TIE


def one(name, default):
    rec = json.loads((HERE / "results" / "reproduce" / f"{name}.json").read_text())
    tuned = rec["fits"]["methods"]["rf_tuned"]
    N = int(tuned["best_params"]["n_features"])
    train, test = load_subset(name, int(rec["train"]), int(rec["test"]), HERE / "results" / "data")
    (U, V), (Ut, Vt) = arrays(train), arrays(test)
    stages.FINALIST_TIE = TIE if default else np.inf
    t0 = time.perf_counter()
    cv = RandomFeatureOperatorCV(
        n_features=N,
        random_state=0,
        **({} if default else {"stages": {"finalists": 3}, "refit": False}),
    )
    cv.fit(U, V)
    res = cv.cv_results_
    stage, fam, err = (np.asarray(res[k]) for k in ("stage", "family", "mean_relative_l2"))
    row = {"seconds": time.perf_counter() - t0, "fine_laws": sorted(set(fam[stage == "fine"]))}
    if default:
        return {
            **row,
            "test": relative_l2_error(Vt, cv.predict(Ut)),
            "best_params": cv.best_params_,
            "recorded_test": tuned["error"],
            "recorded_params": tuned["best_params"],
        }
    for s in ("coarse", "fine"):
        row[s] = {
            f: float(np.nanmin(err[(stage == s) & (fam == f)]))
            for f in sorted(set(fam[stage == s]))
        }
    row["test"] = {}
    for f in row["fine"]:
        i = np.flatnonzero((stage == "fine") & (fam == f))
        j = i[np.nanargmin(err[i])]
        model = RandomFeatureOperator(
            n_features=N,
            distribution=f,
            gamma=float(res["gamma"][j]),
            alpha=float(res["alpha"][j]),
            random_state=0,
        ).fit(U, V)
        row["test"][f] = relative_l2_error(Vt, model.predict(Ut))
    return row


def main(argv=None):
    argv = argv_or_usage(__doc__, 2, argv)
    default = "--default" in argv
    names, out = [a for a in argv if a != "--default"]
    results = {}
    for name in (ALL if names == "all" else names).split(","):
        results[name] = one(name, default)
        print(name, json.dumps(results[name], default=str), flush=True)
    Path(out).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
