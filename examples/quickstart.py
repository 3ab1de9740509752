"""rfol_dask through the Python API: a Zarr data set, a LocalCluster, a tuned fit, a prediction.

Run:  python examples/quickstart.py [OUTDIR]
"""

import sys
import time
from pathlib import Path

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, datasets
from rfol_dask.cluster import local_client
from rfol_dask.metrics import relative_l2_error
from rfol_dask.plotting import plot_prediction


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "example_output")
    out.mkdir(parents=True, exist_ok=True)

    with local_client(n_workers=2):  # the computations below run on it
        # 1. a data set in a Zarr store, chunked along `sample`, read back lazily with xarray
        ds = datasets.generate(
            "advection2",
            2000,
            store=out / "advection2.zarr",
            seed=1,
            block_size=250,
            overwrite=True,
        )
        train, test = ds.isel(sample=slice(0, 1000)), ds.isel(sample=slice(1000, None))
        print(ds)

        # 2. the search: the frequency law, gamma and alpha chosen on the last 20 % of the training
        # samples, then the winner refitted on all of them (dask-backed data: run on the cluster)
        search = RandomFeatureOperatorCV(n_features=5000, random_state=0)
        t0 = time.perf_counter()
        search.fit(train["input"], train["output"])
        print(f"search + fit: {time.perf_counter() - t0:.2f} s, chose {search.best_params_}")
        model = search.best_estimator_

        # 3. predictions come back lazily as a DataArray with the test samples' coordinates
        pred = model.predict(test["input"])
        err = relative_l2_error(test["output"], pred)
        print(f"relative L2 test error: {err:.3e} (paper: Cauchy 1.88e-06, Gaussian 6.30e-06)")

        # 4. save, reload, plot
        model.save(out / "advection2_model.zarr")
        again = RandomFeatureOperator.load(out / "advection2_model.zarr")
        sample = pred.isel(sample=0).compute()
        plot_prediction(
            out / "advection2.png",
            test["output"].isel(sample=0).values,
            {"tuned RF": sample.values, "reloaded": again.predict(test["input"][:1]).values[0]},
            grid=ds["x"].values,
            title="Advection II, test sample 0",
        )
        print(f"wrote {out / 'advection2.png'}")
    # leaving the with block closed the client and its LocalCluster


if __name__ == "__main__":  # worker processes are spawned: keep the work under this guard
    main()
