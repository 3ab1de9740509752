"""Advection III (de Hoop et al. 2022): the sign of a periodic random field, translated by
``shift`` (the exact solution of ``u_t + u_x = 0`` at ``t = shift``; docs/datasets.md)."""

from __future__ import annotations

import numpy as np

from .grf import periodic_series_1d
from .registry import DatasetSpec, at_least, greater, register, sample_rng


def field(rng, x, *, n_modes=50, tau=3.0, alpha=2.0):
    """``a(x) = sum_{l <= n_modes} (4 pi^2 l^2 + tau^2)^(-alpha/2) sqrt(2) (theta_{2l-1} cos 2 pi
    l x + theta_{2l} sin 2 pi l x)`` (n,) of the sample drawn from ``rng`` at ``x`` (n,)."""
    theta = rng.standard_normal(2 * int(n_modes))
    ell = np.arange(1, int(n_modes) + 1)
    coeffs = (4.0 * np.pi**2 * ell**2 + tau**2) ** (-alpha / 2.0)
    return periodic_series_1d(theta[0::2], theta[1::2], coeffs, x)


def make_block(seed, start, stop, *, n_points=200, n_modes=50, tau=3.0, alpha=2.0, shift=0.5):
    """Samples ``start .. stop-1``: inputs ``sign(a(x))`` and outputs ``sign(a((x - shift) mod
    1))``, each (stop - start, n_points)."""
    x = np.linspace(0.0, 1.0, int(n_points))
    xs, kw = np.concatenate([x, (x - shift) % 1.0]), dict(n_modes=n_modes, tau=tau, alpha=alpha)
    a = [field(sample_rng(seed, i), xs, **kw) for i in range(start, stop)]
    u = np.where(np.reshape(a, (stop - start, 2, len(x))) > 0.0, 1.0, -1.0)
    return np.ascontiguousarray(u[:, 0]), np.ascontiguousarray(u[:, 1])


def grids(*, n_points=200, **_):
    """Input and output share the grid ``{"x": linspace(0, 1, n_points)}``."""
    x = np.linspace(0.0, 1.0, int(n_points))
    return {"x": x}, {"x": x}


_PAPER = dict(train=1000, test=1000, n_features=3000, gamma=1e-6, alpha=1e-15)
_RANGES = dict(n_points=at_least(2), n_modes=at_least(1), tau=at_least(0), alpha=greater(0))
ADVECTION3 = register(
    DatasetSpec(
        name="advection3",
        input_attrs={"long_name": "initial condition u(x, 0)", "units": "1"},
        output_attrs={"long_name": "solution u(x, t)", "units": "1"},
        make_block=make_block,
        defaults={"n_points": 200, "n_modes": 50, "tau": 3.0, "alpha": 2.0, "shift": 0.5},
        units="m",
        periods={"x": 1.0},  # linspace(0, 1, n): a closed periodic grid, u(1) = u(0)
        grids=grids,
        ranges={**_RANGES, "shift": greater(0)},
        description="Advection III: thresholded 50-mode periodic field translated by half a "
        "period (200 -> 200)",
        paper=dict(_PAPER, cauchy=0.141, gaussian=0.211),
    )
)
