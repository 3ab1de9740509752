"""The primal dask fit: ``G = A^T A`` (N, N) and ``A^T V`` (N, m) summed over row blocks in
per-worker-thread chains of in-place partial sums, a tree over the chains, one factorisation,
solves over column blocks of the outputs. :func:`fit_primal` for random features;
:func:`solve_primal` is the part after the sums, which the linear kernel baseline shares
(its features are the inputs, :func:`rfol_dask.gram.linear_partial`)."""

from __future__ import annotations

import dask

from ..factor import primal_factor, primal_solve
from ..gram import add_partials, block_means, primal_partial
from ..placement import worker_slots
from .graph import Columns, InputCentre, TaskNames, chained_sum, compute_fit


def fit_primal(
    Ub,
    Vb,
    starts,
    cols,
    frequencies,
    *,
    alpha,
    fit_intercept,
    client,
    progress,
    input_centre=None,
    per_worker=None,
):
    """The primal random-feature fit on the delayed row blocks ``Ub`` (k_i, n), ``Vb`` (k_i, m)
    (offsets ``starts``, output column blocks ``cols``) with the frequency recipe
    ``frequencies`` and the fit's :class:`.graph.InputCentre` (or None); returns numpy
    ``(coef (N, m), intercept (m,))``. Memory per chain ``N^2 + N m`` and a block of features;
    ``per_worker``: the chains a worker may run at once (None: one per thread)."""
    names = TaskNames()
    centred = InputCentre.kwargs(input_centre)
    om, bb = dask.delayed(frequencies, pure=True, nout=2)(**centred)
    shifts = dask.delayed(block_means, nout=2)(Ub[0], Vb[0], om, bb, fit_intercept, **centred)

    def add_block(i, acc):
        args = (Ub[i], Vb[i], om, bb, starts[i], acc, shifts)
        return dask.delayed(primal_partial)(
            *args, **centred, dask_key_name=names("primal-partial", i)
        )

    sums = primal_sums(len(Ub), add_block, client, per_worker)
    kw = dict(alpha=alpha, fit_intercept=fit_intercept, client=client, progress=progress)
    return solve_primal(
        sums, shifts, cols, names, desc="fit (primal)", input_centre=input_centre, **kw
    )


def primal_sums(n_blocks, add_block, client, per_worker=None):
    """The delayed :class:`rfol_dask.gram.PrimalSums` of ``n_blocks`` row blocks in one chain per
    worker thread (at most ``per_worker`` a worker): ``add_block(i, acc)`` adds block ``i``."""
    return chained_sum(
        n_blocks, worker_slots(client, per_worker), add_block, dask.delayed(add_partials)
    )


def solve_primal(
    sums, shifts, cols, names, *, alpha, fit_intercept, client, progress, desc, input_centre=None
):
    """Factorise the delayed primal ``sums`` (of data shifted by ``shifts``), solve the output
    column blocks ``cols``, compute it all and return numpy ``(coef (N, m), intercept (m,))``."""
    fac = dask.delayed(primal_factor)(
        sums, shifts, alpha, fit_intercept, warn=False, dask_key_name=names("primal-factor")
    )
    solved = [
        dask.delayed(primal_solve, nout=2)(fac, c0, c1, dask_key_name=names("primal-solve", c0))
        for c0, c1 in cols
    ]
    out = Columns(cols)

    def consume(k, result):
        out.put_coef(k, result[0])
        out.put_intercept(k, result[1])

    kw = dict(progress=progress, client=client, desc=desc, alpha=alpha, centre=input_centre)
    compute_fit(*solved, consume=consume, factor=fac, **kw)
    return out.coef, out.intercept
