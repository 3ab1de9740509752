"""Advection I and II (Lu et al. 2022): the closed-form translation ``u(x, t) = u0((x - t) mod 1)``
on ``x = linspace(0, 1, n_points)``, ``t = t_index / (n_points - 1)`` (docs/datasets.md)."""

from __future__ import annotations

import numpy as np

from .registry import DatasetSpec, at_least, register, sample_rng


def _profile_1(x, h, w, c):
    """``h`` on the periodically wrapped closed interval ``[c - w/2, c + w/2]``, else 0."""
    d = (x - c + 0.5) % 1.0 - 0.5
    return np.where(np.abs(d) <= w / 2.0, h, 0.0)


def _profile_2(x, c1, w, h1, c2, a, h2):
    """Square wave plus semicircle-like bump of Advection II at shifted positions ``x``."""
    square = h1 * np.heaviside(x - c1 + w / 2.0, 0.5) * np.heaviside(c1 + w / 2.0 - x, 0.5)
    bump = np.sqrt(np.maximum(h2**2 - a**2 * (x - c2) ** 2, 0.0))
    return square + bump


def _make(bounds, profile):
    """``make_block`` of the profile whose parameters are uniform on ``bounds``."""

    def make_block(seed, start, stop, *, n_points=40, t_index=20):
        x = np.linspace(0.0, 1.0, int(n_points))
        t = t_index / (n_points - 1)
        inputs = np.empty((stop - start, n_points))
        outputs = np.empty_like(inputs)
        # shifted positions on [0, 1): a value near 1 is a 0 the modulo rounded down (-5.6e-17 %
        # 1.0), where Advection II's bump, which is not periodic, would be read at the far end
        shifted = (x - t) % 1.0
        shifted[shifted > 1.0 - 0.5 / (n_points - 1)] = 0.0
        for row, i in enumerate(range(start, stop)):
            rng = sample_rng(seed, i)
            p = tuple(rng.uniform(lo, hi) for lo, hi in bounds)
            inputs[row] = profile(x % 1.0, *p)
            outputs[row] = profile(shifted, *p)
        return inputs, outputs

    return make_block


def _grids(*, n_points=40, t_index=20):
    x = np.linspace(0.0, 1.0, int(n_points))
    return {"x": x}, {"x": x}


def _spec(name, bounds, profile, what, cauchy, gaussian):
    paper = dict(train=1000, test=1000, n_features=5000, gamma=1e-5, alpha=1e-15)
    return register(
        DatasetSpec(
            name=name,
            input_attrs={"long_name": "initial condition u(x, 0)", "units": "1"},
            output_attrs={"long_name": "solution u(x, t)", "units": "1"},
            make_block=_make(bounds, profile),
            defaults={"n_points": 40, "t_index": 20},
            units="m",
            periods={"x": 1.0},  # linspace(0, 1, n): a closed periodic grid, u(1) = u(0)
            grids=_grids,
            ranges={"n_points": at_least(2), "t_index": at_least(1)},
            description=f"Advection {what} translated to t = 20/39 (40 -> 40)",
            paper=dict(paper, cauchy=cauchy, gaussian=gaussian),
        )
    )


# h, w, c;  c1, w, h1, c2, a, h2
_BOUNDS_1 = ((1.0, 2.0), (0.3, 0.6), (0.3, 0.7))
_BOUNDS_2 = ((0.2, 0.3), (0.1, 0.2), (0.5, 2.0), (0.7, 0.8), (5.0, 10.0), (0.5, 2.0))
ADVECTION1 = _spec("advection1", _BOUNDS_1, _profile_1, "I: periodic square wave", 2.55e-6, 4.62e-6)
ADVECTION2 = _spec(
    "advection2", _BOUNDS_2, _profile_2, "II: square wave plus bump", 1.88e-6, 6.3e-6
)
