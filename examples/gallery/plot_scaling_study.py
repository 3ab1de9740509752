"""
A scaling study: error and fit time against N and M
===================================================

Fit the paper's Cauchy model of Advection I for a grid of training sizes ``M`` and feature
counts ``N``, keep the test error and the fit time in an :class:`xarray.Dataset` over
``(n_train, n_features)``, save it, read it back and plot it with xarray.
"""

import time
from pathlib import Path
from tempfile import mkdtemp

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from matplotlib.ticker import NullLocator

from rfol_dask import RandomFeatureOperator, datasets
from rfol_dask.metrics import relative_l2_error

ds = datasets.generate("advection1", 1300, seed=0)
test = ds.isel(sample=slice(1000, None))
n_train, n_features = [125, 250, 500, 1000], [250, 1000, 4000]

study = xr.Dataset(
    {
        "error": (("n_train", "n_features"), np.full((4, 3), np.nan), {"long_name": "test error"}),
        "fit_time": (("n_train", "n_features"), np.full((4, 3), np.nan), {"units": "s"}),
    },
    coords={"n_train": n_train, "n_features": n_features},
    attrs={"dataset": "advection1", "distribution": "cauchy", "gamma": 1e-5, "alpha": 1e-15},
)
for M in n_train:
    train = ds.isel(sample=slice(0, M))
    for N in n_features:
        model = RandomFeatureOperator(
            n_features=N, distribution="cauchy", gamma=1e-5, alpha=1e-15, random_state=0
        )
        elapsed = []  # the best of two fits: a fair time on a busy machine
        for _ in range(2):
            t0 = time.perf_counter()
            model.fit(train["input"], train["output"])
            elapsed.append(time.perf_counter() - t0)
        err = float(relative_l2_error(test["output"], model.predict(test["input"])))
        study["fit_time"].loc[M, N] = min(elapsed)
        study["error"].loc[M, N] = err

# %%
# Save, read back (a study grows across runs: ``xr.concat`` along ``n_train``), plot.
path = Path(mkdtemp()) / "scaling.nc"
study.to_netcdf(path)
study = xr.open_dataset(path)
print(study)

fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
study.error.plot.line(ax=left, x="n_train", hue="n_features", xscale="log", yscale="log")
left.set_title("test error")
study.fit_time.plot.line(ax=right, x="n_features", hue="n_train", xscale="log", yscale="log")
right.set_title("fit time")
for ax, ticks in ((left, n_train), (right, n_features)):
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, [str(t) for t in ticks])
fig.suptitle("Advection I, Cauchy features")
fig.tight_layout()
