"""The paper's min-norm random-feature recovery map (kind ``"rf"``)."""

from __future__ import annotations

import numpy as np

from ..features import check_random_state, draw_frequencies, feature_map
from ..linalg import cho_solve, cholesky
from ..memory import check_gram_memory
from .interpolation import Recovery

#: the default ``gamma`` of each distribution
_GAMMA = {"gaussian": (0.2 * np.pi) ** 2 / 2, "cauchy": 0.05 * np.pi, "student_t": 0.2 * np.pi}


def _check_factor_memory(n, N, k, n_out=0):
    """ValueError unless a factor of ``n`` grid points in ``k`` dimensions with ``N`` features
    fits the memory budget: its Gram (twice while made), or with ``n_out`` output points the map."""
    held = {f"the {n} x {N} features": n * N * 8, f"the {k} x {N} frequencies": (k + 1) * N * 8}
    if not n_out:  # A A^T is made C-ordered, then copied into Fortran order
        held["the Gram's Fortran-ordered copy"] = n * n * 8
    else:
        held[f"the {n_out} x {N} features of the output points"] = n_out * N * 8
        held[f"three {n_out} x {n} maps"] = 3 * n_out * n * 8
    try:
        check_gram_memory(n, np.float64, solver="recovery", held=held)
    except ValueError as exc:  # said of the recovery map, which the user may not know builds a Gram
        raise ValueError(f"recovery 'rf' on {n} grid points ({N} features): {exc}") from None


class RandomFeatureInterpolant(Recovery):
    """The paper's min-norm random-feature recovery map on a grid.

    For each factor of the grid (each axis when ``separable``, else the whole grid) with points
    ``x`` (n, k) in units of the mean spacing: features ``A = sqrt(2/N) cos(x Omega + b)``, the
    Gram ``G = A A^T + ridge I`` factorised once; centred values ``u`` give ``c = A^T G^{-1} u``
    and values ``Phi(y) c`` anywhere. Per output grid the map ``Phi(y) A^T G^{-1}`` is formed
    once and applied to all functions (results independent of the chunking). Separable: memory
    ``8 (n_a^2 + n_a N_a)`` bytes per axis; else ``8 n^2`` for the Gram and ``8 n N`` for the
    features (checked against the memory budget first).

    Parameters
    ----------
    grid_in : grid
    distribution : {"gaussian", "cauchy", "student_t"}, default="gaussian"
        Gaussian is the default: with it the interpolant approaches spectral accuracy (to
        its Monte-Carlo error); Cauchy features (kernel ``exp(-gamma |x - y|)``) give rough
        interpolants (see :mod:`rfol_dask.recovery`).
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

    def __init__(
        self,
        grid_in,
        *,
        distribution="gaussian",
        gamma=None,
        n_features=None,
        ridge=1e-6,
        separable=True,
        nu=3.0,
        random_state=0,
    ):
        super().__init__(grid_in)
        if distribution not in _GAMMA:
            raise ValueError(
                f"distribution must be 'gaussian', 'cauchy' or 'student_t', got {distribution!r}"
            )
        if gamma is not None and not gamma > 0:
            raise ValueError(f"gamma must be > 0, got {gamma!r}")
        if not ridge >= 0:
            raise ValueError(f"ridge must be >= 0, got {ridge!r}")
        self.distribution, self.ridge, self.nu = distribution, float(ridge), nu
        self.separable = bool(separable)
        self.gamma = float(_GAMMA[distribution] if gamma is None else gamma)
        self.scale = [(x[-1] - x[0]) / (x.size - 1) if x.size > 1 else 1.0 for x in self.grid_in]
        rng = check_random_state(random_state)
        factors = [(a,) for a in range(self.ndim)] if self.separable else [tuple(range(self.ndim))]
        self.factors = []
        for axes in factors:
            pts = self._points(axes, [self.grid_in[a] for a in axes])
            n = pts.shape[0]
            N = int(n_features) if n_features is not None else 16 * n
            _check_factor_memory(n, N, len(axes))  # before anything is drawn
            omega, b = draw_frequencies(len(axes), N, distribution, self.gamma, nu, rng)
            A = feature_map(pts, omega, b)
            G = np.asfortranarray(A @ A.T)
            try:
                L, used = cholesky(G, self.ridge)
            except ValueError as exc:
                raise ValueError(
                    f"the random-feature Gram of grid axes {axes} is singular with "
                    f"ridge={self.ridge:g}: pass ridge > 0 (e.g. 1e-10), a larger gamma or more "
                    "features"
                ) from exc
            self.factors.append(dict(axes=axes, omega=omega, b=b, A=A, L=L, ridge=used))
        self.n_features = [f["omega"].shape[1] for f in self.factors]

    def _points(self, axes, coords):
        """Scaled points (n, len(axes)) of the tensor grid ``coords``, first axis slowest."""
        scaled = [
            (c - self.grid_in[a][0]) / self.scale[a] for a, c in zip(axes, coords, strict=False)
        ]
        mesh = np.meshgrid(*scaled, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def _map(self, f, coords):
        """The (n_out, n_in) map ``W = Phi(y) A^T G^{-1}`` of factor ``f`` to the output coordinates
        ``coords``, corrected so that it centres the data first (``W + (1 - W 1) 1^T / n``)."""
        _check_factor_memory(*f["A"].shape, len(f["axes"]), int(np.prod([c.size for c in coords])))
        K = feature_map(self._points(f["axes"], coords), f["omega"], f["b"]) @ f["A"].T
        W = cho_solve(f["L"], np.asfortranarray(K.T)).T
        return W + (1.0 - W.sum(axis=1, keepdims=True)) / W.shape[1]

    def _matrix(self, axis, y):  # separable: one axis at a time
        return self._map(self.factors[axis], [y])

    def _resample_block(self, block, grid_out, dtype):
        if self.separable:
            return super()._resample_block(block, grid_out, dtype)
        block = self._finite(block)
        key = ("joint",) + tuple(y.tobytes() for y in grid_out)
        W = self._cached(key, lambda: self._map(self.factors[0], list(grid_out)))
        out = block.reshape(block.shape[0], -1) @ W.T
        return out.reshape((block.shape[0], *(y.size for y in grid_out))).astype(dtype, copy=False)
