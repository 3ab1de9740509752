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


def _draw_1(rng):  # h, w, c
    return tuple(rng.uniform(lo, hi) for lo, hi in ((1.0, 2.0), (0.3, 0.6), (0.3, 0.7)))


def _draw_2(rng):  # c1, w, h1, c2, a, h2
    ranges = ((0.2, 0.3), (0.1, 0.2), (0.5, 2.0), (0.7, 0.8), (5.0, 10.0), (0.5, 2.0))
    return tuple(rng.uniform(lo, hi) for lo, hi in ranges)


def _make(draw, profile):
    def make_block(seed, start, stop, *, n_points=40, t_index=20):
        x = _grid(n_points)
        t = t_index / (n_points - 1)
        inputs = np.empty((stop - start, n_points))
        outputs = np.empty_like(inputs)
        # shifted positions on [0, 1): a value near 1 is a 0 the modulo rounded down (-5.6e-17 %
        # 1.0), where Advection II's bump, which is not periodic, would be read at the far end
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


def _spec(name, draw, profile, description, cauchy, gaussian):
    paper = dict(train=1000, test=1000, n_features=5000, gamma=1e-5, alpha=1e-15)
    return register(
        DatasetSpec(
            name=name,
            input_attrs={"long_name": "initial condition u(x, 0)", "units": "1"},
            output_attrs={"long_name": "solution u(x, t)", "units": "1"},
            make_block=_make(draw, profile),
            defaults=dict(_DEFAULTS),
            units="m",
            periods={"x": 1.0},  # linspace(0, 1, n): a closed periodic grid, u(1) = u(0)
            grids=_grids,
            ranges=_RANGES,
            description=description,
            paper=dict(paper, cauchy=cauchy, gaussian=gaussian),
        )
    )


ADVECTION1 = _spec(
    "advection1",
    _draw_1,
    _profile_1,
    "Advection I: periodic square wave translated to t = 20/39 (40 -> 40)",
    2.55e-6,
    4.62e-6,
)
ADVECTION2 = _spec(
    "advection2",
    _draw_2,
    _profile_2,
    "Advection II: square wave plus bump translated to t = 20/39 (40 -> 40)",
    1.88e-6,
    6.30e-6,
)
