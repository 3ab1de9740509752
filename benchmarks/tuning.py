"""Model selection on the quick-reproduction data sets (issue 10): paper settings vs tuned models.

For each data set (the training / test samples of ``reproduce.py --quick``: the first samples of
the seed-0 data, generated when missing), with ``N`` = the paper's feature count capped at
``--max-features`` (2000, as ``--quick``):

- RF Cauchy and RF Gaussian with the paper's (gamma, alpha), and the defaults (``gamma="median"``);
- RF tuned: :class:`rfol_dask.RandomFeatureOperatorCV` (law x gamma x alpha on a validation split
  of the training set), refitted at the chosen N;
- kernel tuned: :class:`rfol_dask.baselines.KernelOperatorCV` (kernel x length scale x nugget).

Selection sees the training split only; the test split only scores the refitted winners. The
search cost is reported relative to one fit at the chosen setting on the same data (the refit,
timed in the same run). Results go to ``benchmarks/results/tuning.json``; a markdown table is
printed. ``--alpha-path`` measures the ridge path instead: one ``eigh`` of an M x M Gram against
one Cholesky factorisation (+ solve) per alpha.

    python benchmarks/tuning.py burgers,navier_stokes_low --threads 1
    python benchmarks/tuning.py --alpha-path 2000,4000 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from reproduce import QUICK, QUICK_TRAIN, _arrays, load_subset  # noqa: E402

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, datasets  # noqa: E402
from rfol_dask.baselines import KernelOperatorCV  # noqa: E402
from rfol_dask.metrics import relative_l2_error  # noqa: E402

OUT = HERE / "results" / "tuning.json"


def timed_fit(model, U, V):
    t0 = time.perf_counter()
    model.fit(U, V)
    return time.perf_counter() - t0


def run_set(name, n_train, n_test, max_features, data_dir):
    """All models on one data set; returns the result dict."""
    paper = datasets.get(name).paper
    train, test = load_subset(name, n_train, n_test, data_dir)
    U, V = _arrays(train)
    Ut, Vt = _arrays(test)
    N = min(int(paper["n_features"]), max_features)
    rows = {}
    for law in ("cauchy", "gaussian"):
        for label, gamma, alpha in ((f"rf_{law}_paper", paper["gamma"], paper["alpha"]),
                                    (f"rf_{law}_median", "median", 1e-10)):
            model = RandomFeatureOperator(n_features=N, distribution=law, gamma=gamma, alpha=alpha, random_state=0)
            fit_s = timed_fit(model, U, V)
            rows[label] = {"error": relative_l2_error(Vt, model.predict(Ut)), "fit_s": fit_s, "n_features": N,
                           "gamma": model.gamma_, "alpha": alpha}
    for label, search in (("rf_tuned", RandomFeatureOperatorCV(n_features=N, random_state=0)),
                          ("kernel_tuned", KernelOperatorCV())):
        search.fit(U, V)
        res = search.cv_results_
        rows[label] = {"error": relative_l2_error(Vt, search.predict(Ut)), "best_params": search.best_params_,
                       "validation_error": -search.best_score_, "search_s": search.search_time_,
                       "refit_s": search.refit_time_, "cost_ratio": search.search_time_ / search.refit_time_,
                       "candidates": int(len(res["mean_test_score"])),
                       "stages": sorted({str(s) for s in res["stage"]})}
    for label, row in rows.items():
        extra = (f"  search {row['search_s']:.2f} s = {row['cost_ratio']:.1f} x refit  {row['best_params']}"
                 if "search_s" in row else f"  fit {row['fit_s']:.2f} s")
        print(f"  {name:26s} {label:18s} error {row['error']:.3e}{extra}", flush=True)
    return {"name": name, "train": len(U), "test": len(Ut), "n_features": N, "paper": paper, "methods": rows}


def render(results):
    """Markdown table of the tuned vs paper-settings errors."""
    lines = ["| data set | train / test | N | RF paper (Cauchy / Gaussian) | RF median default (C / G) | RF tuned "
             "| kernel tuned | RF tuned / kernel tuned | RF search cost (x refit) | kernel search cost (x refit) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.values():
        m = r["methods"]
        tuned, kern = m["rf_tuned"], m["kernel_tuned"]
        bp = tuned["best_params"]
        lines.append(
            f"| {r['name']} | {r['train']} / {r['test']} | {r['n_features']} | "
            f"{m['rf_cauchy_paper']['error']:.3%} / {m['rf_gaussian_paper']['error']:.3%} | "
            f"{m['rf_cauchy_median']['error']:.3%} / {m['rf_gaussian_median']['error']:.3%} | "
            f"{tuned['error']:.3%} ({bp['distribution']}, gamma {bp['gamma']:.3g}, alpha {bp['alpha']:.0e}) | "
            f"{kern['error']:.3%} ({kern['best_params']['kernel']}) | {tuned['error'] / kern['error']:.2f} | "
            f"{tuned['cost_ratio']:.1f} | {kern['cost_ratio']:.1f} |")
    return "\n".join(lines)


def alpha_path(sizes, n_alphas=14, m=64, seed=0):
    """Seconds of one ``eigh`` (+ the two products of the path) vs one Cholesky + solve per alpha,
    on the centred random-feature Gram of smooth synthetic data (M x M, N = M features)."""
    from _common import synthetic_operator

    from rfol_dask.features import draw_frequencies, feature_map
    from rfol_dask.linalg import cho_solve, cholesky
    from rfol_dask.tuning import EigenPath

    out = []
    for M in sizes:
        U, V = synthetic_operator(M + M // 4, 64, seed=seed)
        V = V[:, :m]
        omega, b = draw_frequencies(U.shape[1], M, "cauchy", 0.05, None, seed)
        A = feature_map(U, omega, b)
        A -= A[:M].mean(axis=0)
        G, K = A[:M] @ A[:M].T, A[M:] @ A[:M].T
        t0 = time.perf_counter()
        path = EigenPath(np.asfortranarray(G), K, V[:M])
        t_eigh = time.perf_counter() - t0
        t0 = time.perf_counter()
        path.errors(10.0 ** np.arange(-12, -12 + n_alphas), V[M:])
        t_alphas = time.perf_counter() - t0
        G = A[:M] @ A[:M].T
        t0 = time.perf_counter()
        L, _ = cholesky(np.asfortranarray(G), 1e-6)
        K @ cho_solve(L, V[:M] - V[:M].mean(axis=0))
        t_chol = time.perf_counter() - t0
        row = {"M": M, "eigh_s": t_eigh, "path_all_alphas_s": t_alphas, "cholesky_solve_s": t_chol,
               "n_alphas": n_alphas, "break_even_alphas": t_eigh / t_chol,
               "eigh_total_s": t_eigh + t_alphas, "cholesky_total_s": n_alphas * t_chol}
        print(f"  M = {M:6d}: eigh + path {t_eigh:.2f} + {t_alphas:.2f} s; Cholesky + solve {t_chol:.2f} s per "
              f"alpha ({n_alphas} alphas: {n_alphas * t_chol:.2f} s); break-even at {t_eigh / t_chol:.1f} alphas",
              flush=True)
        out.append(row)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="?", default="burgers,navier_stokes_low",
                        help="comma-separated data sets (the quick sizes of reproduce.py), or 'all'")
    parser.add_argument("--train", type=int, default=None, help="training samples (default: the quick size)")
    parser.add_argument("--test", type=int, default=QUICK["test"])
    parser.add_argument("--max-features", type=int, default=QUICK["max_features"])
    parser.add_argument("--data", default=str(HERE / "results" / "data"))
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads of the factorisations (dask config rfol_dask.factor-threads)")
    parser.add_argument("--alpha-path", default=None, help="comma-separated Gram sizes M: time eigh vs Cholesky")
    args = parser.parse_args(argv)
    import dask

    if args.threads:
        dask.config.set({"rfol_dask.factor-threads": args.threads})
    out = Path(args.out)
    res = json.loads(out.read_text()) if out.exists() else {}
    res.update(machine=platform.machine(), cpus=os.cpu_count(), threads=args.threads)
    if args.alpha_path:
        res["alpha_path"] = alpha_path([int(s) for s in args.alpha_path.split(",")])
        res["alpha_path_load_avg"] = os.getloadavg()[0]
    else:
        from sanity import NAMES

        names = NAMES if args.names == "all" else args.names.split(",")
        sets = res.setdefault("sets", {})
        for name in names:
            n_train = args.train or QUICK_TRAIN.get(name, QUICK["train"])
            t0 = time.perf_counter()
            sets[name] = run_set(name, n_train, args.test, args.max_features, args.data)
            sets[name]["load_avg"] = os.getloadavg()[0]
            sets[name]["wall_s"] = time.perf_counter() - t0
            out.write_text(json.dumps(res, indent=1, default=float))
        print("\n" + render(sets))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
