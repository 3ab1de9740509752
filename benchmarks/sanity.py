"""Do our generated data behave like the originals? A Cauchy random-feature fit per data set at the
paper's sizes and (N, gamma, alpha), its relative test error beside the paper's figure.

Data are generated once into --data (Zarr stores, reused when present and complete; test sets are
capped at --max-test samples, so Helmholtz / Navier-Stokes high use 2000 instead of 30000).

    python benchmarks/sanity.py                        # all data sets
    python benchmarks/sanity.py --names burgers,darcy  # some
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from rfol_dask import RandomFeatureOperator, datasets
from rfol_dask.experiments import SharedCluster, load_split, reference_data
from rfol_dask.metrics import relative_l2_error

HERE = Path(__file__).resolve().parent
NAMES = reference_data()["sets"]


def run(name, data_dir, max_test, workers, train=None, n_features=None, gaussian=False):
    """One Cauchy fit (and a Gaussian one with ``gaussian``) at the paper's settings; ``train`` /
    ``n_features`` override the paper's training size and feature count (a subset of the stored
    data)."""
    paper = datasets.get(name).paper
    t0 = time.perf_counter()
    cluster = SharedCluster(workers)
    try:
        train_ds, test = load_split(name, data_dir, max_test, cluster)
    finally:
        cluster.close()
    gen_time = time.perf_counter() - t0
    n_train, n_test = train_ds.sizes["sample"], test.sizes["sample"]
    n_train = min(train or n_train, n_train)
    N = int(n_features or paper["n_features"])
    U, V = train_ds["input"].values[:n_train], train_ds["output"].values[:n_train]
    Ut, Vt = test["input"].values, test["output"].values
    row = {
        "name": name,
        "train": n_train,
        "test": n_test,
        "paper_test": paper["test"],
        "n_features": N,
        "gamma": paper["gamma"],
        "alpha": paper["alpha"],
        "paper_error": paper["cauchy"],
        "data_s": gen_time,
    }
    for dist in ("cauchy", "gaussian") if gaussian else ("cauchy",):
        model = RandomFeatureOperator(
            n_features=N,
            distribution=dist,
            gamma=paper["gamma"],
            alpha=paper["alpha"],
            random_state=0,
        )
        t0 = time.perf_counter()
        model.fit(U, V)
        fit_time = time.perf_counter() - t0
        err = relative_l2_error(Vt, model.predict(Ut))
        key = "" if dist == "cauchy" else "gaussian_"
        row.update({f"{key}error": err, f"{key}fit_s": fit_time, "solver": model.solver_})
        print(
            f"{name:28s} {dist:8s} train {n_train:6d} test {n_test:6d}  N={N:<7g} error {err:.3e}  "
            f"paper {paper[dist]:.3e}  ratio {err / paper[dist]:5.2f}  fit {fit_time:6.1f} s",
            flush=True,
        )
    row["ratio"] = row["error"] / paper["cauchy"]
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--names", default=",".join(NAMES))
    parser.add_argument("--data", default=str(HERE / "results" / "data"))
    parser.add_argument("--max-test", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--train", type=int, default=None, help="override the paper's training size"
    )
    parser.add_argument("--n-features", type=int, default=None, help="override the paper's N")
    parser.add_argument("--gaussian", action="store_true", help="also fit Gaussian features")
    parser.add_argument("--out", default=str(HERE / "results" / "sanity.json"))
    args = parser.parse_args(argv)
    Path(args.data).mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.exists() else {}
    for name in args.names.split(","):
        key = (
            name
            if args.train is None and args.n_features is None
            else f"{name}@{args.train or 'paper'}x{args.n_features or 'paper'}"
        )
        rows[key] = run(
            name, args.data, args.max_test, args.workers, args.train, args.n_features, args.gaussian
        )
        out.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
