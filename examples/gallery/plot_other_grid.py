"""
Train on one grid, predict on another
=====================================

A model remembers the grids it was trained on (the coordinates of its xarray data). Given
inputs on another grid of the same domain it reads them onto the training grid, and with
``output_grid=`` it writes its predictions onto any grid, through the recovery maps of
:mod:`rfol_dask.recovery` (cubic splines by default; on a periodic axis they wrap around).

The data: advection-diffusion ``u_t + u_x = 0.01 u_xx`` on the periodic interval ``[0, 1)``,
solved exactly in Fourier space, so the same functions can be sampled at any resolution.
"""

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from rfol_dask import RandomFeatureOperatorCV
from rfol_dask.metrics import relative_l2_error

rng = np.random.default_rng(1)
n_modes = 8
k = np.arange(n_modes + 1)
modes = (rng.standard_normal((900, k.size)) + 1j * rng.standard_normal((900, k.size))) / (1 + k**2)
modes[:, 0] = 0
decay = np.exp(-(0.01 * (2 * np.pi * k) ** 2 + 1j * 2 * np.pi * k) * 0.25)  # at t = 0.25


def sample(n_points, at_time):
    """The functions on ``n_points`` points of [0, 1), as a DataArray (sample, x)."""
    x = np.arange(n_points) / n_points
    values = np.real((modes * (decay if at_time else 1)) @ np.exp(2j * np.pi * np.outer(k, x)))
    return xr.DataArray(
        values,
        dims=("sample", "x"),
        coords={"sample": np.arange(len(modes)), "x": ("x", x, {"period": 1.0})},
    )


# %%
# Train on 24 points.
coarse_u, coarse_v = sample(24, False), sample(24, True)
model = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(coarse_u[:700], coarse_v[:700])

# %%
# Predict from inputs on 96 points, onto 96 points. The DataArray's ``x`` coordinate says it is
# another grid; ``output_grid`` asks for the predictions on the fine grid.
fine_u, fine_v = sample(96, False)[700:], sample(96, True)[700:]
pred = model.predict(fine_u, output_grid={"x": fine_v["x"].values})
coarse_error = relative_l2_error(coarse_v[700:], model.predict(coarse_u[700:]))
print(f"on 24 points: {float(coarse_error):.2e}")
print(f"on 96 points: {float(relative_l2_error(fine_v, pred)):.2e}")

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
fine_u.isel(sample=0).plot(ax=ax, color="0.6", label="input on 96 points")
coarse_v[700].plot(ax=ax, marker="o", linestyle="", color="C0", label="training grid (24)")
fine_v.isel(sample=0).plot(ax=ax, color="k", label="truth on 96 points")
pred.isel(sample=0).plot(ax=ax, color="C1", linestyle="--", label="prediction on 96 points")
ax.legend(fontsize="small")
ax.set_title("trained on 24 points, predicted on 96")
fig.tight_layout()
