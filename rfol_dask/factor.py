"""Factorisation and solve kernels of the ridge normal equations, shared by the in-memory fit,
the dask graphs, the kernel baseline and the error curves.

Two regimes (``A = phi(U)`` is M x N, ``V`` is M x m, both centred when fitting an intercept):

- dual (``N >= M``): ``(H K H + alpha I) Beta = V - vbar`` with ``K = A A^T``, ``C = A^T Beta``;
- primal (``N < M``): ``(A_c^T A_c + alpha I) C = A_c^T V_c``.

Centring uses ``H K H`` in the dual (``H = I - 1 1^T / M``) and ``A^T A - M mu mu^T`` in the
primal, so no centred copy of ``A`` is ever formed. The Cholesky step and its jitter policy
are :func:`rfol_dask.linalg.cholesky`. Every kernel takes its array namespace from its
arguments (:mod:`rfol_dask.backend`): numpy runs the in-place LAPACK path, CuPy the GPU one.
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

__all__ = [
    "DualFactor",
    "PrimalFactor",
    "gram_place",
    "dual_factor",
    "dual_solve",
    "dual_intercept",
    "primal_factor",
    "primal_solve",
    "used_ridge",
]


@sized_by_arrays
@dataclass
class DualFactor:
    """The factorised dual system.

    Attributes
    ----------
    L : ndarray (M, M) or None
        Lower Cholesky factor of ``H K H + alpha I`` (only its lower triangle is meaningful);
        None where only the intercepts are still needed (:meth:`without_factor`).
    r : ndarray (M,)
        Row sums ``K 1`` of the (uncentred) Gram.
    vbar : ndarray (m,)
        Output means (zeros without intercept).
    M : int
        Samples.
    fit_intercept : bool
    ridge : float or None
        The ridge the factorisation used (``alpha``, or the jitter policy's raised one); None
        where it was made elsewhere (the blocked factorisation).
    """

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
    """The factorised primal system.

    Attributes
    ----------
    L : ndarray (N, N)
        Lower Cholesky factor of ``A_c^T A_c + alpha I``.
    AtV : ndarray (N, m)
        Right-hand sides ``A_c^T V_c``.
    mu : ndarray (N,)
        Feature means (zeros without intercept).
    vbar : ndarray (m,)
        Output means (zeros without intercept).
    ridge : float or None
        The ridge the factorisation used (``alpha``, or the jitter policy's raised one).
    """

    L: np.ndarray
    AtV: np.ndarray
    mu: np.ndarray
    vbar: np.ndarray
    ridge: float | None = None


def gram_place(K, offsets, i, *tiles):
    """Copy the tiles ``A_i A_j^T`` (j = i, i+1, ...) of row block ``i`` into the upper block
    triangle of the C-ordered ``K`` (M, M), in place; returns ``K``. ``offsets`` (nb + 1,) are
    the row-block starts. A chain of these builds the Gram holding one tile row besides ``K``."""
    for j, T in enumerate(tiles, start=i):
        K[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]] = T
    return K


def lift_ones(mean_diag, M):
    """The constant added to every entry of a centred Gram ``H K H`` (M, M) at ``alpha = 0``:
    ``mean_diag / M``, so the ones direction, else in its null space, gets the eigenvalue
    ``mean_diag`` (the Gram's mean diagonal). The right-hand sides are centred, so the solution
    has no component along ones and is the same as without the lift."""
    return mean_diag / M


def dual_factor(K, vsum, alpha, fit_intercept, upper=False, warn=True):
    """Centre the Gram ``K`` (M, M) and factorise ``H K H + alpha I`` in place; returns a
    :class:`DualFactor`. ``vsum`` (m,) are the column sums of ``V``. ``warn=False`` (a task of
    a fit graph): a raised ridge is not warned here but kept in the factor's ``ridge``, for
    the client to warn about (:func:`used_ridge`).

    ``H K H`` has the ones vector in its null space. With ``alpha = 0`` (min-norm interpolation)
    that direction is lifted (:func:`lift_ones`), which leaves the solution (projected off it
    by :func:`dual_solve`) unchanged and keeps the factorisation from depending on rounding.

    ``K`` is full and symmetric, or (``upper=True``) C-ordered with only its upper block
    triangle filled (from :func:`gram_place`). The tiles may come from shifted features
    ``A - s``; ``H K H`` does not depend on ``s``. Memory: ``K`` itself, no copy.
    """
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
    """:func:`rfol_dask.backend.cholesky` of ``G``; ``(L, ridge)``. Without ``warn`` a raised
    ridge is recorded, not warned (:func:`rfol_dask.linalg.recorded_ridges`)."""
    with contextlib.nullcontext() if warn else recorded_ridges():
        L, ridge = cholesky(G, alpha)
    return L, float(ridge)


def used_ridge(fac):
    """``(ridge, dtype name)`` of the factorisation in ``fac`` (:class:`DualFactor` or
    :class:`PrimalFactor`; None where it was made elsewhere), computed beside a fit graph so that
    the client warns about a raised ridge (:func:`rfol_dask.solve.graph.compute_fit`): a task's
    own warning would stay on its worker."""
    return None if fac.ridge is None else (fac.ridge, str(fac.vbar.dtype))


def dual_solve(fac, V, start=0, borrow_threads=False, overwrite=False):
    """Centred dual coefficients ``H Beta`` (M, k) for the output columns ``start:start+k`` in
    ``V`` (M, k) (with ``borrow_threads``, on all the cores the factorisation uses; with
    ``overwrite``, in the memory of a Fortran-ordered ``V``, which the caller gives up; else in
    one Fortran-ordered copy of ``V``, M k elements)."""
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
    """Intercepts ``vbar - mu^T C`` (k,) of the columns ``start:start+k`` of ``Beta`` (M, k).

    With shifted features ``(A - s) C = K Beta``, so ``mu^T C = s^T C + r^T Beta / M``; a
    kernel method (no explicit ``C`` (N, k)) passes neither ``C`` nor ``shift`` (N,).
    """
    if not fac.fit_intercept:
        return namespace(Beta).zeros(Beta.shape[1], dtype=Beta.dtype)
    out = fac.vbar[start : start + Beta.shape[1]] - (fac.r @ Beta) / fac.M
    return out if C is None else out - shift @ C


def primal_factor(sums, shifts, alpha, fit_intercept, warn=True):
    """Centre the :class:`rfol_dask.gram.PrimalSums` ``sums`` (of the data shifted by
    ``shifts = (s (N,), t (m,))``) and factorise ``A_c^T A_c + alpha I`` in place; returns a
    :class:`PrimalFactor` (``warn``: as for :func:`dual_factor`).

    With ``d = colsum / M`` the mean of ``A - s``: ``A_c^T A_c = G - M d d^T`` and
    ``A_c^T V_c = AtV - M d e^T`` (``e`` the mean of ``V - t``). Memory: ``G`` itself (the rank-one
    update in row blocks of 16 MiB), ``AtV`` and its centred copy.
    """
    G, AtV, M = symmetrize(sums.G, "lower"), sums.AtV, sums.count
    xp = namespace(G)
    if fit_intercept:
        d, e = sums.colsum / M, sums.vsum / M
        N = G.shape[0]
        rows = max(1, 2**21 // max(1, N))  # row blocks of 16 MiB (float64): no N x N temporary
        for r0 in range(0, N, rows):
            r1 = min(r0 + rows, N)  # (the array API has no out-of-bounds slices)
            G[r0:r1, :] -= M * (
                d[r0:r1, None] * d[None, :]
            )  # the outer products, as np.outer forms them
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
