"""Dense linear algebra at the bottom of the package: SYRK, triangle mirroring, the Cholesky
factorisation with its jitter policy, triangular solves, and the BLAS threads they use.

Jitter policy: the Gram plus ``alpha I`` is factorised in place; if it is not numerically
positive definite and ``alpha > 0``, the factorisation is retried with the ridge raised
in steps of 10 from ``eps(dtype) * mean(diag)`` and a warning says which value was used
(:func:`recorded_ridges` records it instead, :func:`ridge_name` names the ridge in it).
With ``alpha = 0`` a singular Gram is an error that asks for ``alpha > 0``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import warnings

import dask
import numpy as np
from scipy.linalg import blas, lapack

from .exceptions import RidgeRaised
from .stacklevel import user_stacklevel

__all__ = [
    "syrk",
    "symmetrize",
    "blas_limits",
    "blas_threads",
    "host_cores",
    "factor_threads",
    "jitter_ridges",
    "first_ridge",
    "RidgeRaised",
    "warn_ridge",
    "recorded_ridges",
    "ridge_name",
    "not_positive_definite",
    "potrf_ridge",
    "cholesky",
    "cho_solve",
]


_CONTROLLER = []


def _controller():
    """One ``ThreadpoolController`` for the process: building one (or calling
    ``threadpool_limits`` / ``threadpool_info``) scans the loaded libraries, 0.4 ms on a plain install and
    10 ms where many are loaded (a PyTorch environment), on every call."""
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


_LIMITS = threading.local()  # this thread's stack of limits (the innermost last)
_LIMIT_LOCK = threading.Lock()
_LIMIT_STATE = {"depth": 0, "first": None}  # sections open in the process; the first one's limiter


def _as_controller(call):
    """``call()``, a threadpoolctl setting of the BLAS threads, made from this thread with effect.

    threadpoolctl 3.8 lets one thread at a time set the size of OpenBLAS's process-wide pthreads
    pool: the first thread to set it, until its ``with threadpool_limits(...)`` block ends or it
    dies; a setting from any other thread is silently dropped (``OpenBLASController.set_num_threads``).
    :func:`blas_limits` sets without a ``with`` block (its sections overlap across threads), so
    the first thread to set kept that right as long as it lived: a restore from another thread
    was dropped (two fits in two threads left a user's 1 BLAS thread at 2 when the thread that
    entered first was still running after the other's section had ended), and after one section
    in the main thread every section in a dask worker thread was a no-op (its factorisation on
    the count found, its slab tasks oversubscribed). The package's settings are serialised by
    ``_LIMIT_LOCK``, so each one takes that right for its call and gives it up after it (where no
    other thread took it meanwhile), as threadpoolctl's own ``with`` blocks do at their end.
    threadpoolctl before 3.8 has no such rule (nothing to take)."""
    from threadpoolctl import OpenBLASController

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
    """Context manager: at most ``n`` BLAS threads inside (``threadpool_limits(n, "blas")``).

    The BLAS thread count is one setting of the process. Sections open in several threads at
    once (two fits in two threads) overlap: each sets its limit on entry, a section that ends
    sets its thread's enclosing limit again, and the last to end restores the count found by
    the first. (threadpoolctl's own contexts restore what each found on entry, so overlapping
    ones could leave another's limit in place for good: the user's 1 thread raised to 2, or
    every later product of the process on 1 thread.) Each setting is made with effect from
    whichever thread makes it (:func:`_as_controller`: threadpoolctl 3.8 drops those of all
    threads but one under OpenBLAS's pthreads pool)."""
    stack = _LIMITS.__dict__.setdefault("stack", [])
    with _LIMIT_LOCK:
        limiter = _as_controller(lambda: _controller().limit(limits=n, user_api="blas"))
        if _LIMIT_STATE["depth"] == 0:
            _LIMIT_STATE["first"] = limiter  # remembers the count before any section
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
                _LIMIT_STATE["first"] = None
            elif stack:  # nested in this thread: the enclosing limit again
                _as_controller(lambda: _controller().limit(limits=stack[-1], user_api="blas"))


def blas_threads():
    """Threads the BLAS may use now (the fewest over its loaded libraries; 1 inside a default
    dask worker, 1 where no BLAS is found)."""
    counts = [i["num_threads"] for i in _controller().info() if i["user_api"] == "blas"]
    return max(1, min(counts)) if counts else 1


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


def host_cores():
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def factor_threads():
    """BLAS threads for the factorisation: ``dask.config`` key ``rfol_dask.factor-threads``, by
    default every core this process may run on. The factorisation is the one step every
    other task waits for, so inside a dask worker (1 BLAS thread by default) it borrows the
    idle cores of its host."""
    n = dask.config.get("rfol_dask.factor-threads", None)
    if n:
        return int(n)
    return host_cores()


def jitter_ridges(alpha, mean_diag, dtype):
    """The ridges tried in turn: ``alpha``, then (if ``alpha > 0``) 10x, 100x, ... (8 steps) of
    ``max(alpha, eps(dtype) * mean_diag)``, ``mean_diag`` the mean absolute diagonal."""
    floor = np.finfo(dtype).eps * max(mean_diag, np.finfo(dtype).tiny)
    return [alpha] + ([max(alpha, floor) * 10.0**k for k in range(1, 9)] if alpha > 0 else [])


#: this context's raised-ridge reporting: (the name messages give the ridge, the list that
#: records them instead of warning, or None). A context variable, not ``warnings.catch_warnings``,
#: which swaps process-wide state before Python 3.14: two searches refitting in two threads
#: lost or leaked each other's warnings, and each reset the process's warning filters.
_RIDGE_REPORT = contextvars.ContextVar("rfol_dask_ridge_report", default=("alpha", None))


@contextlib.contextmanager
def recorded_ridges():
    """Context manager yielding a list: the :class:`RidgeRaised` of each factorisation made in
    this context is appended to it instead of being warned. The context is this thread's (and
    that of the tasks dask's local threaded scheduler runs for it, which copies the submitting
    thread's context), so searches in other threads are not affected; factorisations on
    ``distributed`` workers still warn there."""
    record = []
    token = _RIDGE_REPORT.set((_RIDGE_REPORT.get()[0], record))
    try:
        yield record
    finally:
        _RIDGE_REPORT.reset(token)


@contextlib.contextmanager
def ridge_name(name):
    """Context manager: the :class:`RidgeRaised` messages made in this context (as for
    :func:`recorded_ridges`) call the ridge ``name`` (a kernel's ``"nugget"``) instead of ``alpha``."""
    token = _RIDGE_REPORT.set((name, _RIDGE_REPORT.get()[1]))
    try:
        yield
    finally:
        _RIDGE_REPORT.reset(token)


def warn_ridge(alpha, ridge, dtype):
    """The :class:`RidgeRaised` warning of a factorisation that needed ``ridge`` instead of
    ``alpha``, or its record where :func:`recorded_ridges` is active in this context."""
    name, record = _RIDGE_REPORT.get()
    raised = RidgeRaised(
        f"the Gram matrix plus {name}={alpha:g} is not numerically positive definite in "
        f"{np.dtype(dtype)}; used ridge {ridge:.3g} instead (pass a larger {name} to choose it "
        "yourself)",
        float(alpha),
        float(ridge),
    )
    if record is not None:
        record.append(raised)
    else:
        warnings.warn(raised, stacklevel=user_stacklevel())


def first_ridge(attempt, alpha, mean_diag, dtype):
    """The jitter policy's loop: ``attempt(ridge, again)`` for each ridge of
    :func:`jitter_ridges` in turn (``again``: not the first try) until it returns something
    other than None; returns ``(that, ridge)``, with :func:`warn_ridge` for a raised ridge, or
    raises :func:`not_positive_definite` when every ridge fails. ``mean_diag``: a number, or a
    callable giving it, called only when ``alpha`` itself fails (it may cost a pass over data)."""
    result = attempt(float(alpha), False)
    if result is not None:
        return result, alpha
    ridges = jitter_ridges(alpha, mean_diag() if callable(mean_diag) else mean_diag, dtype)
    for ridge in ridges[1:]:
        result = attempt(float(ridge), True)
        if result is not None:
            warn_ridge(alpha, ridge, dtype)
            return result, ridge
    raise not_positive_definite(alpha, ridges)


def not_positive_definite(alpha, ridges):
    """The ValueError of a Gram that no ridge in ``ridges`` made positive definite."""
    if alpha == 0:
        return ValueError(
            "alpha=0 leaves the Gram matrix singular (not positive definite; e.g. fewer features "
            "than samples, or repeated samples): pass alpha > 0, for example alpha=1e-10"
        )
    return ValueError(
        f"the Gram matrix is not positive definite even with ridge {ridges[-1]:.3g} (alpha={alpha:g}); "
        "check the data for duplicated or constant samples, or pass a larger alpha"
    )


def stands_on_rounding(pivots, gram_diag):
    """Whether a Cholesky factor of a Gram with no ridge (``alpha = 0``) is numerically singular:
    its smallest squared pivot ``L_kk^2`` at most ``n eps`` times the Gram's largest diagonal
    entry. An exactly singular Gram (repeated samples with different outputs) factorises or not
    depending on rounding, and where it does its solution is noise. ``pivots``: the factor's
    diagonal (n,), ``gram_diag`` the Gram's; numpy."""
    n = pivots.shape[0]
    return n > 0 and float(pivots.min()) ** 2 <= n * float(np.finfo(pivots.dtype).eps) * float(
        np.abs(gram_diag).max()
    )


def potrf_ridge(G, diag, ridge, mirror=True):
    """LAPACK ``potrf`` of ``G`` with ``diag + ridge`` on its diagonal, in place in its lower
    triangle; the strict upper triangle is left as it was. With ``mirror`` (a retry after an
    attempt that overwrote the lower triangle) the upper triangle is first mirrored into the
    lower one, so a ridge gives the same factor whichever attempt reaches it, provided the
    triangles of ``G`` were exactly equal to begin with (as every Gram of the package is:
    :func:`rfol_dask.backend.centre_gram`). ``G``: symmetric, Fortran order; ``diag`` its
    original diagonal. Returns ``(L, info)`` (``info > 0``: not positive definite)."""
    if mirror:
        symmetrize(G, "upper")
    idx = np.arange(G.shape[0])
    G[idx, idx] = diag + G.dtype.type(ridge)
    L, info = lapack.get_lapack_funcs("potrf", (G,))(G, lower=1, overwrite_a=1, clean=0)
    if info < 0:  # pragma: no cover - argument error in LAPACK
        raise RuntimeError(f"potrf argument {-info} invalid")
    return L, info


def cholesky(G, alpha):
    """Lower Cholesky factor of ``G + alpha I``, computed in place in ``G``.

    ``G`` is a symmetric Fortran-ordered (n, n) array with both triangles filled and exactly
    equal (the upper one is kept as the backup a retry factorises: :func:`potrf_ridge`). Returns
    ``(L, ridge)`` where only the lower triangle of ``L`` (n, n) is meaningful and ``ridge`` is
    the value added to the diagonal. Cost ``n^3 / 3`` flops, no extra ``n x n`` memory.
    """
    diag = np.diagonal(G).copy()

    def attempt(ridge, again):
        L, info = potrf_ridge(G, diag, ridge, mirror=again)
        return (
            L
            if info == 0 and not (ridge == 0 and stands_on_rounding(np.diagonal(L), diag))
            else None
        )

    with blas_limits(factor_threads()):
        return first_ridge(attempt, alpha, float(np.mean(np.abs(diag))), G.dtype)


def cho_solve(L, B, overwrite=False):
    """Solve ``L L^T X = B`` for the (n, k) right-hand sides ``B`` (cost ``2 n^2 k`` flops);
    with ``overwrite`` and a Fortran-ordered ``B`` the solution replaces ``B`` (no copy)."""
    X, info = lapack.get_lapack_funcs("potrs", (L,))(L, B, lower=1, overwrite_b=overwrite)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"potrs failed with info={info}")
    return X
