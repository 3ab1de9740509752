"""Blockwise Gram matrices and cross-products of the feature matrix ``A = phi(U)``.

The kernels here act on numpy row blocks (one block = one chunk of samples) and are
shared by the in-memory path and the dask graphs of :mod:`rfol_dask.solve`:

- dual: ``K = A A^T`` (M, M) is a set of tiles ``A_i A_j^T`` over pairs of row blocks
  ``i <= j`` (diagonal tiles by SYRK, so the Gram costs ``M^2 N`` flops, not ``2 M^2 N``);
- primal: ``G = A^T A`` (N, N) and ``A^T V`` (N, m) are sums over row blocks,
  accumulated in place along a chain of blocks (``G += A_i^T A_i`` by SYRK with beta = 1)
  so that a chain holds one ``N x N`` buffer however many blocks it reads.

Every kernel that reads data checks it for NaN / Inf in the same pass and names the
sample range of a bad value.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas

from .features import feature_map

__all__ = ["check_finite", "features_block", "block_means", "dual_tile", "syrk", "primal_partial", "add_partials"]


def check_finite(X, start, name, action="fitting"):
    """Raise ValueError naming the samples of ``X`` (rows ``start + i``) that hold NaN or Inf."""
    if not np.isfinite(X).all():
        rows = np.flatnonzero(~np.isfinite(X.reshape(len(X), -1)).all(axis=1)) + start
        raise ValueError(
            f"{name} contains NaN or infinity in samples {start}-{start + len(X) - 1} "
            f"(first bad sample: {rows[0]}, {len(rows)} bad in this block); "
            f"drop or fill those samples before {action}"
        )


def features_block(U, omega, b, start=0, shift=None, name="U"):
    """Checked features of one row block, minus ``shift``: ``U`` (k, n) -> ``A - shift`` (k, N).

    Memory ``k N itemsize``. The shift (a row vector, see :func:`block_means`) keeps the
    centred Grams free of cancellation: ``H (A - s)(A - s)^T H = H A A^T H`` exactly, but
    with small entries when ``s`` is close to the column means.
    """
    U = np.asarray(U, dtype=omega.dtype)
    check_finite(U, start, name)
    return feature_map(U, omega, b, shift=shift)


def block_means(U, V, omega, b, fit_intercept=True, rows=64):
    """Shifts ``(s, t)``: column means of ``phi(U)`` (N,) and ``V`` (m,) over the first ``rows``
    samples of a block (zeros without intercept). Any representative sample serves."""
    if not fit_intercept:
        return np.zeros(omega.shape[1], omega.dtype), np.zeros(np.shape(V)[1], omega.dtype)
    U, V = U[:rows], V[:rows]
    A = features_block(U, omega, b)
    V = np.asarray(V, dtype=omega.dtype)
    check_finite(V, 0, "V")
    return A.mean(axis=0), V.mean(axis=0)


def syrk(A, trans, C=None):
    """Lower triangle of ``A A^T`` (``trans=False``) or ``A^T A`` (``trans=True``), Fortran order.

    ``A`` is C-contiguous; with ``C`` given the product is added to it in place (beta = 1).
    Only the lower triangle of the result is meaningful.
    """
    A = np.ascontiguousarray(A)
    f = blas.get_blas_funcs("syrk", (A,))
    # A.T is a Fortran-ordered view: syrk(a=A.T, trans=0) = A^T A, syrk(a=A.T, trans=1) = A A^T.
    if C is None:
        return f(1.0, A.T, trans=0 if trans else 1, lower=1)
    return f(1.0, A.T, beta=1.0, c=C, trans=0 if trans else 1, lower=1, overwrite_c=1)


def symmetrize(C, source="lower", block=512):
    """Fill one triangle of the square ``C`` from the other (``source``), in place; returns ``C``.

    Copies transposed slabs of ``block`` rows (O(n^2) memory traffic, no n^2 index arrays).
    """
    n = C.shape[0]
    T = C if source == "lower" else C.T  # mirror the lower triangle of T into its upper one
    for j in range(0, n, block):
        e = min(j + block, n)
        T[j:e, e:] = T[e:, j:e].T
        D = T[j:e, j:e]
        iu = np.triu_indices(e - j, 1)
        D[iu] = D.T[iu]
    return C


def symmetrize_lower(C):
    """Fill the upper triangle of ``C`` from its lower triangle, in place; returns ``C``."""
    return symmetrize(C, "lower")


def dual_tile(Ai, Aj, diagonal):
    """Tile ``A_i A_j^T`` of the dual Gram (full tile; SYRK and mirrored when ``diagonal``)."""
    if diagonal:
        return symmetrize_lower(syrk(Ai, trans=False))
    return Ai @ Aj.T


def primal_partial(U, V, omega, b, start=0, acc=None, shifts=(None, None)):
    """Add one row block to the primal sums of the shifted data; returns the updated ``acc``.

    With ``shifts = (s, t)`` the sums are over ``A - s`` and ``V - t``: ``acc`` holds ``G``
    (N, N; lower triangle, Fortran order, updated in place), ``AtV`` (N, m), ``colsum``
    (N,) = ``(A - s)^T 1``, ``vsum`` (m,) and ``count``.
    Memory: ``N^2 + N m`` for the sums plus ``k N`` for the block's features.
    """
    s, t = shifts
    A = features_block(U, omega, b, start, s)
    V = np.asarray(V, dtype=omega.dtype)
    check_finite(V, start, "V")
    if t is not None:
        V = V - t
    if acc is None:
        return {"G": syrk(A, trans=True), "AtV": A.T @ V, "colsum": A.sum(axis=0),
                "vsum": V.sum(axis=0), "count": len(A)}
    acc["G"] = syrk(A, trans=True, C=acc["G"])
    acc["AtV"] += A.T @ V
    acc["colsum"] += A.sum(axis=0)
    acc["vsum"] += V.sum(axis=0)
    acc["count"] += len(A)
    return acc


def add_partials(a, b):
    """Sum of two primal partial dicts (in place into ``a``)."""
    a["G"] += b["G"]
    for key in ("AtV", "colsum", "vsum", "count"):
        a[key] += b[key]
    return a
