"""Recovery maps (the paper's ``R_U`` and ``R_V``): grid values -> functions -> other grids.

``make_recovery(kind, grid_in).resample(values, grid_out)`` maps the values of many functions
on a rectilinear grid, ``(M, *grid_in)``, to another grid of the same domain, ``(M, *grid_out)``,
linearly and one axis at a time. Kinds: ``"cubic"`` (default; not-a-knot spline), ``"linear"``,
``"nearest"`` (no overshoot on piecewise-constant data), ``"spectral"`` (trigonometric
interpolation on uniform periodic grids) and ``"rf"`` (the paper's min-norm random-feature
interpolant). Measurements: ``benchmarks/README.md``, "Resolution".

``periods`` gives an axis a known period ``P`` (the coordinate attribute ``period``): the axis
lies in one period, open (``arange(n) / n``) or closed (last point ``x[0] + P``, read as the
first), and wraps, so any output coordinate is valid (``"rf"`` ignores periods). Other output
points beyond ``1e-6`` of the grid's span are an error: recovery never extrapolates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numpy.typing import ArrayLike

from .grids import as_grid, as_periods, grid_domain, same_grid, tolerance, uniform_period
from .interpolation import GridInterpolation, Recovery, SpectralResampling
from .rf import RandomFeatureInterpolant

__all__ = ["KINDS", "as_grid", "as_periods", "make_recovery", "Recovery", "GridInterpolation"]
__all__ += ["SpectralResampling", "RandomFeatureInterpolant", "same_grid", "tolerance"]
__all__ += ["grid_domain", "uniform_period"]

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
        "cauchy"}``).
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
