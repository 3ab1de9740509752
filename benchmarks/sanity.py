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
from rfol_dask.cluster import local_client
from rfol_dask.metrics import relative_l2_error

HERE = Path(__file__).resolve().parent
NAMES = ["advection1", "advection2", "advection3", "burgers", "darcy", "helmholtz_low", "helmholtz_high",
         "structural_mechanics_low", "structural_mechanics_high", "navier_stokes_low", "navier_stokes_high"]


def load_split(name, data_dir, max_test, workers, seed=0):
    paper = datasets.get(name).paper
    n_train, n_test = paper["train"], min(paper["test"], max_test)
    path = Path(data_dir) / f"{name}.zarr"
    try:
        ds = datasets.open(path)
        if ds.sizes["sample"] != n_train + n_test:
            raise ValueError("size differs")
    except (FileNotFoundError, ValueError):
        with local_client(n_workers=workers) as client:
            ds = datasets.generate(name, n_train + n_test, store=path, seed=seed, client=client, overwrite=True,
                                   progress=False)
            client.cluster.close()
    ds = ds.load()
    return ds.isel(sample=slice(0, n_train)), ds.isel(sample=slice(n_train, None)), n_train, n_test


def run(name, data_dir, max_test, workers):
    paper = datasets.get(name).paper
    t0 = time.perf_counter()
    train, test, n_train, n_test = load_split(name, data_dir, max_test, workers)
    gen_time = time.perf_counter() - t0
    U, V = train["input"].values, train["output"].values
    Ut, Vt = test["input"].values, test["output"].values
    model = RandomFeatureOperator(n_features=int(paper["n_features"]), distribution="cauchy",
                                  gamma=paper["gamma"], alpha=paper["alpha"], random_state=0)
    t0 = time.perf_counter()
    model.fit(U, V)
    fit_time = time.perf_counter() - t0
    err = relative_l2_error(Vt, model.predict(Ut))
    row = {"name": name, "train": n_train, "test": n_test, "paper_test": paper["test"],
           "n_features": paper["n_features"], "gamma": paper["gamma"], "alpha": paper["alpha"],
           "solver": model.solver_, "error": err, "paper_error": paper["cauchy"], "ratio": err / paper["cauchy"],
           "fit_s": fit_time, "data_s": gen_time}
    print(f"{name:28s} train {n_train:6d} test {n_test:6d}  N={paper['n_features']:<7g} error {err:.3e}  "
          f"paper {paper['cauchy']:.3e}  ratio {err / paper['cauchy']:5.2f}  fit {fit_time:6.1f} s", flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", default=",".join(NAMES))
    parser.add_argument("--data", default=str(HERE / "results" / "data"))
    parser.add_argument("--max-test", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(HERE / "results" / "sanity.json"))
    args = parser.parse_args(argv)
    Path(args.data).mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.exists() else {}
    for name in args.names.split(","):
        rows[name] = run(name, args.data, args.max_test, args.workers)
        out.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
