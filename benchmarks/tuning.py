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
    python benchmarks/tuning.py burgers --cost --train 1500 --max-features 4000 --threads 1

``--grow-to NMAX`` lets the search grow N after it (full-size runs, ``results/tuning_full.json``):
``RandomFeatureOperatorCV(n_features=--max-features, max_features=NMAX)`` scores the winner's law,
gamma and alphas at N, 2 N, 4 N, ... NMAX on the same validation split of the training data (one
pass, nested features, stopping once a doubling gains under 1 %); the best N is refitted on all
training data and only then scored on the test split:

    OPENBLAS_NUM_THREADS=2 python benchmarks/tuning.py burgers --train 1848 --test 200 --max-features 4000 \
        --grow-to 128000 --threads 2 --out benchmarks/results/tuning_full.json

``--ns-high`` runs the 20000-sample Navier-Stokes target instead: train = the first 20000 samples
of ``results/data/navier_stokes_high_22000.zarr`` (made by ``scale_ns.py``, or here when missing),
test = the other 2000, read from Zarr on a LocalCluster of one in-process worker (2 threads); the
search at ``--max-features`` grows N to ``--grow-to``; the winner is refitted, then refitted
again at N = 20000; peak memory of the process is sampled throughout:

    OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=2 python benchmarks/tuning.py --ns-high --max-features 4000 \
        --grow-to 160000 --threads 2 --max-gram-bytes 6e9 --out benchmarks/results/tuning_ns_high.json

``--cost`` times a default search (no refit) against one fit at the chosen parameters (medians of
``--repeats``), on numpy input and on dask input from the Zarr store, and counts the dask
``compute`` calls and the reads of each input chunk.

``--distributions`` (comma-separated laws, default: those of ``RandomFeatureOperatorCV()``),
``--nu`` and ``--coarse`` set the RF search's (and ``--cost``'s) laws and stages; a run with
other than the defaults is stored under the key ``"<name> [<laws>; nu=...; coarse=...]"``
(non-default entries only; ``--cost``: its label gets the same suffix), so such runs share one
output file:

    OPENBLAS_NUM_THREADS=1 python benchmarks/tuning.py burgers --threads 1 \
        --distributions cauchy,gaussian,rational_quadratic --out benchmarks/results/tuning_iq.json
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

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, datasets
from rfol_dask.baselines import KernelOperatorCV
from rfol_dask.experiments import arrays as _arrays
from rfol_dask.experiments import load_subset, quick_train, sizes
from rfol_dask.metrics import relative_l2_error
from rfol_dask.selection import DEFAULT_GAMMAS

STAGE_KEYS = set(RandomFeatureOperatorCV._stage_defaults)


def _staged(search):
    """The search's options with its stage settings grouped in ``stages``."""
    stages = {k: v for k, v in search.items() if k in STAGE_KEYS}
    return {**{k: v for k, v in search.items() if k not in STAGE_KEYS}, "stages": stages}


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
QUICK = sizes(quick=True)
#: the RandomFeatureOperatorCV defaults of the options --distributions, --nu and --coarse set
DEFAULT_SEARCH = {
    **{k: RandomFeatureOperatorCV().get_params()[k] for k in ("distributions", "nu")},
    "coarse": RandomFeatureOperatorCV._stage_defaults["coarse"],
}
DEFAULT_LAWS = tuple(DEFAULT_SEARCH["distributions"])

OUT = HERE / "results" / "tuning.json"


def timed_fit(model, U, V):
    t0 = time.perf_counter()
    model.fit(U) if V is None else model.fit(U, V)
    return time.perf_counter() - t0


def growth_curve(search):
    """Validation error of the best alpha at each N of the growth stage: {N: {...}}."""
    res = search.cv_results_
    curve = {}
    for N in sorted({int(n) for n, st in zip(res["n_features"], res["stage"]) if st == "growth"}):
        sel = (res["n_features"] == N) & (res["stage"] == "growth")
        k = int(np.nanargmin(np.where(sel, res["mean_relative_l2"], np.nan)))
        curve[N] = {
            "validation_error": float(res["mean_relative_l2"][k]),
            "gamma": float(res["gamma"][k]),
            "alpha": float(res["alpha"][k]),
        }
    return curve


def stage_curves(search, stage):
    """Best validation error (over alpha) of each gamma multiple and N of one stage:
    {multiple: {N: error}} (NaN scores, alphas left unsolved, skipped)."""
    res = search.cv_results_
    out = {}
    for mult, N, err, st in zip(
        res["scale_multiple"], res["n_features"], res["mean_relative_l2"], res["stage"]
    ):
        if st == stage and np.isfinite(err):
            row = out.setdefault(f"{float(mult):.6g}", {})
            row[int(N)] = min(row.get(int(N), np.inf), float(err))
    return out


def search_row(search, Vt, pred):
    """The results row of a fitted search and its test predictions."""
    res = search.cv_results_
    return {
        "error": relative_l2_error(Vt, pred),
        "best_params": search.best_params_,
        "validation_error": -search.best_score_,
        "search_s": search.search_time_,
        "refit_s": search.refit_time_,
        "cost_ratio": search.search_time_ / search.refit_time_,
        "candidates": int(len(res["mean_test_score"])),
        "stages": sorted({str(s) for s in res["stage"]}),
    }


def search_key(name, search):
    """``name``, or ``"name [law,...; nu=...; coarse=...]"`` naming the entries of the RF search
    options ``search`` (a dict as :data:`DEFAULT_SEARCH`) that differ from the defaults."""
    laws = tuple(search.get("distributions", DEFAULT_LAWS))
    parts = [] if laws == DEFAULT_LAWS else [",".join(laws)]
    parts += [
        f"{k}={search[k]}"
        for k in ("nu", "coarse")
        if k in search and search[k] != DEFAULT_SEARCH[k]
    ]
    return f"{name} [{'; '.join(parts)}]" if parts else name


def run_set(name, n_train, n_test, max_features, data_dir, grow_to=None, search=None):
    """All models on one data set, the RF search with the options ``search`` (``distributions``,
    ``nu``, ``coarse`` of :class:`rfol_dask.RandomFeatureOperatorCV`; default its defaults) and
    ``max_features=grow_to``; returns the result dict."""
    search = {**DEFAULT_SEARCH, **(search or {})}
    paper = datasets.get(name).paper
    train, test = load_subset(name, n_train, n_test, data_dir)
    U, V = _arrays(train)
    Ut, Vt = _arrays(test)
    N = min(int(paper["n_features"]), max_features)
    rows = {}
    for law in ("cauchy", "gaussian"):
        for label, gamma, alpha in (
            (f"rf_{law}_paper", paper["gamma"], paper["alpha"]),
            (f"rf_{law}_median", "median", 1e-10),
        ):
            model = RandomFeatureOperator(
                n_features=N, distribution=law, gamma=gamma, alpha=alpha, random_state=0
            )
            fit_s = timed_fit(model, U, V)
            rows[label] = {
                "error": relative_l2_error(Vt, model.predict(Ut)),
                "fit_s": fit_s,
                "n_features": N,
                "gamma": model.gamma_,
                "alpha": alpha,
            }
    for label, est in (
        (
            "rf_tuned",
            RandomFeatureOperatorCV(
                n_features=N, max_features=grow_to, random_state=0, **_staged(search)
            ),
        ),
        ("kernel_tuned", KernelOperatorCV()),
    ):
        est.fit(U, V)
        rows[label] = search_row(est, Vt, est.predict(Ut))
        if label == "rf_tuned" and grow_to:
            rows[label]["validation_curve"] = curve = growth_curve(est)
            for n, c in curve.items():
                print(
                    f"  {name:26s} grow N = {n:6d}: validation {c['validation_error']:.3e} "
                    f"(gamma {c['gamma']:.3g}, alpha {c['alpha']:.0e})",
                    flush=True,
                )
    for label, row in rows.items():
        extra = (
            f"  search {row['search_s']:.2f} s = {row['cost_ratio']:.1f} x refit  {row['best_params']}"
            if "search_s" in row
            else f"  fit {row['fit_s']:.2f} s"
        )
        print(f"  {name:26s} {label:18s} error {row['error']:.3e}{extra}", flush=True)
    return {
        "name": name,
        "label": search_key(name, search),
        "search_options": search,
        "train": len(U),
        "test": len(Ut),
        "n_features": N,
        "grow_to": grow_to,
        "paper": paper,
        "methods": rows,
    }


def _floats(text):
    """Comma-separated positive numbers (a CLI grid), or None for an empty string."""
    return tuple(float(x) for x in text.split(",")) if text else None


def _limit_gammas(text):
    """``--limit-gammas``: comma-separated multiples, ``default`` (the default gamma grid) or ``none``."""
    return {"default": DEFAULT_GAMMAS, "none": "none"}.get(text) or _floats(text)


def _ns_high_data(args):
    """Training and test parts (lazy) of the NS-high data set (``--store`` or the 22000-sample
    store, made when missing): the first ``--train`` samples (default 20000) and the rest."""
    from scale_ns import ns_data

    ds = (
        datasets.open(args.store)
        if args.store
        else ns_data(Path(args.data) / "navier_stokes_high_22000.zarr", 20000, 2000, 2)
    )
    M = args.train or 20000
    return ds.isel(sample=slice(0, M)), ds.isel(sample=slice(M, None))


def ns_high(args, search=None):
    """The 20000-sample Navier-Stokes target: search + growth + refit from Zarr on a LocalCluster,
    then the winner refitted at N = ``--second-features``."""
    from _common import blas_info

    from rfol_dask.cluster import close_client, local_client
    from rfol_dask.experiments.measure import PeakMemory

    train, test = _ns_high_data(args)
    M = train.sizes["sample"]
    Vt = test["output"].values
    row = {
        "M": M,
        "test": len(Vt),
        "store": args.store,
        "score_outputs": args.score_outputs,
        "n_features": args.max_features,
        "grow_to": args.grow_to,
        "blas": blas_info(),
        "max_gram_bytes": args.max_gram_bytes,
        "memory_limit": args.memory_limit,
        "load_avg_start": os.getloadavg(),
    }
    client = local_client(
        n_workers=1, threads_per_worker=2, processes=False, memory_limit=args.memory_limit
    )
    try:
        with PeakMemory(interval=0.05, every=10.0) as pm:
            options = {
                **(search or {}),
                **{
                    k: v
                    for k, v in (
                        ("gammas", args.gammas),
                        ("alphas", args.alphas),
                        ("growth_refine", args.growth_refine),
                    )
                    if v
                },
            }
            if args.limit_gammas is not None:
                options["limit_gammas"] = None if args.limit_gammas == "none" else args.limit_gammas
            row["search_options"] = options
            stages = {k: options.pop(k) for k in list(options) if k in STAGE_KEYS}
            stages.setdefault("score_outputs", args.score_outputs)
            search = RandomFeatureOperatorCV(
                n_features=args.max_features,
                max_features=args.grow_to,
                random_state=0,
                max_gram_bytes=args.max_gram_bytes,
                stages=stages,
                progress=True,
                **options,
            )
            search.fit(train)
        pred = search.predict(test["input"])
        row["rf_tuned"] = search_row(search, Vt, np.asarray(pred))
        row["rf_tuned"].update(
            validation_curve=growth_curve(search),
            growth_curves=stage_curves(search, "growth"),
            limit_stage=stage_curves(search, "limit"),
            peak_bytes=pm.peak,
            peak_increase_bytes=pm.increase,
            load_avg=os.getloadavg(),
            search_peak_bytes=pm.peak_between(0, search.search_time_),
            refit_peak_bytes=pm.peak_between(search.search_time_),
            memory_timeline=pm.timeline,
        )
        print(json.dumps(row["rf_tuned"], indent=1, default=float), flush=True)
        best = dict(search.best_params_, n_features=args.second_features)
        del search, pred
        with PeakMemory(interval=0.05) as pm:
            model = RandomFeatureOperator(
                random_state=0, max_gram_bytes=args.max_gram_bytes, progress=True, **best
            )
            fit_s = timed_fit(model, train, None)
        row["rf_tuned_second"] = {
            "error": relative_l2_error(Vt, np.asarray(model.predict(test["input"]))),
            "params": best,
            "fit_s": fit_s,
            "peak_bytes": pm.peak,
            "load_avg": os.getloadavg(),
        }
        print(json.dumps(row["rf_tuned_second"], indent=1, default=float), flush=True)
    finally:
        close_client(client)
    return row


def ns_high_fixed(args, params):
    """The 20000-sample Navier-Stokes target without a search: ``RandomFeatureOperator(**params)``
    (chosen elsewhere on training data only, e.g. by a search on a subset of the training
    samples) fitted from Zarr on the same LocalCluster at N = ``--grow-to`` and at
    ``--second-features``, each scored on the test split."""
    from _common import blas_info

    from rfol_dask.cluster import close_client, local_client
    from rfol_dask.experiments.measure import PeakMemory

    train, test = _ns_high_data(args)
    Vt = test["output"].values
    row = {
        "M": train.sizes["sample"],
        "test": len(Vt),
        "store": args.store,
        "params": params,
        "blas": blas_info(),
        "max_gram_bytes": args.max_gram_bytes,
        "memory_limit": args.memory_limit,
        "load_avg_start": os.getloadavg(),
        "fits": [],
    }
    client = local_client(
        n_workers=1, threads_per_worker=2, processes=False, memory_limit=args.memory_limit
    )
    try:
        for N in (args.grow_to, args.second_features):
            with PeakMemory(interval=0.05) as pm:
                model = RandomFeatureOperator(
                    random_state=0,
                    max_gram_bytes=args.max_gram_bytes,
                    progress=True,
                    **{**params, "n_features": N},
                )
                fit_s = timed_fit(model, train, None)
            fit = {
                "n_features": N,
                "error": relative_l2_error(Vt, np.asarray(model.predict(test["input"]))),
                "gamma_": model.gamma_,
                "fit_s": fit_s,
                "peak_bytes": pm.peak,
                "load_avg": os.getloadavg(),
            }
            row["fits"].append(fit)
            print(json.dumps(fit, indent=1, default=float), flush=True)
            del model
    finally:
        close_client(client)
    return row


def ns_high_kernel(args):
    """The tuned exact kernel on the same 20000 / 2000 Navier-Stokes-high split as ``--ns-high``
    (a default ``KernelOperatorCV(pca_power=--pca-power)`` on in-memory arrays): the limit the RF
    models approach."""
    from _common import blas_info

    from rfol_dask.experiments.measure import PeakMemory

    train, test = _ns_high_data(args)
    (U, V), (Ut, Vt) = _arrays(train.load()), _arrays(test.load())
    with PeakMemory(interval=0.05) as pm:
        est = KernelOperatorCV(pca_power=args.pca_power).fit(U, V)
    row = search_row(est, Vt, est.predict(Ut))
    row.update(
        M=len(U),
        test=len(Vt),
        pca_power=args.pca_power,
        peak_bytes=pm.peak,
        blas=blas_info(),
        load_avg=os.getloadavg(),
    )
    print(json.dumps(row, indent=1, default=float), flush=True)
    return row


def render_full(results):
    """Markdown table of the full-size runs (``--grow-to``)."""
    lines = [
        "| data set | train / test | N searched, grown to | N chosen | law, gamma, alpha | RF tuned | kernel tuned "
        "| paper's better RF | validation error | search s (incl. growth) | refit s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        m = r["methods"]
        if not r.get("grow_to"):
            continue
        g, kern, p = m["rf_tuned"], m["kernel_tuned"], r["paper"]
        bp = g["best_params"]
        lines.append(
            f"| {r.get('label', r['name'])} | {r['train']} / {r['test']} | {r['n_features']}, {r['grow_to']} "
            f"| {bp['n_features']} | {bp['distribution']}, {bp['gamma']:.3g}, {bp['alpha']:.0e} | {_pct(g['error'])} "
            f"| {_pct(kern['error'])} ({kern['best_params']['kernel']}) | {_pct(min(p['cauchy'], p['gaussian']))} "
            f"| {_pct(g['validation_error'])} | {g['search_s']:.1f} | {g['refit_s']:.1f} |"
        )
    return "\n".join(lines)


def _pct(x):
    """A relative error in percent, three significant digits."""
    return f"{100 * x:.3g}%"


def render(results):
    """Markdown table of the tuned vs paper-settings errors."""
    lines = [
        "| data set | train / test | N | RF paper (Cauchy / Gaussian) | RF median default (C / G) | RF tuned "
        "| kernel tuned | RF tuned / kernel tuned | RF search cost (x refit) | kernel search cost (x refit) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        m = r["methods"]
        tuned, kern = m["rf_tuned"], m["kernel_tuned"]
        bp = tuned["best_params"]
        lines.append(
            f"| {r.get('label', r['name'])} | {r['train']} / {r['test']} | {r['n_features']} | "
            f"{_pct(m['rf_cauchy_paper']['error'])} / {_pct(m['rf_gaussian_paper']['error'])} | "
            f"{_pct(m['rf_cauchy_median']['error'])} / {_pct(m['rf_gaussian_median']['error'])} | "
            f"{_pct(tuned['error'])} ({bp['distribution']}, gamma {bp['gamma']:.3g}, alpha {bp['alpha']:.0e}) | "
            f"{_pct(kern['error'])} ({kern['best_params']['kernel']}) | {tuned['error'] / kern['error']:.2f} | "
            f"{tuned['cost_ratio']:.1f} | {kern['cost_ratio']:.1f} |"
        )
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
        row = {
            "M": M,
            "eigh_s": t_eigh,
            "path_all_alphas_s": t_alphas,
            "cholesky_solve_s": t_chol,
            "n_alphas": n_alphas,
            "break_even_alphas": t_eigh / t_chol,
            "eigh_total_s": t_eigh + t_alphas,
            "cholesky_total_s": n_alphas * t_chol,
        }
        print(
            f"  M = {M:6d}: eigh + path {t_eigh:.2f} + {t_alphas:.2f} s; Cholesky + solve {t_chol:.2f} s per "
            f"alpha ({n_alphas} alphas: {n_alphas * t_chol:.2f} s); break-even at {t_eigh / t_chol:.1f} alphas",
            flush=True,
        )
        out.append(row)
    return out


def _median_time(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times, out


def cost(name, n_train, n_test, N, data_dir, repeats=3, chunk=250, search=None):
    """Seconds of a ``RandomFeatureOperatorCV(n_features=N, **search)`` search (no refit) against one
    ``RandomFeatureOperator`` fit at the chosen parameters, medians of ``repeats`` runs each, on
    numpy input and on dask input read from the Zarr store (threaded scheduler, ``chunk`` samples
    per chunk). For dask input it also counts the ``compute`` calls and how often each input
    chunk is read (search, then the fit of the winner)."""
    import dask
    import dask.threaded

    load_subset(name, n_train, n_test, data_dir)  # generates the store when missing
    store = Path(data_dir) / "subsets" / f"{name}_{n_train + n_test}.zarr"
    ds = datasets.open_dataset(store if store.exists() else Path(data_dir) / f"{name}.zarr")
    ds = ds.isel(sample=slice(0, n_train))
    Ul = ds["input"].data.reshape(n_train, -1).rechunk((chunk, -1))
    Vl = ds["output"].data.reshape(n_train, -1).rechunk((chunk, -1))
    U, V = np.asarray(Ul.compute(), dtype=np.float64), np.asarray(Vl.compute(), dtype=np.float64)
    search = {**DEFAULT_SEARCH, **(search or {})}
    out = {
        "name": name,
        "search_options": search,
        "train": n_train,
        "n_features": N,
        "n_in": U.shape[1],
        "n_out": V.shape[1],
        "repeats": repeats,
        "load_avg_start": os.getloadavg()[0],
    }
    for kind in ("numpy", "dask"):
        reads, calls = {}, []

        def count(block, block_info=None, which=""):
            key = (which, block_info[0]["chunk-location"][0])
            reads[key] = reads.get(key, 0) + 1
            return block

        def scheduler(dsk, keys, **kwargs):
            calls.append(len(keys) if isinstance(keys, list) else 1)
            return dask.threaded.get(dsk, keys, **kwargs)

        if kind == "numpy":
            X, Y = U, V
        else:
            X = Ul.map_blocks(count, dtype=Ul.dtype, which="U")
            Y = Vl.map_blocks(count, dtype=Vl.dtype, which="V")
        with dask.config.set(scheduler=scheduler):
            search_s, search_all, fitted = _median_time(
                lambda: RandomFeatureOperatorCV(
                    n_features=N, random_state=0, refit=False, **_staged(search)
                ).fit(X, Y),
                repeats,
            )
            search_reads, search_calls = dict(reads), len(calls)
            best = fitted.best_params_
            fit_s, fit_all, _ = _median_time(
                lambda: RandomFeatureOperator(random_state=0, **best).fit(X, Y), repeats
            )
        row = {
            "search_s": search_s,
            "search_all_s": search_all,
            "fit_s": fit_s,
            "fit_all_s": fit_all,
            "ratio": search_s / fit_s,
            "best_params": best,
            "validation_error": -fitted.best_score_,
            "candidates": int(len(fitted.cv_results_["mean_test_score"])),
        }
        if kind == "dask":
            per_search = {k: v / repeats for k, v in search_reads.items()}
            row.update(
                search_computes=search_calls / repeats,
                fit_computes=(len(calls) - search_calls) / repeats,
                max_reads_per_chunk_search=max(per_search.values()),
                max_reads_per_chunk_search_and_fit=max(
                    (reads[k] - search_reads.get(k, 0)) / repeats + per_search.get(k, 0)
                    for k in reads
                ),
            )
        out[kind] = row
        print(
            f"  {name} M = {n_train}, N = {N}, {kind}: search {search_s:.2f} s, fit {fit_s:.2f} s "
            f"({row['ratio']:.2f} x); best {best}"
            + (
                f"; computes search / fit {row['search_computes']:g} / {row['fit_computes']:g}, reads per chunk "
                f"(search + fit) <= {row['max_reads_per_chunk_search_and_fit']:g}"
                if kind == "dask"
                else ""
            ),
            flush=True,
        )
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def _coarse(text):
    """``--coarse``: a fraction in (0, 1], or "none"."""
    return None if text.lower() == "none" else float(text)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "names",
        nargs="?",
        default="burgers,navier_stokes_low",
        help="comma-separated data sets (the quick sizes of reproduce.py), or 'all'",
    )
    parser.add_argument(
        "--train", type=int, default=None, help="training samples (default: the quick size)"
    )
    parser.add_argument("--test", type=int, default=QUICK["test"])
    parser.add_argument("--max-features", type=int, default=QUICK["max_features"])
    parser.add_argument("--data", default=str(HERE / "results" / "data"))
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="BLAS threads of the factorisations (dask config rfol_dask.factor-threads)",
    )
    parser.add_argument(
        "--alpha-path", default=None, help="comma-separated Gram sizes M: time eigh vs Cholesky"
    )
    parser.add_argument(
        "--cost",
        action="store_true",
        help="search cost vs one fit (numpy and dask input) on the first data set at --train "
        "samples and N = --max-features; results under 'cost' (key: --label)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="--cost: runs per timing (medians)")
    parser.add_argument(
        "--label", default=None, help="--cost: key of the result (default name_M_N)"
    )
    parser.add_argument(
        "--grow-to",
        type=int,
        default=None,
        help="let the search grow N from --max-features up to this many features (max_features)",
    )
    parser.add_argument(
        "--ns-high",
        action="store_true",
        help="the 20000-sample Navier-Stokes high target from Zarr on a LocalCluster (key ns_high)",
    )
    parser.add_argument(
        "--ns-high-kernel",
        action="store_true",
        help="the tuned exact kernel on the --ns-high split, in memory (key ns_high_kernel)",
    )
    parser.add_argument(
        "--store", default=None, help="--ns-high: another store (a dry run; --train samples train)"
    )
    parser.add_argument(
        "--second-features",
        type=int,
        default=20000,
        help="--ns-high: N of the second refit of the winner (row rf_tuned_second)",
    )
    parser.add_argument(
        "--memory-limit", default="20GB", help="--ns-high: the worker's memory limit"
    )
    parser.add_argument(
        "--score-outputs",
        type=int,
        default=None,
        help="--ns-high: score the search on a sketch of this many output combinations "
        "(RandomFeatureOperatorCV(score_outputs=)); default all outputs",
    )
    parser.add_argument(
        "--max-gram-bytes",
        type=float,
        default=6e9,
        help="--ns-high: max_gram_bytes of the search and the fits (the search then builds one "
        "gamma's Grams at a time)",
    )
    parser.add_argument(
        "--gammas",
        type=_floats,
        default=None,
        help="--ns-high: comma-separated gamma multiples of the search (default the estimator's)",
    )
    parser.add_argument(
        "--alphas",
        type=_floats,
        default=None,
        help="--ns-high: comma-separated alphas of the search (default the estimator's)",
    )
    parser.add_argument(
        "--limit-gammas",
        type=_limit_gammas,
        default=None,
        help="--ns-high: the limit stage's gamma multiples, 'default' for the default grid "
        "(DEFAULT_GAMMAS) or 'none' (default: the search's grid)",
    )
    parser.add_argument(
        "--growth-refine",
        type=_floats,
        default=None,
        help="--ns-high: the growth stage's gamma multiples (default the estimator's)",
    )
    parser.add_argument(
        "--distributions",
        default=",".join(DEFAULT_LAWS),
        help="comma-separated laws of the RF search (default: RandomFeatureOperatorCV's, "
        f"{','.join(DEFAULT_LAWS)})",
    )
    parser.add_argument(
        "--nu",
        type=float,
        default=None,
        help="nu of the RF search: student_t's degrees of freedom, rational_quadratic's shape",
    )
    parser.add_argument(
        "--pca-power",
        type=float,
        default=None,
        help="pca_power of the RF search and of --ns-high-kernel (default None: the grid values' "
        "own metric)",
    )
    parser.add_argument(
        "--params",
        type=json.loads,
        default=None,
        help="--ns-high: no search; fit RandomFeatureOperator(**PARAMS) (JSON) at --grow-to and "
        "--second-features features (key ns_high_fixed)",
    )
    parser.add_argument(
        "--coarse",
        type=_coarse,
        default=DEFAULT_SEARCH["coarse"],
        help="coarse fraction of the RF search, or 'none' for one stage at full size "
        f"(default {DEFAULT_SEARCH['coarse']})",
    )
    args = parser.parse_args(argv)
    search = {
        "distributions": tuple(args.distributions.split(",")),
        "nu": args.nu,
        "coarse": args.coarse,
        **({"pca_power": args.pca_power} if args.pca_power is not None else {}),
    }
    import dask

    if args.threads:
        dask.config.set({"rfol_dask.factor-threads": args.threads})
    out = Path(args.out)
    res = json.loads(out.read_text()) if out.exists() else {}
    res.update(machine=platform.machine(), cpus=os.cpu_count(), threads=args.threads)
    if args.ns_high_kernel:
        res["ns_high_kernel"] = ns_high_kernel(args)
    elif args.ns_high and args.params is not None:
        res["ns_high_fixed"] = ns_high_fixed(args, args.params)
    elif args.ns_high:
        res["ns_high"] = ns_high(args, search)
    elif args.cost:
        name = args.names.split(",")[0]
        n_train = args.train or quick_train(name)
        row = cost(
            name, n_train, args.test, args.max_features, args.data, args.repeats, search=search
        )
        row["threads"] = args.threads
        res.setdefault("cost", {})[
            search_key(args.label or f"{name}_{n_train}_{args.max_features}", search)
        ] = row
    elif args.alpha_path:
        res["alpha_path"] = alpha_path([int(s) for s in args.alpha_path.split(",")])
        res["alpha_path_load_avg"] = os.getloadavg()[0]
    else:
        from sanity import NAMES

        names = NAMES if args.names == "all" else args.names.split(",")
        sets = res.setdefault("sets", {})
        for name in names:
            n_train = args.train or quick_train(name)
            t0 = time.perf_counter()
            key = search_key(name, search)
            sets[key] = run_set(
                name, n_train, args.test, args.max_features, args.data, args.grow_to, search
            )
            sets[key]["load_avg"] = os.getloadavg()[0]
            sets[key]["wall_s"] = time.perf_counter() - t0
            out.write_text(json.dumps(res, indent=1, default=float))
        print("\n" + render(sets))
        if args.grow_to:
            print("\n" + render_full(sets))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
