"""Hyperparameters from the data: the ridge (alpha) path and the validation Grams of the scale
families (the median heuristic and the input metric: :mod:`rfol_dask.heuristics`).

One ``eigh`` of the centred dual Gram gives every alpha's validation error (:class:`EigenPath`);
for short alpha grids on large Grams one Cholesky per alpha is cheaper (:func:`eigh_pays`). Alphas
below the Gram's rounding floor (:func:`rounding_floor`) score NaN. Every frequency law is a scale
family (:func:`frequency_scale`): one projection per feature slab serves every gamma
(:func:`validation_slab`).
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.linalg

from . import backend
from .backend import symmetrize, syrk
from .features import FREQUENCY_BLOCK
from .heuristics import (
    GAMMA_METRIC,
    PCA_ROWS,
    input_scales,
    median_distance,
    median_gamma,
    median_gammas,
    median_length_scale,
    pca_metric,
    sample_rows,
    weighted_directions,
)
from .linalg import blas_limits, factor_threads
from .metrics import BLOCK_BYTES, relative_l2_errors

# fmt: off
__all__ = [
    "sample_rows", "median_distance", "median_gamma", "median_gammas", "median_length_scale",
    "PCA_ROWS", "pca_metric", "weighted_directions", "input_scales", "GAMMA_METRIC",
    "frequency_scale", "scores_primal", "validation_slab", "sum_validation", "validation_grams",
    "path_method",
    "eigh_above", "EigenPath", "cholesky_errors", "window_errors", "path_errors",
    "floored_path_errors", "rounding_floor", "eigh_pays", "relative_errors", "nonzero_rows",
    "scored_rows",
]
# fmt: on

#: below this many flops a BLAS / LAPACK call of the search runs on one thread: small calls lose
#: a lot to threads on shared cores (a 160 x 160 ``eigh``: 6 ms on one thread, 70 ms on two)
SMALL_FLOPS = 1e9


def _threads(n, flops):
    return 1 if flops < SMALL_FLOPS else n


def frequency_scale(distribution, gamma):
    """``s`` with ``draw_frequencies(..., gamma) = s * draw_frequencies(..., 1.0)`` (same seed):
    ``sqrt(gamma)`` for laws of a squared distance (:data:`GAMMA_METRIC`), else ``gamma``."""
    if distribution not in GAMMA_METRIC:
        raise ValueError(
            f"unknown distribution {distribution!r}; choose one of {tuple(GAMMA_METRIC)}"
        )
    return float(np.sqrt(gamma)) if GAMMA_METRIC[distribution] == "sqeuclidean" else float(gamma)


def slab_bounds(n_features, M, segments=(), slab_bytes=64 * 2**20):
    """Column ranges ``(f0, f1)`` covering ``0:n_features`` in slabs of at most ``slab_bytes``
    for ``M`` rows (whole frequency blocks where possible), cut at every ``segments`` boundary."""
    width = max(1, int(slab_bytes // (8 * max(M, 1))))
    width = max(FREQUENCY_BLOCK, width - width % FREQUENCY_BLOCK)
    cuts = sorted(
        {0, int(n_features), *range(width, int(n_features), width), *(int(c) for c in segments)}
    )
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def scores_primal(n_train, n_features):
    """Whether a search scores ``n_features`` on ``n_train`` rows in the primal (its ``N x N``
    Gram is the smaller), as the refit's ``solver="auto"`` solves."""
    return n_features < n_train


def validation_slab(
    acc, X, n_train, frequencies, n_features, f0, f1, scales, segments, fit_intercept=True
):
    """Add the feature slab ``f0:f1`` to the validation Grams of every scale; returns ``acc``.

    ``X`` (M_t + M_v, n): training then validation rows; ``frequencies(columns=)`` draws the
    ``gamma = 1`` slab ``(Z, b)``, ``P = X Z`` is made once and scale ``s`` has the features
    ``sqrt(2 / N) cos(s P + b)``. ``acc[k][g]`` is ``(G, K)`` of scale ``k`` and segment ``g``
    (nested models ``N' = segments[g]`` out of one pass): ``G`` the sum of ``A_t A_t^T`` (numpy:
    lower triangle, Fortran order) and ``K`` of ``A_v A_t^T``, made where ``X`` lives. Where
    :func:`scores_primal`, ``acc[k][0]`` is the centred features ``A`` (M_t + M_v, N) themselves,
    zero outside the slabs made, and the other segments None.
    """
    from .placement import worker_threads

    xp = backend.namespace(X)
    fast = backend.is_fast(xp)
    Z, b = (x if fast else backend.to_namespace(x, xp) for x in frequencies(columns=(f0, f1)))
    g = int(np.searchsorted(segments, f1))
    norm, acc = float(np.sqrt(2.0 / n_features)), acc or [[None] * len(segments) for _ in scales]
    M_t, M_v, w = n_train, X.shape[0] - n_train, f1 - f0
    primal = scores_primal(n_train, n_features)
    grams = 0 if primal else len(scales) * (M_t**2 + 2 * M_v * M_t) * w
    flops = 2 * (M_t + M_v) * X.shape[1] * w + grams
    with blas_limits(_threads(worker_threads(), flops)):
        P = X @ Z
        A = np.empty_like(P) if fast else None
        for k, s in enumerate(scales):
            if fast:  # in place: one (M, w) buffer beside P
                np.multiply(P, s, out=A)
                A += b
                np.cos(A, out=A)
                A *= norm
            else:
                A = xp.cos(P * float(s) + b) * norm
            if fit_intercept:
                A -= xp.mean(A[:n_train, ...], axis=0)
            if primal:
                if acc[k][0] is None:
                    acc[k][0] = xp.zeros((X.shape[0], n_features), dtype=X.dtype)
                acc[k][0][:, f0:f1] = A
                continue
            At, Av = A[:n_train, ...], A[n_train:, ...]
            G, K = acc[k][g] or (None, xp.zeros((M_v, n_train), dtype=X.dtype))
            K += Av @ At.T
            acc[k][g] = (syrk(At, trans=False, C=G), K)
    return acc


def add_validation(a, b):
    """The sum of two :func:`validation_slab` accumulators (into ``a``)."""
    for ra, rb in zip(a, b, strict=False):
        for g, (pa, pb) in enumerate(zip(ra, rb, strict=False)):
            if pa is None:
                ra[g] = pb
            elif pb is not None and not isinstance(pa, tuple):
                pa += pb  # the primal's features: each part holds its own columns
            elif pb is not None:
                G, K = pa
                G += pb[0]  # in place (numpy, CuPy, array API)
                K += pb[1]
    return a


def sum_validation(*accs):
    """The sum of :func:`validation_slab` accumulators in a new one (the inputs are kept)."""

    def copy(p):
        return backend.copy(p) if not isinstance(p, tuple) else tuple(map(backend.copy, p))

    out = [[None if p is None else copy(p) for p in row] for row in accs[0]]
    for acc in accs[1:]:
        add_validation(out, acc)
    return out


def validation_grams(acc, k, segments, g, copy=True, n_train=None):
    """``(G, K, factor, design)`` of scale ``k`` and ``segments[g]`` features: the segments' sums
    up to ``g``; that model's Grams are ``factor G``, ``factor K`` (``factor = N / segments[g]``).
    ``copy=False`` with one segment: the accumulator's own arrays, ``G`` symmetrized in place.
    A primal accumulator (``n_train`` rows) gives ``A_t^T A_t``, ``A_v`` and ``design = A_t``
    (:class:`EigenPath`); a dual one ``design = None``."""
    factor = segments[-1] / segments[g]
    if not isinstance(acc[k][0], tuple):  # the primal: the Gram of the first segments[g] features
        A = acc[k][0][:n_train, : segments[g]]
        return symmetrize(syrk(A, trans=True)), acc[k][0][n_train:, : segments[g]], factor, A
    parts = [p for p in acc[k][: g + 1] if p is not None]
    if not copy and len(parts) == 1:
        return symmetrize(parts[0][0]), parts[0][1], factor, None
    G = backend.fortran_copy(parts[0][0])  # a new array: the accumulator is kept
    K = backend.copy(parts[0][1])
    for p in parts[1:]:
        G += p[0]
        K += p[1]
    return symmetrize(G), K, factor, None


def relative_errors(true, pred):
    """Per-sample relative L2 errors of (k, m) arrays as numpy (k,); a zero true sample gives inf
    / nan without a warning."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return backend.to_numpy(relative_l2_errors(true, pred))


def nonzero_rows(V):
    """The samples of ``V`` (M, m) whose output is not identically zero (numpy bool (M,))."""
    xp = backend.namespace(V)
    return backend.to_numpy(xp.sum(V * V, axis=1) > 0)


def scored_rows(V_valid):
    """:func:`nonzero_rows` of the validation outputs, the samples a score counts; ValueError for
    none."""
    keep = nonzero_rows(V_valid)
    if not keep.any():
        raise ValueError(
            "every validation output is identically zero: the relative L2 error is undefined"
        )
    return keep


def rounding_floor(G, trace=None, bound=False, eps=None):
    """The rounding floor of the Gram ``G`` (M, M), ``2 eps trace / sqrt(M)``: the spectral norm of
    rounding errors of ``eps trace / M`` per entry, which a solve amplifies by up to ``1 / alpha``.
    ``eps``: the coarser of ``G``'s dtype's and this; ``trace``: of the matrix ``G`` was computed
    from (default ``G``'s); ``bound``: the bound of that norm instead, ``eps trace``."""
    if trace is None:
        trace = backend.namespace(G).sum(backend.diagonal(G))
    eps = max(eps or 0.0, np.finfo(backend.to_numpy_dtype(G.dtype)).eps)
    return float(eps * abs(float(trace)) * (1.0 if bound else 2.0 / np.sqrt(max(1, G.shape[0]))))


def _mean_error(V_valid, pred, keep):
    return float(np.mean(relative_errors(V_valid, pred)[keep]))


def eigh_above(G, floor=None):
    """Eigenvalues (k,), ascending, and eigenvectors (M, k) of the symmetric ``G`` (overwritten on
    numpy: LAPACK ``syevr``), those at most ``floor`` left out."""
    xp = backend.namespace(G)
    if backend.is_fast(xp):
        lam, Q = scipy.linalg.eigh(G, overwrite_a=True, check_finite=False, driver="evr")
    else:
        lam, Q = xp.linalg.eigh(G)
    if floor is None:
        return lam, Q
    k0 = int(np.count_nonzero(backend.to_numpy(lam) <= floor))  # eigh's eigenvalues are ascending
    return lam[k0:], Q[:, k0:]


class EigenPath:
    """Validation predictions of the dual ridge problem for every ``alpha`` from one ``eigh`` of
    the centred training Gram ``G`` (M_t, M_t; overwritten on numpy), with the centred cross-Gram
    ``K`` (M_v, M_t) and training outputs ``V`` (M_t, m). ``design``: the primal problem (``G =
    X_c^T X_c``, ``K`` the centred validation inputs); ``drop``: eigenvalues at most this are
    left out with their directions. Negative eigenvalues count as 0; an alpha at which ``G +
    alpha I`` is not positive definite scores ``inf``, as a failed Cholesky does. Cost ``eigh``
    plus ``2 M_v M_t^2 + 2 M_t^2 m``, then ``2 M_v M_t m`` per alpha.
    """

    def __init__(self, G, K, V, fit_intercept=True, design=None, drop=None):
        xp = backend.namespace(G, K, V)
        M = G.shape[0]
        with blas_limits(_threads(factor_threads(), 9.0 * M**3 + 2.0 * K.shape[0] * M**2)):
            lam, Q = eigh_above(G, drop)
            self.vbar = xp.mean(V, axis=0) if fit_intercept else xp.zeros(V.shape[1], dtype=V.dtype)
            self.lam_min = float(xp.min(lam)) if lam.shape[0] else 0.0
            self.lam = xp.maximum(lam, xp.zeros_like(lam))
            rhs = V - self.vbar
            self.R = Q.T @ (rhs if design is None else design.T @ rhs)
            self.W = K @ Q

    def predict(self, alpha):
        """Validation predictions (M_v, m) for the ridge ``alpha`` (> 0)."""
        return self.W @ (self.R / (self.lam + float(alpha))[:, None]) + self.vbar

    def errors(self, alphas, V_valid):
        """Mean relative L2 validation error per alpha (numpy; zero outputs left out): the
        predictions of as many alphas at once as fit in ``BLOCK_BYTES`` (float64)."""
        keep, lo = scored_rows(V_valid), self.lam_min
        (M_v, k), m = self.W.shape, self.R.shape[1]
        alphas = np.asarray(alphas, dtype=float)
        out, ok = np.full(len(alphas), np.inf), np.flatnonzero(alphas + lo > 0)
        step = BLOCK_BYTES // (8 * M_v * m)
        with blas_limits(_threads(factor_threads(), 2.0 * M_v * k * m * len(alphas))):
            if step < 2:  # one alpha's predictions fill a block: one at a time
                out[ok] = [_mean_error(V_valid, self.predict(a), keep) for a in alphas[ok]]
                return out
            xp = backend.namespace(self.W, V_valid)
            rows = backend.to_namespace(keep, xp)
            W, true = self.W[rows], V_valid[rows]
            for a in (ok[i : i + step] for i in range(0, len(ok), step)):
                shrink = self.lam[None, :] + xp.asarray(alphas[a], dtype=self.lam.dtype)[:, None]
                pred = W @ (self.R[None, ...] / shrink[:, :, None]) + self.vbar
                flat = (xp.reshape(x, (-1, m)) for x in (xp.broadcast_to(true, pred.shape), pred))
                out[a] = np.mean(relative_errors(*flat).reshape(len(a), -1), axis=1)
        return out


def cholesky_errors(G, K, V, V_valid, alphas, fit_intercept=True, design=None):
    """:meth:`EigenPath.errors` by one Cholesky per alpha (``inf`` where it fails; no jitter), made
    in place in the symmetric Fortran ``G``, which is restored afterwards; the solve runs against
    the ``m`` outputs, or the ``M_v`` rows of ``K^T`` when fewer. ``design`` as for EigenPath."""
    xp = backend.namespace(G, K, V)
    keep = scored_rows(V_valid)
    vbar = xp.mean(V, axis=0) if fit_intercept else xp.zeros(V.shape[1], dtype=V.dtype)
    Vc = backend.as_fortran(V - vbar if design is None else design.T @ (V - vbar))
    G = backend.as_fortran(G)
    factor, restore = backend.ridge_factor(G)
    out = []
    M, m, M_v = G.shape[0], Vc.shape[1], K.shape[0]
    by_rows = M_v < m  # solve for K (G + alpha I)^-1 (M_v right-hand sides), then times V
    rhs = backend.as_fortran(K.T) if by_rows else Vc
    flops = M**3 / 3 + 2.0 * M**2 * min(m, M_v) + 2.0 * M_v * M * m
    with blas_limits(_threads(factor_threads(), flops)):
        for k, alpha in enumerate(alphas):
            L = factor(float(alpha), k > 0)
            if L is None:
                out.append(np.inf)
            else:
                pred = backend.cho_solve(L, rhs).T @ Vc if by_rows else K @ backend.cho_solve(L, Vc)
                out.append(_mean_error(V_valid, pred + vbar, keep))
        restore()
    return np.array(out)


def eigh_pays(n_alphas, M):
    """Whether one ``eigh`` beats ``n_alphas`` Cholesky solves of an M x M Gram: break-even measured
    (``benchmarks/tuning.py --alpha-path``) at about ``sqrt(M) / 3`` alphas."""
    return n_alphas >= np.sqrt(M) / 3


def window_errors(G, K, V, V_valid, alphas, center, half_width=2, fit_intercept=True, design=None):
    """:func:`cholesky_errors` on the ``2 half_width + 1`` alphas around index ``center`` of
    ``alphas``, widened by one alpha at a time on a side while the best error sits on that edge
    of the window (and not on the grid's edge); the alphas left out score NaN. ``G`` is kept."""
    alphas = np.asarray(alphas, dtype=float)
    n = len(alphas)
    lo, hi = max(0, center - half_width), min(n, center + half_width + 1)
    out = np.full(n, np.nan)
    kw = dict(fit_intercept=fit_intercept, design=design)
    solve = functools.partial(cholesky_errors, G, K, V, V_valid, **kw)
    out[lo:hi] = solve(alphas[lo:hi])
    while True:
        best = lo + int(np.argmin(out[lo:hi]))
        # larger alphas (or none solved yet)
        if (best == hi - 1 or not np.isfinite(out[best])) and hi < n:
            out[hi] = solve(alphas[hi : hi + 1])[0]
            hi += 1
        elif best == lo and lo > 0 and np.isfinite(out[best]):
            lo -= 1
            out[lo] = solve(alphas[lo : lo + 1])[0]
        else:
            return out


def path_method(n_alphas, M, method="auto", center=None, half_width=2):
    """The ridge path :func:`path_errors` takes for ``n_alphas`` alphas of an ``M x M`` Gram:
    ``"window"``, ``"eigh"`` or ``"cholesky"`` (``method`` itself unless ``"auto"``)."""
    if method != "auto":
        return method
    if center is not None and not eigh_pays(2 * half_width + 1, M):
        return "window"
    return "eigh" if eigh_pays(n_alphas, M) else "cholesky"


def path_errors(
    G,
    K,
    V,
    V_valid,
    alphas,
    fit_intercept=True,
    method="auto",
    center=None,
    half_width=2,
    floor=None,
    design=None,
    drop=None,
):
    """Mean relative L2 validation errors (n_alpha,) of the dual ridge problem for every alpha by
    ``method`` (:func:`path_method`; ``G`` may be overwritten). With ``center`` (an index of
    ``alphas``) only a window around it may be solved (:func:`window_errors`), the others NaN.
    Alphas below ``floor`` (default :func:`rounding_floor` of ``G``) score NaN. ``design``, ``drop``
    as for :class:`EigenPath` (``drop``: always the eigen path)."""
    alphas = np.asarray(alphas, dtype=float)
    floor = rounding_floor(G) if floor is None else floor
    idx = np.flatnonzero(alphas >= floor)  # the eligible alphas
    out = np.full(len(alphas), np.nan)
    scored_rows(V_valid)  # its ValueError before any solve
    if not len(idx):
        return out
    if drop is not None:  # a Cholesky solve keeps every direction
        method = "eigh"
    method, a = path_method(len(idx), G.shape[0], method, center, half_width), alphas[idx]
    if method == "window":  # from the centre, or the first eligible alpha above it
        start = min(int(np.searchsorted(idx, int(center))), len(idx) - 1)
        out[idx] = window_errors(G, K, V, V_valid, a, start, half_width, fit_intercept, design)
    elif method == "eigh":
        out[idx] = EigenPath(G, K, V, fit_intercept, design, drop).errors(a, V_valid)
    elif method == "cholesky":
        out[idx] = cholesky_errors(G, K, V, V_valid, a, fit_intercept, design)
    else:
        raise ValueError(
            f"unknown ridge path method {method!r}; choose 'auto', 'eigh' or 'cholesky'"
        )
    return out


def floored_path_errors(G, K, V, V_valid, alphas, *args, trace=None, eps=None, **kwargs):
    """:func:`path_errors` at the :func:`rounding_floor` of ``G`` (``trace``, ``eps`` as there),
    then that floor: (n_alpha + 1,), a stage's row."""
    floor = rounding_floor(G, trace, eps=eps)
    return np.append(path_errors(G, K, V, V_valid, alphas, *args, floor=floor, **kwargs), floor)
