"""Advection III (de Hoop et al. 2022): a thresholded periodic random field shifted by half a
period.

On ``x = linspace(0, 1, n_points)`` (200 points) the field ``a(x) = sum_{l <= n_modes}
(4 pi^2 l^2 + tau^2)^(-alpha/2) sqrt(2) (theta_{2l-1} cos 2 pi l x + theta_{2l} sin 2 pi l x)``
(50 modes, ``tau = 3``, ``alpha = 2``) is thresholded to ``u0 = sign(a)`` (input); the output is
the exact solution of ``u_t + u_x = 0`` at ``t = shift = 0.5``, ``sign(a((x - shift) mod 1))``.
Ranges: ``n_points >= 2``, ``n_modes >= 1``, ``tau >= 0``, ``alpha > 0``, ``shift > 0``.
"""

from __future__ import annotations

import numpy as np

from .grf import periodic_series_1d
from .registry import DatasetSpec, at_least, greater, register, sample_rng

_DEFAULTS = {"n_points": 200, "n_modes": 50, "tau": 3.0, "alpha": 2.0, "shift": 0.5}
_RANGES = {
    "n_points": at_least(2),
    "n_modes": at_least(1),
    "tau": at_least(0),
    "alpha": greater(0),
    "shift": greater(0),
}


def coefficients(n_modes=50, tau=3.0, alpha=2.0):
    """Mode amplitudes ``(4 pi^2 l^2 + tau^2)^(-alpha/2)`` (n_modes,)."""
    ell = np.arange(1, int(n_modes) + 1)
    return (4.0 * np.pi**2 * ell**2 + tau**2) ** (-alpha / 2.0)


def draw_theta(rng, n_modes=50):
    """The ``2 n_modes`` N(0, 1) draws of one sample as ``(theta_cos, theta_sin)``, each
    (n_modes,)."""
    theta = rng.standard_normal(2 * int(n_modes))
    return theta[0::2], theta[1::2]


def field(rng, x, *, n_modes=50, tau=3.0, alpha=2.0):
    """The field ``a`` (n,) of the sample drawn from ``rng`` at ``x`` (n,)."""
    theta_cos, theta_sin = draw_theta(rng, n_modes)
    return periodic_series_1d(theta_cos, theta_sin, coefficients(n_modes, tau, alpha), x)


def _threshold(a):
    return np.where(a > 0.0, 1.0, -1.0)


def make_block(seed, start, stop, *, n_points=200, n_modes=50, tau=3.0, alpha=2.0, shift=0.5):
    """Samples ``start .. stop-1``: inputs ``sign(a(x))`` and outputs ``sign(a((x - shift) mod
    1))``, each (stop - start, n_points)."""
    x = np.linspace(0.0, 1.0, int(n_points))
    xs = np.concatenate([x, (x - shift) % 1.0])
    inputs = np.empty((stop - start, int(n_points)))
    outputs = np.empty_like(inputs)
    for row, i in enumerate(range(start, stop)):
        a = field(sample_rng(seed, i), xs, n_modes=n_modes, tau=tau, alpha=alpha)
        inputs[row] = _threshold(a[: len(x)])
        outputs[row] = _threshold(a[len(x) :])
    return inputs, outputs


def grids(*, n_points=200, n_modes=50, tau=3.0, alpha=2.0, shift=0.5):
    """Input and output share the grid ``{"x": linspace(0, 1, n_points)}``."""
    x = np.linspace(0.0, 1.0, int(n_points))
    return {"x": x}, {"x": x}


_PAPER = dict(train=1000, test=1000, n_features=3000, gamma=1e-6, alpha=1e-15)
_PAPER.update(cauchy=0.141, gaussian=0.211)
ADVECTION3 = register(
    DatasetSpec(
        name="advection3",
        input_attrs={"long_name": "initial condition u(x, 0)", "units": "1"},
        output_attrs={"long_name": "solution u(x, t)", "units": "1"},
        make_block=make_block,
        defaults=dict(_DEFAULTS),
        units="m",
        periods={"x": 1.0},  # linspace(0, 1, n): a closed periodic grid, u(1) = u(0)
        grids=grids,
        ranges=_RANGES,
        description="Advection III: thresholded 50-mode periodic field translated by half a "
        "period (200 -> 200)",
        paper=_PAPER,
    )
)
