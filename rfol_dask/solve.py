"""Fitting the coefficients: Cholesky once, triangular solves over output column blocks.

Two regimes (``A = phi(U)`` is M x N, ``V`` is M x m, both centred when fitting an intercept):

- dual (``N >= M``): ``(A A^T + alpha I) Beta = V``, ``C = A^T Beta``;
- primal (``N < M``): ``(A^T A + alpha I) C = A^T V``.

``fit_numpy`` runs in memory with no graph; ``fit_dask`` builds one dask graph and
computes it in a single ``compute`` call, so the data are read once: in the dual, each
worker sums ``A_f A_f^T`` over its slabs of feature columns into its own Gram, the Grams
are reduced across the workers and factorised once (:func:`dual_stream_graph`; when the
Gram does not fit a worker, tiles of row blocks factorised blocked, :func:`dual_graph`);
in the primal, chained partial sums over row blocks; then solves over column blocks of
the right-hand sides and ``C``. Centring uses ``H K H`` in the dual (``H = I - 1 1^T / M``) and
``A^T A - M mu mu^T`` in the primal, so no centred copy of ``A`` is ever formed.

Jitter policy: the Gram plus ``alpha I`` is factorised in place; if it is not numerically
positive definite and ``alpha > 0``, the factorisation is retried with the ridge raised
in steps of 10 from ``eps(dtype) * mean(diag)`` and a warning says which value was used.
With ``alpha = 0`` a singular Gram is an error that asks for ``alpha > 0``.
"""

from __future__ import annotations

import os
import warnings

import dask
import numpy as np
from scipy.linalg import lapack
from threadpoolctl import threadpool_limits

from .features import FREQUENCY_BLOCK, feature_map
from .gram import (add_partials, block_means, check_finite, dual_tile, features_block, primal_partial, symmetrize,
                   symmetrize_lower, syrk)
from .progress import active_client, compute

__all__ = ["cholesky", "cho_solve", "check_gram_memory", "fit_numpy", "fit_dask", "choose_solver"]

#: rows of ``A`` formed at once by the in-memory primal path and by ``predict``
_ROW_BLOCK_BYTES = 128 * 2**20


def choose_solver(solver, n_samples, n_features):
    """``"dual"`` or ``"primal"``: ``"auto"`` picks the smaller Gram (dual when ``N >= M``)."""
    if solver == "auto":
        return "dual" if n_features >= n_samples else "primal"
    return solver


def check_gram_memory(size, dtype, max_bytes=None, client=None):
    """Raise ValueError if a ``size x size`` Gram of ``dtype`` cannot be held by one process.

    The budget is ``max_bytes`` if given, else 60 % of the smallest worker memory limit of
    the distributed ``client`` (if it has limits), else 60 % of this machine's available memory.
    """
    need = int(size) ** 2 * np.dtype(dtype).itemsize
    budget, where = max_bytes, "max_gram_bytes"
    if budget is None and client is not None:
        limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
        if limits and min(limits) > 0:
            budget, where = 0.6 * min(limits), "60% of the smallest worker memory limit"
    if budget is None:
        import psutil

        budget, where = 0.6 * psutil.virtual_memory().available, "60% of the available memory"
    if need > budget:
        raise ValueError(
            f"the {size} x {size} Gram matrix needs {need:,} bytes ({need / 2**30:.2f} GiB) but the "
            f"budget ({where}) is {int(budget):,} bytes; use fewer samples or features, the other "
            "solver (solver='primal' when n_features < n_samples), or pass max_gram_bytes"
        )
    return need


def factor_threads():
    """BLAS threads for the factorisation: ``dask.config`` key ``rfol_dask.factor-threads``, by
    default every core this process may run on. The factorisation is the one step every
    other task waits for, so inside a dask worker (1 BLAS thread by default) it borrows the
    idle cores of its host."""
    n = dask.config.get("rfol_dask.factor-threads", None)
    return int(n) if n else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cholesky(G, alpha):
    """Lower Cholesky factor of ``G + alpha I``, computed in place in ``G``.

    ``G`` is a symmetric Fortran-ordered array with both triangles filled (the upper one
    is kept as the backup used to retry with jitter). Returns ``(L, ridge)`` where only the
    lower triangle of ``L`` is meaningful. Cost ``n^3 / 3`` flops, no extra ``n x n`` memory.
    """
    n = G.shape[0]
    diag = np.diagonal(G).copy()
    eps = np.finfo(G.dtype).eps
    floor = eps * max(float(np.mean(np.abs(diag))), np.finfo(G.dtype).tiny)
    ridges = [alpha] + ([max(alpha, floor) * 10.0**k for k in range(1, 9)] if alpha > 0 else [])
    idx = np.arange(n)
    with threadpool_limits(limits=factor_threads(), user_api="blas"):
        for attempt, ridge in enumerate(ridges):
            if attempt:
                symmetrize(G, "upper")  # restore the lower triangle from the untouched upper one
            G[idx, idx] = diag + G.dtype.type(ridge)
            L, info = lapack.get_lapack_funcs("potrf", (G,))(G, lower=1, overwrite_a=1, clean=0)
            if info == 0:
                if attempt:
                    warnings.warn(
                        f"the Gram matrix plus alpha={alpha:g} is not numerically positive definite in "
                        f"{G.dtype}; used ridge {ridge:.3g} instead (pass a larger alpha to choose it "
                        "yourself)", RuntimeWarning, stacklevel=2)
                return L, ridge
            if info < 0:  # pragma: no cover - argument error in LAPACK
                raise RuntimeError(f"potrf argument {-info} invalid")
    if alpha == 0:
        raise ValueError(
            "alpha=0 leaves the Gram matrix singular (not positive definite; e.g. fewer features "
            "than samples, or repeated samples): pass alpha > 0, for example alpha=1e-10"
        )
    raise ValueError(
        f"the Gram matrix is not positive definite even with ridge {ridges[-1]:.3g} (alpha={alpha:g}); "
        "check the data for duplicated or constant samples, or pass a larger alpha"
    )


def cho_solve(L, B, overwrite=False):
    """Solve ``L L^T X = B`` for the (n, k) right-hand sides ``B`` (cost ``2 n^2 k`` flops);
    with ``overwrite`` and a Fortran-ordered ``B`` the solution replaces ``B`` (no copy)."""
    X, info = lapack.get_lapack_funcs("potrs", (L,))(L, B, lower=1, overwrite_b=overwrite)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"potrs failed with info={info}")
    return X


# ---------------------------------------------------------------------------------------
# factorisation and solve kernels shared by the in-memory path and the dask graphs


def gram_place(K, offsets, i, *tiles):
    """Copy the tiles ``A_i A_j^T`` (j = i, i+1, ...) of row block ``i`` into the upper block
    triangle of the C-ordered ``K`` (M, M), in place; returns ``K``. A chain of these builds
    the Gram while holding one tile row at a time besides ``K``."""
    for j, T in enumerate(tiles, start=i):
        K[offsets[i]:offsets[i + 1], offsets[j]:offsets[j + 1]] = T
    return K


def dual_factor(K, vsum, alpha, fit_intercept, upper=False):
    """Centre the Gram ``K`` (M, M) and factorise ``H K H + alpha I`` in place.

    ``K`` is full and symmetric, or (``upper=True``) C-ordered with only its upper block
    triangle filled (from :func:`gram_place`). The tiles come from shifted features
    ``A - s``; ``H K H`` does not depend on ``s``. Memory: ``K`` itself, no copy.
    Returns a dict with the factor ``L``, the row sums ``r = K 1``, ``vbar`` and ``M``.
    """
    M = K.shape[0]
    # K.T of a C-ordered symmetric K is the Fortran-ordered view LAPACK factorises in place
    K = symmetrize(K, "upper").T if upper else np.asfortranarray(K)
    r = K.sum(axis=1)
    if fit_intercept:
        K -= (r / M)[:, None]
        K -= (r / M)[None, :]
        K += r.sum() / M**2
    L, _ = cholesky(K, alpha)
    vbar = vsum / M if fit_intercept else np.zeros_like(vsum)
    return {"L": L, "r": r, "vbar": vbar, "M": M, "fit_intercept": fit_intercept}


def dual_solve(fac, V, start=0, borrow_threads=False, overwrite=False):
    """Centred dual coefficients ``H Beta`` (M, k) for the output columns ``start:start+k`` in ``V``
    (with ``borrow_threads``, on all the cores the factorisation uses; with ``overwrite``, in
    the memory of a Fortran-ordered ``V``, which the caller gives up)."""
    limits = factor_threads() if borrow_threads else None
    vbar = fac["vbar"][start:start + V.shape[1]]
    if overwrite:
        V -= vbar
    else:
        V = V - vbar
    with threadpool_limits(limits=limits, user_api="blas"):
        Beta = cho_solve(fac["L"], V, overwrite=True)
    if fac["fit_intercept"]:
        Beta -= Beta.mean(axis=0)
    return Beta


def dual_intercept(fac, Beta, C=None, shift=None, start=0):
    """Intercepts ``vbar - mu^T C`` of the columns ``start:start+k``.

    With shifted features ``(A - s) C = K Beta``, so ``mu^T C = s^T C + r^T Beta / M``; a
    kernel method (no explicit ``C``) passes neither ``C`` nor ``shift``.
    """
    if not fac["fit_intercept"]:
        return np.zeros(Beta.shape[1], Beta.dtype)
    out = fac["vbar"][start:start + Beta.shape[1]] - (fac["r"] @ Beta) / fac["M"]
    return out if C is None else out - shift @ C


def primal_factor(acc, shifts, alpha, fit_intercept):
    """Centre the summed (shifted) primal partials and factorise ``A_c^T A_c + alpha I`` in place.

    With ``d = colsum / M`` the mean of ``A - s``: ``A_c^T A_c = G - M d d^T`` and
    ``A_c^T V_c = AtV - M d e^T`` (``e`` the mean of ``V - t``).
    """
    G, AtV, M = symmetrize_lower(acc["G"]), acc["AtV"], acc["count"]
    if fit_intercept:
        d, e = acc["colsum"] / M, acc["vsum"] / M
        G -= M * np.outer(d, d)
        AtV = AtV - M * np.outer(d, e)
        mu, vbar = shifts[0] + d, shifts[1] + e
    else:
        mu, vbar = np.zeros(G.shape[0], G.dtype), np.zeros(AtV.shape[1], G.dtype)
    L, _ = cholesky(G, alpha)
    return {"L": L, "AtV": AtV, "mu": mu, "vbar": vbar}


def primal_solve(fac, start, stop):
    """Coefficients ``C[:, start:stop]`` and their intercepts from the primal factor."""
    C = cho_solve(fac["L"], fac["AtV"][:, start:stop])
    return C, fac["vbar"][start:stop] - fac["mu"] @ C


# ---------------------------------------------------------------------------------------
# in-memory path


def _row_blocks(n_rows, row_bytes):
    step = max(1, int(_ROW_BLOCK_BYTES // max(row_bytes, 1)))
    return [(s, min(s + step, n_rows)) for s in range(0, n_rows, step)]


def dual_numpy(X, V, tile, *, alpha, fit_intercept):
    """Dual solve in memory: ``K = tile(X, X, True)`` (M, M), centred, factorised once, solved
    for all columns of ``V`` (M, m). Returns ``(factor dict, centred Beta (M, m))``."""
    V = np.asarray(V, dtype=X.dtype)
    check_finite(V, 0, "V")
    fac = dual_factor(tile(X, X, True), V.sum(axis=0), alpha, fit_intercept)
    return fac, dual_solve(fac, V)


def fit_numpy(U, V, omega, b, *, alpha, fit_intercept, solver):
    """Fit on numpy ``U`` (M, n), ``V`` (M, m); returns ``(coef (N, m), intercept (m,))``.

    Memory: dual ``M N + M^2`` (A and K), primal ``N^2 + N m`` plus one 128 MiB row block.
    """
    dtype = omega.dtype
    if solver == "dual":
        A = features_block(U, omega, b)
        shift = A.mean(axis=0) if fit_intercept else np.zeros(A.shape[1], dtype)  # exact centring
        A -= shift
        fac, Beta = dual_numpy(A, V, dual_tile, alpha=alpha, fit_intercept=fit_intercept)
        C = A.T @ Beta
        return C, dual_intercept(fac, Beta, C, shift)
    blocks = _row_blocks(len(U), omega.shape[1] * dtype.itemsize)
    shifts = block_means(U, V, omega, b, fit_intercept)
    acc = None
    for s, e in blocks:
        acc = primal_partial(U[s:e], V[s:e], omega, b, s, acc, shifts)
    fac = primal_factor(acc, shifts, alpha, fit_intercept)
    return primal_solve(fac, 0, V.shape[1])


# ---------------------------------------------------------------------------------------
# dask path


def _column_blocks(m, block):
    return [(s, min(s + block, m)) for s in range(0, m, block)]


def _tree(parts, combine):
    """Pairwise tree reduction of delayed ``parts`` with delayed ``combine``."""
    parts = list(parts)
    while len(parts) > 1:
        parts = [combine(parts[k], parts[k + 1]) if k + 1 < len(parts) else parts[k]
                 for k in range(0, len(parts), 2)]
    return parts[0]


def _iadd(a, b):
    a += b
    return a


def _vsum(V, start):
    V = np.asarray(V)
    check_finite(V, start, "V")
    return V.sum(axis=0)


def _column_slab(start, stop, dtype, *blocks):
    """Columns ``start:stop`` of the row blocks ``blocks``, stacked in one Fortran-ordered
    (M, stop - start) array (the layout the triangular solves overwrite in place)."""
    out = np.empty((sum(len(B) for B in blocks), stop - start), dtype=dtype, order="F")
    row = 0
    for B in blocks:
        out[row:row + len(B)] = B = np.asarray(B)[:, start:stop]
        check_finite(B, row, "V")
        row += len(B)
    return out


def _rows(X, start, stop):
    return X[start:stop]


def _cross_block(A, Beta_rows, acc=None):
    """``acc + A^T Beta_rows`` (N, k), accumulated in place into ``acc`` when given."""
    if acc is None:
        return A.T @ Beta_rows
    acc += A.T @ Beta_rows
    return acc


def dual_needs_blocking(M, dtype, max_gram_bytes=None, client=None):
    """True (with a warning) if the M x M dual Gram does not fit one worker: the dask fit then
    factorises it blocked across the workers instead of failing (:func:`dual_graph`)."""
    try:
        check_gram_memory(M, dtype, max_gram_bytes, client)
        return False
    except ValueError as exc:
        warnings.warn(f"{exc.args[0].split(';')[0]}: factorising it blocked, across the workers",
                      RuntimeWarning, stacklevel=4)
        return True


def row_blocks(U, V, column_block=None, client=None):
    """Delayed row blocks of ``U`` (M, n) and ``V`` (M, m) on the same sample chunks, their
    start offsets (nb + 1,), and the output column blocks for the solves (default: one per
    worker thread). Nothing is computed."""
    U = U.rechunk({1: -1})
    V = V.rechunk({0: U.chunks[0], 1: -1})
    starts = np.concatenate([[0], np.cumsum(U.chunks[0])]).astype(int)
    m = V.shape[1]
    if column_block is None:
        column_block = max(1, -(-m // _n_slots(client)))
    Ub, Vb = U.to_delayed().ravel(), V.to_delayed().ravel()
    Ub = [dask.delayed(_after_v_check)(u, v, s) for u, v, s in zip(Ub, Vb, starts)]
    return Ub, Vb, starts, _column_blocks(m, column_block)


def _after_v_check(U, V, start):
    """The block ``U`` once the same rows of ``V`` are checked: a NaN in ``V`` fails before
    the features are made, as one in ``U`` does."""
    check_finite(np.asarray(V), start, "V")
    return U


def _identity(x):
    return x


def broadcast(client, *values):
    """Delayed handles of values every task needs (frequencies, fitted arrays): scattered to
    every worker once with a distributed client, else kept as single graph values; never
    copied into each task. The handles serve as arguments of delayed calls and map_blocks."""
    if client is not None:
        futures = client.scatter(list(values), broadcast=True, hash=False)
        return [dask.delayed(_identity, pure=True)(f) for f in futures]
    return [dask.delayed(v, pure=True, traverse=False) for v in values]


def dual_graph(Xb, Vb, starts, tile, cols, *, alpha, fit_intercept, dtype, blocked=False):
    """The dual part of a dask fit, shared by the random-feature and kernel models.

    ``Xb`` are delayed row blocks (features, or inputs for a kernel), ``tile(X_i, X_j, diag)``
    makes one Gram tile (only ``i <= j`` are formed), ``Vb`` the delayed output blocks.
    Returns the delayed factor (a dict with ``r``, ``vbar``, ``M``) and one delayed centred
    ``Beta`` (M, c1 - c0) per column block ``(c0, c1)`` of ``cols``.

    In memory (default) a chain of tasks copies each row of tiles into the Gram as it is
    made (the Gram plus one tile row in memory), one task factorises it, and the column
    blocks are solved in tasks spread over the workers (``cols`` with one block solves on the
    factorising worker, so the factor is never copied). ``blocked=True`` never assembles the
    Gram: the tiles form a dask array factorised by ``dask.array.linalg.cholesky`` and solved
    by blocked triangular solves, so no worker holds more than a few tiles.
    """
    nb = len(Xb)
    sizes = [int(k) for k in np.diff(starts)]
    vsum = _tree([dask.delayed(_vsum)(Vb[i], starts[i]) for i in range(nb)], dask.delayed(np.add))
    if blocked:
        tiles = [((i, j), dask.delayed(tile)(Xb[i], Xb[j], i == j)) for i in range(nb) for j in range(i, nb)]
        return _blocked_dual(tiles, sizes, vsum, Vb, cols, alpha, fit_intercept, dtype)
    rows = [[dask.delayed(tile)(Xb[i], Xb[j], i == j) for j in range(i, nb)] for i in range(nb)]
    # The Gram, its factor and (unless spread) the solves stay on one worker: the chain is pinned
    # there as a preference, so the M x M array never travels between workers.
    with _on_one_worker():
        K = dask.delayed(np.empty)((int(starts[-1]),) * 2, dtype=dtype)
        for i in range(nb):
            K = dask.delayed(gram_place)(K, starts, i, *rows[i])
        fac = dask.delayed(dual_factor)(K, vsum, alpha, fit_intercept, upper=True)
    borrow = len(cols) == 1  # a single solve task runs alone: it may use all cores, like the factor
    betas = [dask.delayed(dual_solve)(fac, dask.delayed(_column_slab)(c0, c1, dtype, *Vb), c0, borrow, True)
             for c0, c1 in cols]
    return fac, betas


def _on_one_worker():
    """``dask.annotate`` preferring one worker of the active distributed client (else a no-op)."""
    client = active_client()
    workers = sorted(client.scheduler_info()["workers"]) if client is not None else []
    return _pinned(workers[0] if workers else None)


def _blocked_dual(tiles, sizes, vsum, Vb, cols, alpha, fit_intercept, dtype):
    """Blocked dual solve on the tiles as a dask array (see :func:`dual_graph`)."""
    import dask.array as da

    M, m, nb = sum(sizes), cols[-1][1], len(sizes)
    T = {ij: da.from_delayed(t, (sizes[ij[0]], sizes[ij[1]]), dtype=dtype) for ij, t in tiles}
    K = da.block([[T[i, j] if i <= j else T[j, i].T for j in range(nb)] for i in range(nb)])
    r = K.sum(axis=1)
    V = da.concatenate([da.from_delayed(v, (sizes[i], m), dtype=dtype) for i, v in enumerate(Vb)])
    vbar = da.from_delayed(vsum, (m,), dtype=dtype) / M if fit_intercept else da.zeros(m, dtype=dtype)
    if fit_intercept:
        K = K - r[:, None] / M - r[None, :] / M + r.sum() / M**2
    K = K + da.diag(da.full(M, alpha, chunks=(tuple(sizes),), dtype=dtype))
    # dask's blocked Cholesky wants equal square chunks: pad with an identity block to a multiple
    c = max(sizes)
    pad = -M % c
    rhs = V - vbar
    if pad:
        K = da.block([[K, da.zeros((M, pad), dtype=dtype)], [da.zeros((pad, M), dtype=dtype), da.eye(pad, dtype=dtype)]])
        rhs = da.concatenate([rhs, da.zeros((pad, m), dtype=dtype)])
    L = da.linalg.cholesky(K.rechunk(c), lower=True)
    Beta = da.linalg.solve_triangular(L.T, da.linalg.solve_triangular(L, rhs.rechunk((c, m)), lower=True), lower=False)
    Beta = Beta[:M]
    if fit_intercept:
        Beta = Beta - Beta.mean(axis=0)
    # chunks as delayed with the arrays' own keys: the tiles and features are shared with the
    # rest of the fit graph, not optimised (and so recomputed) once per array
    r, vbar, Beta = (_whole(x) for x in (r, vbar, Beta.astype(dtype)))
    fac = dask.delayed(dict)(r=r, vbar=vbar, M=M, fit_intercept=fit_intercept)
    return fac, [dask.delayed(_columns)(Beta, c0, c1) for c0, c1 in cols]


def _whole(x):
    """A dask array as one delayed numpy array, keeping its keys (no separate optimisation)."""
    blocks = x.to_delayed(optimize_graph=False)
    return dask.delayed(_assemble)(blocks.tolist(), x.ndim)


def _assemble(blocks, ndim):
    return np.block(blocks) if ndim > 1 else np.concatenate(blocks)


def _columns(X, start, stop):
    return X[:, start:stop]


# ---------------------------------------------------------------------------------------
# streamed dual: the Gram as a sum over feature slabs, reduced across the workers

#: bytes of one feature slab ``A[:, f0:f1]`` (M x slab width) in the streamed dual
SLAB_BYTES = 256 * 2**20


def feature_slabs(M, N, n_groups, itemsize, slab_bytes=None):
    """Column ranges ``(f0, f1)`` of ``A`` (M x N) in ``n_groups`` contiguous groups of nearly
    equal width (one per worker; empty groups dropped), each cut into slabs of at most
    ``slab_bytes``. Boundaries fall on whole blocks of frequencies where the sizes allow, so
    each block is drawn once."""
    B = FREQUENCY_BLOCK
    width = max(1, int((SLAB_BYTES if slab_bytes is None else slab_bytes) // (M * itemsize)))
    width -= width % B if width > B else 0
    n_blocks = -(-N // B)
    if n_blocks >= n_groups:
        bounds = [min(N, (n_blocks * g // n_groups) * B) for g in range(n_groups + 1)]
    else:
        bounds = [N * g // n_groups for g in range(n_groups + 1)]
    return [[(f, min(f + width, g1)) for f in range(g0, g1, width)] for g0, g1 in zip(bounds, bounds[1:]) if g1 > g0]


def _current_worker():
    """The distributed worker running this task, or None (local schedulers, the client)."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def _worker_threads():
    """BLAS threads for a task that runs alone on its worker: the worker's task threads in a
    distributed worker, else every core (local schedulers run one Gram chain)."""
    worker = _current_worker()
    return max(1, int(worker.state.nthreads)) if worker is not None else factor_threads()


def _cache_file(token, f0):
    """Where slab ``f0`` of the fit ``token`` is cached: the worker's local directory (else
    the temporary directory), or None without a token."""
    if token is None:
        return None
    import tempfile

    worker = _current_worker()
    base = worker.local_directory if worker is not None else tempfile.gettempdir()
    return os.path.join(base, f"rfol-{token}-{f0}.npy")


def remove_cache(token):
    """Delete what is left of the feature cache of the fit ``token`` (after a failure)."""
    import glob

    for path in glob.glob(_cache_file(token, "*")):
        try:
            os.remove(path)
        except OSError:  # pragma: no cover - removed concurrently
            pass


def _clean(client, token):
    """Remove the feature cache of ``token`` here and on every worker (best effort)."""
    remove_cache(token)
    if client is not None:
        try:
            client.run(remove_cache, token)
        except Exception:  # pragma: no cover - a cluster going down takes its scratch space along
            pass


def _stack_rows(starts, dtype, *blocks):
    """The checked row blocks stacked into one (M, n) array (copied once per worker)."""
    out = np.empty((int(starts[-1]), np.shape(blocks[0])[1]), dtype=dtype)
    for i, B in enumerate(blocks):
        B = np.asarray(B)
        check_finite(B, starts[i], "U")
        out[starts[i]:starts[i + 1]] = B
    return out


#: samples whose mean features shift each slab (the centring shift of :func:`block_means`)
_SHIFT_ROWS = 64


def _slab(U, freq, N, f0, f1, centre):
    """Features ``A[:, f0:f1]`` (of ``N``) of all of ``U`` minus their mean over the first
    samples (if ``centre``), and that shift. ``freq`` is a recipe ``freq(columns=(f0, f1))``
    drawing the slab of ``(Omega, b)`` (``features.draw_frequencies``) or the whole ``(Omega, b)``."""
    omega, b = freq(columns=(f0, f1)) if callable(freq) else (freq[0][:, f0:f1], freq[1][f0:f1])
    shift = feature_map(U[:_SHIFT_ROWS], omega, b, n_features=N).mean(axis=0) if centre else None
    return feature_map(U, omega, b, shift=shift, n_features=N), shift


def gram_slab(K, U, freq, N, f0, f1, centre, token=None):
    """``K + A_f A_f^T`` for the shifted feature slab ``A_f = A[:, f0:f1] - s_f`` (lower
    triangle, Fortran order, in place; ``K=None`` starts the sum). ``A_f`` (M x (f1 - f0)) is
    made from all of ``U`` on the worker's cores and, with a ``token``, kept on the worker's
    disk for ``C = A^T Beta`` when there is room (else it is made again then). Cost
    ``2 M n (f1 - f0) + M^2 (f1 - f0)`` flops."""
    import shutil

    with threadpool_limits(limits=_worker_threads(), user_api="blas"):
        A, _ = _slab(U, freq, N, f0, f1, centre)
        K = syrk(A, trans=False, C=K)
    path = _cache_file(token, f0)
    if path is not None and shutil.disk_usage(os.path.dirname(path)).free > 4 * A.nbytes + 2**30:
        np.save(path, A)
    return K


def coef_slab(acc, n0, U, freq, N, f0, f1, centre, Beta, token=None):
    """Rows ``f0:f1`` of ``C = A^T Beta`` written into ``acc["C"]`` (holding rows ``n0:``) in
    place, and ``s_f^T C_f`` added to ``acc["sC"]`` (the intercept needs ``s^T C``). The slab
    is read back from the worker's disk (and deleted) or made again."""
    path = _cache_file(token, f0)
    with threadpool_limits(limits=_worker_threads(), user_api="blas"):
        if path is not None and os.path.exists(path):
            A = np.load(path)
            os.remove(path)
            shift = _slab(U[:_SHIFT_ROWS], freq, N, f0, f1, centre)[1]
        else:
            A, shift = _slab(U, freq, N, f0, f1, centre)
        Cf = np.matmul(A.T, Beta, out=acc["C"][f0 - n0:f1 - n0])
    if shift is not None:
        acc["sC"] += shift @ Cf
    return acc


def _coef_part(rows, m, dtype, after=None):
    """An empty part of ``C`` (``rows`` x m); ``after`` (ignored) keeps it from being made early."""
    return {"C": np.empty((rows, m), dtype=dtype), "sC": np.zeros(m, dtype=dtype)}


def _pinned(worker):
    """``dask.annotate`` preferring ``worker`` (loosely: another takes over if it dies)."""
    import contextlib

    return dask.annotate(workers=[worker], allow_other_workers=True) if worker else contextlib.nullcontext()


def _factor_info(fac):
    """The factor's small parts (everything but ``L``), so ``L`` is freed after the solve."""
    return {k: v for k, v in fac.items() if k != "L"}


def _intercept_minus(intercept, *parts):
    return intercept - sum(p["sC"] for p in parts)


def dual_stream_graph(Ub, Vb, starts, m, freq, *, n_features, alpha, fit_intercept, dtype, client):
    """The streamed dual fit of random features; returns delayed ``(coef parts, intercept)``
    and the token of the feature cache.

    Each worker gets all of ``U`` (M x n) and a contiguous group of feature slabs
    (:func:`feature_slabs`); along a chain of tasks it draws each slab's frequencies, makes
    the slab and adds ``A_f A_f^T`` to its own Gram, so neither ``A`` nor ``Omega`` exists
    whole and ``A`` never travels. The workers' Grams are summed (a tree; ``8 M^2`` bytes
    moved per worker beyond the first), factorised once, and solved for all outputs on one
    worker (in place); ``Beta`` (M x m) goes to every worker, which writes the rows of
    ``C = A^T Beta`` of its slabs. Memory per worker: ``8 M^2`` (its Gram) ``+ 8 M n``
    (``U``) ``+`` two slabs; on the factorising worker ``+ 8 M m``; the coefficients
    ``8 N m`` in all. Flops: those of the in-memory dual; the slabs are cached on the
    workers' local disks between the two passes (config ``rfol_dask.feature-cache: none``
    makes them again instead: ``2 M n N`` more flops).
    """
    import uuid

    workers = sorted(client.scheduler_info()["workers"]) if client is not None else [None]
    groups = feature_slabs(int(starts[-1]), n_features, len(workers), np.dtype(dtype).itemsize)
    token = uuid.uuid4().hex if dask.config.get("rfol_dask.feature-cache", "disk") == "disk" else None
    U = dask.delayed(_stack_rows)(starts, dtype, *Ub)
    grams = []
    for w, group in zip(workers, groups):
        with _pinned(w):
            K = None
            for f0, f1 in group:
                K = dask.delayed(gram_slab)(K, U, freq, n_features, f0, f1, fit_intercept, token)
        grams.append(K)
    with _pinned(workers[0]):
        K = dask.delayed(symmetrize_lower)(_tree(grams, dask.delayed(_iadd)))
        Vslab = dask.delayed(_column_slab)(0, m, dtype, *Vb)
        fac = dask.delayed(dual_factor)(K, dask.delayed(np.sum)(Vslab, axis=0), alpha, fit_intercept)
        Beta = dask.delayed(dual_solve)(fac, Vslab, 0, True, True)
        info = dask.delayed(_factor_info)(fac)
    parts = []
    for w, group in zip(workers, groups):
        n0, n1 = group[0][0], group[-1][1]
        with _pinned(w):
            acc = dask.delayed(_coef_part)(n1 - n0, m, dtype, Beta)
            for f0, f1 in group:
                acc = dask.delayed(coef_slab)(acc, n0, U, freq, n_features, f0, f1, fit_intercept, Beta, token)
        parts.append(acc)
    intercept = dask.delayed(_intercept_minus)(dask.delayed(dual_intercept)(info, Beta), *parts)
    return parts, intercept, token


def memory_plan(client, M, N, m, dtype):
    """How the tiled dask dual fit (:func:`dual_graph`) uses memory, from the sizes and the
    workers' memory.

    ``keep_features``: the row blocks of ``A`` (M x N in all) stay in memory for
    ``C = A^T Beta`` if they take at most 30 % of the cluster's memory; otherwise they are
    recomputed from the inputs (one more projection, ``2 M n N`` flops, instead of holding ``A``).
    """
    import psutil

    itemsize = np.dtype(dtype).itemsize
    limits = []
    if client is not None:
        limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
    if not limits or min(limits) <= 0:
        limits = [psutil.virtual_memory().available]
    return {"keep_features": M * N * itemsize <= 0.3 * sum(limits)}


def _n_slots(client):
    if client is not None:
        return max(1, sum(w["nthreads"] for w in client.scheduler_info()["workers"].values()))
    return os.cpu_count() or 1


def fit_dask(U, V, omega=None, b=None, *, alpha, fit_intercept, solver, column_block=None,
             progress=False, max_gram_bytes=None, frequencies=None, n_features=None, dtype=None):
    """Fit on dask arrays ``U`` (M, n) and ``V`` (M, m) chunked along samples only.

    One graph, one ``compute``. Dual: the Gram summed over feature slabs on each worker and
    reduced across them (:func:`dual_stream_graph`), or, when it does not fit a worker, as
    tiles ``i <= j`` of row blocks factorised blocked (:func:`dual_graph`). Primal: features
    per row block (never concatenated), per-worker chains of in-place partial sums. Then one
    factorisation, solves over column blocks of ``column_block`` outputs (primal and
    blocked), and ``C``. Returns numpy ``(coef, intercept)``.

    ``frequencies``, a picklable callable returning ``(omega, b)`` (or, with
    ``columns=(f0, f1)``, their columns ``f0:f1``), lets the workers draw the frequencies
    themselves (the streamed dual draws one slab per task; recomputed if the workers holding
    them die; nothing large in the graph), and ``omega``, ``b`` may then be None (give
    ``n_features`` and ``dtype``). Without it the arrays are scattered to every worker.
    """
    if omega is None and frequencies is None:
        raise ValueError("fit_dask needs the frequencies: omega and b, or a frequencies recipe")
    client = active_client()
    dtype = omega.dtype if omega is not None else np.dtype(dtype)
    N = omega.shape[1] if omega is not None else int(n_features)
    if solver == "dual":
        blocked = dual_needs_blocking(V.shape[0], dtype, max_gram_bytes, client)
    else:
        check_gram_memory(N, dtype, max_gram_bytes, client)
        blocked = False
    Ub, Vb, starts, cols = row_blocks(U, V, column_block, client)
    if frequencies is not None:
        om, bb = dask.delayed(frequencies, pure=True, nout=2)()
    else:
        om, bb = broadcast(client, omega, b)
    if solver == "dual" and not blocked:
        parts, intercept, token = dual_stream_graph(
            Ub, Vb, starts, V.shape[1], frequencies if frequencies is not None else (om, bb), n_features=N,
            alpha=alpha, fit_intercept=fit_intercept, dtype=dtype, client=client)
        try:
            parts, intercept = compute_fit(parts, intercept, progress=progress, client=client,
                                           desc="fit (dual)", alpha=alpha)
        finally:
            if token is not None:
                _clean(client, token)
        parts = [p["C"] for p in parts]
        return (parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)), intercept
    nb, slots = len(Ub), _n_slots(client)
    shifts = dask.delayed(block_means, nout=2)(Ub[0], Vb[0], om, bb, fit_intercept)
    if solver == "dual":  # blocked: Gram tiles of row blocks, factorised across the workers
        shift = shifts[0]
        plan = memory_plan(client, V.shape[0], N, V.shape[1], dtype)
        A = [dask.delayed(features_block)(Ub[i], om, bb, starts[i], shift) for i in range(nb)]
        fac, betas = dual_graph(A, Vb, starts, dual_tile, cols, alpha=alpha, fit_intercept=fit_intercept,
                                dtype=dtype, blocked=blocked)
        if not plan["keep_features"]:  # new tasks: the features are made again for C = A^T Beta
            A = [dask.delayed(features_block)(Ub[i], om, bb, starts[i], shift) for i in range(nb)]
        coefs, intercepts = [], []
        n_chains = min(slots, nb)
        for (c0, _), Beta in zip(cols, betas):
            # C = sum_i A_i^T Beta_i: one in-place (N, k) accumulator per worker thread, then a
            # tree over those few; (N, k) partials per row block would cross between workers
            chains = []
            for c in range(n_chains):
                acc = None
                for i in range(c, nb, n_chains):
                    acc = dask.delayed(_cross_block)(A[i], dask.delayed(_rows)(Beta, starts[i], starts[i + 1]), acc)
                chains.append(acc)
            coefs.append(_tree(chains, dask.delayed(_iadd)))
            intercepts.append(dask.delayed(dual_intercept)(fac, Beta, coefs[-1], shift, c0))
    else:
        n_chains = min(slots, nb)
        chains = []
        for c in range(n_chains):
            acc = None
            for i in range(c, nb, n_chains):
                acc = dask.delayed(primal_partial)(Ub[i], Vb[i], om, bb, starts[i], acc, shifts)
            chains.append(acc)
        total = _tree(chains, dask.delayed(add_partials))
        fac = dask.delayed(primal_factor)(total, shifts, alpha, fit_intercept)
        solved = [dask.delayed(primal_solve, nout=2)(fac, c0, c1) for c0, c1 in cols]
        coefs = [s[0] for s in solved]
        intercepts = [s[1] for s in solved]
    coefs, intercepts = compute_fit(coefs, intercepts, progress=progress, client=client,
                                    desc=f"fit ({solver})", alpha=alpha)
    return np.concatenate(coefs, axis=1), np.concatenate(intercepts)


def compute_fit(*collections, progress, client, desc, alpha):
    """``progress.compute`` for a fit graph; a failed blocked Cholesky becomes a ValueError."""
    try:
        return compute(*collections, progress=progress, client=client, desc=desc)
    except np.linalg.LinAlgError as exc:  # raised by the blocked Cholesky (no jitter retry there)
        raise ValueError(f"the blocked Cholesky factorisation failed ({exc}): the Gram plus alpha={alpha:g} "
                         "is not numerically positive definite; pass a larger alpha") from exc
