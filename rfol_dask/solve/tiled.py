"""The tiled dask dual (random features and kernels): the Gram from tiles ``X_i X_j^T`` of row
blocks, assembled on one worker or, when it does not fit one, factorised blocked across them."""

from __future__ import annotations

import itertools
import operator

import dask
import dask.array as da
import numpy as np

from ..factor import DualFactor, dual_factor, dual_intercept, dual_solve, gram_place
from ..gram import block_means, dual_tile, features_block
from ..linalg import stands_on_rounding
from ..memory import keeps_features
from ..placement import pinned, worker_addresses, worker_slots
from ..progress import active_client
from . import graph


def dual_graph(
    Xb, Vb, starts, tile, cols, *, alpha, fit_intercept, dtype, blocked=False, names=None
):
    """The delayed :class:`DualFactor` and ``Beta`` per column block (``blocked``: by workers)."""
    names, nb = names or graph.TaskNames(), len(Xb)
    vsums = [dask.delayed(graph.block_vsum)(Vb[i], starts[i]) for i in range(nb)]
    vsum = graph.tree_sum(vsums, dask.delayed(np.add))
    sizes = [int(k) for k in np.diff(starts)]

    def gram_tile(i, j, *after):  # the tile X_i X_j^T, once the tasks ``after`` are done
        name = names("gram-tile", i, j)
        return dask.delayed(_tile_after)(tile, Xb[i], Xb[j], i == j, *after, dask_key_name=name)

    if blocked:
        T = {}
        for i, j in itertools.combinations_with_replacement(range(nb), 2):
            T[i, j] = da.from_delayed(gram_tile(i, j), (sizes[i], sizes[j]), dtype=dtype)
        return _blocked_dual(T, sizes, vsum, Vb, cols, alpha, fit_intercept, dtype)
    # the Gram, its factor and a single solve stay on one worker: the M x M array never travels
    one, K, placed = worker_addresses(active_client())[0], None, None
    for i in range(nb):
        row = [gram_tile(i, j, placed) for j in range(i, nb)]
        with pinned(one):
            if K is None:
                K = dask.delayed(np.empty)((int(starts[-1]),) * 2, dtype=dtype)
            K = dask.delayed(gram_place)(K, starts, i, *row, dask_key_name=names("gram-place", i))
            placed = dask.delayed(graph.after)(None, K, dask_key_name=names("gram-placed", i))
    with pinned(one):
        kw = dict(upper=True, warn=False, dask_key_name=names("dual-factor"))
        fac = dask.delayed(dual_factor)(K, vsum, alpha, fit_intercept, **kw)
    borrow = len(cols) == 1  # a single solve task runs alone: it may use all cores, like the factor
    betas = []
    for c0, c1 in cols:
        V, name = dask.delayed(graph.column_slab)(c0, c1, dtype, *Vb), names("dual-solve", c0)
        betas.append(dask.delayed(dual_solve)(fac, V, c0, borrow, True, dask_key_name=name))
    return fac, betas


def _tile_after(tile, X, Y, diagonal, *_):
    return tile(X, Y, diagonal)


def _blocked_dual(T, sizes, vsum, Vb, cols, alpha, fit_intercept, dtype):
    """The dual solved blocked on the tiles ``T`` {(i <= j, j): dask array}: factor, ``Beta``s."""
    M, m, nb = sum(sizes), cols[-1][1], len(sizes)
    K = da.block([[T[i, j] if i <= j else T[j, i].T for j in range(nb)] for i in range(nb)])
    r = K.sum(axis=1)
    V = da.concatenate([da.from_delayed(v, (sizes[i], m), dtype=dtype) for i, v in enumerate(Vb)])
    vbar = da.zeros(m, dtype=dtype)
    if fit_intercept:
        vbar = da.from_delayed(vsum, (m,), dtype=dtype) / M
        K = K - r[:, None] / M - r[None, :] / M + r.sum() / M**2
        if alpha == 0:  # the ones direction gets the eigenvalue mean(diag), as dual_factor does
            K = K + abs(da.diag(K)).mean() / M
    K = K + da.diag(da.full(M, alpha, chunks=(tuple(sizes),), dtype=dtype))
    # dask's blocked Cholesky wants equal square chunks: pad with an identity block to a multiple
    c = max(sizes)
    pad, rhs = -M % c, V - vbar
    if pad:
        side, corner = da.zeros((M, pad), dtype=dtype), da.eye(pad, dtype=dtype)
        K = da.block([[K, side], [side.T, corner]])
        rhs = da.concatenate([rhs, da.zeros((pad, m), dtype=dtype)])
    L = da.linalg.cholesky(K.rechunk(c), lower=True)
    Y = da.linalg.solve_triangular(L, rhs.rechunk((c, m)), lower=True)
    Beta = da.linalg.solve_triangular(L.T, Y, lower=False)[:M]
    if alpha == 0:  # a singular Gram may factorise by rounding: refused as in memory
        pivots, diag = (da.diag(X)[:M].rechunk(-1) for X in (L, K))
        meta = np.empty((0, 0), dtype=Beta.dtype)
        Beta = da.map_blocks(_checked_pivots, Beta, pivots, diag, dtype=Beta.dtype, meta=meta)
    if fit_intercept:
        Beta = Beta - Beta.mean(axis=0)
    # chunks as delayed with the arrays' own keys: the tiles and features are shared with the
    # rest of the fit graph, not optimised (and so recomputed) once per array
    r, vbar, Beta = (
        dask.delayed(np.block)(x.to_delayed(optimize_graph=False).tolist())
        for x in (r, vbar, Beta.astype(dtype))
    )
    fac = dask.delayed(DualFactor)(L=None, r=r, vbar=vbar, M=M, fit_intercept=fit_intercept)
    return fac, [Beta[:, c0:c1] for c0, c1 in cols]


def _checked_pivots(block, pivots, diag):
    """``block``, or LinAlgError when the pivots of the alpha = 0 factor stand on rounding."""
    if stands_on_rounding(pivots, diag):
        raise np.linalg.LinAlgError("the Gram is numerically singular (a pivot at rounding level)")
    return block


def cross_block(A, Beta_rows, acc=None):
    """``acc + A^T Beta_rows`` (N, k), in place into ``acc`` when given."""
    return A.T @ Beta_rows if acc is None else operator.iadd(acc, A.T @ Beta_rows)


def fit_tiled(
    Ub, Vb, starts, cols, draw, N, dtype, *, alpha, fit_intercept, client, progress, input_centre
):
    """The blocked random-feature dual fit, ridges raised where it fails: numpy ``(C, c0)``."""
    nb, centred = len(Ub), graph.InputCentre.kwargs(input_centre)
    keep = keeps_features(client, int(starts[-1]), N, dtype)

    def attempt(ridge):
        names = graph.TaskNames()
        om, bb = dask.delayed(draw, pure=True, nout=2)(**centred)
        shift = dask.delayed(block_means, nout=2)(Ub[0], Vb[0], om, bb, fit_intercept, **centred)[0]

        def features(name):  # a delayed block of features per row block
            make = dask.delayed(features_block)
            args = [(Ub[i], om, bb, starts[i], shift) for i in range(nb)]
            return [make(*a, **centred, dask_key_name=names(name, i)) for i, a in enumerate(args)]

        A = features("features")
        kw = dict(alpha=ridge, fit_intercept=fit_intercept, dtype=dtype, blocked=True, names=names)
        fac, betas = dual_graph(A, Vb, starts, dual_tile, cols, **kw)
        A = A if keep else features("features-again")
        coefs, intercepts, slots = [], [], worker_slots(client)
        for (c0, _), Beta in zip(cols, betas, strict=True):

            def add_block(i, acc, Beta=Beta):
                rows = Beta[starts[i] : starts[i + 1]]
                return dask.delayed(cross_block)(A[i], rows, acc)

            coefs.append(graph.chained_sum(nb, slots, add_block, dask.delayed(operator.iadd)))
            intercepts.append(dask.delayed(dual_intercept)(fac, Beta, coefs[-1], shift, c0))
        out, nc = graph.Columns(cols), len(cols)
        kw = dict(progress=progress, client=client, alpha=ridge, centre=input_centre)
        kw["consume"] = lambda i, r: out.put(i, coef=r) if i < nc else out.put(i - nc, intercept=r)
        graph.compute_fit(*coefs, *intercepts, desc="fit (dual)", **kw)
        return out.coef, out.intercept

    return graph.with_ridges(attempt, alpha, dtype)
