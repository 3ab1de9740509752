"""The three parts of the reproduction for one data set: fits table, equal time, error curves."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np

from .. import RandomFeatureOperator, RandomFeatureOperatorCV, curves, datasets
from ..baselines import KernelOperator, KernelOperatorCV
from ..plotting import plot_example
from . import reference as ref
from .data import arrays, grid, load_split, load_subset
from .measure import run_method
from .report import fmt_error, read_results, write_results
from .selection import median_length_scale, select_nugget


def _pct(x, missing="-"):  # an error for the console: in percent, with the unit, or missing
    text = fmt_error(x, missing=missing)
    return text if text == missing else f"{text} %"


def _rf(law, N, paper):
    kw = dict(gamma=paper["gamma"], alpha=paper["alpha"], random_state=0)
    return RandomFeatureOperator(n_features=N, distribution=law, **kw)


def make_models(paper, U, V, max_features=None, grow_to=None):
    """The methods of :data:`.METHODS`: ``{label: (estimator, info, select_s)}``: RF at the
    paper's (N capped at ``max_features``, gamma, alpha); kernels at the median length scale of
    ``U`` (M, n) and the nugget of :func:`select_nugget` (``select_s`` s); the default searches of
    the CV estimators (RF at the same N, grown up to ``grow_to``)."""
    N = min(int(paper["n_features"]), max_features or int(paper["n_features"]))
    info = {"n_features": N, "gamma": paper["gamma"], "alpha": paper["alpha"]}
    out = {f"rf_{law}": (_rf(law, N, paper), info, 0.0) for law in ("cauchy", "gaussian")}
    ell = median_length_scale(U, random_state=0)
    for kernel in ("rbf", "matern52", "linear"):
        nugget, sel_s, sel = select_nugget(kernel, ell, U, V)
        info = {"nugget": nugget, "validation": sel}
        if kernel != "linear":
            info["length_scale"] = ell
        out[kernel] = (KernelOperator(kernel=kernel, length_scale=ell, nugget=nugget), info, sel_s)
    grow = int(grow_to) if grow_to and int(grow_to) > N else None
    search = RandomFeatureOperatorCV(n_features=N, max_features=grow, random_state=0)
    out["rf_tuned"] = (search, {"n_features": N, "grow_to": grow}, 0.0)
    out["kernel_tuned"] = (KernelOperatorCV(), {}, 0.0)
    return out


def tuned_info(search):
    """The selection of a fitted CV estimator: chosen parameters, validation error, seconds."""
    return dict(best_params=search.best_params_, validation_error=-float(search.best_score_),
                search_s=search.search_time_, refit_s=search.refit_time_,
                candidates=len(search.cv_results_["mean_test_score"]))  # fmt: skip


def run_fits(name, train, test, cfg, out, quick):
    """Every method of :data:`.METHODS` on one split, the RF Cauchy figure in ``<out>/<name>.png``:
    ``{"methods": {label: row}, "figure": file name}``; a row holds the :func:`run_method` figures,
    the hyperparameters, the paper's error and, quick, the ``bound`` and whether it ``passed``."""
    paper = datasets.get(name).paper
    (U, V), (Ut, Vt) = arrays(train), arrays(test)
    rows, example = {}, None
    models = make_models(paper, U, V, cfg["max_features"], cfg.get("grow_to"))
    for label, (model, info, sel_s) in models.items():
        row, pred = run_method(model, U, V, Ut, Vt)
        row.update(info, select_s=sel_s, paper=ref.paper_error(name, label))
        if label in ref.TUNED:  # the selection; the N the growth chose
            row.update(tuned_info(model))
            if "n_features" in row["best_params"]:
                row["n_features"] = row["best_params"]["n_features"]
        if quick:
            row["bound"] = ref.quick_bound(name, label)
            row["passed"] = bool(row["error"] < row["bound"])
        rows[label], example = row, pred if label == "rf_cauchy" else example
        more = f"  select {sel_s:.2f} s" if sel_s else ""
        more += f"  chose {row['best_params']}" if label in ref.TUNED else ""
        print(f"  {name:26s} {label:12s} error {_pct(row['error'], 'nan')}  paper "
              f"{_pct(row['paper'])}  fit {row['fit_s']:7.2f} s  predict {row['predict_s']:6.2f} s"
              f"  peak {row['peak_mib']:7.0f} MiB{more}", flush=True)  # fmt: skip
    kw = dict(title=f"{name}: RF Cauchy, N = {rows['rf_cauchy']['n_features']}", label="RF Cauchy")
    sample = (train["input"].values[0], train["output"].values[0], test["output"].values[0])
    example = example[0].reshape(train["output"].shape[1:])
    grids = grid(train["input"]), grid(train["output"])
    png = plot_example(Path(out) / f"{name}.png", *sample, example, *grids, **kw)
    return {"methods": rows, "figure": Path(png).name}


def run_equal_time(name, train, test, cfg):
    """The paper's table 2: kernels as in the fits; each RF law at the N of a doubling ladder whose
    fit time is closest to the kernels' mean training time (selection + fit; medians of 3 runs)."""
    paper = datasets.get(name).paper
    (U, V), (Ut, Vt) = arrays(train), arrays(test)
    rows = {}
    ell = median_length_scale(U, random_state=0)
    for kernel in ("rbf", "matern52"):
        nugget, sel_s, _ = select_nugget(kernel, ell, U, V)
        model = KernelOperator(kernel=kernel, length_scale=ell, nugget=nugget)
        row, _ = run_method(model, U, V, Ut, Vt, repeats=3)
        row.update(nugget=nugget, length_scale=ell, select_s=sel_s, train_s=sel_s + row["fit_s"])
        rows[kernel] = row
    budget = float(np.mean([r["train_s"] for r in rows.values()]))
    ladder = curves.doubling(250, cfg["curve_stop"])
    for law in ("cauchy", "gaussian"):
        settings = dict(distribution=law, gamma=paper["gamma"], alpha=paper["alpha"])
        c = curves.error_curve(U, V, Ut, Vt, ladder, random_state=0, **settings)
        N = int(c["n_features"][np.argmin(np.abs(np.log(c["fit_time"] / budget)))])
        row, _ = run_method(_rf(law, N, paper), U, V, Ut, Vt, repeats=3)
        row.update(n_features=N, train_s=row["fit_s"], ladder_fit_s=c["fit_time"].tolist())
        row["ladder_error"] = c["error"].tolist()
        rows[f"rf_{law}"] = row
    for label, row in rows.items():
        row["paper"] = ref.paper_equal_time(name, label)
        more = f"  N = {row['n_features']}" if "n_features" in row else ""
        more += f"  (paper {_pct(row['paper'][0])}, {row['paper'][1]} s)" if row["paper"] else ""
        print(f"  equal time {name:18s} {label:12s} error {_pct(row['error'], 'nan')}  "
              f"train {row['train_s']:6.3f} s{more}", flush=True)  # fmt: skip
    return {"train": len(U), "test": len(Ut), "budget_s": budget, "methods": rows}


def run_curves(name, train, test, cfg):
    """Error and fit time vs N (Cauchy), one grow-by-blocks fit per seed: an
    :func:`~rfol_dask.curves.error_curves` result (``curves.curve_dataset`` reads it)."""
    paper = datasets.get(name).paper
    (U, V), (Ut, Vt) = arrays(train), arrays(test)
    ladder = curves.doubling(250, cfg["curve_stop"])
    settings = dict(distribution="cauchy", gamma=paper["gamma"], alpha=paper["alpha"])
    res = curves.error_curves(U, V, Ut, Vt, ladder, seeds=range(cfg["curve_seeds"]), **settings)
    s, e = res["slope"], res["excess"]
    sat = "-" if s["saturated_at"] is None else int(s["saturated_at"])
    floor = "too few points to fit a floor"
    floor = f"error = {e['floor']:.3g} + c N^-{e['p']:.2f}" if np.isfinite(e["p"]) else floor
    print(f"  curve {name:22s} Cauchy, M = {len(U)}: error slope {s['slope']:+.3f} over "
          f"{s['n_points']} points (saturated at N = {sat}); fit-time slope "
          f"{res['time_slope']['slope']:+.2f}; for N >= 2M: {floor}", flush=True)  # fmt: skip
    arrays_ = ("gamma", "seeds", "n_features", "error", "fit_time", "predict_time")
    out = dict(train=len(U), test=len(Ut), n_train=len(U), distribution="cauchy")
    out.update({k: res[k].tolist() for k in arrays_}, settings=res["settings"], slope=s)
    return dict(out, time_slope=res["time_slope"], excess=res["excess"])


def _split(name, cfg, data_dir, quick, cluster):
    if quick:
        return load_subset(name, ref.quick_train(name), cfg["test"], data_dir, cluster)
    return load_split(name, data_dir, cfg["max_test"], cluster)


def run(name, parts, cfg, out, data_dir, quick, cluster=None):
    """The ``parts`` of data set ``name``, written to ``<out>/<name>.json`` (merged with an earlier
    file of the same mode) after each part; returns its content."""
    path = Path(out) / f"{name}.json"
    res = read_results(path) if path.exists() else {}
    res.update(name=name, quick=quick)  # every part of a file is of one mode
    if "fits" in parts:
        train, test = _split(name, cfg, data_dir, quick, cluster)
        res.update(train=train.sizes["sample"], test=test.sizes["sample"])
        res.update(paper_test=datasets.get(name).paper["test"], machine=platform.machine())
        res["load_avg"] = os.getloadavg()[0]
        res["fits"] = run_fits(name, train, test, cfg, out, quick)
        write_results(path, res)
    if "equal_time" in parts and ref.part_applies(name, "equal_time"):
        train, test = load_subset(name, cfg["equal_train"], cfg["equal_test"], data_dir, cluster)
        res["equal_time"] = run_equal_time(name, train, test, cfg)
        write_results(path, res)
    if "curves" in parts and ref.part_applies(name, "curves"):
        train, test = _split(name, cfg, data_dir, quick, cluster)
        res["curves"] = run_curves(name, train, test, cfg)
        write_results(path, res)
    return res
