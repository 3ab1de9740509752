"""The kernels' input transform: principal scores of the inputs (``n_components``,
``pca_power``), and the predictions through it."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from .. import backend
from ..gram import check_finite
from ..memory import ROW_BLOCK_BYTES
from ..tuning import weighted_directions


def transform_inputs(U, start, mean, components, dtype):
    """Checked inputs of one row block, projected on the PCA directions if any: (k, n) -> (k, p);
    computed where the directions live (a numpy ``U`` is moved to a device's directions), else
    where ``U`` lives."""
    ref = components if backend.is_array_api(components) else U
    xp = backend.namespace(ref) if backend.is_array_api(ref) else np
    U = xp.asarray(
        backend.to_namespace(U, xp) if xp is not np else U, dtype=getattr(xp, np.dtype(dtype).name)
    )
    check_finite(U, start, "U")
    return U if components is None else (U - mean) @ components


def _scores(U, like, mean, components):
    """The inputs (k, n) of one prediction block as the model's (k, p), where ``like`` lives."""
    xp, dtype = backend.namespace(like), backend.to_numpy_dtype(like.dtype)
    return xp, transform_inputs(backend.to_namespace(U, xp), 0, mean, components, dtype)


def _predict_linear(U, coef, intercept, mean, components):
    """``x W + c0`` for one row block (k, n) -> (k, m): the linear kernel fitted in the primal."""
    out = _scores(U, coef, mean, components)[1] @ coef
    out += intercept
    return out


def _predict_block(U, X_train, Beta, intercept, mean, components, tile):
    """``k(U, X_train) Beta + c0`` for one row block (k, n) -> (k, m), in row chunks."""
    xp, X = _scores(U, Beta, mean, components)
    M = X.shape[0]
    out = xp.empty((M, Beta.shape[1]), dtype=Beta.dtype)
    step = max(1, ROW_BLOCK_BYTES // (backend.itemsize(Beta.dtype) * max(1, X_train.shape[0])))
    for s in range(0, M, step):
        e = min(s + step, M)
        out[s:e, ...] = tile(X[s:e, ...], X_train) @ Beta
    out += intercept
    return out


def pca(U, n_components, power=None):
    """Mean (n,) and leading principal directions (n, p) of the rows of ``U`` (numpy, dask or
    CuPy), weighted by ``(s_j / s_1)^power`` if ``power`` is given (:func:`pca_from_scatter`); one
    pass over ``U`` and an ``n x n`` eigendecomposition."""
    if backend.is_array_api(U):  # CuPy: the scatter on the GPU, the eigenproblem on the host
        check_finite(U, 0, "U")
        xp = backend.namespace(U)
        mean = xp.mean(U, axis=0)
        Uc = U - mean
        mean, Q = pca_from_scatter(
            backend.to_numpy(mean), backend.to_numpy(Uc.T @ Uc), n_components, power
        )
        return backend.to_namespace(mean, xp), backend.to_namespace(Q, xp)
    mean = U.mean(axis=0)
    Uc = U - mean
    lib = da if isinstance(U, da.Array) else np
    mean, scatter, bad = dask.compute(
        mean, Uc.T @ Uc, lib.flatnonzero(~lib.isfinite(U).all(axis=1))
    )
    if bad.size:  # the eigensolver would not converge: named as the fit's own check names them
        raise ValueError(
            f"U contains NaN or infinity in {bad.size} samples (first bad sample: {bad[0]}); drop "
            "or fill those samples before fitting"
        )
    return pca_from_scatter(mean, scatter, n_components, power)


def pca_from_scatter(mean, scatter, n_components, power=None):
    """``(mean (n,), leading principal directions (n, p))`` from the scatter matrix (n, n),
    weighted by ``(s_j / s_1)^power`` with ``power`` (``s_j^2`` the scatter's eigenvalues; the
    rule of :func:`rfol_dask.heuristics.weighted_directions`)."""
    lam, Q = np.linalg.eigh(np.asarray(scatter))
    lam, Q = lam[::-1], Q[:, ::-1]
    if power is None:
        p = min(int(n_components), Q.shape[1])
        return np.asarray(mean), np.ascontiguousarray(Q[:, :p])
    ratio = np.sqrt(np.clip(lam, 0.0, None) / lam[0]) if lam[0] > 0 else np.ones_like(lam)
    p = None if n_components is None else int(n_components)
    return np.asarray(mean), weighted_directions(Q, ratio, power, p)
