"""What a search costs against one fit of its winner (issue 36, items 2 to 4).

    OPENBLAS_NUM_THREADS=2 python benchmarks/search_cost.py cost 500,1000 results/search_cost.json
    OPENBLAS_NUM_THREADS=2 python benchmarks/search_cost.py growth 1200 results/search_growth.json
    OPENBLAS_NUM_THREADS=2 python benchmarks/search_cost.py metric all results/search_metric.json
    OPENBLAS_NUM_THREADS=2 python benchmarks/search_cost.py plan all results/search_plan.json DIR
    OPENBLAS_NUM_THREADS=2 python benchmarks/search_cost.py profile 5000:2500,1000:500 OUT
    OPENBLAS_NUM_THREADS=2 python benchmarks/search_cost.py errors 500:250,5000:2500 OUT

``cost``: for each ``M`` (training samples of the 64-point synthetic operator of ``_common``) and
``N = M / 2, M, 2 M, 5 M, 10 M`` (or the factors of ``M`` given as a fourth argument, e.g.
``0.5,1,2``), the default ``RandomFeatureOperatorCV(n_features=N)`` search
(``search_time_``, the median of 3, or of the searches given as a fifth argument) and one fit
of its winner (``RandomFeatureOperator(**best_params_)``), in the same run; the ratio of the two.
``growth``: ``RandomFeatureOperatorCV(n_features=2000, max_features=4000)`` against a plain search
at ``n_features=4000`` on ``M`` samples: seconds and validation error of each.
``plan``: the default plan (its fine stage on half of N) against the previous one (the fine stage
on all N), on the eight data sets' training samples (5 shuffled folds; ``all``: and three sizes of
the synthetic operator, default split) or the cases given: the winner's validation error and the
seconds of each.
``profile``: for each ``M:N``, the default search's wall time per stage (and scales scored), the
time in its ``syrk`` and ``potrf`` calls per stage, and one fit of its winner.
``errors``: for each ``M:N``, the default search with the alpha path's errors taken one alpha
at a time (as before they were batched) against the default, alternating, 5 of each: medians.
``metric``: on the eight data sets of ``refit_check.py`` (all their samples are training samples),
``pca_power=None`` against ``1.0`` scored on 5 shuffled folds of the training samples (refit
off): the validation error of each, fold by fold, and the seconds (a search with
``pca_power=(None, 1.0)`` costs the two).
"""

import contextlib
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _common import argv_or_usage, synthetic_operator
from refit_check import SIZES, load
from sklearn.model_selection import KFold

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV


def cost(M, factors=(0.5, 1, 2, 5, 10), path=None, repeats=3):
    """The search's seconds (the median of ``repeats`` searches) and one fit of its winner's at
    ``N = f M`` for each factor ``f``; each row is also appended to ``path`` + ``.jsonl`` as it
    comes (long runs keep what they measured)."""
    U, V = synthetic_operator(M, 64, seed=0)
    RandomFeatureOperatorCV(n_features=64, refit=False).fit(U[:100], V[:100])  # imports, warm-up
    rows = []
    for N in (int(f * M) for f in factors):
        searches = []
        for _ in range(repeats):
            cv = RandomFeatureOperatorCV(n_features=N, random_state=0, refit=False).fit(U, V)
            searches.append(cv.search_time_)
        fits = []  # at least 3, more for fits under a second (the median of up to 9)
        while len(fits) < 3 or (sum(fits) < 2 and len(fits) < 9):
            t0 = time.perf_counter()
            RandomFeatureOperator(**cv.best_params_, random_state=cv.random_state_).fit(U, V)
            fits.append(time.perf_counter() - t0)
        search, fit = statistics.median(searches), statistics.median(fits)
        rows.append({"M": M, "N": N, "search_s": search, "fit_s": fit, "ratio": search / fit})
        rows[-1] |= {"searches_s": searches, "fits_s": fits, "load_average": os.getloadavg()[0]}
        print(json.dumps(rows[-1]), flush=True)
        if path:
            with open(f"{path}.jsonl", "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    return rows


def previous_plan():
    """The plan before the fine stage took half of N: its features are all N (benchmark only)."""
    from rfol_dask.stages import StagedSearch

    own = StagedSearch._n_features

    def n_features(self, Ns, frac):
        fine = frac is not None and frac == self._st["fine"] != self._st["coarse"]
        return Ns if fine else own(self, Ns, frac)

    StagedSearch._n_features = n_features
    try:
        yield
    finally:
        StagedSearch._n_features = own


def plan(cases, data_dir):
    """The default plan against the previous one: each data set's training samples on 5 shuffled
    folds, each ``M:N`` of the synthetic operator on the default split."""
    out = []
    for case in cases:
        if ":" in case:
            M, N = map(int, case.split(":"))
            (U, V), kw = synthetic_operator(M, 64, seed=0), dict(n_features=N)
        else:
            (U, V), kw = (
                load(case, data_dir, "float64"),
                dict(cv=KFold(5, shuffle=True, random_state=0)),
            )
        row = {"case": case}
        for name, context in (("previous", previous_plan), ("default", contextlib.nullcontext)):
            with context():
                cv = RandomFeatureOperatorCV(random_state=0, refit=False, **kw).fit(U, V)
            row[name] = dict(validation=-cv.best_score_, search_s=cv.search_time_)
            row[name]["best_params"] = cv.best_params_
        row["ratio"] = row["default"]["validation"] / row["previous"]["validation"]
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def profile(sizes):
    """Seconds per stage of the default search, and in its Gram and Cholesky kernels."""
    from rfol_dask import linalg, stages

    out, clock = [], {}

    def timed(f, key):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                k = (clock["stage"], key)
                clock[k] = clock.get(k, 0.0) + time.perf_counter() - t0

        return run

    stage, syrk, potrf = stages.StagedSearch._stage, linalg.syrk, linalg.potrf_ridge
    linalg.syrk = timed(syrk, "syrk_s")
    linalg.potrf_ridge = timed(potrf, "potrf_s")

    def _stage(self, X, Y, splits, client, family, scales, *args):
        clock["stage"] = args[2]  # its name
        clock[(args[2], "scales")] = clock.get((args[2], "scales"), 0) + len(scales)
        return timed(stage, "wall_s")(self, X, Y, splits, client, family, scales, *args)

    stages.StagedSearch._stage = _stage
    U, V = synthetic_operator(100, 64, seed=0)
    RandomFeatureOperatorCV(n_features=64, refit=False).fit(U, V)  # imports, warm-up
    try:
        for M, N in sizes:
            clock.clear()
            U, V = synthetic_operator(M, 64, seed=0)
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            cv = RandomFeatureOperatorCV(n_features=N, random_state=0, refit=False).fit(U, V)
            r1, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            RandomFeatureOperator(**cv.best_params_, random_state=cv.random_state_).fit(U, V)
            r2 = resource.getrusage(resource.RUSAGE_SELF)
            row = {"M": M, "N": N, "search_s": cv.search_time_, "fit_s": time.perf_counter() - t0}
            for name, a, b in (("search", r0, r1), ("fit", r1, r2)):  # CPU seconds: user, system
                row[f"{name}_user_s"] = b.ru_utime - a.ru_utime
                row[f"{name}_sys_s"] = b.ru_stime - a.ru_stime
            row |= {f"{k[0]}_{k[1]}": v for k, v in clock.items() if isinstance(k, tuple)}
            out.append(row)
            print(json.dumps(row), flush=True)
    finally:
        stages.StagedSearch._stage, linalg.potrf_ridge = stage, potrf
        linalg.syrk = syrk
    return out


def errors(sizes, repeats=5):
    """The search with the alpha path one alpha at a time against the default (batched)."""
    from rfol_dask import tuning

    block, out = tuning.BLOCK_BYTES, []
    U, V = synthetic_operator(100, 64, seed=0)
    RandomFeatureOperatorCV(n_features=64, refit=False).fit(U, V)  # imports, warm-up
    try:
        for M, N in sizes:
            U, V = synthetic_operator(M, 64, seed=0)
            runs = {"one_by_one_s": [], "batched_s": []}
            for _ in range(repeats):
                # a block of 8 bytes holds no alpha's predictions: EigenPath.errors's old loop
                for key, tuning.BLOCK_BYTES in (("one_by_one_s", 8), ("batched_s", block)):
                    cv = RandomFeatureOperatorCV(n_features=N, random_state=0, refit=False)
                    runs[key].append(cv.fit(U, V).search_time_)
            row = {"M": M, "N": N, **{k[:-2]: statistics.median(v) for k, v in runs.items()}}
            row |= {"ratio": row["batched"] / row["one_by_one"], **runs}
            out.append(row)
            print(json.dumps(row), flush=True)
    finally:
        tuning.BLOCK_BYTES = block
    return out


def growth(M):
    """Growth to 4000 features against a plain search at 4000."""
    U, V = synthetic_operator(M, 64, seed=0)
    out = {}
    for name, kw in (
        ("grown", dict(n_features=2000, max_features=4000)),
        ("plain", dict(n_features=4000)),
    ):
        t0 = time.perf_counter()
        cv = RandomFeatureOperatorCV(random_state=0, refit=False, **kw).fit(U, V)
        out[name] = {"seconds": time.perf_counter() - t0, "validation": -cv.best_score_}
        out[name]["best_params"] = cv.best_params_
        print(name, json.dumps(out[name]), flush=True)
    return out


def metric(names, data_dir):
    """pca_power None against 1.0 on 5 shuffled folds of each data set's training samples."""
    out = {}
    for name in names:
        U, V = load(name, data_dir, "float64")
        folds = KFold(5, shuffle=True, random_state=0)
        out[name] = {}
        for q in (None, 1.0):
            t0 = time.perf_counter()
            cv = RandomFeatureOperatorCV(pca_power=q, cv=folds, random_state=0, refit=False)
            cv.fit(U, V)
            i = cv.best_index_
            splits = [-cv.cv_results_[f"split{k}_test_score"][i] for k in range(cv.n_splits_)]
            out[name][str(q)] = {
                "validation": -cv.best_score_,
                "folds": splits,
                "seconds": time.perf_counter() - t0,
            }
        a, b = (np.asarray(out[name][k]["folds"]) for k in ("None", "1.0"))
        out[name]["ratio_1_over_none"] = float(b.mean() / a.mean())
        out[name]["folds_1_better"] = int(np.sum(b < a))
        print(name, json.dumps(out[name]), flush=True)
    return out


def main(argv=None):
    args = argv_or_usage(__doc__, 3, argv)
    what, arg, path = args[:3]
    if what == "cost":
        factors = [float(f) for f in args[3].split(",")] if len(args) > 3 else (0.5, 1, 2, 5, 10)
        n = int(args[4]) if len(args) > 4 else 3
        res = [row for M in arg.split(",") for row in cost(int(M), factors, path, n)]
    elif what == "growth":
        res = growth(int(arg))
    elif what in ("profile", "errors"):
        sizes = [tuple(map(int, size.split(":"))) for size in arg.split(",")]
        res = profile(sizes) if what == "profile" else errors(sizes)
    elif what == "plan":
        extra = ["2000:1000", "5000:2500", "5000:5000"]
        cases = list(SIZES) + extra if arg == "all" else arg.split(",")
        res = plan(cases, args[3] if len(args) > 3 else "results/data_small")
    else:
        names = list(SIZES) if arg == "all" else arg.split(",")
        res = metric(names, args[3] if len(args) > 3 else "results/data_small")
    Path(path).write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
