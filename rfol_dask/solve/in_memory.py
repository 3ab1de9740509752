"""The in-memory fit (no graph): the dual with one Gram, the primal over row blocks; numpy on the
CPU, or CuPy (any array API namespace) where the arrays live (:mod:`rfol_dask.backend`)."""

from __future__ import annotations

import numpy as np

from ..backend import itemsize, namespace
from ..factor import dual_factor, dual_intercept, dual_solve, primal_factor, primal_solve
from ..gram import block_means, check_finite, dual_tile, features_block, primal_partial
from ..memory import ROW_BLOCK_BYTES

__all__ = ["row_ranges", "dual_numpy", "fit_numpy"]


def row_ranges(n_rows, row_bytes, block_bytes=ROW_BLOCK_BYTES):
    """Ranges ``(s, e)`` of rows, each about ``block_bytes`` for rows of ``row_bytes``."""
    step = max(1, int(block_bytes // max(row_bytes, 1)))
    return [(s, min(s + step, n_rows)) for s in range(0, n_rows, step)]


def dual_numpy(X, V, tile, *, alpha, fit_intercept):
    """Dual solve in memory: ``K = tile(X, X, True)`` (M, M), centred, factorised once, solved
    for all columns of ``V`` (M, m). Returns ``(DualFactor, centred Beta (M, m))``."""
    V = namespace(X).asarray(V, dtype=X.dtype)
    check_finite(V, 0, "V")
    fac = dual_factor(tile(X, X, True), namespace(X).sum(V, axis=0), alpha, fit_intercept)
    return fac, dual_solve(fac, V)


def fit_numpy(U: np.ndarray, V: np.ndarray, omega: np.ndarray, b: np.ndarray, *, alpha: float,
              fit_intercept: bool, solver: str) -> tuple[np.ndarray, np.ndarray]:
    """Fit the random-feature ridge coefficients in memory (numpy, no graph).

    Parameters
    ----------
    U : ndarray of shape (M, n)
        Input functions (flattened grids), in the dtype of ``omega``. Any array API namespace:
        the fit runs in the namespace of ``omega`` (CuPy arrays: on their GPU) and returns
        arrays of it; numpy takes the in-place LAPACK path.
    V : ndarray of shape (M, m)
        Output functions.
    omega : ndarray of shape (n, N)
        Frequencies; their dtype (float32 or float64) is the working precision.
    b : ndarray of shape (N,)
        Phases.
    alpha : float
        Ridge parameter (>= 0).
    fit_intercept : bool
        Centre features and outputs and fit an intercept per output column.
    solver : {"dual", "primal"}
        Dual: ``(A A^T + alpha I) Beta = V``, ``C = A^T Beta``; primal:
        ``(A^T A + alpha I) C = A^T V``.

    Returns
    -------
    coef : ndarray of shape (N, m)
        The coefficients ``C``.
    intercept : ndarray of shape (m,)
        The intercept ``c0`` of each output column.

    Raises
    ------
    ValueError
        If ``V`` holds NaN / Inf (the samples are named) or the Gram is singular with
        ``alpha=0`` (the message suggests a ridge).

    Notes
    -----
    Memory: dual ``M N + M^2`` elements (the features ``A`` and the Gram), primal
    ``N^2 + N m`` plus one row block of about 128 MiB.
    """
    dtype, xp = omega.dtype, namespace(omega)
    if solver == "dual":
        A = features_block(U, omega, b)
        shift = xp.mean(A, axis=0) if fit_intercept else xp.zeros(A.shape[1], dtype=dtype)  # exact centring
        A -= shift
        fac, Beta = dual_numpy(A, V, dual_tile, alpha=alpha, fit_intercept=fit_intercept)
        C = A.T @ Beta
        return C, dual_intercept(fac, Beta, C, shift)
    shifts = block_means(U, V, omega, b, fit_intercept)
    sums = None
    for s, e in row_ranges(U.shape[0], omega.shape[1] * itemsize(dtype)):
        sums = primal_partial(U[s:e, ...], V[s:e, ...], omega, b, s, sums, shifts)
    return primal_solve(primal_factor(sums, shifts, alpha, fit_intercept), 0, V.shape[1])
