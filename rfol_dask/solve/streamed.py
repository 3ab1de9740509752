"""The streamed dask dual: the Gram ``K = sum_f A_f A_f^T`` summed over feature slabs on each
worker and reduced across the workers, factorised once; ``C = A^T Beta`` slab by slab.

Each worker gets all of ``U`` (M x n) and a contiguous group of feature slabs
(:func:`feature_slabs`); along a chain of tasks (``gram-slab``) it draws each slab's
frequencies, makes the slab and adds ``A_f A_f^T`` to its own Gram (:func:`gram_slab`), so
neither ``A`` nor ``Omega`` exists whole and ``A`` never travels. The workers' Grams are
summed (a tree; ``itemsize M^2`` bytes moved per worker beyond the first), factorised once and
solved for all outputs on one worker (in place); ``Beta`` (M x m) goes to every worker, which
makes the rows of ``C = A^T Beta`` of its slabs (``coef-slab``, :func:`coef_slab`), and the
client gathers each slab's rows while the next ones are made (:func:`fit_streamed`).

Memory per worker: its Gram ``+ U +`` a slab and its temporaries (:func:`rfol_dask.memory.dual_plan`
sizes the slab); on the factorising worker ``+ V`` (M x m); the coefficient rows of the slabs
not yet gathered (the client holds ``C``, N x m).
Flops: those of the in-memory dual. The slabs are cached on the workers' local disks between
the two passes, in a directory of the fit that is removed when the fit ends, whether it
succeeds or fails (dask config ``rfol_dask.feature-cache: none`` makes them again instead:
``2 M n N`` more flops).

On GPUs (``device="cuda"``, or dask arrays with CuPy chunks) each worker stacks ``U`` on its
GPU and makes its slabs, Gram and (on the factorising worker) factor and solves there, in the
namespace of its arrays (:mod:`rfol_dask.backend`); the Grams are summed across workers as
on the CPU, ``V`` is stacked on the factorising worker's GPU block by block, the slabs are made
again for ``C = A^T Beta`` (no disk cache) from the frequencies drawn in the first pass, kept on
the GPU while it has room (``8 n N / workers`` bytes; else drawn again), and the coefficient
rows come back to the host.

Rows mode (the default on a device whose every worker has room for its features, config
``rfol_dask.device-features``): no ``U`` is stacked; each worker takes the row blocks in order
as they are read, writes their features of its columns into the ``A`` it keeps (M x its
columns) and adds the Gram strip of the block (:func:`gram_rows`), so the Gram is done shortly
after the last block is read; ``C = A^T Beta`` then reads the kept ``A`` (:func:`coef_rows`).
Memory per worker ``itemsize (M^2 + M w)`` for ``w`` columns, and a second ``M^2`` on a worker
that sums two workers' Grams (:func:`rows_need`); flops those
of the slabs mode less the second pass's features.
"""

from __future__ import annotations

import functools
import glob
import logging
import math
import os
import shutil
import socket
import tempfile
import time

import dask
import numpy as np

from .. import backend
from ..backend import sized_by_arrays, symmetrize, syrk, to_numpy
from ..factor import DualFactor, dual_factor, dual_intercept, dual_solve
from ..features import FREQUENCY_BLOCK, feature_map
from ..gram import stack_rows
from .owners import owned_tag, process_alive, tag_owner
from ..linalg import blas_limits
from ..memory import device_free_bytes, free_bytes
from ..placement import current_worker, pinned, worker_addresses, worker_threads
from .graph import TaskNames, column_slab, compute_fit, iadd, tree_sum

__all__ = [
    "SHIFT_ROWS",
    "ROW_STEP",
    "FEATURE_MODES",
    "row_steps",
    "feature_slabs",
    "slab_features",
    "slab_shift",
    "gram_slab",
    "coef_slab",
    "Resident",
    "gram_rows",
    "coef_rows",
    "rows_need",
    "feature_mode",
    "sweep_stale_caches",
    "open_cache",
    "remove_cache",
    "dual_stream_graph",
    "fit_streamed",
]

logger = logging.getLogger("rfol_dask")

#: samples whose mean features shift each slab (the centring shift of ``gram.block_means``)
SHIFT_ROWS = 64

#: the rows mode adds the Gram strip of at least this many rows at a time (whole row blocks):
#: small chunks are taken together, so that each step is one large product
ROW_STEP = 1024


def row_steps(starts, at_least=None):
    """Consecutive groups of the row blocks with offsets ``starts`` (block indices), each of at
    least ``at_least`` (default :data:`ROW_STEP`) rows but for the last."""
    at_least = ROW_STEP if at_least is None else at_least
    steps, first = [], 0
    for i in range(1, len(starts)):
        if starts[i] - starts[first] >= at_least or i == len(starts) - 1:
            steps.append(list(range(first, i)))
            first = i
    return steps


def feature_slabs(M, N, n_groups, itemsize, slab_bytes):
    """Column ranges ``(f0, f1)`` of ``A`` (M x N) in ``n_groups`` contiguous groups of nearly
    equal width (one per worker; empty groups dropped), each cut into slabs of at most
    ``slab_bytes``. Boundaries fall on whole blocks of frequencies where the sizes allow, so
    each block is drawn once."""
    B = FREQUENCY_BLOCK
    width = max(1, int(slab_bytes // (M * itemsize)))
    width -= width % B if width > B else 0
    n_blocks = -(-N // B)
    if n_blocks >= n_groups:
        bounds = [min(N, (n_blocks * g // n_groups) * B) for g in range(n_groups + 1)]
    else:
        bounds = [N * g // n_groups for g in range(n_groups + 1)]
    return [
        [(f, min(f + width, g1)) for f in range(g0, g1, width)]
        for g0, g1 in zip(bounds, bounds[1:])
        if g1 > g0
    ]


# ---------------------------------------------------------------------------------------
# the feature cache: one directory per fit on each worker's local disk


def _cache_dir(token, worker=None):
    """The cache directory of the fit ``token``: in the worker's local directory, else the
    temporary directory."""
    base = worker.local_directory if worker is not None else tempfile.gettempdir()
    return os.path.join(base, f"rfol-{token}")


def sweep_stale_caches():
    """Remove the cache directories that fits of this host left in the temporary directory when
    their process was killed (SIGKILL, or SIGTERM outside the CLI: no clean-up ran). A worker's
    caches live in its local directory, which dask removes with the worker."""
    for path in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), "rfol-*")):
        owner = tag_owner(
            os.path.basename(path)[len("rfol-") :]
        )  # None: not a cache of this naming
        if owner is not None and owner[0] == socket.gethostname() and not process_alive(*owner):
            shutil.rmtree(path, ignore_errors=True)


def open_cache(token, dask_worker=None):
    """Make the cache directory of the fit ``token`` (``client.run`` passes ``dask_worker``).
    Slabs are only cached where it exists, so a task that outlives its failed fit writes nothing."""
    os.makedirs(_cache_dir(token, dask_worker), exist_ok=True)


def remove_cache(token, dask_worker=None):
    """Delete the cache directory of the fit ``token`` and what is left in it (and the
    frequencies kept in this process: after the directory, so that a task keeping some
    meanwhile finds it gone and drops them, :func:`_keep`)."""
    path = _cache_dir(token, dask_worker)
    for _ in range(5):  # a task creating a file while the tree is removed makes rmtree fail: again
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            break
        time.sleep(0.05)
    for key in [k for k in _KEPT_FREQUENCIES if k[0] == token]:
        _KEPT_FREQUENCIES.pop(key, None)


def _cache_file(token, f0):
    return (
        None
        if token is None
        else os.path.join(_cache_dir(token, current_worker()), f"slab-{f0}.npy")
    )


def _cache_put(token, f0, A):
    """Keep the slab ``A`` on this worker's disk if the fit's cache is open and there is room."""
    path = _cache_file(token, f0)
    if path is None or not isinstance(A, np.ndarray):  # device slabs are made again instead
        return
    try:
        if shutil.disk_usage(os.path.dirname(path)).free > 4 * A.nbytes + 2**30:
            np.save(path, A)
    except OSError:  # the cache is closed (the fit ended) or the disk is full: make it again later
        if os.path.exists(path):
            os.remove(path)


#: the frequencies of device slabs between a fit's two passes, by ``(token, f0)``, per process
_KEPT_FREQUENCIES = {}


def _slab_frequencies(token, U, frequencies, f0, f1, keep):
    """``(omega, b)`` of the columns ``f0:f1`` in the namespace of ``U``, as a ``frequencies``
    recipe for :func:`slab_features`. Numpy ``U`` draws them. Elsewhere (a GPU) the first pass
    (``keep=True``) draws them and, while the fit's cache is open and the device keeps
    ``4 x`` their bytes ``+ 1 GiB`` free, keeps them for the second pass (``keep=False``), which
    takes them back (or draws them again)."""
    if isinstance(U, np.ndarray) or token is None:
        return frequencies
    pair = _KEPT_FREQUENCIES.pop((token, f0), None)
    if pair is None:  # not drawn ahead (:func:`draw_slab`) or not kept
        pair = tuple(_like(a, U) for a in frequencies(columns=(f0, f1)))
        keep = keep and _room(
            token,
            backend.namespace(U),
            sum(math.prod(a.shape) * backend.itemsize(a.dtype) for a in pair),
        )
    if keep:
        _keep(token, f0, pair)
    return lambda columns: pair


def _keep(token, f0, pair):
    """Keep the frequencies ``pair`` of slab ``f0`` for the fit ``token`` in this process, unless
    that fit has ended (its cache directory is gone; checked after storing them, as
    :func:`remove_cache` removes the directory before the kept frequencies)."""
    _KEPT_FREQUENCIES[(token, f0)] = pair
    if not os.path.isdir(_cache_dir(token, current_worker())):
        _KEPT_FREQUENCIES.pop((token, f0), None)


def _room(token, xp, nbytes, reserve=0):
    """True while the fit ``token`` runs (its cache directory exists) and the memory of ``xp``
    has ``reserve + 4 nbytes + 1 GiB`` free: room to keep ``nbytes`` of frequencies."""
    return (
        os.path.isdir(_cache_dir(token, current_worker()))
        and free_bytes(xp) > reserve + 4 * nbytes + 2**30
    )


def draw_slab(token, frequencies, f0, f1, device, nbytes, reserve):
    """Draw the frequencies of the columns ``f0:f1`` (``nbytes`` of them) on the host cores and
    keep them on ``device`` for both passes of the fit ``token`` (:func:`_slab_frequencies`), if
    the device keeps ``reserve`` bytes (the fit's Gram, ``U``, ``V`` and slabs) beyond them
    free; else draw nothing (the passes draw them). These tasks need no data, so a GPU worker
    draws while the rows of ``U`` are still read and its Gram pass only computes."""
    xp = backend.device_namespace(device)
    if _room(token, xp, nbytes, reserve):
        with blas_limits(backend.host_threads_per_gpu()):
            pair = tuple(backend.to_namespace(a, xp) for a in frequencies(columns=(f0, f1)))
        if _room(token, xp, 0, reserve):  # still, now that they are there
            _keep(token, f0, pair)
    return f0


def _cache_take(token, f0):
    """The cached slab ``f0`` (deleted from the disk), or None."""
    path = _cache_file(token, f0)
    if path is None or not os.path.exists(path):
        return None
    A = np.load(path)
    os.remove(path)
    return A


def _close_cache(client, token):
    """Remove the feature cache of ``token`` here and on every worker (best effort)."""
    remove_cache(token)
    if client is not None:
        try:
            client.run(remove_cache, token)
        except Exception:  # pragma: no cover - a cluster going down takes its scratch space along
            pass


# ---------------------------------------------------------------------------------------
# the tasks


def _on_device(B, device):
    """The row block ``B`` moved to ``device`` (unless it is an array API array already, which
    stays where it is); :func:`rfol_dask.gram.stack_rows` checks it there."""
    return backend.to_namespace(B, backend.compute_namespace(device, B))


def _stack_outputs(starts, dtype, device, m, *blocks):
    """The checked output blocks stacked into one Fortran-ordered (M, m) array for the in-place
    solves: on the host by :func:`.graph.column_slab`; on a device each block is moved as it is
    (C order) and written into the Fortran-ordered stack there (no transposing copy on the host)."""
    if backend.is_fast(backend.compute_namespace(device, *blocks)):
        return column_slab(0, m, dtype, *blocks)
    return stack_rows(starts, dtype, device, *blocks, name="V", fortran=True)


def _symmetric(K):
    """The summed Gram made symmetric: numpy's SYRK fills the lower triangle only; the other
    namespaces sum full products, symmetric already (:func:`rfol_dask.backend.syrk`)."""
    return symmetrize(K, "lower") if isinstance(K, np.ndarray) else K


def _like(X, ref):
    """``X`` moved to the namespace (device) of ``ref``."""
    return backend.to_namespace(X, backend.namespace(ref))


def _colsum(X):
    return backend.namespace(X).sum(X, axis=0)


def slab_features(
    U, frequencies, n_features, f0, f1, centre, shift_rows=SHIFT_ROWS, input_centre=None
):
    """Features ``A[:, f0:f1]`` (M, f1 - f0) of all of ``U`` (M, n) minus their mean ``s_f``
    over the first ``shift_rows`` samples (if ``centre``; ``shift_rows=None``: over all of them,
    the exact column means), and that shift (or None).
    ``frequencies(columns=(f0, f1))`` draws the slab of ``(Omega, b)`` (a
    ``features.draw_frequencies`` recipe); ``n_features`` is the model's ``N``; ``input_centre``
    (n,) the model's (:func:`rfol_dask.features.feature_map`)."""
    xp = backend.namespace(U)
    omega, b = (backend.to_namespace(a, xp) for a in frequencies(columns=(f0, f1)))
    if not centre:
        return feature_map(U, omega, b, n_features=n_features, input_centre=input_centre), None
    if shift_rows is None:
        A = feature_map(U, omega, b, n_features=n_features, input_centre=input_centre)
        shift = xp.mean(A, axis=0)
        A -= shift
        return A, shift
    shift = slab_shift(U, omega, b, n_features, shift_rows, input_centre)
    return feature_map(
        U, omega, b, shift=shift, n_features=n_features, input_centre=input_centre
    ), shift


def slab_shift(U, omega, b, n_features, shift_rows=SHIFT_ROWS, input_centre=None):
    """The centring shift ``s_f`` of a slab: the mean of its features over the first
    ``shift_rows`` samples of ``U`` (all of them if fewer), in ``U``'s namespace."""
    head = U[: min(shift_rows, U.shape[0]), ...]
    return backend.namespace(U).mean(
        feature_map(head, omega, b, n_features=n_features, input_centre=input_centre), axis=0
    )


def _slab_threads(U):
    """BLAS threads of a slab task, and so of its frequency draw (:func:`.features.draw_frequencies`):
    the worker's on the CPU; where ``U`` is on a GPU, which does the products, the host cores per
    GPU of the node (:func:`rfol_dask.backend.host_threads_per_gpu`), for the draw."""
    return worker_threads() if isinstance(U, np.ndarray) else backend.host_threads_per_gpu()


def gram_slab(K, U, frequencies, n_features, f0, f1, centre, token=None, after=None):
    """``K + A_f A_f^T`` (M, M) for the shifted feature slab ``A_f`` of columns ``f0:f1``
    (:func:`slab_features`): lower triangle, Fortran order, in place (``K=None`` starts the
    sum). ``A_f`` is made on the worker's cores and, with a ``token``, kept on the worker's
    disk for ``C = A^T Beta`` (else made again then). ``after`` (ignored): the slab's
    :func:`draw_slab`, if any. Cost ``2 M n (f1 - f0) + M^2 (f1 - f0)`` flops."""
    with blas_limits(_slab_threads(U)):
        A, _ = slab_features(
            U, _slab_frequencies(token, U, frequencies, f0, f1, True), n_features, f0, f1, centre
        )
        K = syrk(A, trans=False, C=K)
    _cache_put(token, f0, A)
    return K


def _to_host(X, out):
    """Copy the device array ``X`` into the C-contiguous numpy array ``out`` (CuPy: straight
    into it, no temporary host array)."""
    if backend.is_cupy(backend.namespace(X)) and X.flags.c_contiguous:
        X.get(out=out)
    else:
        out[...] = to_numpy(X)


def coef_slab(U, frequencies, n_features, f0, f1, centre, Beta, token=None, out=None, after=None):
    """Rows ``f0:f1`` of ``C = A^T Beta`` (``Beta`` (M, m)) on the host, and ``s_f^T C_f`` (m,)
    (``s_f`` the slab's shift; None without centring), which the intercepts need. With ``out``
    (the (N, m) numpy coefficients in this process: the local scheduler) the rows are written
    into ``out[f0:f1]`` and None stands in their place; else they are a new (f1 - f0, m) array,
    which the client gathers while the next slabs are made (:func:`fit_streamed`). The slab is
    read back from the worker's disk (and deleted) or made again. ``after`` (ignored) chains a
    worker's slabs, so that they run one at a time on all its cores."""
    with blas_limits(_slab_threads(U)):
        A = _cache_take(token, f0)
        frequencies = _slab_frequencies(token, U, frequencies, f0, f1, False)
        if A is None:
            A, shift = slab_features(U, frequencies, n_features, f0, f1, centre)
        else:
            shift = slab_features(U[:SHIFT_ROWS], frequencies, n_features, f0, f1, centre)[1]
        return _coef_rows(A, Beta, shift, f0, f1, out)


def _coef_rows(A, Beta, shift, f0, f1, out):
    """``C_f = A^T Beta`` of the features ``A`` (M, f1 - f0) of the columns ``f0:f1``, on the
    host (see :func:`coef_slab` for ``out``), and ``s_f^T C_f``."""
    rows = None if out is None else out[f0:f1]
    if isinstance(A, np.ndarray) and isinstance(Beta, np.ndarray):
        Cf = rows = np.matmul(A.T, Beta, out=rows)
    else:  # on the device; the rows come back to the host
        Cf = A.T @ Beta
        if rows is None:
            rows = to_numpy(Cf)
        else:
            _to_host(Cf, rows)
    return (None if out is not None else rows), (None if shift is None else to_numpy(shift @ Cf))


# ---------------------------------------------------------------------------------------
# resident features: the Gram made row block by row block, as the blocks are read


@sized_by_arrays
class Resident:
    """What one worker holds in the rows mode (:func:`gram_rows`): its features ``A`` (M, w) of
    the columns ``g0:g0 + w`` (its feature group), each slab's shift ``s_f`` and frequencies, and
    its Gram ``K`` (M, M; numpy: lower triangle, Fortran order; elsewhere both triangles) until
    :func:`resident_gram` hands it over.
    Memory ``itemsize (M w + M^2)`` plus the frequencies (dropped after the last block)."""

    __slots__ = ("A", "K", "g0", "shifts", "pairs")


def gram_rows(
    acc, B, start, M, frequencies, n_features, slabs, centre, token=None, last=False, after=None
):
    """Add the row block ``B`` (k, n) (rows ``start:start + k`` of ``U``) to the worker's
    :class:`Resident` ``acc`` (None: the first block, which allocates it, takes each slab's
    frequencies, drawn ahead by :func:`draw_slab` or drawn here, and fixes each slab's shift from
    its first :data:`SHIFT_ROWS` rows): its features of the ``slabs`` (contiguous ``(f0, f1)``)
    become rows of ``A``, and the Gram strip ``K[start:e, :e] = A[start:e] A[:e]^T``
    (``e = start + k``) is made, mirrored above the diagonal outside numpy. So the Gram grows
    while the later blocks are still read, and ``C = A^T Beta`` reads ``A`` instead of making the
    features again (:func:`coef_rows`). The blocks must come in order. ``last``: drop the
    frequencies. Cost ``2 k n w + 2 k e w`` flops (``w`` the group's width)."""
    xp = backend.namespace(B)
    with blas_limits(_slab_threads(B)):
        if acc is None:
            acc = Resident()
            acc.g0, width = slabs[0][0], slabs[-1][1] - slabs[0][0]
            dt = B.dtype
            acc.A = xp.empty((M, width), dtype=dt)
            acc.K = (
                np.zeros((M, M), dtype=dt, order="F")
                if isinstance(B, np.ndarray)
                else xp.zeros((M, M), dtype=dt)
            )
            acc.pairs = {
                f0: tuple(
                    _like(a, B)
                    for a in _slab_frequencies(token, B, frequencies, f0, f1, False)(
                        columns=(f0, f1)
                    )
                )
                for f0, f1 in slabs
            }
            acc.shifts = {}
            if centre:
                for f0, _ in slabs:
                    acc.shifts[f0] = slab_shift(B, *acc.pairs[f0], n_features)
        e = start + B.shape[0]
        for f0, f1 in slabs:
            acc.A[start:e, f0 - acc.g0 : f1 - acc.g0] = feature_map(
                B, *acc.pairs[f0], shift=acc.shifts.get(f0), n_features=n_features
            )
        acc.K[start:e, :e] = acc.A[start:e, ...] @ acc.A[:e, ...].T
        if not isinstance(acc.K, np.ndarray) and start:
            acc.K[:start, start:e] = acc.K[start:e, :start].T
    if last:
        acc.pairs = None
    return acc


def resident_gram(acc):
    """The Gram of a :class:`Resident`, handed over: the worker's ``acc`` keeps ``A`` only, so the
    Gram (factorised in place afterwards) is freed after the solves, before ``C = A^T Beta``.
    Run again (dask recomputes it when the worker holding the summed Gram is lost), it makes the
    Gram again from ``A``: ``A A^T``, the sum of the strips (``2 M^2 w`` flops)."""
    K, acc.K = acc.K, None
    if K is None:
        with blas_limits(_slab_threads(acc.A)):
            K = syrk(acc.A, trans=False)
    return K


def coef_rows(acc, f0, f1, centre, Beta, out=None, after=None):
    """:func:`coef_slab` from the worker's resident features ``A`` (no features made again)."""
    with blas_limits(_slab_threads(acc.A)):
        A = acc.A[:, f0 - acc.g0 : f1 - acc.g0]
        return _coef_rows(A, Beta, acc.shifts.get(f0) if centre else None, f0, f1, out)


#: dask config ``rfol_dask.device-features``: how the streamed dual on a device makes its
#: features: ``"auto"`` (rows where every worker's device has room for them, else slabs),
#: ``"rows"`` (also on the CPU: for tests and comparisons), ``"slabs"``
FEATURE_MODES = ("auto", "rows", "slabs")


def rows_need(M, width, m, n_inputs, itemsize, n_workers=1):
    """Bytes a worker's device holds in the rows mode: its features and Gram (two on a worker that
    sums them, with several workers: the one that comes over, beside its kept features), ``V``
    and ``Beta`` (on the factorising worker), the group's frequencies, a row block's temporaries
    (a quarter of the rest) and 1 GiB for the libraries."""
    grams = 2 if n_workers > 1 else 1
    held = itemsize * (M * width + grams * M * M + 2 * M * m + (n_inputs + 1) * width)
    return int(1.25 * held) + 2**30


def feature_mode(client, draw_on, M, N, m, n_inputs, itemsize, n_workers):
    """``"rows"`` or ``"slabs"`` for a streamed dual fit (config ``rfol_dask.device-features``,
    :data:`FEATURE_MODES`): ``"auto"`` takes the rows mode on a device (``draw_on``) whose every
    worker has :func:`rows_need` bytes free for its share of the ``N`` features."""
    mode = dask.config.get("rfol_dask.device-features", "auto")
    if mode not in FEATURE_MODES:
        raise ValueError(f"rfol_dask.device-features must be one of {FEATURE_MODES}, got {mode!r}")
    if mode != "auto":
        return mode
    if draw_on is None:
        return "slabs"
    need = rows_need(M, -(-N // max(1, n_workers)), m, n_inputs, itemsize, n_workers)
    free = (
        client.run(device_free_bytes, draw_on).values()
        if client is not None
        else [device_free_bytes(draw_on)]
    )
    return "rows" if min(free) > need else "slabs"


def dual_stream_graph(
    Ub,
    Vb,
    starts,
    m,
    frequencies,
    *,
    n_features,
    alpha,
    fit_intercept,
    dtype,
    client,
    slab_bytes,
    token=None,
    device="cpu",
    out=None,
    draw_on=None,
    n_inputs=0,
    mode="slabs",
    input_centre=None,
):
    """The streamed dual fit (see the module docstring) on the delayed row blocks ``Ub``
    (k_i, n), ``Vb`` (k_i, m) with offsets ``starts``; returns ``slabs``, a list of
    ``((f0, f1), delayed (rows of C or None, s_f^T C_f or None))`` (:func:`coef_slab`), and
    the delayed intercept (m,) before the shifts' part ``- sum_f s_f^T C_f``, and the delayed
    :class:`rfol_dask.factor.DualFactor` without its factor (the ridge used). ``token`` names
    the feature cache (None: no cache); ``device`` where numpy blocks are computed (CuPy blocks
    stay on their GPU); ``out`` the (N, m) numpy array the local scheduler writes the
    coefficients into (None on a cluster, whose slabs return their rows); ``draw_on`` the device
    (``"cuda"``) on which the workers draw each slab's frequencies ahead of the Gram pass
    (:func:`draw_slab`, ``n_inputs`` rows each; None: in the slab tasks, as on the CPU).
    ``mode="rows"``: each worker keeps its features and grows its Gram row block by row block as
    the blocks are read (:func:`gram_rows`), instead of making feature slabs of the stacked
    ``U`` twice. ``input_centre``: the fit's :class:`.graph.InputCentre` (or None), folded into the
    recipe the tasks draw with and subtracted from the rows as they are stacked
    (:func:`rfol_dask.gram.stack_rows`: before the cast to ``dtype``, with no copy of its own)."""
    names = TaskNames()
    workers = worker_addresses(client)
    M, itemsize = int(starts[-1]), np.dtype(dtype).itemsize
    groups = feature_slabs(M, n_features, len(workers), itemsize, slab_bytes)
    centre = None if input_centre is None else input_centre.task
    if centre is not None:  # the recipe every task draws with, the centre bound into it
        frequencies = dask.delayed(functools.partial, pure=True)(frequencies, input_centre=centre)
    if draw_on is not None:  # each block moved to the device as soon as it is read
        Ub = [
            dask.delayed(_on_device)(B, draw_on, dask_key_name=names("device-inputs", i))
            for i, B in enumerate(Ub)
        ]
        Vb = [
            dask.delayed(_on_device)(B, draw_on, dask_key_name=names("device-outputs", i))
            for i, B in enumerate(Vb)
        ]
    rows_mode = mode == "rows"
    if rows_mode:  # the row blocks of each step, checked and stacked where they are computed
        steps = row_steps(starts)
        Ub = [
            dask.delayed(stack_rows)(
                [int(starts[i] - starts[s[0]]) for i in (*s, s[-1] + 1)],
                dtype,
                device,
                *(Ub[i] for i in s),
                offset=int(starts[s[0]]),
                centre=centre,
                dask_key_name=names("check-inputs", k),
            )
            for k, s in enumerate(steps)
        ]
        row_starts = [int(starts[s[0]]) for s in steps]
    else:
        U = dask.delayed(stack_rows)(
            starts, dtype, device, *Ub, centre=centre, dask_key_name=names("stack-inputs")
        )
        args = (U, frequencies, n_features)
    grams, residents = [], []
    for w, group in zip(workers, groups):
        width = group[-1][1] - group[0][0]
        with pinned(w):
            drawn = []
            for f0, f1 in group:
                if draw_on is not None and token is not None:
                    # what the device must keep free beside the frequencies: Gram, V, and U and two
                    # slabs, or the resident features
                    held = M * (M + m) + (
                        M * width if rows_mode else M * n_inputs + 2 * M * (f1 - f0)
                    )
                    drawn.append(
                        dask.delayed(draw_slab)(
                            token,
                            frequencies,
                            f0,
                            f1,
                            draw_on,
                            itemsize * (n_inputs + 1) * (f1 - f0),
                            itemsize * held,
                            dask_key_name=names("draw-slab", f0),
                        )
                    )
                else:
                    drawn.append(None)
            K = None
            if rows_mode:
                for i, B in enumerate(Ub):
                    K = dask.delayed(gram_rows)(
                        K,
                        B,
                        row_starts[i],
                        M,
                        frequencies,
                        n_features,
                        group,
                        fit_intercept,
                        token,
                        i == len(Ub) - 1,
                        drawn if i == 0 else None,
                        dask_key_name=names("gram-rows", f"{group[0][0]}-{i}"),
                    )
                residents.append(K)
                K = dask.delayed(resident_gram)(
                    K, dask_key_name=names("resident-gram", group[0][0])
                )
            else:
                for (f0, f1), d in zip(group, drawn):
                    K = dask.delayed(gram_slab)(
                        K,
                        *args,
                        f0,
                        f1,
                        fit_intercept,
                        token,
                        d,
                        dask_key_name=names("gram-slab", f0),
                    )
        grams.append(K)
    K = tree_sum(grams, dask.delayed(iadd), workers)  # ends on workers[0]
    with pinned(workers[0]):
        K = dask.delayed(_symmetric)(K)
        Vslab = dask.delayed(_like)(
            dask.delayed(_stack_outputs)(
                starts, dtype, device, m, *Vb, dask_key_name=names("stack-outputs")
            ),
            K,
        )
        fac = dask.delayed(dual_factor)(
            K,
            dask.delayed(_colsum)(Vslab),
            alpha,
            fit_intercept,
            warn=False,
            dask_key_name=names("dual-factor"),
        )
        Beta = dask.delayed(dual_solve)(
            fac, Vslab, 0, True, True, dask_key_name=names("dual-solve")
        )
        info = dask.delayed(DualFactor.without_factor)(fac)  # the factor is freed after the solve
    slabs = []
    for g, (w, group) in enumerate(zip(workers, groups)):
        with pinned(w):
            rows = None
            for f0, f1 in group:
                if rows_mode:
                    rows = dask.delayed(coef_rows)(
                        residents[g],
                        f0,
                        f1,
                        fit_intercept,
                        Beta,
                        out,
                        rows,
                        dask_key_name=names("coef-rows", f0),
                    )
                else:
                    rows = dask.delayed(coef_slab)(
                        *args,
                        f0,
                        f1,
                        fit_intercept,
                        Beta,
                        token,
                        out,
                        rows,
                        dask_key_name=names("coef-slab", f0),
                    )
                slabs.append(((f0, f1), rows))
    return (
        slabs,
        dask.delayed(_host_intercept)(info, Beta, dask_key_name=names("dual-intercept")),
        info,
    )


def _host_intercept(info, Beta):
    """:func:`dual_intercept` as numpy, made on the worker: a CuPy array would need CuPy and a GPU
    on the client to be unpickled there (a client on a login node without one)."""
    return to_numpy(dual_intercept(info, Beta))


def _in_process():
    """True when dask's local scheduler runs the tasks in this process (threads, or synchronous),
    so that they can write into the caller's arrays; not its ``"processes"`` scheduler."""
    import dask.base
    import dask.local
    import dask.threaded

    return dask.base.get_scheduler() in (None, dask.threaded.get, dask.local.get_sync)


def fit_streamed(
    Ub,
    Vb,
    starts,
    m,
    frequencies,
    *,
    n_features,
    alpha,
    fit_intercept,
    dtype,
    client,
    progress,
    slab_bytes,
    device="cpu",
    draw_on=None,
    n_inputs=0,
    input_centre=None,
):
    """Run :func:`dual_stream_graph` in one ``compute``; returns numpy ``(coef (N, m), intercept (m,))``.
    On a cluster each slab's coefficient rows are gathered into ``coef`` as soon as they are
    made, while the workers make the next ones, and then forgotten on the cluster; dask's local
    scheduler writes them into ``coef`` in place (its processes scheduler returns them). The
    client holds ``coef`` and one slab's rows in transit. The feature cache is opened on every
    worker first and removed afterwards, also on failure."""
    # the fit's token names its cache directories: ``<host>.<pid>.<hex>`` tells sweep_stale_caches whose they are
    cache = dask.config.get("rfol_dask.feature-cache", "disk")
    if cache not in ("disk", "none"):  # a typo turned the cache off silently
        raise ValueError(f"rfol_dask.feature-cache must be 'disk' or 'none', got {cache!r}")
    token = owned_tag() if cache == "disk" else None
    mode = feature_mode(
        client,
        draw_on,
        int(starts[-1]),
        n_features,
        m,
        n_inputs,
        np.dtype(dtype).itemsize,
        len(worker_addresses(client)),
    )
    logger.debug("streamed dual: %s mode", mode)
    coef = np.empty((n_features, m), dtype=dtype)
    got = {"shift": np.zeros(m, dtype=dtype)}
    try:
        if token is not None and client is None:
            sweep_stale_caches()
            open_cache(token)
        elif token is not None:
            client.run(open_cache, token)
        slabs, intercept, factor = dual_stream_graph(
            Ub,
            Vb,
            starts,
            m,
            frequencies,
            n_features=n_features,
            alpha=alpha,
            fit_intercept=fit_intercept,
            dtype=dtype,
            client=client,
            slab_bytes=slab_bytes,
            token=token,
            device=device,
            out=coef if client is None and _in_process() else None,
            draw_on=draw_on,
            n_inputs=n_inputs,
            mode=mode,
            input_centre=input_centre,
        )

        def consume(i, result):
            if i == len(slabs):
                got["intercept"] = result
                return
            (f0, f1), (rows, shifted) = slabs[i][0], result
            if rows is not None:
                coef[f0:f1] = rows
            if shifted is not None:
                got["shift"] += shifted

        compute_fit(
            *(slab for _, slab in slabs),
            intercept,
            progress=progress,
            client=client,
            desc="fit (dual)",
            alpha=alpha,
            consume=consume,
            centre=input_centre,
            factor=factor,
        )
    finally:
        if token is not None:
            t0 = time.perf_counter()
            _close_cache(client, token)
            logger.debug("feature cache closed in %.3f s", time.perf_counter() - t0)
    return coef, got["intercept"] - got["shift"]
