"""Grids of the recovery maps (tuples of 1-D float64 coordinate arrays, one per axis), their
periods and domains, and the one-axis interpolation matrices."""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np

#: tolerance on grid coordinates, relative to the span of the axis
RTOL = 1e-6


def as_grid(grid, name="grid"):
    """A grid (a 1-D array, a sequence of them, or a mapping ``{dim: coords}``) as a tuple of
    finite, strictly increasing 1-D float64 arrays, one per axis."""
    if isinstance(grid, Mapping):
        axes = list(grid.values())
    elif isinstance(grid, np.ndarray) and grid.ndim == 1:
        axes = [grid]
    elif isinstance(grid, (list, tuple)) and grid:
        axes = [grid] if all(isinstance(g, numbers.Real) for g in grid) else list(grid)
    else:
        raise TypeError(
            f"{name} must be a 1-D coordinate array, a sequence of them (one per axis) or a "
            f"mapping dim -> coordinates; got {type(grid).__name__}"
        )
    out = []
    for k, ax in enumerate(axes):
        ax = np.asarray(getattr(ax, "values", ax))
        if ax.ndim != 1 or ax.size == 0 or not np.issubdtype(ax.dtype, np.number):
            raise ValueError(
                f"{name}: axis {k} must be a non-empty 1-D array of numbers, got shape {ax.shape} "
                f"and dtype {ax.dtype}"
            )
        ax = ax.astype(np.float64)
        if not np.all(np.isfinite(ax)):
            raise ValueError(f"{name}: axis {k} holds NaN or Inf")
        if ax.size > 1 and not np.all(np.diff(ax) > 0):
            raise ValueError(f"{name}: axis {k} must be strictly increasing")
        out.append(ax)
    return tuple(out)


def as_periods(periods, grid, name="periods"):
    """Per-axis periods (float or None) of ``grid`` from ``periods`` (None, one number, or one
    entry per axis); ValueError unless each is > 0 and its axis lies in one period."""
    grid = as_grid(grid)
    if periods is None:
        return (None,) * len(grid)
    if isinstance(periods, numbers.Real):
        periods = (periods,) * len(grid)
    periods = tuple(periods)
    if len(periods) != len(grid):
        raise ValueError(
            f"{name} has {len(periods)} entries but the grid has {len(grid)} axes: "
            "give one period (or None) per axis"
        )
    out = []
    for k, (ax, P) in enumerate(zip(grid, periods, strict=False)):
        if P is None:
            out.append(None)
            continue
        if not isinstance(P, numbers.Real) or isinstance(P, bool) or not np.isfinite(P) or P <= 0:
            raise ValueError(f"{name}: the period of axis {k} must be a positive number, got {P!r}")
        P = float(P)
        if ax[-1] - ax[0] > P * (1 + RTOL):
            raise ValueError(
                f"{name}: axis {k} spans [{ax[0]:g}, {ax[-1]:g}], more than its period {P:g}; "
                "a periodic axis must lie in one period, e.g. [0, period)"
            )
        out.append(P)
    return tuple(out)


def is_closed(ax, P):
    """True if the periodic axis ``ax`` repeats its first point at ``ax[0] + P``."""
    return ax.size > 1 and abs(ax[-1] - ax[0] - P) <= RTOL * P


def spline_matrix(x, y, k, period=None):
    """The (len(y), len(x)) map of node values on ``x`` to the values at ``y`` of their
    interpolating spline of degree ``k`` (``make_interp_spline``'s knots: not-a-knot, or periodic
    with ``period``): ``E S^{-1}`` of the B-spline bases at ``y`` and ``x``, by a sparse LU."""
    from scipy.interpolate import BSpline, make_interp_spline
    from scipy.sparse import csc_array, csr_array
    from scipy.sparse.linalg import splu

    n, nodes = x.size, x if period is None else np.append(x, x[0] + period)
    bc = "periodic" if period is not None and k > 1 else None
    t = make_interp_spline(nodes, np.zeros(nodes.size), k=k, bc_type=bc).t

    def basis(z):  # (len(z), n) sparse; periodic: coefficient j is coefficient j mod n
        B = BSpline.design_matrix(z, t, k).tocoo()
        return csr_array((B.data, (B.row, B.col % n)), shape=(z.size, n))

    lu = splu(csc_array(basis(x).T), permc_spec="NATURAL")
    return np.ascontiguousarray(lu.solve(basis(y).T.toarray()).T)


def periodic_matrix(x, P, y, method):
    """The (len(y), len(x)) map of values on the periodic axis ``x`` (period ``P``) to ``y``
    wrapped into the period: periodic spline, wrapped hats or nearest node modulo ``P``; on a
    closed axis the repeated end point shares the weight of the first."""
    closed = is_closed(x, P)
    xu = x[:-1] if closed else x
    n = xu.size
    yw = np.clip(x[0] + np.mod(y - x[0], P), x[0], x[0] + P)
    if n == 1:
        W = np.ones((y.size, 1))
    elif method == "nearest":
        d = np.abs(np.mod(yw[:, None] - xu[None, :] + P / 2, P) - P / 2)
        W = np.zeros((y.size, n))
        W[np.arange(y.size), d.argmin(axis=1)] = 1.0
    else:
        W = spline_matrix(xu, yw, 3 if method == "cubic" and n >= 3 else 1, period=P)
    if closed:
        W = np.concatenate([W, W[:, :1] / 2], axis=1)
        W[:, 0] /= 2
    return W


def uniform_period(ax):
    """``n * spacing`` of a uniform axis of ``n > 1`` points: its period as an open periodic
    grid."""
    return ax.size * (ax[-1] - ax[0]) / (ax.size - 1)


def grid_domain(grid, periodic=False):
    """``[(lo, hi), ...]`` per axis: ``[x[0], x[-1]]`` (``periodic``: ``[x[0], x[0] + n h)``)."""
    return [
        (float(x[0]), float(x[0] + uniform_period(x) if periodic and x.size > 1 else x[-1]))
        for x in as_grid(grid)
    ]


def tolerance(ax):
    """How far a coordinate of the axis ``ax`` may be from a point of it and still be that point:
    ``1e-6`` of the span (1 for one point), or of the largest magnitude where larger (float32
    rounds coordinates far from 0 to about ``6e-8`` of it)."""
    ax = np.asarray(ax, dtype=float)
    span = float(ax[-1] - ax[0]) if ax.size > 1 else 1.0
    return RTOL * max(span, float(np.max(np.abs(ax))) if ax.size else 0.0)


def same_grid(a, b):
    """True if the grids ``a`` and ``b`` have the same shape and coordinates (to a tolerance)."""
    if a is None or b is None or len(a) != len(b):
        return False
    pairs = zip(a, b, strict=False)
    return all(
        x.shape == y.shape and np.allclose(x, y, rtol=0, atol=tolerance(x)) for x, y in pairs
    )
