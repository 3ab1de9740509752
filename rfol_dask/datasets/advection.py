"""Advection I and II (Lu et al. 2022): closed-form translation ``u(x, t) = u0((x - t) mod 1)``.

Grid ``x = linspace(0, 1, n_points)`` (endpoint included); input ``u(., 0)``, output
``u(., t_index / (n_points - 1))`` (default 20/39, about 0.513, as in the published files).
Ranges: ``n_points >= 2`` (two grid points span the period), ``t_index >= 1`` (a time ``t > 0``).
"""

from __future__ import annotations

import numpy as np

from .registry import DatasetSpec, at_least, register, sample_rng

_DEFAULTS = {"n_points": 40, "t_index": 20}
_RANGES = {"n_points": at_least(2), "t_index": at_least(1)}


def _grid(n_points):
    return np.linspace(0.0, 1.0, int(n_points))


def _heaviside(z):
    return np.heaviside(z, 0.5)


def _profile_1(x, h, w, c):
    """``h`` on the periodically wrapped closed interval ``[c - w/2, c + w/2]``, else 0."""
    d = (x - c + 0.5) % 1.0 - 0.5
    return np.where(np.abs(d) <= w / 2.0, h, 0.0)


def _profile_2(x, c1, w, h1, c2, a, h2):
    """Square wave plus semicircle-like bump of Advection II at shifted positions ``x``."""
    square = h1 * _heaviside(x - c1 + w / 2.0) * _heaviside(c1 + w / 2.0 - x)
    bump = np.sqrt(np.maximum(h2**2 - a**2 * (x - c2) ** 2, 0.0))
    return square + bump


def _draw_1(rng):
    h = rng.uniform(1.0, 2.0)
    w = rng.uniform(0.3, 0.6)
    c = rng.uniform(0.3, 0.7)
    return h, w, c


def _draw_2(rng):
    c1 = rng.uniform(0.2, 0.3)
    w = rng.uniform(0.1, 0.2)
    h1 = rng.uniform(0.5, 2.0)
    c2 = rng.uniform(0.7, 0.8)
    a = rng.uniform(5.0, 10.0)
    h2 = rng.uniform(0.5, 2.0)
    return c1, w, h1, c2, a, h2


def _make(draw, profile):
    def make_block(seed, start, stop, *, n_points=40, t_index=20):
        x = _grid(n_points)
        t = t_index / (n_points - 1)
        inputs = np.empty((stop - start, n_points))
        outputs = np.empty_like(inputs)
        # shifted positions on [0, 1): every one is a grid point k / (n - 1), k <= n - 2, so a value
        # above 1 - 1 / (2 (n - 1)) is 0 rounded down by the modulo (-5.6e-17 % 1.0 = 1 - 1.1e-16),
        # where Advection II's bump, which is not periodic, would be read at the far end
        shifted = (x - t) % 1.0
        shifted[shifted > 1.0 - 0.5 / (n_points - 1)] = 0.0
        for row, i in enumerate(range(start, stop)):
            p = draw(sample_rng(seed, i))
            inputs[row] = profile(x % 1.0, *p)
            outputs[row] = profile(shifted, *p)
        return inputs, outputs

    return make_block


def _grids(*, n_points=40, t_index=20):
    x = _grid(n_points)
    return {"x": x}, {"x": x}


ADVECTION1 = register(
    DatasetSpec(
        name="advection1",
        input_attrs={"long_name": "initial condition u(x, 0)", "units": "1"},
        output_attrs={"long_name": "solution u(x, t)", "units": "1"},
        make_block=_make(_draw_1, _profile_1),
        defaults=dict(_DEFAULTS),
        units="m",
        periods={"x": 1.0},  # linspace(0, 1, n): a closed periodic grid, u(1) = u(0)
        grids=_grids,
        ranges=_RANGES,
        description="Advection I: periodic square wave translated to t = 20/39 (40 -> 40)",
        paper=dict(
            train=1000,
            test=1000,
            n_features=5000,
            gamma=1e-5,
            alpha=1e-15,
            cauchy=2.55e-6,
            gaussian=4.62e-6,
        ),
    )
)

ADVECTION2 = register(
    DatasetSpec(
        name="advection2",
        input_attrs={"long_name": "initial condition u(x, 0)", "units": "1"},
        output_attrs={"long_name": "solution u(x, t)", "units": "1"},
        make_block=_make(_draw_2, _profile_2),
        defaults=dict(_DEFAULTS),
        units="m",
        periods={"x": 1.0},  # linspace(0, 1, n): a closed periodic grid, u(1) = u(0)
        grids=_grids,
        ranges=_RANGES,
        description="Advection II: square wave plus bump translated to t = 20/39 (40 -> 40)",
        paper=dict(
            train=1000,
            test=1000,
            n_features=5000,
            gamma=1e-5,
            alpha=1e-15,
            cauchy=1.88e-6,
            gaussian=6.30e-6,
        ),
    )
)
