"""Fitting the coefficients: ``fit_numpy`` in memory; ``fit_dask`` in one dask graph reading the
data once: the streamed dual (:mod:`.streamed`), the tiled dual (:mod:`.tiled`, when the Gram
does not fit one worker) or the primal (:mod:`.primal`)."""

from __future__ import annotations

from collections.abc import Callable

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array
from numpy.typing import DTypeLike

from .. import memory
from ..backend import device_namespace, is_array_api
from ..progress import active_client
from .graph import MAX_TILE_BLOCKS, InputCentre, TaskNames, row_blocks
from .in_memory import fit_numpy, held_beside_gram, model_bytes
from .primal import fit_primal
from .streamed import fit_streamed
from .tiled import fit_tiled

__all__ = ["choose_solver", "check_min_norm", "dask_fit_plan", "fit_dask", "fit_numpy"]
__all__ += ["held_beside_gram", "model_bytes", "InputCentre"]


def choose_solver(solver, n_samples, n_features, dual_only=False):
    """``"dual"`` or ``"primal"``; ``"auto"``: the smaller Gram, or the dual if ``dual_only``."""
    if solver == "auto":
        return "dual" if dual_only or n_features >= n_samples else "primal"
    return solver


def check_min_norm(solver, alpha, n_samples, n_features, fit_intercept):
    """ValueError for ``alpha = 0`` where the Gram is singular whatever the data."""
    rows, primal = n_samples - bool(fit_intercept), solver == "primal"
    if alpha == 0 and (n_features > rows if primal else n_features < rows):
        relation, gram, other = ("<=", "N x N", "dual") if primal else (">=", "M x M", "primal")
        raise ValueError(
            f"alpha=0 (min-norm interpolation) in the {solver} needs n_features {relation} {rows} "
            f"(the samples{' less one with an intercept' if fit_intercept else ''}), got "
            f"{n_features} features and {n_samples} samples: the {gram} Gram is singular; pass "
            f"solver='{other}' or alpha > 0"
        )


def dask_fit_plan(
    M, n, m, n_features, dtype, solver, max_gram_bytes, client, device, meta, warn=True, budget=None
):
    """The :class:`rfol_dask.memory.DualPlan` of a dask fit (None: primal), after its refusals."""
    dtype = np.dtype(dtype)
    on_device, plan = device != "cpu" or is_array_api(meta), None
    if solver == "dual":
        held, device = M * (n + m) * dtype.itemsize, memory.gram_device(device, meta)
        kw = dict(n_features=n_features, n_inputs=n, device=device, warn=warn and not on_device)
        plan = memory.dual_plan(M, dtype, max_gram_bytes, client, held_bytes=held, **kw)
    elif not on_device:  # on GPUs the primal is refused whatever its size
        beside, copies = (n + 1) * n_features * dtype.itemsize, min(2, memory.n_slots(client))
        kw = dict(solver="primal", peak_copies=copies, beside=beside, budget=budget)
        memory.check_gram_memory(n_features, dtype, max_gram_bytes, client, **kw)
    if on_device and (plan is None or plan.blocked):
        what = "primal" if plan is None else "blocked dual (the Gram does not fit one worker: "
        raise NotImplementedError(
            f"on a GPU, dask input is fitted by the streamed dual only, not the {what}"
            f"{'' if plan is None else plan.reason + ')'}: pass solver='dual' with a Gram that "
            "fits one GPU worker, or compute the data into memory for the in-memory GPU fit"
        )
    return plan


def fit_dask(
    U: da.Array,
    V: da.Array,
    *,
    frequencies: Callable[..., tuple[np.ndarray, np.ndarray]],
    n_features: int,
    dtype: DTypeLike,
    alpha: float,
    fit_intercept: bool,
    solver: str,
    column_block: int | None = None,
    progress: bool = False,
    max_gram_bytes: float | None = None,
    device: str = "cpu",
    input_centre: InputCentre | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit the random-feature ridge coefficients on dask arrays, in one graph and one ``compute``.

    Runs on the active ``distributed.Client`` if any, else dask's local scheduler. ValueError
    before any work when the primal Gram does not fit, NotImplementedError on a GPU for the primal
    and the blocked dual; ValueError for NaN / Inf in the data.

    Parameters
    ----------
    U, V : dask arrays of shapes (M, n) and (M, m)
        Input and output functions (flattened grids), chunked along samples only.
    frequencies : callable
        Picklable recipe of ``(omega (n, N), b (N,))`` (``columns=(f0, f1)``: those columns).
    n_features : int
        The number of features ``N``.
    dtype : {"float32", "float64"} or numpy dtype
        Working precision.
    alpha : float
        Ridge parameter (>= 0).
    fit_intercept : bool
        Centre features and outputs and fit an intercept per output column.
    solver : {"dual", "primal"}
        Dual (M x M Gram) or primal (N x N Gram).
    column_block : int, optional
        Output columns per solve task (default: spread over all worker threads).
    progress : bool, default=False
        Show a progress bar on stderr.
    max_gram_bytes : float, optional
        Memory budget of the Gram (default: 60 % of the available / worker memory).
    device : {"cpu", "cuda"}, default="cpu"
        Where the workers compute numpy chunks (CuPy chunks stay on their GPU).
    input_centre : InputCentre, optional
        The model's input centre, made in the graph and left in ``input_centre.value``.

    Returns
    -------
    coef : ndarray of shape (N, m)
        The coefficients ``C``, numpy in ``dtype``.
    intercept : ndarray of shape (m,)
        The intercept ``c0`` of each output column.
    """
    client, dtype = active_client(), np.dtype(dtype)
    (M, n), m, meta = U.shape, V.shape[1], meta_from_array(U)
    if device != "cpu" and client is None:  # computed in this process: say what is missing, first
        device_namespace(device)
    # the primal on the CPU asks the workers for their memory once, for its check and for its chains
    primal = solver == "primal" and device == "cpu" and not is_array_api(meta)
    budget = memory.memory_budget(max_gram_bytes, client) if primal else None
    sizes = (M, n, m, n_features, dtype, solver, max_gram_bytes, client, device, meta)
    plan = dask_fit_plan(*sizes, budget=budget)
    tiled = solver == "dual" and plan.blocked  # its blocks make features: n_features values a row
    size = n_features * dtype.itemsize
    kw = dict(max_blocks=MAX_TILE_BLOCKS if tiled else None, row_bytes=size)
    Ub, Vb, starts, cols = row_blocks(U, V, column_block, client, **kw)
    if input_centre is not None:
        input_centre.attach(Ub, starts, dtype, TaskNames())
    common = dict(alpha=alpha, fit_intercept=fit_intercept, client=client, progress=progress)
    common.update(input_centre=input_centre)
    if solver == "primal":  # as many chains on a worker as its memory holds Grams
        kw = dict(beside=(n + 1) * size, with_each=m * size, budget=budget)
        per_worker = memory.gram_slots(n_features, dtype, **kw)
        return fit_primal(Ub, Vb, starts, cols, frequencies, per_worker=per_worker, **common)
    if tiled:
        rows = max(np.diff([*starts, M]))  # the largest (merged) row block
        memory.check_tile_memory(rows, n_features, dtype, max_gram_bytes, client, n_inputs=n)
        return fit_tiled(Ub, Vb, starts, cols, frequencies, n_features, dtype, **common)
    kw = dict(m=m, n_features=n_features, dtype=dtype, slab_bytes=plan.slab_bytes, n_inputs=n)
    kw.update(device=device, draw_on=memory.gram_device(device, meta))
    return fit_streamed(Ub, Vb, starts, frequencies, **kw, **common)
