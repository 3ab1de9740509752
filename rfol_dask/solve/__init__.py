"""Fitting the coefficients: one Cholesky factorisation, triangular solves over output columns.

``fit_numpy`` (:mod:`.in_memory`) runs in memory with no graph; ``fit_dask`` builds one dask
graph and computes it in a single ``compute`` call, so the data are read once, with one of
three algorithms:

- :mod:`.streamed`: the dual Gram summed over feature slabs on each worker and reduced across
  the workers (the default dual);
- :mod:`.tiled`: the dual Gram from tiles of row blocks, factorised blocked across the workers
  (the dual when the Gram does not fit one worker, :func:`rfol_dask.memory.dual_plan`);
- :mod:`.primal`: chained partial sums of ``A^T A`` over row blocks.

The factor and solve kernels are in :mod:`rfol_dask.factor`, the dense linear algebra in
:mod:`rfol_dask.linalg`, the memory policy in :mod:`rfol_dask.memory`.
"""

from __future__ import annotations

import numpy as np

from ..memory import check_gram_memory, dual_plan
from ..progress import active_client
from .graph import row_blocks
from .in_memory import fit_numpy
from .primal import fit_primal
from .streamed import fit_streamed
from .tiled import fit_tiled

__all__ = ["choose_solver", "fit_numpy", "fit_dask"]


def choose_solver(solver, n_samples, n_features):
    """``"dual"`` or ``"primal"``: ``"auto"`` picks the smaller Gram (dual when ``N >= M``)."""
    if solver == "auto":
        return "dual" if n_features >= n_samples else "primal"
    return solver


def fit_dask(U, V, *, frequencies, n_features, dtype, alpha, fit_intercept, solver, column_block=None,
             progress=False, max_gram_bytes=None):
    """Fit on dask arrays ``U`` (M, n) and ``V`` (M, m) chunked along samples only.

    ``frequencies`` is a picklable recipe returning ``(omega (n, N), b (N,))`` or, with
    ``columns=(f0, f1)``, their columns ``f0:f1`` (``functools.partial`` of
    ``features.draw_frequencies``): the workers draw what they need (recomputed if the workers
    holding them die; nothing large in the graph). ``n_features`` is ``N``, ``dtype`` the working
    precision. One graph, one ``compute``: the dual is streamed, or tiled and factorised
    blocked when its Gram does not fit a worker; the primal sums over row blocks. Returns numpy
    ``(coef (N, m), intercept (m,))``.
    """
    client = active_client()
    dtype = np.dtype(dtype)
    (M, n), m = U.shape, V.shape[1]
    if solver == "dual":
        plan = dual_plan(M, dtype, max_gram_bytes, client, held_bytes=M * (n + m) * dtype.itemsize,
                         n_features=n_features)
    else:
        check_gram_memory(n_features, dtype, max_gram_bytes, client, solver="primal")
    Ub, Vb, starts, cols = row_blocks(U, V, column_block, client)
    common = dict(alpha=alpha, fit_intercept=fit_intercept, client=client, progress=progress)
    if solver == "primal":
        return fit_primal(Ub, Vb, starts, cols, frequencies, **common)
    if plan.blocked:
        return fit_tiled(Ub, Vb, starts, cols, frequencies, n_features=n_features, dtype=dtype, **common)
    return fit_streamed(Ub, Vb, starts, m, frequencies, n_features=n_features, dtype=dtype,
                        slab_bytes=plan.slab_bytes, **common)
