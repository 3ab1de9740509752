"""
Quickstart: fit, predict, score
===============================

Make a small Advection II data set, let :class:`~rfol_dask.RandomFeatureOperatorCV` choose the
feature law, ``gamma`` and ``alpha`` on a validation split of the training samples, and predict
the held-out samples. Everything stays an :class:`xarray.DataArray`: the predictions keep the
test samples' labels and the grid's coordinates.
"""

import matplotlib.pyplot as plt

from rfol_dask import RandomFeatureOperatorCV, datasets
from rfol_dask.metrics import relative_l2_error

# %%
# The data: ``input`` is the initial condition, ``output`` the solution at a later time, each
# ``(sample, x)``. Without ``store=`` the samples are made in memory.
ds = datasets.generate("advection2", 1200, seed=1)
train, test = ds.isel(sample=slice(0, 1000)), ds.isel(sample=slice(1000, None))
print(ds)

# %%
# The search scores each law, gamma and alpha on the last 20 % of the training samples and
# refits the winner on all of them; the test samples are never seen.
search = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(
    train["input"], train["output"]
)
print(search.best_params_)
pred = search.predict(test["input"])
print(f"relative L2 test error: {float(relative_l2_error(test['output'], pred)):.2e}")

# %%
# One test sample: truth, prediction and the pointwise error.
k = 0
fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(6, 5))
test["input"].isel(sample=k).plot(ax=top, color="0.6", label="input u(x, 0)")
test["output"].isel(sample=k).plot(ax=top, color="k", label="truth u(x, t)")
pred.isel(sample=k).plot(ax=top, color="C1", linestyle="--", label="prediction")
top.legend()
top.set_xlabel("")
abs(pred - test["output"]).isel(sample=k).plot(ax=bottom, color="C3")
bottom.set_yscale("log")
bottom.set_ylabel("|error|")
fig.suptitle("Advection II, a test sample")
fig.tight_layout()
