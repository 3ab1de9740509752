"""``rfol-dask quickstart``: a small data set, a tuned model, its test error and a figure."""

from __future__ import annotations

import time
from pathlib import Path

from .. import RandomFeatureOperatorCV, datasets
from ..metrics import relative_l2_error
from ..plotting import plot_prediction


def quickstart(args, client=None):
    """Generate (or reuse) ``args.train + args.test`` samples of ``args.dataset`` in ``args.out``,
    fit a ``RandomFeatureOperatorCV`` on the first ``args.train``, print its test error beside the
    paper's, save the model and plot a test sample. Returns 0."""
    dataset, n_train, n_test, seed, out = args.dataset, args.train, args.test, args.seed, args.out
    (out := Path(out)).mkdir(parents=True, exist_ok=True)
    spec = datasets.get(dataset)
    store = out / (f"{dataset}.zarr" if not seed else f"{dataset}_seed{seed}.zarr")
    print(f"rfol-dask quickstart: {dataset} ({spec.description})")
    ds = datasets.reuse_or_generate(dataset, n_train + n_test, store, seed=seed, client=client)
    print(f"data: {n_train} train + {n_test} test samples in {store}")
    train, test = ds.isel(sample=slice(0, n_train)), ds.isel(sample=slice(n_train, None))
    n = args.n_features or spec.paper.get("n_features", 1000)
    model = RandomFeatureOperatorCV(n_features=n, random_state=seed, progress=not args.quiet)
    t0 = time.perf_counter()
    model.fit(train)
    fit_s = time.perf_counter() - t0
    pred = model.predict(test["input"]).compute()
    model.save(out / "model.zarr")
    err, best = relative_l2_error(test["output"], pred), model.best_params_
    print(f"tuned: {best['distribution']}, gamma {best['gamma']:.4g}, alpha {best['alpha']:.3g}, "
          f"N={best['n_features']}: {fit_s:.1f} s (search + refit)")  # fmt: skip
    known = [k for k in ("cauchy", "gaussian") if spec.paper.get(k)]
    paper = ", ".join(f"{k} {spec.paper[k]:.3g}" for k in known)
    print(f"relative L2 test error: {err:.3e} (paper: {paper or '-'})")
    dims, title = ds["output"].dims[1:], f"{dataset}: test sample 0"
    grid = ds[dims[0]] if len(dims) == 1 and dims[0] in ds.coords else None
    preds = {f"tuned {best['distribution']}": pred.values[0]}
    truth = test["output"].values[0]
    png = plot_prediction(out / "quickstart.png", truth, preds, grid=grid, title=title)
    print(f"figure: {png}\nmodel: {out / 'model.zarr'}")
    return 0
