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
    ``scipy.interpolate.RegularGridInterpolator`` along each axis (cubic: not-a-knot
    spline, solved directly; needs 4 points per axis). Exact on cubic polynomials.
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

import numbers
from collections.abc import Mapping, Sequence
from functools import partial

import dask.array as da
import numpy as np
from numpy.typing import ArrayLike

from .features import check_random_state, draw_frequencies, feature_map
from .linalg import cho_solve, cholesky
from .memory import check_gram_memory

__all__ = ["KINDS", "as_grid", "as_periods", "make_recovery", "Recovery", "GridInterpolation", "SpectralResampling",
           "RandomFeatureInterpolant", "same_grid", "grid_domain"]

KINDS = ("cubic", "linear", "nearest", "spectral", "rf")

#: tolerance on grid coordinates, relative to the span of the axis
_RTOL = 1e-6


def as_grid(grid, name="grid"):
    """Normalise a grid to a tuple of 1-D float64 coordinate arrays, one per axis.

    Accepts a 1-D array (one axis), a sequence of 1-D arrays, or a mapping
    ``{dim: coords}`` (e.g. ``DataArray.coords`` restricted to the grid dims; order kept).
    Every axis must be finite and strictly increasing.
    """
    if isinstance(grid, Mapping):
        axes = list(grid.values())
    elif isinstance(grid, np.ndarray) and grid.ndim == 1:
        axes = [grid]
    elif isinstance(grid, (list, tuple)) and grid and all(isinstance(g, numbers.Real) for g in grid):
        axes = [grid]
    elif isinstance(grid, (list, tuple)) and grid:
        axes = list(grid)
    else:
        raise TypeError(f"{name} must be a 1-D coordinate array, a sequence of them (one per axis) or a "
                        f"mapping dim -> coordinates; got {type(grid).__name__}")
    out = []
    for k, ax in enumerate(axes):
        ax = np.asarray(getattr(ax, "values", ax))
        if ax.ndim != 1 or ax.size == 0 or not np.issubdtype(ax.dtype, np.number):
            raise ValueError(f"{name}: axis {k} must be a non-empty 1-D array of numbers, got shape {ax.shape} "
                             f"and dtype {ax.dtype}")
        ax = ax.astype(np.float64)
        if not np.all(np.isfinite(ax)):
            raise ValueError(f"{name}: axis {k} holds NaN or Inf")
        if ax.size > 1 and not np.all(np.diff(ax) > 0):
            raise ValueError(f"{name}: axis {k} must be strictly increasing")
        out.append(ax)
    return tuple(out)


def as_periods(periods, grid, name="periods"):
    """Per-axis periods of ``grid``: a tuple of float or None (non-periodic), one per axis.

    ``periods`` is None (no periodic axis), one number (every axis) or a sequence with one
    entry per axis. Each period must be > 0 and its axis must fit in one period (an open
    grid, or a closed one whose last point is ``x[0] + period``); else ValueError.
    """
    grid = as_grid(grid)
    if periods is None:
        return (None,) * len(grid)
    if isinstance(periods, numbers.Real):
        periods = (periods,) * len(grid)
    periods = tuple(periods)
    if len(periods) != len(grid):
        raise ValueError(f"{name} has {len(periods)} entries but the grid has {len(grid)} axes: "
                         "give one period (or None) per axis")
    out = []
    for k, (ax, P) in enumerate(zip(grid, periods)):
        if P is None:
            out.append(None)
            continue
        if not isinstance(P, numbers.Real) or isinstance(P, bool) or not np.isfinite(P) or P <= 0:
            raise ValueError(f"{name}: the period of axis {k} must be a positive number, got {P!r}")
        P = float(P)
        if ax[-1] - ax[0] > P * (1 + _RTOL):
            raise ValueError(f"{name}: axis {k} spans [{ax[0]:g}, {ax[-1]:g}], more than its period {P:g}; "
                             "a periodic axis must lie in one period, e.g. [0, period)")
        out.append(P)
    return tuple(out)


def _closed(ax, P):
    """True if the periodic axis ``ax`` repeats its first point at ``ax[0] + P``."""
    return ax.size > 1 and abs(ax[-1] - ax[0] - P) <= _RTOL * P


def _periodic_matrix(x, P, y, method):
    """The (len(y), len(x)) map of values on the periodic axis ``x`` (period ``P``) to ``y``:
    wraps ``y`` into ``[x[0], x[0] + P)``; cubic: periodic spline, linear: wrapped hat
    functions (``scipy.interpolate.make_interp_spline``), nearest: nearest node modulo ``P``.
    On a closed axis the repeated end point shares the weight of the first."""
    closed = _closed(x, P)
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
        from scipy.interpolate import make_interp_spline

        k = 3 if method == "cubic" and n >= 3 else 1
        basis = np.vstack([np.eye(n), np.eye(n)[:1]])  # node values of the n cardinal functions, wrapped
        W = make_interp_spline(np.append(xu, x[0] + P), basis, k=k, bc_type="periodic" if k > 1 else None)(yw)
    if closed:
        W = np.concatenate([W, W[:, :1] / 2], axis=1)
        W[:, 0] /= 2
    return W


def grid_domain(grid, periodic=False):
    """``[(lo, hi), ...]`` per axis: ``[x[0], x[-1]]``, or ``[x[0], x[0] + n * spacing)`` if ``periodic``."""
    out = []
    for ax in as_grid(grid):
        hi = ax[0] + ax.size * (ax[-1] - ax[0]) / (ax.size - 1) if periodic and ax.size > 1 else ax[-1]
        out.append((float(ax[0]), float(hi)))
    return out


def _span(ax):
    return float(ax[-1] - ax[0]) if ax.size > 1 else 1.0


def same_grid(a, b):
    """True if the grids ``a`` and ``b`` have the same shape and coordinates (to ``1e-6`` of the span)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x.shape == y.shape and np.allclose(x, y, rtol=0, atol=_RTOL * _span(x)) for x, y in zip(a, b))


def _shape(grid):
    return tuple(len(ax) for ax in grid)


def _apply_matrix(values, axis, W):
    """``values`` with ``axis`` (length n) mapped by ``W`` (n_out, n); cost ``2 n n_out`` flops per line."""
    return np.moveaxis(np.tensordot(W, values, axes=([1], [axis])), 0, axis)


class Recovery:
    """Base class: a linear map from values on ``grid_in`` to values on any grid of its domain.

    Subclasses implement ``_matrix(axis, y)``: the (len(y), n_axis) map of grid axis
    ``axis`` to the points ``y`` (cached per output axis), or override ``_apply``.
    """

    kind = None
    periodic = False

    def __init__(self, grid_in, periods=None):
        self.grid_in = as_grid(grid_in, "grid_in")
        self.shape_in = _shape(self.grid_in)
        self.periods = as_periods(periods, self.grid_in)
        self._cache = {}

    @property
    def ndim(self):
        return len(self.grid_in)

    def domain(self):
        """``[(lo, hi), ...]`` per axis of ``grid_in`` (see :func:`grid_domain`); an axis with a
        given period gives ``(x[0], x[0] + period)`` (its points wrap, any coordinate is valid)."""
        return [(ax[0], ax[0] + P) if P is not None else d
                for ax, P, d in zip(self.grid_in, self.periods, grid_domain(self.grid_in, self.periodic))]

    def check_grid(self, grid, name="grid_out", where="the grid it is recovered from"):
        """``grid`` as a tuple of axes, clipped into the domain; ValueError if it has the wrong
        number of axes or leaves the domain by more than ``1e-6`` of the span."""
        grid = as_grid(grid, name)
        if len(grid) != self.ndim:
            raise ValueError(f"{name} has {len(grid)} axes but the recovery grid has {self.ndim} "
                             f"(shape {self.shape_in}): pass one coordinate array per axis")
        out = []
        for k, (y, (lo, hi), x, P) in enumerate(zip(grid, self.domain(), self.grid_in, self.periods)):
            if P is not None:  # wraps: every coordinate is valid
                out.append(y)
                continue
            tol = _RTOL * _span(x)
            if y[0] < lo - tol or y[-1] > hi + tol:
                raise ValueError(
                    f"{name} spans [{y[0]:g}, {y[-1]:g}] along axis {k}, outside the domain [{lo:g}, {hi:g}] of "
                    f"{where}; recovery does not extrapolate (if the axis is periodic, give its period: the "
                    "coordinate attribute 'period' or fit(..., periods=))")
            out.append(np.clip(y, lo, hi))
        return tuple(out)

    def resample(self, values, grid_out):
        """Values of the recovered functions on ``grid_out``.

        Parameters
        ----------
        values : ndarray or dask.array, shape (M, *grid_in shape)
            Also accepted: (M, prod(grid_in shape)) and, for one function, ``grid_in`` shape.
        grid_out : grid (see :func:`as_grid`) inside the domain.

        Returns
        -------
        Same kind as ``values``, shape (M, *grid_out shape) (or ``grid_out`` shape for one
        function); float32 in gives float32 out. Dask input is mapped blockwise over its
        sample chunks (grid axes rechunked whole), lazily; results do not depend on chunks.
        Memory: a few copies of one block of values on the larger of the two grids.
        """
        grid_out = self.check_grid(grid_out)
        shape_out = _shape(grid_out)
        single = tuple(values.shape) == self.shape_in
        if single:
            values = values[None]
        if values.ndim == 2 and self.ndim != 1 and values.shape[1] == int(np.prod(self.shape_in)):
            values = values.reshape((values.shape[0], *self.shape_in))
        if tuple(values.shape[1:]) != self.shape_in:
            raise ValueError(f"values have shape {tuple(values.shape)} but the recovery grid has shape "
                             f"{self.shape_in}: pass (n_samples, *grid shape)")
        dtype = np.float32 if values.dtype == np.float32 else np.float64
        if isinstance(values, da.Array):
            values = values.rechunk({k: -1 for k in range(1, values.ndim)})
            out = values.map_blocks(partial(self._resample_block, grid_out=grid_out, dtype=dtype),
                                    chunks=(values.chunks[0], *shape_out), dtype=dtype)
        else:
            out = self._resample_block(np.asarray(values), grid_out, dtype)
        return out[0] if single else out

    def _resample_block(self, block, grid_out, dtype):
        out = np.asarray(block, dtype=np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError("values hold NaN or Inf; recovery needs finite values")
        for axis, y in enumerate(grid_out):
            if not same_grid((self.grid_in[axis],), (y,)):
                out = self._apply(out, axis + 1, axis, y)
        return out.astype(dtype, copy=False)

    def _apply(self, values, array_axis, axis, y):
        """``values`` (float64) mapped along ``array_axis`` (grid axis ``axis``) to the points ``y``."""
        W = self._cached((axis, y.tobytes()), lambda: self._matrix(axis, y))
        return _apply_matrix(values, array_axis, W)

    def _cached(self, key, make):
        if key not in self._cache:
            if len(self._cache) > 32:
                self._cache.clear()
            self._cache[key] = make()
        return self._cache[key]

    def __repr__(self):
        return f"{type(self).__name__}(kind={self.kind!r}, shape_in={self.shape_in})"


class GridInterpolation(Recovery):
    """Piecewise-polynomial interpolation on a rectilinear grid: ``RegularGridInterpolator``
    (``method`` ``"cubic"``, ``"linear"`` or ``"nearest"``) applied along each axis.

    The per-axis map (n_out, n_in) is built once per output axis by interpolating the
    identity; the cubic spline is solved with a direct sparse solver (scipy's default
    iterative one stops near 1e-6). Cost per function ``2 n_in n_out`` flops per axis line;
    memory ``8 n_in n_out`` bytes per axis map. An axis with fewer than 4 points
    (``"cubic"``) or 2 points (``"linear"``) falls back to the highest order it allows.
    """

    def __init__(self, grid_in, method="cubic", periods=None):
        super().__init__(grid_in, periods)
        if method not in ("cubic", "linear", "nearest"):
            raise ValueError(f"method must be 'cubic', 'linear' or 'nearest', got {method!r}")
        self.kind = self.method = method

    def _matrix(self, axis, y):
        from scipy.interpolate import RegularGridInterpolator
        from scipy.sparse.linalg import spsolve

        x = self.grid_in[axis]
        n = x.size
        if self.periods[axis] is not None:
            return _periodic_matrix(x, self.periods[axis], y, self.method)
        if n == 1:
            return np.ones((y.size, 1))
        method = self.method
        if method == "cubic" and n < 4:
            method = "linear"
        kw = {"solver": spsolve} if method == "cubic" else {}
        interp = RegularGridInterpolator((x,), np.eye(n), method=method, **kw)
        return interp(np.clip(y, x[0], x[-1])[:, None])


class SpectralResampling(Recovery):
    """Trigonometric interpolation on uniform periodic grids (every axis periodic with period
    ``n * spacing``), evaluated exactly on the output grid.

    Uniform output axes use the FFT (coefficients, phase shift, fold onto ``n_out`` bins,
    inverse FFT): ``O(n log n + n_out log n_out)`` per line, exact point values (folding, not
    truncation, so output nodes that are input nodes get the input values). Other output
    axes use the (n_out, n) evaluation matrix. Even ``n``: the Nyquist mode is read as
    ``cos``. Memory: complex copies of one block of values.
    """

    kind = "spectral"
    periodic = True

    def __init__(self, grid_in, periods=None):
        super().__init__(grid_in, periods)
        for k, (x, P) in enumerate(zip(self.grid_in, self.periods)):
            if x.size > 2 and not np.allclose(np.diff(x), x[1] - x[0], rtol=_RTOL, atol=0):
                raise ValueError(f"spectral resampling needs uniform periodic axes; axis {k} is not uniform "
                                 "(use kind='cubic' for general grids)")
            n = x.size - 1 if P is not None and _closed(x, P) else x.size
            if P is not None and n > 1 and abs(n * (x[1] - x[0]) - P) > _RTOL * P:
                raise ValueError(
                    f"spectral resampling needs the nodes of a periodic axis to split its period uniformly: "
                    f"axis {k} has {n} points {x[1] - x[0]:g} apart but period {P:g} (use kind='cubic')")

    def _period(self, axis):
        """``(period, closed)`` of grid axis ``axis``: the given period, else ``n * spacing``."""
        x, P = self.grid_in[axis], self.periods[axis]
        if P is None:
            return x.size * (x[-1] - x[0]) / (x.size - 1), False
        return P, _closed(x, P)

    def _coefficients(self, values, array_axis, n):
        """Fourier coefficients along ``array_axis`` (moved last), Nyquist split: (..., K), k (K,)."""
        C = np.fft.fft(np.moveaxis(values, array_axis, -1), axis=-1) / n
        k = np.rint(np.fft.fftfreq(n) * n).astype(np.int64)
        if n % 2 == 0:
            C[..., n // 2] *= 0.5
            C = np.concatenate([C, C[..., n // 2:n // 2 + 1]], axis=-1)
            k = np.concatenate([k, [n // 2]])
        return C, k

    def _apply(self, values, array_axis, axis, y):
        x = self.grid_in[axis]
        if x.size == 1:
            return np.repeat(values, y.size, axis=array_axis)
        period, closed = self._period(axis)
        if closed:  # the repeated end point: averaged into the first, then dropped
            last = np.take(values, -1, axis=array_axis)
            values = np.delete(values, -1, axis=array_axis)
            first = (slice(None),) * array_axis + (0,)
            values[first] = (values[first] + last) / 2
        n = values.shape[array_axis]
        m = y.size
        uniform = m == 1 or (np.allclose(np.diff(y), period / m, rtol=_RTOL, atol=0))
        if uniform:
            C, k = self._coefficients(values, array_axis, n)
            C = C * np.exp(2j * np.pi * k * (y[0] - x[0]) / period)
            lead = C.shape[:-1]
            C2 = C.reshape(-1, C.shape[-1])
            folded = np.zeros((C2.shape[0], m), dtype=complex)
            np.add.at(folded, (slice(None), k % m), C2)
            out = (np.fft.ifft(folded, axis=-1) * m).real.reshape((*lead, m))
            return np.moveaxis(out, -1, array_axis)

        def matrix():
            C, k = self._coefficients(np.eye(n), 0, n)  # (n, K): row j = coefficients of e_j
            E = np.exp(2j * np.pi * np.outer(y - x[0], k) / period)  # (m, K)
            return (E @ C.T).real

        W = self._cached((axis, y.tobytes()), matrix)
        return _apply_matrix(values, array_axis, W)


class RandomFeatureInterpolant(Recovery):
    """The paper's min-norm random-feature recovery map on a grid.

    For each factor of the grid (each axis when ``separable``, else all grid points at once)
    with points ``x`` (n, k), coordinates divided by the mean spacing of each axis:
    features ``A = sqrt(2/N) cos(x Omega + b)`` (n, N), ``Omega`` from ``distribution`` with
    scale ``gamma`` (as in :mod:`rfol_dask.features`), the Gram ``G = A A^T + ridge I``
    factorised once (:func:`rfol_dask.solve.cholesky`, with its jitter policy). A function's
    values ``u`` (centred: constants are reproduced exactly) give ``c = A^T G^{-1} u`` and
    values ``Phi(y) c`` anywhere. The factor serves every function: per output grid the
    map ``Phi(y) A^T G^{-1}`` (n_out x n) is formed once from ``n_out`` triangular solves
    and then applied to all M functions as one matrix product (this keeps the results
    independent of how the samples are chunked; solving with the M functions as
    right-hand sides costs the same but lets the Gram's conditioning amplify rounding).

    ``separable=True`` uses products of 1-D features (``prod N_a`` features of the tensor-
    product kernel; the min-norm problem factorises into 1-D ones, ridge per axis): memory
    ``8 (n_a^2 + n_a N_a)`` bytes per axis. ``separable=False`` draws d-dimensional
    frequencies as in the paper: the Gram covers the whole grid, ``8 n^2`` bytes for n grid
    points (checked against the memory budget), ``n^3 / 3`` flops to factorise.

    Parameters
    ----------
    grid_in : grid
    distribution : {"gaussian", "cauchy", "student_t"}, default="gaussian"
        Gaussian is the default: with it the interpolant approaches spectral accuracy (to
        its Monte-Carlo error); Cauchy features (kernel ``exp(-gamma |x - y|)``) give rough
        interpolants (see the module docstring).
    gamma : float, default=None
        Frequency scale in units of the grid spacing. ``None``: Gaussian ``(0.2 pi)^2 / 2``
        (frequency standard deviation a fifth of the Nyquist frequency), Cauchy
        ``0.05 pi``, Student-t scale ``0.2 pi``.
    n_features : int, default=None
        Features per factor; ``None``: 16 per point of the factor.
    ridge : float, default=1e-6
        Added to the Gram (its diagonal is about 1). The default stabilises the map
        against the random features (nodes are matched to about 1e-4 of the data for
        smooth functions); raise it for noisy data. ``0`` (or ``1e-12``) is the paper's
        min-norm interpolation, exact at the nodes but sensitive to the features.
    separable : bool, default=True
    nu : float, default=3.0
        Degrees of freedom for ``distribution="student_t"``.
    random_state : int, Generator or None, default=0
        Seed of the frequencies (a fixed default: the same grid gives the same map).
    """

    kind = "rf"

    def __init__(self, grid_in, *, distribution="gaussian", gamma=None, n_features=None, ridge=1e-6,
                 separable=True, nu=3.0, random_state=0):
        super().__init__(grid_in)
        if distribution not in ("gaussian", "cauchy", "student_t"):
            raise ValueError(f"distribution must be 'gaussian', 'cauchy' or 'student_t', got {distribution!r}")
        if gamma is not None and not gamma > 0:
            raise ValueError(f"gamma must be > 0, got {gamma!r}")
        if not ridge >= 0:
            raise ValueError(f"ridge must be >= 0, got {ridge!r}")
        self.distribution, self.ridge, self.separable, self.nu = distribution, float(ridge), bool(separable), nu
        if gamma is None:
            gamma = {"gaussian": (0.2 * np.pi) ** 2 / 2, "cauchy": 0.05 * np.pi, "student_t": 0.2 * np.pi}[distribution]
        self.gamma = float(gamma)
        self.scale = [(x[-1] - x[0]) / (x.size - 1) if x.size > 1 else 1.0 for x in self.grid_in]
        rng = check_random_state(random_state)
        factors = [(a,) for a in range(self.ndim)] if self.separable else [tuple(range(self.ndim))]
        self.factors = []
        for axes in factors:
            pts = self._points(axes, [self.grid_in[a] for a in axes])
            n = pts.shape[0]
            N = int(n_features) if n_features is not None else 16 * n
            if not self.separable:
                check_gram_memory(n, np.float64)
            omega, b = draw_frequencies(len(axes), N, distribution, self.gamma, nu, rng)
            A = feature_map(pts, omega, b)
            G = np.asfortranarray(A @ A.T)
            try:
                L, used = cholesky(G, self.ridge)
            except ValueError as exc:
                raise ValueError(f"the random-feature Gram of grid axes {axes} is singular with ridge={self.ridge:g}: "
                                 "pass ridge > 0 (e.g. 1e-10), a larger gamma or more features") from exc
            self.factors.append({"axes": axes, "omega": omega, "b": b, "A": A, "L": L, "ridge": used})
        self.n_features = [f["omega"].shape[1] for f in self.factors]

    def _points(self, axes, coords):
        """Scaled points (n, len(axes)) of the tensor grid ``coords``, first axis slowest."""
        scaled = [(c - self.grid_in[a][0]) / self.scale[a] for a, c in zip(axes, coords)]
        mesh = np.meshgrid(*scaled, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def _map(self, f, coords):
        """The (n_out, n_in) map of factor ``f`` to the output coordinates ``coords``:
        ``W = Phi(y) A^T G^{-1}`` from the Cholesky factor (``n_out`` right-hand sides),
        corrected so that it centres the data first (``W + (1 - W 1) 1^T / n``)."""
        K = feature_map(self._points(f["axes"], coords), f["omega"], f["b"]) @ f["A"].T
        W = cho_solve(f["L"], np.asfortranarray(K.T)).T
        return W + (1.0 - W.sum(axis=1, keepdims=True)) / W.shape[1]

    def _matrix(self, axis, y):  # separable: one axis at a time
        return self._map(self.factors[axis], [y])

    def _resample_block(self, block, grid_out, dtype):
        if self.separable:
            return super()._resample_block(block, grid_out, dtype)
        block = np.asarray(block, dtype=np.float64)
        if not np.all(np.isfinite(block)):
            raise ValueError("values hold NaN or Inf; recovery needs finite values")
        key = ("joint",) + tuple(y.tobytes() for y in grid_out)
        W = self._cached(key, lambda: self._map(self.factors[0], list(grid_out)))
        out = block.reshape(block.shape[0], -1) @ W.T
        return out.reshape((block.shape[0], *_shape(grid_out))).astype(dtype, copy=False)


def make_recovery(kind: str | Mapping = "cubic",
                  grid_in: ArrayLike | Sequence[ArrayLike] | Mapping[str, ArrayLike] | None = None,
                  periods: float | Sequence[float | None] | None = None, **options) -> Recovery:
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
