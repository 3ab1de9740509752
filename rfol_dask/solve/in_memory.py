"""The in-memory fit (no graph): the dual with one Gram (numpy: ``A`` whole; other namespaces
summed over feature slabs), the primal over row blocks."""

from __future__ import annotations

import dask
import numpy as np

from .. import gram
from ..backend import is_cupy, is_fast, itemsize, namespace, syrk
from ..factor import dual_factor, dual_intercept, dual_solve, primal_factor, primal_solve
from ..gram import block_means, dual_tile, features_block, primal_partial, slab_features
from ..memory import ROW_BLOCK_BYTES, SLAB_BYTES
from .graph import feature_slabs


def row_ranges(n_rows, row_bytes, block_bytes=ROW_BLOCK_BYTES):
    """Ranges ``(s, e)`` of rows, each about ``block_bytes`` for rows of ``row_bytes``."""
    step = max(1, int(block_bytes // max(row_bytes, 1)))
    return [(s, min(s + step, n_rows)) for s in range(0, n_rows, step)]


def dual_numpy(X, V, tile, *, alpha, fit_intercept):
    """Dual solve in memory on the Gram ``tile(X, X, True)``: ``(DualFactor, centred Beta)``."""
    V, K = _checked(V, X), tile(X, X, True)
    fac = dual_factor(K, namespace(K).sum(V, axis=0), alpha, fit_intercept)
    return fac, dual_solve(fac, V)


def _checked(V, like, name="V"):
    gram.check_finite(V := namespace(like).asarray(V, dtype=like.dtype), 0, name)
    return V


def dual_slabs(U, V, omega, b, *, alpha, fit_intercept, slab_bytes=None, input_centre=None):
    """The dual outside numpy (CuPy): the Gram and ``C = A^T Beta`` by feature slabs of ``A``."""
    xp = namespace(omega)
    # with a centre, U keeps its dtype: its rows are centred, then cast (features.feature_map)
    U, V = _checked(U, omega if input_centre is None else U, "U"), _checked(V, omega)
    (M, m), N = V.shape, omega.shape[1]
    (slabs,) = feature_slabs(M, N, 1, itemsize(omega.dtype), _slab_bytes(slab_bytes))

    def slab(f0, f1):  # A[:, f0:f1] (exactly centred if fit_intercept) and its shift
        args = (N, f0, f1, fit_intercept, None, input_centre)
        return slab_features(U, lambda columns: (omega[:, f0:f1], b[f0:f1]), *args)

    K, shifts = None, []
    for f0, f1 in slabs:
        A, shift = slab(f0, f1)
        K = syrk(A, trans=False, C=K)
        shifts.append(shift)
        del A  # before the next slab is made
    # outside numpy, syrk sums the full products: K is symmetric already (no mirroring pass)
    fac = dual_factor(K, namespace(K).sum(V, axis=0), alpha, fit_intercept)
    Beta = dual_solve(fac, V)
    info = fac.without_factor()  # the Gram (factorised in its place) is freed before pass 2
    del fac, K
    C = xp.empty((N, m), dtype=omega.dtype)
    for f0, f1 in slabs:
        C[f0:f1, :] = slab(f0, f1)[0].T @ Beta
    shift = xp.concat(shifts) if fit_intercept else xp.zeros(N, dtype=omega.dtype)
    return C, dual_intercept(info, Beta, C, shift)


def _slab_bytes(given):
    return int(dask.config.get("rfol_dask.slab-bytes", SLAB_BYTES)) if given is None else given


def model_bytes(n, N, m, dtype):
    """The fitted model's arrays, ``{what: bytes}``: what any fit leaves in the client."""
    size, N = np.dtype(dtype).itemsize, int(N)
    held = {f"the {n} x {N} frequencies": (int(n) + 1) * N * size}
    return held | {f"the {N} x {m} coefficients": N * int(m) * size}


def held_beside_gram(M, n, N, m, dtype, solver, xp=np, slab_bytes=None):
    """What an in-memory fit holds beside its Gram at its peak, ``{what: bytes}``."""
    size, held = np.dtype(dtype).itemsize, model_bytes(n, N, m, dtype)
    in_place = is_fast(xp) or is_cupy(xp)
    if solver == "dual" and is_fast(xp):
        held[f"the {M} x {N} features A"] = int(M) * int(N) * size
    elif solver == "dual":
        (slabs,) = feature_slabs(M, N, 1, size, _slab_bytes(slab_bytes))
        width, copies = max(f1 - f0 for f0, f1 in slabs), 1.25 if in_place else 2.25
        held[f"slabs of {M} x {width} features"] = int(copies * M * width * size)
    else:
        (s, e), *_ = row_ranges(M, N * size)
        rows = max(e - s, min(64, M))
        held[f"blocks of {rows} x {N} features"] = (1 if in_place else 2) * rows * int(N) * size
    return held


def fit_numpy(
    U: np.ndarray,
    V: np.ndarray,
    omega: np.ndarray,
    b: np.ndarray,
    *,
    alpha: float,
    fit_intercept: bool,
    solver: str,
    slab_bytes: int | None = None,
    input_centre: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit the random-feature ridge coefficients in memory, in the namespace of ``omega``.

    ValueError if ``V`` holds NaN / Inf or the Gram is singular with ``alpha=0``.

    Parameters
    ----------
    U, V : ndarrays of shapes (M, n) and (M, m)
        Input and output functions (flattened grids).
    omega, b : ndarrays of shapes (n, N) and (N,)
        Frequencies (their dtype is the working precision) and phases.
    alpha : float
        Ridge parameter (>= 0).
    fit_intercept : bool
        Centre features and outputs and fit an intercept per output column.
    solver : {"dual", "primal"}
        Dual ``(A A^T + alpha I) Beta = V`` or primal ``(A^T A + alpha I) C = A^T V``.
    slab_bytes : int, optional
        Bytes of a feature slab of the dual outside numpy (default: ``rfol_dask.slab-bytes``).
    input_centre : ndarray of shape (n,), optional
        The model's input centre, subtracted from the rows of ``U`` as the features are made.

    Returns
    -------
    coef : ndarray of shape (N, m)
        The coefficients ``C``.
    intercept : ndarray of shape (m,)
        The intercept ``c0`` of each output column.
    """
    dtype, xp = omega.dtype, namespace(omega)
    if solver == "dual" and not is_fast(xp):
        kw = dict(slab_bytes=slab_bytes, input_centre=input_centre)
        return dual_slabs(U, V, omega, b, alpha=alpha, fit_intercept=fit_intercept, **kw)
    if solver == "dual":
        A = features_block(U, omega, b, input_centre=input_centre)
        shift = xp.mean(A, axis=0) if fit_intercept else xp.zeros(A.shape[1], dtype=dtype)
        A -= shift  # exact centring
        fac, Beta = dual_numpy(A, V, dual_tile, alpha=alpha, fit_intercept=fit_intercept)
        C = A.T @ Beta
        return C, dual_intercept(fac, Beta, C, shift)
    shifts, sums = block_means(U, V, omega, b, fit_intercept, input_centre=input_centre), None
    for s, e in row_ranges(U.shape[0], omega.shape[1] * itemsize(dtype)):
        sums = primal_partial(U[s:e, ...], V[s:e, ...], omega, b, s, sums, shifts, input_centre)
    return primal_solve(primal_factor(sums, shifts, alpha, fit_intercept), 0, V.shape[1])
