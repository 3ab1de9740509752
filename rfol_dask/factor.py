"""Factorisation and solve kernels of the ridge normal equations (``A = phi(U)`` M x N, ``V``
M x m): the dual ``(H K H + alpha I) Beta = V - vbar``, ``K = A A^T``, ``C = A^T Beta``
(``H = I - 1 1^T / M``); the primal ``(A_c^T A_c + alpha I) C = A_c^T V_c`` with
``A_c^T A_c = A^T A - M mu mu^T``: no centred copy of ``A`` is formed. Each kernel runs in the
namespace of its arguments (numpy: in-place LAPACK; CuPy: on the GPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from .backend import (
    as_fortran,
    centre_gram,
    cho_solve,
    cholesky,
    diagonal,
    fortran_copy,
    namespace,
    sized_by_arrays,
    symmetrize,
)
from .linalg import blas_limits, factor_threads, recorded_ridges


@sized_by_arrays
@dataclass
class DualFactor:
    """The factorised dual system: ``L`` (M, M) the lower Cholesky factor of ``H K H + alpha I``
    (None once only the intercepts are needed), ``r`` (M,) the row sums ``K 1``, ``vbar`` (m,)
    the output means (zeros without intercept), ``ridge`` the ridge used (None: made elsewhere,
    the blocked factorisation)."""

    L: np.ndarray | None
    r: np.ndarray
    vbar: np.ndarray
    M: int
    fit_intercept: bool
    ridge: float | None = None

    def without_factor(self):
        """The small parts only (``L`` dropped), so that the factor is freed after the solve."""
        return dataclasses.replace(self, L=None)


@sized_by_arrays
@dataclass
class PrimalFactor:
    """The factorised primal system: ``L`` (N, N) the lower Cholesky factor of
    ``A_c^T A_c + alpha I``, ``AtV`` (N, m) ``A_c^T V_c``, the feature and output means ``mu``
    (N,) and ``vbar`` (m,) (zeros without intercept), ``ridge`` the ridge used."""

    L: np.ndarray
    AtV: np.ndarray
    mu: np.ndarray
    vbar: np.ndarray
    ridge: float | None = None


def gram_place(K, offsets, i, *tiles):
    """Copy the tiles ``A_i A_j^T`` (j >= i) of row block ``i`` into the upper block triangle of
    the C-ordered ``K`` (M, M) in place (``offsets``: the row-block starts); returns ``K``."""
    for j, T in enumerate(tiles, start=i):
        K[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]] = T
    return K


def lift_ones(mean_diag, M):
    """The constant added to every entry of a centred Gram ``H K H`` (M, M) at ``alpha = 0``, so
    that the ones direction (its null space) gets the eigenvalue ``mean_diag``; the solution,
    orthogonal to ones, is unchanged."""
    return mean_diag / M


def dual_factor(K, vsum, alpha, fit_intercept, upper=False, warn=True):
    """Centre the Gram ``K`` (M, M) (full, or C-ordered with its upper block triangle filled:
    ``upper``) and factorise ``H K H + alpha I`` in place; returns a :class:`DualFactor`.
    ``vsum`` (m,): the column sums of ``V``. At ``alpha = 0`` the ones direction is lifted
    (:func:`lift_ones`). ``warn=False`` (a graph task): a raised ridge is kept in ``ridge`` for
    the client to warn about. ``H K H`` does not depend on a shift of the features."""
    M, xp = K.shape[0], namespace(K)
    # K.T of a C-ordered symmetric K is the Fortran-ordered view LAPACK factorises in place
    K = symmetrize(K, "upper").T if upper else as_fortran(K)
    r = xp.sum(K, axis=1)
    if fit_intercept:
        centre_gram(K, r / M, xp.sum(r) / M**2)  # one pass; K stays exactly symmetric
        if alpha == 0:
            K += lift_ones(xp.mean(xp.abs(diagonal(K))), M)
    L, ridge = _factorised(K, alpha, warn)
    vbar = vsum / M if fit_intercept else xp.zeros_like(vsum)
    return DualFactor(L=L, r=r, vbar=vbar, M=M, fit_intercept=fit_intercept, ridge=ridge)


def _factorised(G, alpha, warn):
    """:func:`rfol_dask.backend.cholesky` of ``G``: ``(L, ridge)``; without ``warn`` a raised
    ridge is recorded, not warned."""
    with contextlib.nullcontext() if warn else recorded_ridges():
        L, ridge = cholesky(G, alpha)
    return L, float(ridge)


def used_ridge(fac):
    """``(ridge, dtype name)`` of the factorisation in ``fac`` (None: made elsewhere), for the
    client to warn about a raised ridge (a task's warning stays on its worker)."""
    return None if fac.ridge is None else (fac.ridge, str(fac.vbar.dtype))


def dual_solve(fac, V, start=0, borrow_threads=False, overwrite=False):
    """Centred dual coefficients ``H Beta`` (M, k) of the output columns ``start:start+k`` in
    ``V`` (M, k); ``borrow_threads``: on the factorisation's cores; ``overwrite``: in the memory
    of a Fortran-ordered ``V`` (else in a copy)."""
    limits = factor_threads() if borrow_threads else None
    vbar = fac.vbar[start : start + V.shape[1]]
    if not overwrite:
        V = fortran_copy(V)
    V -= vbar
    with blas_limits(limits):
        Beta = cho_solve(fac.L, V, overwrite=True)
    if fac.fit_intercept:
        Beta -= namespace(Beta).mean(Beta, axis=0)
    return Beta


def dual_intercept(fac, Beta, C=None, shift=None, start=0):
    """Intercepts ``vbar - mu^T C`` (k,) of the columns ``start:start+k`` of ``Beta`` (M, k):
    ``mu^T C = s^T C + r^T Beta / M`` for the features shifted by ``shift`` (N,) and ``C``
    (N, k); a kernel method passes neither."""
    if not fac.fit_intercept:
        return namespace(Beta).zeros(Beta.shape[1], dtype=Beta.dtype)
    out = fac.vbar[start : start + Beta.shape[1]] - (fac.r @ Beta) / fac.M
    return out if C is None else out - shift @ C


def primal_factor(sums, shifts, alpha, fit_intercept, warn=True):
    """Centre the :class:`rfol_dask.gram.PrimalSums` ``sums`` (of the data shifted by
    ``shifts = (s (N,), t (m,))``) and factorise ``A_c^T A_c + alpha I`` in place; returns a
    :class:`PrimalFactor` (``warn``: as for :func:`dual_factor`). With ``d``, ``e`` the means of
    ``A - s`` and ``V - t``: ``A_c^T A_c = G - M d d^T``, ``A_c^T V_c = AtV - M d e^T``."""
    G, AtV, M = symmetrize(sums.G, "lower"), sums.AtV, sums.count
    xp = namespace(G)
    if fit_intercept:
        d, e = sums.colsum / M, sums.vsum / M
        N = G.shape[0]
        rows = max(1, 2**21 // max(1, N))  # row blocks of 16 MiB (float64): no N x N temporary
        for r0 in range(0, N, rows):
            r1 = min(r0 + rows, N)  # (the array API has no out-of-bounds slices)
            G[r0:r1, :] -= M * (d[r0:r1, None] * d[None, :])  # as np.outer forms them
        AtV = AtV - M * (d[:, None] * e[None, :])
        mu, vbar = shifts[0] + d, shifts[1] + e
    else:
        mu, vbar = xp.zeros(G.shape[0], dtype=G.dtype), xp.zeros(AtV.shape[1], dtype=G.dtype)
    L, ridge = _factorised(G, alpha, warn)
    return PrimalFactor(L=L, AtV=AtV, mu=mu, vbar=vbar, ridge=ridge)


def primal_solve(fac, start, stop):
    """Coefficients ``C[:, start:stop]`` (N, k) and their intercepts (k,) from the primal factor."""
    C = cho_solve(fac.L, fac.AtV[:, start:stop])
    return C, fac.vbar[start:stop] - fac.mu @ C
