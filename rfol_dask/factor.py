"""Factorisation and solve kernels of the ridge normal equations: the dual ``(H K H + alpha I)
Beta = V - vbar``, ``K = A A^T``, ``C = A^T Beta`` (``H = I - 1 1^T / M``); the primal
``(A_c^T A_c + alpha I) C = A_c^T V_c``, ``A_c^T A_c = A^T A - M mu mu^T``. In the namespace of
the arguments."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from . import backend
from .backend import cho_solve, cholesky, namespace, symmetrize
from .linalg import blas_limits, factor_threads, recorded_ridges


@backend.sized_by_arrays
@dataclass
class DualFactor:
    """The factorised dual: ``L`` of ``H K H + alpha I`` (or None), ``r = K 1``, ``vbar``, ridge."""

    L: np.ndarray | None
    r: np.ndarray
    vbar: np.ndarray
    M: int
    fit_intercept: bool
    ridge: float | None = None

    def without_factor(self):
        return dataclasses.replace(self, L=None)


@backend.sized_by_arrays
@dataclass
class PrimalFactor:
    """The factorised primal: ``L`` of ``A_c^T A_c + alpha I``, ``AtV``, means, ``ridge`` used."""

    L: np.ndarray
    AtV: np.ndarray
    mu: np.ndarray
    vbar: np.ndarray
    ridge: float | None = None


def gram_place(K, offsets, i, *tiles):
    """Copy the tiles ``A_i A_j^T`` (j >= i) of row block ``i`` into the upper triangle of ``K``."""
    for j, T in enumerate(tiles, start=i):
        K[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]] = T
    return K


def dual_factor(K, vsum, alpha, fit_intercept, upper=False, warn=True):
    """Centre the Gram ``K`` (``upper``: C-ordered, upper block triangle filled), factorise ``H K H
    + alpha I`` in place: a :class:`DualFactor` (``warn=False``: a raised ridge kept in it)."""
    M, xp = K.shape[0], namespace(K)
    # K.T of a C-ordered symmetric K is the Fortran-ordered view LAPACK factorises in place
    K = symmetrize(K, "upper").T if upper else backend.as_fortran(K)
    r = xp.sum(K, axis=1)
    if fit_intercept:
        backend.centre_gram(K, r / M, xp.sum(r) / M**2)  # one pass; K stays exactly symmetric
        if alpha == 0:  # the ones direction gets the eigenvalue mean(diag)
            K += xp.mean(xp.abs(backend.diagonal(K))) / M
    L, ridge = _factorised(K, alpha, warn)
    vbar = vsum / M if fit_intercept else xp.zeros_like(vsum)
    return DualFactor(L=L, r=r, vbar=vbar, M=M, fit_intercept=fit_intercept, ridge=ridge)


def _factorised(G, alpha, warn):
    """:func:`rfol_dask.backend.cholesky`: ``(L, ridge)``; without ``warn`` recorded."""
    with contextlib.nullcontext() if warn else recorded_ridges():
        L, ridge = cholesky(G, alpha)
    return L, float(ridge)


def used_ridge(fac):
    """``(ridge, dtype name)`` of the factorisation in ``fac`` (None: made elsewhere)."""
    return None if fac.ridge is None else (fac.ridge, str(fac.vbar.dtype))


def dual_solve(fac, V, start=0, borrow_threads=False, overwrite=False):
    """Centred ``H Beta`` (M, k) of the columns ``start:start+k`` (``overwrite``: in ``V``)."""
    V = V if overwrite else backend.fortran_copy(V)
    V -= fac.vbar[start : start + V.shape[1]]
    with blas_limits(factor_threads() if borrow_threads else None):
        Beta = cho_solve(fac.L, V, overwrite=True)
    if fac.fit_intercept:
        Beta -= namespace(Beta).mean(Beta, axis=0)
    return Beta


def dual_intercept(fac, Beta, C=None, shift=None, start=0):
    """Intercepts ``vbar - mu^T C`` (k,) of columns ``start:``; ``mu^T C = s^T C + r^T Beta/M``."""
    if not fac.fit_intercept:
        return namespace(Beta).zeros(Beta.shape[1], dtype=Beta.dtype)
    out = fac.vbar[start : start + Beta.shape[1]] - (fac.r @ Beta) / fac.M
    return out if C is None else out - shift @ C


def primal_factor(sums, shifts, alpha, fit_intercept, warn=True):
    """Centre ``sums`` (of data less ``shifts``), factorise in place: a :class:`PrimalFactor`."""
    G, AtV, M = symmetrize(sums.G, "lower"), sums.AtV, sums.count
    xp, N = namespace(G), G.shape[0]
    if fit_intercept:
        d, e = sums.colsum / M, sums.vsum / M
        rows = max(1, 2**21 // max(1, N))  # row blocks of 16 MiB (float64): no N x N temporary
        for r0 in range(0, N, rows):
            r1 = min(r0 + rows, N)  # (the array API has no out-of-bounds slices)
            G[r0:r1, :] -= M * (d[r0:r1, None] * d[None, :])  # as np.outer forms them
        AtV = AtV - M * (d[:, None] * e[None, :])
        mu, vbar = shifts[0] + d, shifts[1] + e
    else:
        mu, vbar = xp.zeros(N, dtype=G.dtype), xp.zeros(AtV.shape[1], dtype=G.dtype)
    L, ridge = _factorised(G, alpha, warn)
    return PrimalFactor(L=L, AtV=AtV, mu=mu, vbar=vbar, ridge=ridge)


def primal_solve(fac, start, stop):
    """Coefficients ``C[:, start:stop]`` (N, k) and their intercepts (k,) from the primal factor."""
    C = cho_solve(fac.L, fac.AtV[:, start:stop])
    return C, fac.vbar[start:stop] - fac.mu @ C
