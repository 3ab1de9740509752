"""Dense linear algebra on numpy: SYRK, Cholesky with the jitter policy (a Gram plus ``alpha I``
not numerically positive definite is factorised again with the ridge raised tenfold from
``eps(dtype) * mean(diag)``, with a warning; at ``alpha = 0`` an error), solves, BLAS threads."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import warnings

import dask
import numpy as np
from scipy.linalg import blas, lapack
from threadpoolctl import OpenBLASController, ThreadpoolController

from .exceptions import RidgeRaised
from .stacklevel import user_stacklevel


@functools.cache
def _controller():
    return ThreadpoolController()


_LIMITS = threading.local()  # this thread's stack of limits (the innermost last)
_LIMIT_LOCK = threading.Lock()
_LIMIT_STATE = {"depth": 0}  # sections open in the process; "first": the first one's limiter


def _as_controller(call):
    """``call()`` from this thread (threadpoolctl lets one thread at a time set OpenBLAS's pool)."""
    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is None:
        return call()
    clear(force=True)
    try:
        return call()
    finally:
        clear()  # only if this thread still holds it


@contextlib.contextmanager
def blas_limits(n):
    """At most ``n`` BLAS threads inside (process-wide; the last one out restores the first's)."""
    stack = _LIMITS.__dict__.setdefault("stack", [])
    with _LIMIT_LOCK:
        limiter = _as_controller(lambda: _controller().limit(limits=n, user_api="blas"))
        _LIMIT_STATE.setdefault("first", limiter)  # the first section's: the count before any
        _LIMIT_STATE["depth"] += 1
        stack.append(n)
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            stack.pop()
            _LIMIT_STATE["depth"] -= 1
            if _LIMIT_STATE["depth"] == 0:
                _as_controller(_LIMIT_STATE.pop("first").restore_original_limits)
            elif stack:  # nested in this thread: the enclosing limit again
                _as_controller(lambda: _controller().limit(limits=stack[-1], user_api="blas"))


def blas_threads():
    """Threads the BLAS may use now (the fewest over its loaded libraries; 1 where none)."""
    counts = [i["num_threads"] for i in _controller().info() if i["user_api"] == "blas"]
    return max(1, min(counts, default=1))


def syrk(A, trans, C=None):
    """Lower triangle of ``A A^T`` (``trans=False``) or ``A^T A`` (Fortran), added to ``C``."""
    A = np.ascontiguousarray(A)
    f = blas.get_blas_funcs("syrk", (A,))
    # A.T is a Fortran-ordered view: syrk(a=A.T, trans=0) = A^T A, syrk(a=A.T, trans=1) = A A^T.
    kw = {} if C is None else dict(beta=1.0, c=C, overwrite_c=1)
    return f(1.0, A.T, trans=0 if trans else 1, lower=1, **kw)


def symmetrize(C, source="lower", block=512):
    """Fill one triangle of the square ``C`` from the other (``source``) in place; returns ``C``."""
    n, T = C.shape[0], C if source == "lower" else C.T  # T's lower triangle into its upper one
    for j in range(0, n, block):
        e = min(j + block, n)
        T[j:e, e:] = T[e:, j:e].T
        D, iu = T[j:e, j:e], np.triu_indices(e - j, 1)
        D[iu] = D.T[iu]
    return C


def host_cores():
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def factor_threads():
    """BLAS threads of the factorisation: config ``rfol_dask.factor-threads``, else all cores."""
    return int(n) if (n := dask.config.get("rfol_dask.factor-threads", None)) else host_cores()


#: (the ridge's name in messages, a list recording raised ridges instead of warnings, or None)
_RIDGE_REPORT = contextvars.ContextVar("rfol_dask_ridge_report", default=("alpha", None))


@contextlib.contextmanager
def _reporting(name=None, record=None):
    old_name, old_record = _RIDGE_REPORT.get()
    token = _RIDGE_REPORT.set((name or old_name, old_record if record is None else record))
    try:
        yield record
    finally:
        _RIDGE_REPORT.reset(token)


def recorded_ridges():
    """Context manager: a list the :class:`RidgeRaised` of this context go to, not warned."""
    return _reporting(record=[])


def ridge_name(name):
    """Context manager: :class:`RidgeRaised` messages in this context call the ridge ``name``."""
    return _reporting(name=name)


def warn_ridge(alpha, ridge, dtype):
    """Warn (or record, :func:`recorded_ridges`) that a factorisation needed ``ridge``."""
    name, record = _RIDGE_REPORT.get()
    msg = f"the Gram matrix plus {name}={alpha:g} is not numerically positive definite in "
    msg += f"{np.dtype(dtype)}; used ridge {ridge:.3g} instead (pass a larger {name} to choose it "
    raised = RidgeRaised(msg + "yourself)", float(alpha), float(ridge))
    if record is not None:
        record.append(raised)
    else:
        warnings.warn(raised, stacklevel=user_stacklevel())


def first_ridge(attempt, alpha, mean_diag, dtype):
    """``(attempt(ridge, again), ridge)`` not None: alpha, then 10^k max(alpha, eps mean_diag)."""
    result = attempt(float(alpha), False)
    if result is not None:
        return result, alpha
    mean_diag = mean_diag() if callable(mean_diag) else mean_diag
    floor = np.finfo(dtype).eps * max(mean_diag, np.finfo(dtype).tiny)
    ridges = [max(alpha, floor) * 10.0**k for k in range(1, 9)] if alpha > 0 else []
    for ridge in ridges:
        result = attempt(float(ridge), True)
        if result is not None:
            warn_ridge(alpha, ridge, dtype)
            return result, ridge
    if alpha == 0:
        msg = "alpha=0 leaves the Gram matrix singular (e.g. fewer features than samples, or "
        raise ValueError(msg + "repeated samples): pass alpha > 0, for example alpha=1e-10")
    msg = f"the Gram matrix is not positive definite even with ridge {ridges[-1]:.3g} (alpha="
    raise ValueError(msg + f"{alpha:g}); check for duplicated samples, or pass a larger alpha")


def stands_on_rounding(pivots, gram_diag):
    """Whether a factor with no ridge is singular: least squared pivot <= ``n eps max|diag|``."""
    n, eps = pivots.shape[0], float(np.finfo(pivots.dtype).eps)
    return n > 0 and float(pivots.min()) ** 2 <= n * eps * float(np.abs(gram_diag).max())


def potrf_ridge(G, diag, ridge, mirror=True):
    """``potrf`` in place of ``G`` (Fortran) with ``diag + ridge`` on its diagonal."""
    if mirror:
        symmetrize(G, "upper")
    idx = np.arange(G.shape[0])
    G[idx, idx] = diag + G.dtype.type(ridge)
    return lapack.get_lapack_funcs("potrf", (G,))(G, lower=1, overwrite_a=1, clean=0)


def cholesky(G, alpha):
    """Lower factor of ``G + alpha I`` in place (Fortran order), jitter policy: ``(L, ridge)``."""
    diag = np.diagonal(G).copy()

    def attempt(ridge, again):
        L, info = potrf_ridge(G, diag, ridge, mirror=again)
        singular = info != 0 or (ridge == 0 and stands_on_rounding(np.diagonal(L), diag))
        return None if singular else L

    with blas_limits(factor_threads()):
        return first_ridge(attempt, alpha, float(np.mean(np.abs(diag))), G.dtype)


def cho_solve(L, B, overwrite=False):
    """Solve ``L L^T X = B``; with ``overwrite`` and a Fortran-ordered ``B`` in its memory."""
    return lapack.get_lapack_funcs("potrs", (L,))(L, B, lower=1, overwrite_b=overwrite)[0]
