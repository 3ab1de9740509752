"""Hyperparameters from the data: the ridge (alpha) path and the validation Grams of the scale
families (the median heuristic and the input metric: :mod:`rfol_dask.heuristics`).

Ridge path (:func:`path_errors`): one symmetric eigendecomposition of the centred dual Gram
``G = Q diag(lam) Q^T`` (training rows) gives the solution for every ``alpha``: ``Beta(alpha) =
Q (lam + alpha)^-1 Q^T V_c``, and the validation predictions ``K_vt Beta(alpha) + vbar = (K_vt Q)
(lam + alpha)^-1 (Q^T V_c) + vbar`` cost ``2 M_v M_t m`` flops per alpha once the two products
are made (:class:`EigenPath`). An ``eigh`` costs as much as 9-24 Cholesky factorisations here
(measured at M = 1000-6000), so for short alpha grids on large Grams one factorisation per alpha
is cheaper and is used instead.

Rounding floor (:func:`rounding_floor`): a Gram formed in float64 carries rounding of about
``2 eps trace / sqrt(M)`` in norm; a ridge below that is below what the Gram resolves, its
validation predictions are rounding amplified by up to ``1 / alpha``, and their scores move with
the order of the sums (another ridge path, BLAS, a perturbation of the inputs by one ulp). The
paths score such alphas NaN: they are not eligible.

Scale families: the frequencies of every law of one seed are ``s(gamma) Z`` for the draw ``Z`` of
``gamma = 1`` (:func:`frequency_scale`), so a sweep over ``gamma`` projects the inputs once per
feature slab, ``P = U Z``, and makes every gamma's features from it (:func:`validation_slab`).
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
from .linalg import blas_limits
from .metrics import relative_l2_errors

__all__ = [
    "sample_rows",
    "median_distance",
    "median_gamma",
    "median_gammas",
    "median_length_scale",
    "PCA_ROWS",
    "pca_metric",
    "weighted_directions",
    "input_scales",
    "GAMMA_METRIC",
    "frequency_scale",
    "validation_slab",
    "sum_validation",
    "validation_grams",
    "path_method",
    "eigh_above",
    "EigenPath",
    "cholesky_errors",
    "window_errors",
    "path_errors",
    "floored_path_errors",
    "rounding_floor",
    "eigh_pays",
    "relative_errors",
    "nonzero_rows",
    "scored_rows",
]

#: below this many flops a BLAS / LAPACK call of the search runs on one thread: small calls gain
#: little from threads and lose a lot when the cores are shared (measured: a 160 x 160 ``eigh``
#: took 6 ms on one thread and 70 ms on two, on 2 cores with other jobs running)
SMALL_FLOPS = 1e9


def _threads(n, flops):
    """``n`` BLAS threads, or 1 for a call of fewer than :data:`SMALL_FLOPS` flops."""
    return 1 if flops < SMALL_FLOPS else n


# ---------------------------------------------------------------------------------------
# scale families and the validation Grams of random features


def frequency_scale(distribution, gamma):
    """``s`` with ``draw_frequencies(..., gamma) = s * draw_frequencies(..., 1.0)`` (same seed;
    the phases ``b`` do not depend on ``gamma``).

    A law whose kernel is a function of ``gamma`` times a squared distance (``GAMMA_METRIC``
    ``"sqeuclidean"``: ``"gaussian"``, variance ``2 gamma``, and ``"rational_quadratic"``) has
    frequencies proportional to ``sqrt(gamma)``; the others (``"cauchy"``, ``"student_t"``:
    functions of ``gamma`` times a distance) to ``gamma``.
    """
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


def validation_slab(
    acc, X, n_train, frequencies, n_features, f0, f1, scales, segments, fit_intercept=True
):
    """Add the feature slab ``f0:f1`` to the validation Grams of every scale; returns ``acc``.

    ``X`` (M_t + M_v, n): the training rows, then the validation rows. ``frequencies(columns=)``
    draws the base slab ``(Z, b)`` (``gamma = 1``); the projection ``P = X Z`` is made once and the
    features of scale ``s`` are ``sqrt(2 / N) cos(s P + b)`` (``N = n_features``), centred by
    their training mean (``fit_intercept``). ``segments`` (increasing, ending at ``N``): the slab
    lies in segment ``g`` (``segments[g-1] < f1 <= segments[g]``), whose sums are kept apart so
    nested models ``N' = segments[g]`` come out of one pass (:func:`validation_grams`).

    ``acc[k][g]`` is ``(G, K)``: ``G`` (M_t, M_t) the sum of ``A_t A_t^T`` (numpy: lower
    triangle, Fortran order; other namespaces: both triangles) and ``K`` (M_v, M_t) of
    ``A_v A_t^T``. ``X`` may be an array of another namespace (CuPy): the slab is drawn on the
    host, moved there, and every sum is made there. Cost ``2 M n w + S (M_t^2 + 2 M_v M_t) w``
    flops for ``S`` scales and slab width ``w``; memory ``S`` pairs per segment plus ``2 M w``.
    """
    from .placement import worker_threads

    xp = backend.namespace(X)
    fast = backend.is_fast(xp)
    Z, b = (x if fast else backend.to_namespace(x, xp) for x in frequencies(columns=(f0, f1)))
    g = int(np.searchsorted(segments, f1))
    norm = float(np.sqrt(2.0 / n_features))
    M = X.shape[0]
    M_t, M_v, w = n_train, M - n_train, f1 - f0
    flops = 2 * M * X.shape[1] * w + len(scales) * (M_t**2 + 2 * M_v * M_t) * w
    with blas_limits(_threads(worker_threads(), flops)):
        P = X @ Z
        A = np.empty_like(P) if fast else None
        if acc is None:
            acc = [[None] * len(segments) for _ in scales]
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
            At, Av = A[:n_train, ...], A[n_train:, ...]
            G, K = (
                acc[k][g]
                if acc[k][g] is not None
                else (None, xp.zeros((M_v, n_train), dtype=X.dtype))
            )
            K += Av @ At.T
            acc[k][g] = (syrk(At, trans=False, C=G), K)
    return acc


def add_validation(a, b):
    """The sum of two :func:`validation_slab` accumulators (into ``a``)."""
    for ra, rb in zip(a, b, strict=False):
        for g, (pa, pb) in enumerate(zip(ra, rb, strict=False)):
            if pa is None:
                ra[g] = pb
            elif pb is not None:
                G, K = pa
                G += pb[0]  # in place (numpy, CuPy, array API)
                K += pb[1]
    return a


def sum_validation(*accs):
    """The sum of :func:`validation_slab` accumulators in a new one (the inputs are kept)."""
    out = [
        [None if p is None else (backend.copy(p[0]), backend.copy(p[1])) for p in row]
        for row in accs[0]
    ]
    for acc in accs[1:]:
        add_validation(out, acc)
    return out


def validation_grams(acc, k, segments, g, copy=True):
    """``(G, K, factor)`` of scale ``k`` for the model with ``segments[g]`` features: the
    segments' sums up to ``g`` (symmetric, Fortran order); that model's Gram and cross-Gram are
    ``factor G`` and ``factor K``, ``factor = N / segments[g]`` (the features carry
    ``sqrt(2 / N)``), so its ridge ``alpha`` is ``G``'s ``alpha / factor`` with ``K`` as it is.

    ``copy=False`` with a single segment in the sum: ``G`` and ``K`` are the accumulator's own
    arrays, ``G``'s upper triangle filled in place from its lower one (which a solve must leave as
    it is: :func:`cholesky_errors` does); no ``M_t^2`` copy."""
    parts = [p for p in acc[k][: g + 1] if p is not None]
    factor = segments[-1] / segments[g]
    if not copy and len(parts) == 1:
        return symmetrize(parts[0][0]), parts[0][1], factor
    G = backend.fortran_copy(parts[0][0])  # a new array: the accumulator is kept
    K = backend.copy(parts[0][1])
    for p in parts[1:]:
        G += p[0]
        K += p[1]
    return symmetrize(G), K, factor


# ---------------------------------------------------------------------------------------
# the ridge path


def relative_errors(true, pred):
    """Per-sample relative L2 errors (:func:`rfol_dask.metrics.relative_l2_errors`) of (k, m)
    arrays (numpy, or another namespace's: computed there), as a numpy (k,) array; a zero true
    sample gives inf / nan without a warning."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return backend.to_numpy(relative_l2_errors(true, pred))


def nonzero_rows(V):
    """The samples of ``V`` (M, m) whose output is not identically zero (numpy bool (M,)): those
    a relative error is defined on."""
    xp = backend.namespace(V)
    return backend.to_numpy(xp.sum(V * V, axis=1) > 0)


def scored_rows(V_valid):
    """The validation samples a score counts (numpy bool (M_v,)): those whose output is not
    identically zero (their relative error is undefined, :func:`nonzero_rows`); ValueError when
    there is none."""
    keep = nonzero_rows(V_valid)
    if not keep.any():
        raise ValueError(
            "every validation output is identically zero: the relative L2 error is undefined"
        )
    return keep


def rounding_floor(G, trace=None, bound=False, eps=None):
    """The rounding floor of the Gram ``G`` (M, M): ``2 eps trace / sqrt(M)``, ``eps`` of ``G``'s
    dtype (or the coarser ``eps`` of the refit's precision) and ``trace`` that of the matrix ``G``
    was computed from (default ``G``'s own; the exact kernels pass their uncentred kernel's):
    independent rounding errors of ``eps trace / M`` per entry have a spectral norm of about
    ``2 sqrt(M)`` times that, which a solve amplifies by up to ``1 / alpha``; the searches score no
    alpha below it. ``bound``: the bound of that norm instead, ``eps trace``, by which the linear
    kernel's eigen solve tells eigenvalues of rounding
    (:func:`rfol_dask.baselines.kernel.eigen_dual`). A float; cost O(M)."""
    if trace is None:
        trace = backend.namespace(G).sum(backend.diagonal(G))
    M = max(1, G.shape[0])
    eps = max(eps or 0.0, np.finfo(backend.to_numpy_dtype(G.dtype)).eps)
    return float(eps * abs(float(trace)) * (1.0 if bound else 2.0 / np.sqrt(M)))


def _mean_error(V_valid, pred, keep):
    return float(np.mean(relative_errors(V_valid, pred)[keep]))


def eigh_above(G, floor=None):
    """Eigenvalues (k,), ascending, and eigenvectors (M, k) of the symmetric ``G`` (M, M): LAPACK
    ``syevr`` in place on numpy (``G`` is overwritten), the namespace's ``eigh`` on the others.
    With ``floor`` the eigenvalues at most ``floor`` are left out with their directions (the
    linear kernel's directions of rounding, :func:`rfol_dask.baselines.kernel.eigen_dual`); else
    ``k = M``. Memory: ``G`` and the eigenvectors."""
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
    """Validation predictions of the dual ridge problem for every ``alpha`` from one
    eigendecomposition.

    Parameters (numpy, or arrays of one other namespace, e.g. CuPy: computed there)
    ----------
    G : ndarray (M_t, M_t)
        Centred training Gram ``H K H`` (overwritten on numpy).
    K : ndarray (M_v, M_t)
        Centred validation cross-Gram (validation rows x training rows).
    V : ndarray (M_t, m)
        Training outputs.
    fit_intercept : bool
    design : ndarray (M_t, p) or None
        The primal problem instead (the linear kernel): ``G`` is ``X_c^T X_c`` (p, p) of the
        centred training inputs ``design``, ``K`` the centred validation inputs (M_v, p), and
        the right-hand sides are ``X_c^T (V - vbar)``.
    drop : float or None
        Leave out the eigenvalues at most ``drop`` with their directions (:func:`eigh_above`):
        the linear kernel's dual, scored as :func:`rfol_dask.baselines.kernel.eigen_dual`
        solves it (``drop`` its bound of the Gram's rounding). The solution is then that of
        ``G`` without those directions, not the Cholesky solve's.

    Cost: ``eigh`` (LAPACK ``syevr``: measured as much as 9-24 Cholesky factorisations of the
    same size at M = 1000-6000, one thread; see :func:`eigh_pays`) plus
    ``2 M_v M_t^2 + 2 M_t^2 m``; then ``2 M_v M_t m`` per alpha. Memory: ``G``, ``Q`` and
    ``K Q`` (M_v, M_t). The solution for ``alpha`` equals the Cholesky solve of
    ``(G + alpha I) Beta = V - vbar`` (eigenvalues below 0 are rounding and set to 0); an alpha
    at which ``G + alpha I`` is not positive definite (``alpha`` at most minus the smallest
    eigenvalue) scores ``inf``, as the Cholesky path's failed factorisation does.
    """

    def __init__(self, G, K, V, fit_intercept=True, design=None, drop=None):
        from .linalg import factor_threads

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
        """Mean relative L2 validation error for each of ``alphas``: numpy (n_alpha,); ``inf``
        where ``G + alpha I`` is not positive definite. Samples whose output is identically zero
        (relative error undefined) are left out."""
        keep = scored_rows(V_valid)
        return np.array(
            [
                _mean_error(V_valid, self.predict(a), keep) if a + self.lam_min > 0 else np.inf
                for a in alphas
            ]
        )


def cholesky_errors(G, K, V, V_valid, alphas, fit_intercept=True, design=None):
    """The validation errors of :meth:`EigenPath.errors` by one Cholesky factorisation (and
    solve) per alpha; an alpha at which ``G + alpha I`` is not numerically positive definite
    scores ``inf`` (no jitter). Each factorisation is made in place in ``G``, whose lower
    triangle and diagonal are restored from its upper triangle afterwards (``G``: symmetric,
    both triangles filled, Fortran order; returned as it came). The predictions
    ``K (G + alpha I)^-1 V`` are formed in the cheaper order: the solve against the ``m``
    outputs, or against the ``M_v`` validation rows ``K^T`` when ``M_v < m``. Memory: ``G`` and
    the solves (``2 M_t min(m, M_v) + M_v m``), no copy of ``G`` (numpy, CuPy: the factor is
    made in place, :func:`rfol_dask.backend.ridge_factor`; other namespaces factorise a copy).
    Cost ``M_t^3 / 3 + 2 M_t^2 min(m, M_v) + 2 M_v M_t m`` flops per alpha. ``design``: the primal
    problem, as for :class:`EigenPath`."""
    from .linalg import factor_threads

    xp = backend.namespace(G, K, V)
    keep = scored_rows(V_valid)
    vbar = xp.mean(V, axis=0) if fit_intercept else xp.zeros(V.shape[1], dtype=V.dtype)
    Vc = V - vbar
    Vc = backend.as_fortran(Vc if design is None else design.T @ Vc)
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
                continue
            pred = backend.cho_solve(L, rhs).T @ Vc if by_rows else K @ backend.cho_solve(L, Vc)
            pred = pred + vbar
            out.append(_mean_error(V_valid, pred, keep))
        restore()
    return np.array(out)


def eigh_pays(n_alphas, M):
    """Whether one ``eigh`` beats ``n_alphas`` Cholesky factorisations (and solves) of an M x M
    Gram: measured (``benchmarks/tuning.py --alpha-path``, syevr, one thread) break-even at 8.6,
    13.3, 16.4 and 23.9 alphas for M = 1000, 2000, 4000 and 6000, about ``sqrt(M) / 3``."""
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
    """Mean relative L2 validation errors (n_alpha,) of the dual ridge problem for every alpha:
    ``method="eigh"`` (:class:`EigenPath`), ``"cholesky"`` (:func:`cholesky_errors`) or
    ``"auto"`` (the cheaper one, :func:`eigh_pays`). ``G`` may be overwritten.

    ``center`` (an index of ``alphas``, e.g. a coarse stage's winner) with ``method="auto"``:
    where one Cholesky factorisation per alpha of a window of ``2 half_width + 1`` alphas around
    it is cheaper than an ``eigh``, only that window is solved (:func:`window_errors`: widened
    while its best is on its edge); the other alphas score NaN.

    The alphas below ``floor`` (default :func:`rounding_floor` of ``G``) are not eligible: they
    score NaN, unsolved (a window centred below it starts at the first alpha above it).
    ``design``: the primal problem; ``drop``: the eigenvalues left out (:class:`EigenPath`; with
    ``drop`` every eligible alpha is solved by the eigen path, whatever ``method``: a Cholesky
    solve keeps every direction)."""
    alphas = np.asarray(alphas, dtype=float)
    floor = rounding_floor(G) if floor is None else floor
    idx = np.flatnonzero(alphas >= floor)  # the eligible alphas
    out = np.full(len(alphas), np.nan)
    if not len(idx):
        scored_rows(V_valid)
        return out
    if drop is None:
        method = path_method(len(idx), G.shape[0], method, center, half_width)
    else:
        method = "eigh"
    if method == "window":
        scored_rows(V_valid)  # before a window is solved
        # the centre, or the first eligible above it
        start = min(int(np.searchsorted(idx, int(center))), len(idx) - 1)
        args = (start, half_width, fit_intercept, design)
        out[idx] = window_errors(G, K, V, V_valid, alphas[idx], *args)
        return out
    if method == "eigh":
        out[idx] = EigenPath(G, K, V, fit_intercept, design, drop).errors(alphas[idx], V_valid)
    elif method == "cholesky":
        out[idx] = cholesky_errors(G, K, V, V_valid, alphas[idx], fit_intercept, design)
    else:
        raise ValueError(
            f"unknown ridge path method {method!r}; choose 'auto', 'eigh' or 'cholesky'"
        )
    return out


def floored_path_errors(G, K, V, V_valid, alphas, *args, trace=None, eps=None, **kwargs):
    """:func:`path_errors` (``args``, ``kwargs`` as there), then the rounding floor of ``G``
    (:func:`rounding_floor`, of ``trace``: that of the matrix ``G`` was computed from, and ``eps``:
    the refit's precision, so that no alpha is scored that the refit cannot use), taken
    before the solves may overwrite ``G``: (n_alpha + 1,), the row a search's stage records
    (the floor in ``cv_results_``, the alphas below it NaN)."""
    floor = rounding_floor(G, trace, eps=eps)
    return np.append(path_errors(G, K, V, V_valid, alphas, *args, floor=floor, **kwargs), floor)
