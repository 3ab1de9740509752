"""
Bring your own data
===================

Fit an operator to data the package does not generate: the *heat equation*
``u_t = kappa u_xx`` on the periodic interval ``[0, 1)``, solved exactly in Fourier space.
The data set uses its own names: the samples are along ``case``, the grid is ``position``,
the variables are ``u0`` (initial temperature) and ``uT`` (temperature at time ``T``).

The estimators take those names as they are: ``fit(ds, input="u0", output="uT",
sample_dim="case")``. The model remembers them, so ``predict`` and ``score`` need them no more.
"""

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from rfol_dask import RandomFeatureOperatorCV
from rfol_dask.metrics import relative_l2_errors

# %%
# The data: random smooth initial conditions (a Gaussian random field of decaying Fourier
# modes) and their exact solutions at ``T = 0.01``.
rng = np.random.default_rng(0)
n_cases, n_points, kappa, T = 800, 64, 1.0, 0.01
position = np.arange(n_points) / n_points
k = np.fft.rfftfreq(n_points, d=1 / n_points)
modes = rng.standard_normal((n_cases, k.size)) + 1j * rng.standard_normal((n_cases, k.size))
modes /= (1 + k**2) ** 1.0
u0 = np.fft.irfft(modes, n=n_points, axis=1) * n_points
uT = np.fft.irfft(modes * np.exp(-kappa * (2 * np.pi * k) ** 2 * T), n=n_points, axis=1) * n_points

ds = xr.Dataset(
    {"u0": (("case", "position"), u0), "uT": (("case", "position"), uT)},
    coords={"case": np.arange(n_cases), "position": ("position", position, {"period": 1.0})},
)
print(ds)

# %%
# Fit on the first 600 cases with your names; the grid dim ``position`` is matched by name.
# The ``period`` attribute tells the model that the grid wraps around (used when predicting on
# other grids).
train, test = ds.isel(case=slice(0, 600)), ds.isel(case=slice(600, None))
model = RandomFeatureOperatorCV(n_features=1000, random_state=0)
model.fit(train, input="u0", output="uT", sample_dim="case")
print(model.input_name_, model.output_name_, model.sample_dim_)
pred = model.predict(test)  # reads test["u0"]; the prediction runs along "case"
errors = relative_l2_errors(test["uT"], pred)
print(model.best_params_)
print(f"median relative L2 test error: {float(np.median(errors)):.2e}")

# %%
# Three test cases, and the spread of the error over all of them. The prediction is a
# DataArray on your grid: ``position`` and the test cases' labels are kept.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
for j, c in enumerate([0, 1, 2]):
    test["u0"].isel(case=c).plot(ax=axes[0], color=f"C{j}", alpha=0.35)
    test["uT"].isel(case=c).plot(ax=axes[0], color=f"C{j}")
    pred.isel(case=c).plot(ax=axes[0], color="k", linestyle=":")
axes[0].set_title("u0 (faint), uT (solid), prediction (dotted)")
axes[0].set_ylabel("temperature")
axes[1].hist(np.log10(errors), bins=30, color="C0")
axes[1].set_xlabel("log10 relative L2 error per test case")
axes[1].set_title("heat equation, 200 test cases")
fig.tight_layout()
