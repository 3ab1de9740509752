"""The primal dask fit: ``A^T A`` and ``A^T V`` summed over row blocks in chains of in-place
partial sums, one factorisation, solves by output column blocks (shared with the linear kernel)."""

from __future__ import annotations

import dask

from ..factor import primal_factor, primal_solve
from ..gram import add_partials, block_means, primal_partial
from ..placement import worker_slots
from .graph import Columns, InputCentre, TaskNames, chained_sum, compute_fit


def fit_primal(
    Ub, Vb, starts, cols, draw, *, alpha, fit_intercept, client, progress, input_centre, per_worker
):
    """The primal fit on the delayed row blocks, ``per_worker`` chains a worker: ``(C, c0)``."""
    names, centred = TaskNames(), InputCentre.kwargs(input_centre)
    om, bb = dask.delayed(draw, pure=True, nout=2)(**centred)
    shifts = dask.delayed(block_means, nout=2)(Ub[0], Vb[0], om, bb, fit_intercept, **centred)

    def add_block(i, acc):
        args, name = (Ub[i], Vb[i], om, bb, starts[i], acc, shifts), names("primal-partial", i)
        return dask.delayed(primal_partial)(*args, **centred, dask_key_name=name)

    sums = primal_sums(len(Ub), add_block, client, per_worker)
    kw = dict(alpha=alpha, fit_intercept=fit_intercept, client=client, progress=progress)
    kw.update(desc="fit (primal)", input_centre=input_centre)
    return solve_primal(sums, shifts, cols, names, **kw)


def primal_sums(n_blocks, add_block, client, per_worker=None):
    """The delayed :class:`rfol_dask.gram.PrimalSums`, a chain per worker thread (<= per_worker)."""
    slots = worker_slots(client, per_worker)
    return chained_sum(n_blocks, slots, add_block, dask.delayed(add_partials))


def solve_primal(
    sums, shifts, cols, names, *, alpha, fit_intercept, client, progress, desc, input_centre=None
):
    """Factorise the delayed ``sums``, solve the column blocks ``cols``: numpy ``(C, c0)``."""
    kw = dict(warn=False, dask_key_name=names("primal-factor"))
    fac = dask.delayed(primal_factor)(sums, shifts, alpha, fit_intercept, **kw)
    solve, out = dask.delayed(primal_solve, nout=2), Columns(cols)
    solved = [solve(fac, c0, c1, dask_key_name=names("primal-solve", c0)) for c0, c1 in cols]
    kw = dict(progress=progress, client=client, desc=desc, alpha=alpha, centre=input_centre)
    compute_fit(*solved, consume=lambda k, result: out.put(k, *result), factor=fac, **kw)
    return out.coef, out.intercept
