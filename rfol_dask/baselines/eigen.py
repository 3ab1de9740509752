"""The kernel dual by one eigendecomposition of the centred Gram."""

from __future__ import annotations

import dask

from .. import backend
from ..factor import DualFactor
from ..linalg import blas_limits, factor_threads
from ..tuning import eigh_above, rounding_floor


def eigen_dual(X, V, tile=None, *, alpha, fit_intercept):
    """``(DualFactor, centred Beta (M, m))`` by one eigendecomposition of the centred Gram,
    ``H K H = Q diag(lam) Q^T``: ``Beta = Q (lam_+ + alpha)^-1 Q^T (V - vbar)``, the solution the
    searches score, for any ``alpha > 0`` (a Cholesky factorisation of ``H K H + alpha I`` may fail
    on the Gram's rounding). ``K = tile(X, X, True)``; ``tile=None``: the linear kernel ``X X^T``,
    whose directions with an eigenvalue within its rounding bound are left out (else they cost
    ``log10(1 / alpha)`` digits against ``Ridge(solver="svd")``; ``Beta`` there changes no
    prediction). Memory ``2 M^2``; an ``eigh`` costs about 9 Cholesky factorisations."""
    from ..solve.in_memory import _checked

    V = _checked(V, X)
    xp = backend.namespace(X)
    M = X.shape[0]
    with blas_limits(factor_threads()):
        K = (X @ X.T).T if tile is None else backend.as_fortran(tile(X, X, True))
        r = xp.sum(K, axis=1)
        floor = rounding_floor(K, bound=True) if tile is None else None
        if fit_intercept:
            backend.centre_gram(K, r / M, xp.sum(r) / M**2)
        lam, Q = eigh_above(K, floor)
        del K
        vbar = xp.mean(V, axis=0) if fit_intercept else xp.zeros(V.shape[1], dtype=V.dtype)
        lam = xp.maximum(lam, xp.zeros_like(lam))
        Beta = Q @ ((Q.T @ (V - vbar)) / (lam + alpha)[:, None])
    if fit_intercept:
        Beta -= xp.mean(Beta, axis=0)
    fac = DualFactor(L=None, r=r, vbar=vbar, M=M, fit_intercept=fit_intercept, ridge=float(alpha))
    return fac, Beta


def _block_moments(X):
    return X.sum(axis=0), float((X * X).sum()), X.shape[0]


def _linear_mean_diag(Xb, centred):
    """The mean diagonal of the linear kernel's Gram, centred or not, from the delayed row blocks
    ``Xb`` in one pass."""
    parts = dask.compute(*[dask.delayed(_block_moments)(x) for x in Xb])
    total, squares, M = (sum(p[k] for p in parts) for k in range(3))
    return squares / M - (float(total @ total) / M**2 if centred else 0.0)
