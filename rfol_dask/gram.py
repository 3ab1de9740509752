"""Blockwise Gram matrices and cross-products of the feature matrix ``A = phi(U)``.

The kernels here act on row blocks (one block = one chunk of samples) of numpy or any array
API namespace (CuPy on a GPU; :mod:`rfol_dask.backend`) and are shared by the in-memory path
and the dask graphs of :mod:`rfol_dask.solve`:

- dual: ``K = A A^T`` (M, M) is a set of tiles ``A_i A_j^T`` over pairs of row blocks
  ``i <= j`` (diagonal tiles by SYRK, so the Gram costs ``M^2 N`` flops, not ``2 M^2 N``);
- primal: ``G = A^T A`` (N, N) and ``A^T V`` (N, m) are sums over row blocks,
  accumulated in place along a chain of blocks (``G += A_i^T A_i`` by SYRK with beta = 1)
  so that a chain holds one ``N x N`` buffer however many blocks it reads. The linear
  kernel's features are the inputs themselves (``A = X``, :func:`linear_partial`): its
  primal is ridge regression on ``X`` with the ``p x p`` Gram ``X^T X``.

Every kernel that reads data checks it for NaN / Inf in the same pass and names the
sample range of a bad value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import backend
from .backend import namespace, sized_by_arrays, symmetrize, syrk, to_numpy
from .features import feature_map

__all__ = [
    "check_finite",
    "stack_rows",
    "features_block",
    "block_means",
    "dual_tile",
    "PrimalSums",
    "primal_partial",
    "linear_shifts",
    "linear_partial",
    "add_partials",
]


def check_finite(X, start, name, action="fitting"):
    """Raise ValueError naming the samples of ``X`` (rows ``start + i``) that hold NaN or Inf."""
    xp = namespace(X)
    if not bool(xp.all(xp.isfinite(X))):
        X = to_numpy(X)
        rows = np.flatnonzero(~np.isfinite(X.reshape(len(X), -1)).all(axis=1)) + start
        raise ValueError(
            f"{name} contains NaN or infinity in samples {start}-{start + len(X) - 1} "
            f"(first bad sample: {rows[0]}, {len(rows)} bad in this block); "
            f"drop or fill those samples before {action}"
        )


def stack_rows(starts, dtype, device, *blocks, name="U", fortran=False, offset=0, centre=None):
    """The row blocks (k_i, n) stacked into one (M, n) array of ``dtype``, each checked for NaN /
    Inf (:func:`check_finite`, samples ``offset + starts[i]`` on): in the namespace of the
    blocks if they are CuPy (array API) arrays, else of ``device`` (numpy blocks moved there one
    at a time); with ``fortran``, Fortran-ordered on numpy and CuPy. ``centre`` (n,), a model's
    input centre (:func:`rfol_dask.features.input_centre`), is subtracted from the rows as they
    are written, before the cast to ``dtype``. Memory: the stack, one copy (and, with ``centre``
    outside numpy, the centred block before its cast)."""
    xp = backend.compute_namespace(device, *blocks)
    fast = backend.is_fast(xp)
    shape, order = (int(starts[-1]), blocks[0].shape[1]), {"order": "F"} if fortran else {}
    if fast or backend.is_cupy(xp):
        out = xp.empty(shape, dtype=dtype if fast else getattr(xp, np.dtype(dtype).name), **order)
    else:
        out = xp.empty(shape, dtype=getattr(xp, np.dtype(dtype).name))
    c = None if centre is None else backend.to_namespace(centre, xp)
    for i, B in enumerate(blocks):
        B = backend.to_namespace(B, xp)
        if c is not None and fast:  # in place, computed in the wider of the two dtypes
            np.subtract(B, c, out=out[starts[i] : starts[i + 1], ...], casting="same_kind")
        else:
            B = B if c is None else B - c
            out[starts[i] : starts[i + 1], ...] = B if fast else xp.astype(B, out.dtype, copy=False)
        check_finite(
            out[starts[i] : starts[i + 1], ...], offset + starts[i], name
        )  # after the cast (overflow)
    return out


def features_block(U, omega, b, start=0, shift=None, name="U", input_centre=None):
    """Checked features of one row block, minus ``shift``: ``U`` (k, n) -> ``A - shift`` (k, N),
    of the inputs measured from ``input_centre`` (n,) (:func:`rfol_dask.features.feature_map`;
    then ``U`` is read in its own dtype and centred before the cast to that of ``omega``).

    Memory ``k N itemsize``. The shift (a row vector, see :func:`block_means`) keeps the
    centred Grams free of cancellation: ``H (A - s)(A - s)^T H = H A A^T H`` exactly, but
    with small entries when ``s`` is close to the column means.
    """
    xp = namespace(omega)
    U = xp.asarray(U) if input_centre is not None else xp.asarray(U, dtype=omega.dtype)
    check_finite(U, start, name)
    return feature_map(U, omega, b, shift=shift, input_centre=input_centre)


def block_means(U, V, omega, b, fit_intercept=True, rows=64, input_centre=None):
    """Shifts ``(s, t)``: column means of ``phi(U)`` (N,) and ``V`` (m,) over the first ``rows``
    samples of a block (zeros without intercept), ``phi`` with the model's ``input_centre``.
    Any representative sample serves."""
    xp = namespace(omega)
    if not fit_intercept:
        return xp.zeros(omega.shape[1], dtype=omega.dtype), xp.zeros(V.shape[1], dtype=omega.dtype)
    rows = min(rows, U.shape[0])
    U, V = U[:rows, ...], V[:rows, ...]
    A = features_block(U, omega, b, input_centre=input_centre)
    V = xp.asarray(V, dtype=omega.dtype)
    check_finite(V, 0, "V")
    return xp.mean(A, axis=0), xp.mean(V, axis=0)


def dual_tile(Ai, Aj, diagonal):
    """Tile ``A_i A_j^T`` of the dual Gram (full tile; SYRK and mirrored when ``diagonal``)."""
    if diagonal:
        return symmetrize(syrk(Ai, trans=False), "lower")
    return Ai @ Aj.T


@sized_by_arrays
@dataclass
class PrimalSums:
    """The primal sums over the row blocks read so far, of the shifted data ``A - s``, ``V - t``.

    Attributes
    ----------
    G : ndarray (N, N)
        ``(A - s)^T (A - s)``; lower triangle only, Fortran order (updated in place by SYRK).
    AtV : ndarray (N, m)
        ``(A - s)^T (V - t)``.
    colsum : ndarray (N,)
        ``(A - s)^T 1``.
    vsum : ndarray (m,)
        ``(V - t)^T 1``.
    count : int
        Rows summed (``M`` once every block is in).
    """

    G: np.ndarray
    AtV: np.ndarray
    colsum: np.ndarray
    vsum: np.ndarray
    count: int


def primal_partial(U, V, omega, b, start=0, acc=None, shifts=(None, None), input_centre=None):
    """Add one row block ``U`` (k, n), ``V`` (k, m) to the :class:`PrimalSums` ``acc`` (in place;
    ``None`` starts the sums); returns it. ``shifts = (s, t)`` (N,), (m,) are subtracted from the
    features and outputs (``None``: no shift); ``input_centre`` (n,) is the model's.
    Memory: ``N^2 + N m`` for the sums plus ``k N`` for the block's features.
    """
    s, t = shifts
    A = features_block(U, omega, b, start, s, input_centre=input_centre)
    return _add_rows(A, V, start, acc, t)


def linear_shifts(X, V, fit_intercept=True, rows=64):
    """Shifts ``(s, t)`` of the linear kernel's primal: the column means of ``X`` (p,) and ``V``
    (m,) over its first ``rows`` samples (all of them with ``rows=None``: the exact means), as
    :func:`block_means` takes them for features; ``(None, None)`` without intercept."""
    if not fit_intercept:
        return None, None
    xp = namespace(X)
    X, V = X[:rows, ...], xp.asarray(V[:rows, ...], dtype=X.dtype)
    check_finite(V, 0, "V")
    return xp.mean(X, axis=0), xp.mean(V, axis=0)


def linear_partial(X, V, start=0, acc=None, shifts=(None, None)):
    """:func:`primal_partial` of the linear kernel, whose features are the inputs: add the row
    block ``X`` (k, p) (checked inputs, in the working dtype; PCA scores where the model takes
    them), ``V`` (k, m) to the :class:`PrimalSums` ``acc`` (``None`` starts them); returns it.
    Memory: ``p^2 + p m`` for the sums plus a shifted copy of the block."""
    s, t = shifts
    return _add_rows(X if s is None else X - s, V, start, acc, t)


def _add_rows(A, V, start, acc, t):
    """Add the (shifted) features ``A`` (k, N) of a row block and its outputs ``V`` (k, m), less
    ``t`` (m,) if given, to the :class:`PrimalSums` ``acc`` (in place; ``None`` starts them)."""
    xp = namespace(A)
    V = xp.asarray(V, dtype=A.dtype)
    check_finite(V, start, "V")
    if t is not None:
        V = V - t
    if acc is None:
        return PrimalSums(
            G=syrk(A, trans=True),
            AtV=A.T @ V,
            colsum=xp.sum(A, axis=0),
            vsum=xp.sum(V, axis=0),
            count=A.shape[0],
        )
    acc.G = syrk(A, trans=True, C=acc.G)
    acc.AtV += A.T @ V
    acc.colsum += xp.sum(A, axis=0)
    acc.vsum += xp.sum(V, axis=0)
    acc.count += A.shape[0]
    return acc


def add_partials(a, b):
    """Sum of two :class:`PrimalSums` (in place into ``a``); returns ``a``."""
    a.G += b.G
    a.AtV += b.AtV
    a.colsum += b.colsum
    a.vsum += b.vsum
    a.count += b.count
    return a
