"""Blockwise Grams and cross-products of the features ``A = phi(U)`` on row blocks: dual tiles
``A_i A_j^T``, primal sums of ``A^T A`` and ``A^T V``. Every kernel that reads data checks it for
NaN / Inf and names the samples of a bad value."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from . import backend
from .backend import namespace, sized_by_arrays, symmetrize, syrk, to_numpy
from .features import feature_map


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
    """The row blocks stacked, less ``centre``, cast to ``dtype``, checked (samples ``offset:``)."""
    fast = backend.is_fast(xp := backend.compute_namespace(device, *blocks))
    order = {"order": "F"} if fortran and (fast or backend.is_cupy(xp)) else {}
    dt = dtype if fast else getattr(xp, np.dtype(dtype).name)
    out = xp.empty((int(starts[-1]), blocks[0].shape[1]), dtype=dt, **order)
    c = None if centre is None else backend.to_namespace(centre, xp)
    for i, B in enumerate(blocks):
        B, rows = backend.to_namespace(B, xp), slice(starts[i], starts[i + 1])
        if c is not None and fast:  # in place, computed in the wider of the two dtypes
            np.subtract(B, c, out=out[rows, ...], casting="same_kind")
        else:
            B = B if c is None else B - c
            out[rows, ...] = B if fast else xp.astype(B, out.dtype, copy=False)
        check_finite(out[rows, ...], offset + starts[i], name)  # after the cast
    return out


def features_block(U, omega, b, start=0, shift=None, name="U", input_centre=None):
    """Checked features ``A - shift`` (k, N) of the row block ``U`` (no cancellation in Grams)."""
    dt = {} if input_centre is not None else {"dtype": omega.dtype}  # centred rows: cast after
    check_finite(U := namespace(omega).asarray(U, **dt), start, name)
    return feature_map(U, omega, b, shift=shift, input_centre=input_centre)


def block_means(U, V, omega, b, fit_intercept=True, rows=64, input_centre=None):
    """Shifts ``(s, t)``: column means of the first ``rows`` of ``phi(U)`` and ``V`` (or zeros)."""
    xp = namespace(omega)
    if not fit_intercept:
        return xp.zeros(omega.shape[1], dtype=omega.dtype), xp.zeros(V.shape[1], dtype=omega.dtype)
    rows = min(rows, U.shape[0])
    A = features_block(U[:rows, ...], omega, b, input_centre=input_centre)
    check_finite(V := xp.asarray(V[:rows, ...], dtype=omega.dtype), 0, "V")
    return xp.mean(A, axis=0), xp.mean(V, axis=0)


#: samples whose mean features shift each feature slab (as :func:`block_means` shifts blocks)
SHIFT_ROWS = 64


def slab_features(U, recipe, n_features, f0, f1, centre, shift_rows=SHIFT_ROWS, input_centre=None):
    """``A[:, f0:f1]`` less its mean over ``shift_rows`` rows (None: all) if ``centre``; shift."""
    xp = backend.namespace(U)
    omega, b = (backend.to_namespace(a, xp) for a in recipe(columns=(f0, f1)))
    kw = dict(n_features=n_features, input_centre=input_centre)
    if not centre:
        return feature_map(U, omega, b, **kw), None
    if shift_rows is None:
        A = feature_map(U, omega, b, **kw)
        shift = xp.mean(A, axis=0)
        A -= shift
        return A, shift
    shift = slab_shift(U, omega, b, n_features, shift_rows, input_centre)
    return feature_map(U, omega, b, shift=shift, **kw), shift


def slab_shift(U, omega, b, n_features, shift_rows=SHIFT_ROWS, input_centre=None):
    """The centring shift of a slab: its features' mean over the first ``shift_rows`` samples."""
    head = U[: min(shift_rows, U.shape[0]), ...]
    A = feature_map(head, omega, b, n_features=n_features, input_centre=input_centre)
    return backend.namespace(U).mean(A, axis=0)


def dual_tile(Ai, Aj, diagonal):
    """Tile ``A_i A_j^T`` of the dual Gram (full tile; SYRK and mirrored when ``diagonal``)."""
    return symmetrize(syrk(Ai, trans=False), "lower") if diagonal else Ai @ Aj.T


@sized_by_arrays
@dataclass
class PrimalSums:
    """Sums over the row blocks of ``A - s``, ``V - t``: ``G`` (lower triangle), ``A^T V``, ..."""

    G: np.ndarray
    AtV: np.ndarray
    colsum: np.ndarray
    vsum: np.ndarray
    count: int


def primal_partial(U, V, omega, b, start=0, acc=None, shifts=(None, None), input_centre=None):
    """Add the row block ``U``, ``V`` less ``shifts`` to the :class:`PrimalSums` ``acc``."""
    A = features_block(U, omega, b, start, shifts[0], input_centre=input_centre)
    return _add_rows(A, V, start, acc, shifts[1])


def linear_shifts(X, V, fit_intercept=True, rows=64):
    """:func:`block_means` of the linear kernel (its features are ``X``); ``(None, None)``."""
    if not fit_intercept:
        return None, None
    check_finite(V := namespace(X).asarray(V[:rows, ...], dtype=X.dtype), 0, "V")
    return namespace(X).mean(X[:rows, ...], axis=0), namespace(X).mean(V, axis=0)


def linear_partial(X, V, start=0, acc=None, shifts=(None, None)):
    """:func:`primal_partial` of the linear kernel, whose features are the inputs ``X``."""
    return _add_rows(X if shifts[0] is None else X - shifts[0], V, start, acc, shifts[1])


def _add_rows(A, V, start, acc, t):
    xp = namespace(A)
    check_finite(V := xp.asarray(V, dtype=A.dtype), start, "V")
    V = V if t is None else V - t
    if acc is None:
        G, colsum, vsum = syrk(A, trans=True), xp.sum(A, axis=0), xp.sum(V, axis=0)
        return PrimalSums(G=G, AtV=A.T @ V, colsum=colsum, vsum=vsum, count=A.shape[0])
    acc.G = syrk(A, trans=True, C=acc.G)
    acc.AtV += A.T @ V
    acc.colsum += xp.sum(A, axis=0)
    acc.vsum += xp.sum(V, axis=0)
    acc.count += A.shape[0]
    return acc


def add_partials(a, b):
    """Sum of two :class:`PrimalSums` (in place into ``a``); returns ``a``."""
    for name in ("G", "AtV", "colsum", "vsum", "count"):
        setattr(a, name, operator.iadd(getattr(a, name), getattr(b, name)))
    return a
