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

__all__ = ["fit_primal", "primal_sums", "solve_primal"]


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
    (offsets ``starts``, output column blocks ``cols``); the workers draw the frequencies with
    the recipe ``frequencies()``; ``input_centre``: the fit's :class:`.graph.InputCentre`, or None. Returns numpy ``(coef (N, m), intercept (m,))``; on a cluster
    each column block of them is gathered as soon as it is solved.

    Features are made per row block (never concatenated) in tasks ``primal-partial``; memory
    per chain ``N^2 + N m`` plus one block of features; ``per_worker``: the chains a worker may
    run at once (:func:`rfol_dask.memory.gram_slots`; None: one per thread).
    """
    names = TaskNames()
    centred = InputCentre.kwargs(input_centre)
    om, bb = dask.delayed(frequencies, pure=True, nout=2)(**centred)
    shifts = dask.delayed(block_means, nout=2)(Ub[0], Vb[0], om, bb, fit_intercept, **centred)

    def add_block(i, acc):
        return dask.delayed(primal_partial)(
            Ub[i],
            Vb[i],
            om,
            bb,
            starts[i],
            acc,
            shifts,
            **centred,
            dask_key_name=names("primal-partial", i),
        )

    sums = primal_sums(len(Ub), add_block, client, per_worker)
    return solve_primal(
        sums,
        shifts,
        cols,
        names,
        alpha=alpha,
        fit_intercept=fit_intercept,
        client=client,
        progress=progress,
        desc="fit (primal)",
        input_centre=input_centre,
    )


def primal_sums(n_blocks, add_block, client, per_worker=None):
    """The delayed :class:`rfol_dask.gram.PrimalSums` of ``n_blocks`` row blocks, one chain per
    worker thread of ``client`` (at most ``per_worker`` per worker), run on that worker
    (:func:`.graph.chained_sum`): ``add_block(i, acc)`` is the delayed task that adds block ``i``
    to ``acc`` (None for a chain's first block)."""
    return chained_sum(
        n_blocks, worker_slots(client, per_worker), add_block, dask.delayed(add_partials)
    )


def solve_primal(
    sums, shifts, cols, names, *, alpha, fit_intercept, client, progress, desc, input_centre=None
):
    """Factorise the delayed primal ``sums`` (of data shifted by the delayed ``shifts``) in one
    task ``primal-factor`` and solve the output column blocks ``cols`` in tasks ``primal-solve``;
    compute it all (:func:`.graph.compute_fit`: a raised ridge is warned here) and return numpy
    ``(coef (N, m), intercept (m,))``, each column block gathered into its place as it is solved."""
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

    compute_fit(
        *solved,
        progress=progress,
        client=client,
        desc=desc,
        alpha=alpha,
        consume=consume,
        centre=input_centre,
        factor=fac,
    )
    return out.coef, out.intercept
