"""Recovery maps (the paper's ``R_U`` and ``R_V``): grid values -> functions -> other grids.

A recovery is fitted once to a rectilinear grid ``grid_in`` (one 1-D coordinate array per
axis, d = 1 or 2 in the paper, any d here) and turns the values of many functions on that
grid, shape ``(M, *grid_in)``, into their values on any other grid of the same domain,
``(M, *grid_out)``: ``make_recovery(kind, grid_in).resample(values, grid_out)``. Every
map is linear in the values and a tensor product over the axes, so it is applied one axis
at a time (a small ``n_out x n_in`` map per axis; only the non-separable random-feature
option forms a map over the whole grid).

Kinds
-----
``"cubic"`` (default), ``"linear"``, ``"nearest"``
    ``scipy.interpolate.RegularGridInterpolator``'s splines along each axis (cubic: not-a-knot
    spline, solved directly; needs 4 points per axis), each axis map ``n_out x n_in`` built
    from the B-spline basis in that memory. Exact on cubic polynomials.
``"spectral"``
    Trigonometric interpolation on uniform periodic grids, period ``n * spacing``
    (``linspace(a, b, n, endpoint=False)``): FFT, fold or zero-pad, inverse FFT (uniform
    output grids) or an explicit evaluation matrix (other output grids). Exact for
    band-limited functions with ``|k| < n / 2`` modes.
``"rf"``
    The paper's min-norm random-feature interpolant (:class:`RandomFeatureInterpolant`):
    features ``sqrt(2/N) cos(omega x + b)`` in physical space, frequencies from the Cauchy
    or Gaussian law of :mod:`rfol_dask.features`, coefficients ``A^T (A A^T + ridge I)^{-1} u``
    from one Cholesky factor (:func:`rfol_dask.solve.cholesky`) applied to all functions.

Which kind: ``"cubic"`` is the default (robust, no hyperparameter, the most accurate general
kind on smooth data); ``"spectral"`` is exact for band-limited periodic data and is the choice on
periodic grids; ``"nearest"`` or ``"linear"`` avoid the overshoot of cubic on piecewise-constant
data; ``"rf"`` helps where a grid barely resolves oscillations but depends on its bandwidth,
feature count and ridge. The measurements behind this: ``benchmarks/README.md``, "Resolution".

Periods
-------
``make_recovery(kind, grid_in, periods=...)`` gives an axis a known period ``P`` (one entry
per axis, ``None`` for a non-periodic one; data-set coordinates carry it as the attribute
``period``). The axis must then lie in one period: an open grid (``x[-1] < x[0] + P``, e.g.
``arange(n) / n``) or a closed one whose last point repeats the first (``x[-1] = x[0] + P``,
e.g. ``linspace(0, 1, n)``; its last value is read as the first, averaged). On such an axis
the recovery wraps: any output coordinate is valid (read modulo ``P``); ``"cubic"`` is a
periodic cubic spline and ``"linear"`` / ``"nearest"`` wrap around
(``scipy.interpolate.make_interp_spline``); ``"spectral"`` uses ``P`` and needs the nodes to
split it uniformly. ``"rf"`` ignores periods (it is not periodic).

Domains: a non-periodic axis spans ``[x[0], x[-1]]``; a ``"spectral"`` axis without a given
period ``[x[0], x[0] + n h)`` (``n h`` is then taken as its period). Output points outside
(beyond a tolerance of ``1e-6`` of the span) are an error: recovery never extrapolates.
An axis with a given period has no bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numpy.typing import ArrayLike

from .grids import as_grid, as_periods, grid_domain, same_grid, tolerance, uniform_period
from .interpolation import GridInterpolation, Recovery, SpectralResampling
from .rf import RandomFeatureInterpolant

__all__ = [
    "KINDS",
    "as_grid",
    "as_periods",
    "make_recovery",
    "Recovery",
    "GridInterpolation",
    "SpectralResampling",
    "RandomFeatureInterpolant",
    "same_grid",
    "tolerance",
    "grid_domain",
    "uniform_period",
]

KINDS = ("cubic", "linear", "nearest", "spectral", "rf")


def make_recovery(
    kind: str | Mapping = "cubic",
    grid_in: ArrayLike | Sequence[ArrayLike] | Mapping[str, ArrayLike] | None = None,
    periods: float | Sequence[float | None] | None = None,
    **options,
) -> Recovery:
    """Build the recovery map of one grid, ready to resample values on it to other grids.

    Parameters
    ----------
    kind : {"cubic", "linear", "nearest", "spectral", "rf"} or dict, default="cubic"
        A dict is ``{"kind": ..., **options}`` (e.g. ``{"kind": "rf", "distribution":
        "cauchy"}``). ``"cubic"`` is the default: see the module docstring for the measured
        comparison.
    grid_in : 1-D array, sequence of 1-D arrays or mapping dim -> 1-D array
        The grid the values live on: one strictly increasing coordinate array per axis
        (:func:`as_grid`). Required.
    periods : None, float or sequence of (float or None), default=None
        Known period of each axis (see the module docstring and :func:`as_periods`): those
        axes wrap. Ignored by ``"rf"``.
    **options
        Passed to :class:`RandomFeatureInterpolant` for ``kind="rf"``; none for the others.

    Returns
    -------
    Recovery
        With ``.resample(values (M, *grid_in), grid_out) -> (M, *grid_out)`` (numpy or dask,
        chunks along ``M`` kept).

    Raises
    ------
    ValueError
        If ``kind`` is unknown, or ``grid_in`` or ``periods`` is invalid.
    TypeError
        If ``grid_in`` is missing, or options are given to a kind that takes none.
    """
    if isinstance(kind, Mapping):
        options = {**{k: v for k, v in kind.items() if k != "kind"}, **options}
        kind = kind.get("kind", "cubic")
    if kind not in KINDS:
        raise ValueError(f"unknown recovery kind {kind!r}; choose one of {KINDS}")
    if grid_in is None:
        raise TypeError("make_recovery needs grid_in")
    if kind == "rf":
        return RandomFeatureInterpolant(grid_in, **options)
    if options:
        raise TypeError(f"recovery kind {kind!r} takes no options, got {sorted(options)}")
    if kind == "spectral":
        return SpectralResampling(grid_in, periods)
    return GridInterpolation(grid_in, method=kind, periods=periods)
