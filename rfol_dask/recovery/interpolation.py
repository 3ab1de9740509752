"""Recovery maps applied one axis at a time: the :class:`Recovery` base, piecewise-polynomial
:class:`GridInterpolation` and trigonometric :class:`SpectralResampling`."""

from __future__ import annotations

from functools import partial

import dask.array as da
import numpy as np

from . import grids


def apply_matrix(values, axis, W):
    """``values`` with ``axis`` (length n) mapped by ``W`` (n_out, n)."""
    return np.moveaxis(np.tensordot(W, values, axes=([1], [axis])), 0, axis)


class Recovery:
    """Base class: a linear map from values on ``grid_in`` to values on any grid of its domain;
    subclasses give ``_matrix(axis, y)``, the (len(y), n_axis) map of one axis, or ``_apply``."""

    kind = None
    periodic = False

    def __init__(self, grid_in, periods=None):
        self.grid_in = grids.as_grid(grid_in, "grid_in")
        self.shape_in = tuple(x.size for x in self.grid_in)
        self.periods = grids.as_periods(periods, self.grid_in)
        self._cache = {}

    @property
    def ndim(self):
        return len(self.grid_in)

    def domain(self):
        """``[(lo, hi), ...]`` per axis of ``grid_in`` (``(x[0], x[0] + P)`` on an axis of period
        ``P``)."""
        domain = grids.grid_domain(self.grid_in, self.periodic)
        axes = zip(self.grid_in, self.periods, domain, strict=False)
        return [(ax[0], ax[0] + P) if P is not None else d for ax, P, d in axes]

    def check_grid(self, grid, name="grid_out", where="the grid it is recovered from"):
        """``grid`` as a tuple of axes, clipped into the domain; ValueError if it has the wrong
        number of axes or leaves the domain by more than :func:`grids.tolerance`."""
        grid = grids.as_grid(grid, name)
        if len(grid) != self.ndim:
            raise ValueError(
                f"{name} has {len(grid)} axes but the recovery grid has {self.ndim} "
                f"(shape {self.shape_in}): pass one coordinate array per axis"
            )
        out = []
        axes = zip(grid, self.domain(), self.grid_in, self.periods, strict=False)
        for k, (y, (lo, hi), x, P) in enumerate(axes):
            if P is not None:  # wraps: every coordinate is valid
                out.append(y)
                continue
            tol = grids.tolerance(x)
            if y[0] < lo - tol or y[-1] > hi + tol:
                hint = "if the axis is periodic, give its period: the coordinate attribute "
                hint += "'period' or fit(..., periods=)"
                if self.kind == "rf":
                    hint = "recovery 'rf' does not wrap periodic axes: use 'cubic' or 'spectral'"
                raise ValueError(
                    f"{name} spans [{y[0]:.10g}, {y[-1]:.10g}] along axis {k}, outside the domain "
                    f"[{lo:.10g}, {hi:.10g}] of {where}; recovery does not extrapolate ({hint})"
                )
            out.append(np.clip(y, lo, hi))
        return tuple(out)

    def resample(self, values, grid_out):
        """Values (M, *grid_out shape) of the recovered functions on ``grid_out`` (inside the
        domain) from ``values`` (M, *grid_in shape), (M, prod(grid_in shape)) or one function's
        (grid_in shape); numpy or dask (mapped lazily over the sample chunks), float32 kept."""
        grid_out = self.check_grid(grid_out)
        shape_out = tuple(y.size for y in grid_out)
        single = tuple(values.shape) == self.shape_in
        if single:
            values = values[None]
        if values.ndim == 2 and self.ndim != 1 and values.shape[1] == int(np.prod(self.shape_in)):
            values = values.reshape((values.shape[0], *self.shape_in))
        if tuple(values.shape[1:]) != self.shape_in:
            raise ValueError(
                f"values have shape {tuple(values.shape)} but the recovery grid has shape "
                f"{self.shape_in}: pass (n_samples, *grid shape)"
            )
        dtype = np.float32 if values.dtype == np.float32 else np.float64
        if isinstance(values, da.Array):
            values = values.rechunk({k: -1 for k in range(1, values.ndim)})
            out = values.map_blocks(
                partial(self._resample_block, grid_out=grid_out, dtype=dtype),
                chunks=(values.chunks[0], *shape_out),
                dtype=dtype,
            )
        else:
            out = self._resample_block(np.asarray(values), grid_out, dtype)
        return out[0] if single else out

    @staticmethod
    def _finite(block):
        block = np.asarray(block, dtype=np.float64)
        if not np.all(np.isfinite(block)):
            raise ValueError("values hold NaN or Inf; recovery needs finite values")
        return block

    def _resample_block(self, block, grid_out, dtype):
        out = self._finite(block)
        for axis, y in enumerate(grid_out):
            if not grids.same_grid((self.grid_in[axis],), (y,)):
                out = self._apply(out, axis + 1, axis, y)
        return out.astype(dtype, copy=False)

    def _apply(self, values, array_axis, axis, y):
        W = self._cached((axis, y.tobytes()), lambda: self._matrix(axis, y))
        return apply_matrix(values, array_axis, W)

    def _cached(self, key, make):
        if key not in self._cache:
            if len(self._cache) > 32:
                self._cache.clear()
            self._cache[key] = make()
        return self._cache[key]

    def __repr__(self):
        return f"{type(self).__name__}(kind={self.kind!r}, shape_in={self.shape_in})"


class GridInterpolation(Recovery):
    """Piecewise-polynomial interpolation on a rectilinear grid, ``RegularGridInterpolator``'s
    ``method`` (``"cubic"``: not-a-knot, ``"linear"`` or ``"nearest"``) one axis at a time; an axis
    with too few points for cubic falls back to linear."""

    def __init__(self, grid_in, method="cubic", periods=None):
        super().__init__(grid_in, periods)
        if method not in ("cubic", "linear", "nearest"):
            raise ValueError(f"method must be 'cubic', 'linear' or 'nearest', got {method!r}")
        self.kind = self.method = method

    def _matrix(self, axis, y):
        x, n = self.grid_in[axis], self.grid_in[axis].size
        if self.periods[axis] is not None:
            return grids.periodic_matrix(x, self.periods[axis], y, self.method)
        if n == 1:
            return np.ones((y.size, 1))
        y = np.clip(y, x[0], x[-1])
        if self.method == "nearest":  # the node RegularGridInterpolator picks (ties to the left)
            from scipy.interpolate import RegularGridInterpolator

            W = np.zeros((y.size, n))
            node = RegularGridInterpolator((x,), np.arange(n, dtype=float), method="nearest")
            W[np.arange(y.size), node(y[:, None]).astype(np.int64)] = 1.0
            return W
        return grids.spline_matrix(x, y, 3 if self.method == "cubic" and n >= 4 else 1)


class SpectralResampling(Recovery):
    """Trigonometric interpolation on uniform periodic grids (period ``n * spacing`` unless
    given), exact at the output points: by FFT and folding onto uniform output axes, by an
    (n_out, n) evaluation matrix onto others; the Nyquist mode of even ``n`` read as ``cos``."""

    kind = "spectral"
    periodic = True

    def __init__(self, grid_in, periods=None):
        super().__init__(grid_in, periods)
        for k, (x, P) in enumerate(zip(self.grid_in, self.periods, strict=False)):
            if x.size > 2 and not np.allclose(np.diff(x), x[1] - x[0], rtol=grids.RTOL, atol=0):
                raise ValueError(
                    f"spectral resampling needs uniform periodic axes; axis {k} is not uniform "
                    "(use kind='cubic' for general grids)"
                )
            n = x.size - 1 if P is not None and grids.is_closed(x, P) else x.size
            if P is not None and n > 1 and abs(n * (x[1] - x[0]) - P) > grids.RTOL * P:
                raise ValueError(
                    "spectral resampling needs the nodes of a periodic axis to split its period "
                    f"uniformly: axis {k} has {n} points {x[1] - x[0]:g} apart but period {P:g} "
                    "(use kind='cubic')"
                )

    @staticmethod
    def _wavenumbers(n):
        """Wavenumbers (K,) of the Fourier coefficients, ``+n/2`` appended for even ``n``."""
        k = np.rint(np.fft.fftfreq(n) * n).astype(np.int64)
        return np.concatenate([k, [n // 2]]) if n % 2 == 0 else k

    def _apply(self, values, array_axis, axis, y):
        x, P = self.grid_in[axis], self.periods[axis]
        if x.size == 1:
            return np.repeat(values, y.size, axis=array_axis)
        period = grids.uniform_period(x) if P is None else P
        if P is not None and grids.is_closed(x, P):  # the repeated end point: into the first
            last = np.take(values, -1, axis=array_axis)
            values = np.delete(values, -1, axis=array_axis)
            first = (slice(None),) * array_axis + (0,)
            values[first] = (values[first] + last) / 2
        n, m = values.shape[array_axis], y.size
        if m == 1 or np.allclose(np.diff(y), period / m, rtol=grids.RTOL, atol=0):  # FFT, fold
            k = self._wavenumbers(n)
            C = np.fft.fft(np.moveaxis(values, array_axis, -1), axis=-1) / n
            if n % 2 == 0:  # the Nyquist mode split in halves at -n/2 and n/2
                C[..., n // 2] *= 0.5
                C = np.concatenate([C, C[..., n // 2 : n // 2 + 1]], axis=-1)
            C = C * np.exp(2j * np.pi * k * (y[0] - x[0]) / period)
            lead, C2 = C.shape[:-1], C.reshape(-1, C.shape[-1])
            folded = np.zeros((C2.shape[0], m), dtype=complex)
            np.add.at(folded, (slice(None), k % m), C2)
            out = (np.fft.ifft(folded, axis=-1) * m).real.reshape((*lead, m))
            return np.moveaxis(out, -1, array_axis)

        def matrix():  # E C^T, C (n, K) the coefficients of the unit vectors: the DFT of E's rows
            E = np.exp(2j * np.pi * np.outer(y - x[0], self._wavenumbers(n)) / period)  # (m, K)
            if n % 2 == 0:  # the split Nyquist mode: both halves on bin n/2
                E[:, n // 2] = (E[:, n // 2] + E[:, n]) / 2
            return np.fft.fft(E[:, :n], axis=1).real / n

        W = self._cached((axis, y.tobytes()), matrix)
        return apply_matrix(values, array_axis, W)
