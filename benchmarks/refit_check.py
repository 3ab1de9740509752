"""Is the refitted winner the model the search validated? (issue 36, item 1)

    python benchmarks/refit_check.py all results/refit_check.json [--data DIR] [--dtype float32]
        [--n-features N]

On each of the eight data sets of the reproduction (a small size of each, made with
``rfol_dask.datasets.generate`` and kept in ``--data``), ``KernelOperatorCV()`` and
``RandomFeatureOperatorCV(random_state=0)`` with their defaults search the training samples (all
of them: no test set is involved). Checked: ``best_estimator_`` has the parameters of
``best_params_``, and ``best_estimator_``'s clone fitted on the search's training
rows scores, on its validation rows, the error the search reported for the winner (row
``best_index_`` of ``cv_results_``, scored at full size) to a relative ``1e-3``: a winner at the
rounding floor of its Gram carries that rounding (1e-4 on Advection II, errors of 3e-7).
``--n-features``: the random-feature search's ``n_features`` (default 1000; fewer than the
training rows are scored in the primal).
"""

import json
import sys
import time
from pathlib import Path

import xarray as xr
from _common import argv_or_usage
from sklearn.base import clone

from rfol_dask import RandomFeatureOperatorCV, datasets
from rfol_dask.baselines import KernelOperatorCV
from rfol_dask.metrics import relative_l2_error

SIZES = {
    "advection1": 600,
    "advection2": 600,
    "advection3": 600,
    "burgers": 600,
    "darcy": 200,
    "helmholtz_low": 400,
    "structural_mechanics_low": 400,
    "navier_stokes_low": 400,
}


def load(name, data_dir, dtype):
    """The inputs (M, n) and outputs (M, m) of the stored (or newly made) data set."""
    store = Path(data_dir) / f"{name}.zarr"
    ds = xr.open_zarr(store) if store.exists() else datasets.generate(name, SIZES[name], store)
    M = ds.sizes["sample"]
    return (ds[v].values.reshape(M, -1).astype(dtype) for v in ("input", "output"))


def check(search, U, V):
    """The search's winner refitted as validated: its parameters and validation error."""
    t0 = time.perf_counter()
    search.fit(U, V)
    seconds = time.perf_counter() - t0
    (train, valid), best = search._splits(len(U))[-1], search.best_params_
    fitted = search.best_estimator_.get_params()
    model = clone(search.best_estimator_).fit(U[train], V[train])  # its dtype and seed too
    again = relative_l2_error(V[valid], model.predict(U[valid]))
    reported = float(search.cv_results_["mean_relative_l2"][search.best_index_])
    return {
        "best_params": best,
        "params_equal": all(fitted[k] == v for k, v in best.items()),
        "reported_validation_error": reported,
        "refit_validation_error": float(again),
        "relative_difference": abs(again - reported) / reported,
        "seconds": seconds,
    }


def main(argv=None):
    args = argv_or_usage(__doc__, 2, argv)
    opts = dict(zip(args[2::2], args[3::2], strict=False))
    names = list(SIZES) if args[0] == "all" else args[0].split(",")
    data_dir = opts.get("--data", str(Path(__file__).resolve().parent / "results" / "data_small"))
    out, ok, N = {}, True, int(opts.get("--n-features", 1000))
    for name in names:
        U, V = load(name, data_dir, opts.get("--dtype", "float32"))
        out[name] = {
            "kernel": check(KernelOperatorCV(), U, V),
            "rf": check(RandomFeatureOperatorCV(random_state=0, n_features=N), U, V),
        }
        for method, r in out[name].items():
            good = r["params_equal"] and r["relative_difference"] < 1e-3
            ok &= good
            print(
                f"{name:26s} {method:6s} reported {r['reported_validation_error']:.4g} refit "
                f"{r['refit_validation_error']:.4g} params equal {r['params_equal']} "
                f"{'ok' if good else 'FAIL'} ({r['seconds']:.1f} s)",
                flush=True,
            )
        Path(args[1]).write_text(json.dumps(out, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
