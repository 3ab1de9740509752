"""The streamed dask dual: the Gram ``K = sum_f A_f A_f^T`` summed over feature slabs on each
worker and reduced across the workers, factorised once; ``C = A^T Beta`` slab by slab.

Each worker gets all of ``U`` (M x n) and a contiguous group of feature slabs
(:func:`feature_slabs`); along a chain of tasks (``gram-slab``) it draws each slab's
frequencies, makes the slab and adds ``A_f A_f^T`` to its own Gram (:func:`gram_slab`), so
neither ``A`` nor ``Omega`` exists whole and ``A`` never travels. The workers' Grams are
summed (a tree; ``itemsize M^2`` bytes moved per worker beyond the first), factorised once and
solved for all outputs on one worker (in place); ``Beta`` (M x m) goes to every worker, which
writes the rows of ``C = A^T Beta`` of its slabs (``coef-slab``, :func:`coef_slab`).

Memory per worker: its Gram ``+ U +`` a slab and its temporaries (:func:`rfol_dask.memory.dual_plan`
sizes the slab); on the factorising worker ``+ V`` (M x m); the coefficients (N x m) in all.
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
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import uuid

import dask
import numpy as np

from .. import backend
from ..backend import symmetrize, syrk, to_numpy
from ..factor import DualFactor, dual_factor, dual_intercept, dual_solve
from ..features import FREQUENCY_BLOCK, feature_map
from ..gram import check_finite
from ..linalg import blas_limits
from ..placement import current_worker, pinned, worker_addresses, worker_threads
from .graph import TaskNames, column_slab, compute_fit, iadd, tree_sum

__all__ = ["SHIFT_ROWS", "feature_slabs", "slab_features", "gram_slab", "coef_slab", "open_cache",
           "remove_cache", "dual_stream_graph", "fit_streamed"]

logger = logging.getLogger("rfol_dask")

#: samples whose mean features shift each slab (the centring shift of ``gram.block_means``)
SHIFT_ROWS = 64


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
    return [[(f, min(f + width, g1)) for f in range(g0, g1, width)] for g0, g1 in zip(bounds, bounds[1:]) if g1 > g0]


# ---------------------------------------------------------------------------------------
# the feature cache: one directory per fit on each worker's local disk


def _cache_dir(token, worker=None):
    """The cache directory of the fit ``token``: in the worker's local directory, else the
    temporary directory."""
    base = worker.local_directory if worker is not None else tempfile.gettempdir()
    return os.path.join(base, f"rfol-{token}")


def open_cache(token, dask_worker=None):
    """Make the cache directory of the fit ``token`` (``client.run`` passes ``dask_worker``).
    Slabs are only cached where it exists, so a task that outlives its failed fit writes nothing."""
    os.makedirs(_cache_dir(token, dask_worker), exist_ok=True)


def remove_cache(token, dask_worker=None):
    """Delete the cache directory of the fit ``token`` and what is left in it (and the
    frequencies kept in this process)."""
    for key in [k for k in _KEPT_FREQUENCIES if k[0] == token]:
        _KEPT_FREQUENCIES.pop(key, None)
    path = _cache_dir(token, dask_worker)
    for _ in range(5):  # a task creating a file while the tree is removed makes rmtree fail: again
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.05)


def _cache_file(token, f0):
    return None if token is None else os.path.join(_cache_dir(token, current_worker()), f"slab-{f0}.npy")


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


def free_bytes(X):
    """Bytes that the memory holding ``X`` still has free: the GPU's (CuPy: free device memory
    plus the pool's free blocks), else the host's available memory."""
    if backend.is_cupy(backend.namespace(X)):
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[0]) + int(cupy.get_default_memory_pool().free_bytes())
    import psutil

    return int(psutil.virtual_memory().available)


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
    if pair is None:
        pair = tuple(_like(a, U) for a in frequencies(columns=(f0, f1)))
        if keep and os.path.isdir(_cache_dir(token, current_worker())) and \
                free_bytes(U) > 4 * sum(math.prod(a.shape) * backend.itemsize(a.dtype) for a in pair) + 2**30:
            _KEPT_FREQUENCIES[(token, f0)] = pair
    return lambda columns: pair


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


def _stack_rows(starts, dtype, device, *blocks, name="U", fortran=False):
    """The checked row blocks stacked into one (M, n) array (copied once per worker), in the
    namespace of the blocks if they are CuPy (array API) arrays, else of ``device``; with
    ``fortran``, Fortran-ordered on numpy and CuPy."""
    xp = backend.compute_namespace(device, *blocks)
    fast = backend.is_fast(xp)
    shape, order = (int(starts[-1]), blocks[0].shape[1]), {"order": "F"} if fortran else {}
    if fast or backend.is_cupy(xp):
        out = xp.empty(shape, dtype=dtype if fast else getattr(xp, np.dtype(dtype).name), **order)
    else:
        out = xp.empty(shape, dtype=getattr(xp, np.dtype(dtype).name))
    for i, B in enumerate(blocks):
        B = backend.to_namespace(B, xp)
        check_finite(B, starts[i], name)
        out[starts[i]:starts[i + 1], ...] = B if fast else xp.astype(B, out.dtype, copy=False)
    return out


def _stack_outputs(starts, dtype, device, m, *blocks):
    """The checked output blocks stacked into one Fortran-ordered (M, m) array for the in-place
    solves: on the host by :func:`.graph.column_slab`; on a device each block is moved as it is
    (C order) and written into the Fortran-ordered stack there (no transposing copy on the host)."""
    if backend.is_fast(backend.compute_namespace(device, *blocks)):
        return column_slab(0, m, dtype, *blocks)
    return _stack_rows(starts, dtype, device, *blocks, name="V", fortran=True)


def _symmetric(K):
    """The summed Gram made symmetric: numpy's SYRK fills the lower triangle only; the other
    namespaces sum full products, symmetric already (:func:`rfol_dask.backend.syrk`)."""
    return symmetrize(K, "lower") if isinstance(K, np.ndarray) else K


def _like(X, ref):
    """``X`` moved to the namespace (device) of ``ref``."""
    return backend.to_namespace(X, backend.namespace(ref))


def _colsum(X):
    return backend.namespace(X).sum(X, axis=0)


def slab_features(U, frequencies, n_features, f0, f1, centre, shift_rows=SHIFT_ROWS):
    """Features ``A[:, f0:f1]`` (M, f1 - f0) of all of ``U`` (M, n) minus their mean ``s_f``
    over the first ``shift_rows`` samples (if ``centre``; ``shift_rows=None``: over all of them,
    the exact column means), and that shift (or None).
    ``frequencies(columns=(f0, f1))`` draws the slab of ``(Omega, b)`` (a
    ``features.draw_frequencies`` recipe); ``n_features`` is the model's ``N``."""
    xp = backend.namespace(U)
    omega, b = (backend.to_namespace(a, xp) for a in frequencies(columns=(f0, f1)))
    if not centre:
        return feature_map(U, omega, b, n_features=n_features), None
    if shift_rows is None:
        A = feature_map(U, omega, b, n_features=n_features)
        shift = xp.mean(A, axis=0)
        A -= shift
        return A, shift
    head = U[:min(shift_rows, U.shape[0]), ...]
    shift = xp.mean(feature_map(head, omega, b, n_features=n_features), axis=0)
    return feature_map(U, omega, b, shift=shift, n_features=n_features), shift


def _slab_threads(U):
    """BLAS threads of a slab task, and so of its frequency draw (:func:`.features.draw_frequencies`):
    the worker's on the CPU; where ``U`` is on a GPU, which does the products, the host cores per
    GPU of the node (:func:`rfol_dask.backend.host_threads_per_gpu`), for the draw."""
    return worker_threads() if isinstance(U, np.ndarray) else backend.host_threads_per_gpu()


def gram_slab(K, U, frequencies, n_features, f0, f1, centre, token=None):
    """``K + A_f A_f^T`` (M, M) for the shifted feature slab ``A_f`` of columns ``f0:f1``
    (:func:`slab_features`): lower triangle, Fortran order, in place (``K=None`` starts the
    sum). ``A_f`` is made on the worker's cores and, with a ``token``, kept on the worker's
    disk for ``C = A^T Beta`` (else made again then). Cost ``2 M n (f1 - f0) + M^2 (f1 - f0)`` flops."""
    with blas_limits(_slab_threads(U)):
        A, _ = slab_features(U, _slab_frequencies(token, U, frequencies, f0, f1, True), n_features, f0, f1, centre)
        K = syrk(A, trans=False, C=K)
    _cache_put(token, f0, A)
    return K


def _coef_part(rows, m, dtype, after=None):
    """An empty coefficient part: the tuple ``(C (rows, m), sC (m,))`` of the rows
    ``n0:n0 + rows`` of the coefficients that one worker writes, ``C = A[:, rows]^T Beta``, and
    ``sC = s^T C`` over those rows (``s`` the slabs' shifts), which the intercepts need. A
    plain tuple of arrays, not an object: distributed moves it to the client as two numpy
    frames (an object holding them went through pickle, 2-3 x slower for the 655 MB of a
    20000-feature model). ``after`` (ignored) keeps it from being made early."""
    return np.empty((rows, m), dtype=dtype), np.zeros(m, dtype=dtype)


def _to_host(X, out):
    """Copy the device array ``X`` into the C-contiguous numpy array ``out`` (CuPy: straight
    into it, no temporary host array)."""
    if backend.is_cupy(backend.namespace(X)) and X.flags.c_contiguous:
        X.get(out=out)
    else:
        out[...] = to_numpy(X)


def coef_slab(part, n0, U, frequencies, n_features, f0, f1, centre, Beta, token=None):
    """Rows ``f0:f1`` of ``C = A^T Beta`` written into the coefficient part ``part = (C, sC)``
    (:func:`_coef_part`, holding rows ``n0:``) in place, and ``s_f^T C_f`` added to ``sC``;
    ``Beta`` is (M, m). The slab
    is read back from the worker's disk (and deleted) or made again."""
    with blas_limits(_slab_threads(U)):
        A = _cache_take(token, f0)
        frequencies = _slab_frequencies(token, U, frequencies, f0, f1, False)
        if A is None:
            A, shift = slab_features(U, frequencies, n_features, f0, f1, centre)
        else:
            shift = slab_features(U[:SHIFT_ROWS], frequencies, n_features, f0, f1, centre)[1]
        if isinstance(A, np.ndarray) and isinstance(Beta, np.ndarray):
            Cf = np.matmul(A.T, Beta, out=part[0][f0 - n0:f1 - n0])
        else:  # on the device; the rows come back to the host
            Cf = A.T @ Beta
            _to_host(Cf, part[0][f0 - n0:f1 - n0])
    if shift is not None:
        part[1][...] += to_numpy(shift @ Cf)
    return part


def _intercept_minus(intercept, *parts):
    return to_numpy(intercept) - sum(sC for _, sC in parts)


def dual_stream_graph(Ub, Vb, starts, m, frequencies, *, n_features, alpha, fit_intercept, dtype, client,
                      slab_bytes, token=None, device="cpu"):
    """The streamed dual fit (see the module docstring) on the delayed row blocks ``Ub``
    (k_i, n), ``Vb`` (k_i, m) with offsets ``starts``; returns the delayed
    ``(list of coefficient parts (C, sC), intercept (m,))``. ``token`` names the feature cache (None: no cache);
    ``device`` where numpy blocks are computed (CuPy blocks stay on their GPU)."""
    names = TaskNames()
    workers = worker_addresses(client)
    groups = feature_slabs(int(starts[-1]), n_features, len(workers), np.dtype(dtype).itemsize, slab_bytes)
    U = dask.delayed(_stack_rows)(starts, dtype, device, *Ub, dask_key_name=names("stack-inputs"))
    args = (U, frequencies, n_features)
    grams = []
    for w, group in zip(workers, groups):
        with pinned(w):
            K = None
            for f0, f1 in group:
                K = dask.delayed(gram_slab)(K, *args, f0, f1, fit_intercept, token, dask_key_name=names("gram-slab", f0))
        grams.append(K)
    with pinned(workers[0]):
        K = dask.delayed(_symmetric)(tree_sum(grams, dask.delayed(iadd)))
        Vslab = dask.delayed(_like)(dask.delayed(_stack_outputs)(starts, dtype, device, m, *Vb,
                                                                 dask_key_name=names("stack-outputs")), K)
        fac = dask.delayed(dual_factor)(K, dask.delayed(_colsum)(Vslab), alpha, fit_intercept,
                                        dask_key_name=names("dual-factor"))
        Beta = dask.delayed(dual_solve)(fac, Vslab, 0, True, True, dask_key_name=names("dual-solve"))
        info = dask.delayed(DualFactor.without_factor)(fac)  # the factor is freed after the solve
    parts = []
    for w, group in zip(workers, groups):
        n0, n1 = group[0][0], group[-1][1]
        with pinned(w):
            part = dask.delayed(_coef_part)(n1 - n0, m, dtype, Beta)
            for f0, f1 in group:
                part = dask.delayed(coef_slab)(part, n0, *args, f0, f1, fit_intercept, Beta, token,
                                               dask_key_name=names("coef-slab", f0))
        parts.append(part)
    intercept = dask.delayed(_intercept_minus)(dask.delayed(dual_intercept)(info, Beta), *parts)
    return parts, intercept


def fit_streamed(Ub, Vb, starts, m, frequencies, *, n_features, alpha, fit_intercept, dtype, client, progress,
                 slab_bytes, device="cpu"):
    """Run :func:`dual_stream_graph` in one ``compute``; returns numpy ``(coef (N, m), intercept (m,))``.
    The feature cache is opened on every worker first and removed afterwards, also on failure."""
    token = uuid.uuid4().hex if dask.config.get("rfol_dask.feature-cache", "disk") == "disk" else None
    try:
        if token is not None and client is None:
            open_cache(token)
        elif token is not None:
            client.run(open_cache, token)
        parts, intercept = dual_stream_graph(Ub, Vb, starts, m, frequencies, n_features=n_features, alpha=alpha,
                                             fit_intercept=fit_intercept, dtype=dtype, client=client,
                                             slab_bytes=slab_bytes, token=token, device=device)
        parts, intercept = compute_fit(parts, intercept, progress=progress, client=client, desc="fit (dual)",
                                       alpha=alpha)
    finally:
        if token is not None:
            t0 = time.perf_counter()
            _close_cache(client, token)
            logger.debug("feature cache closed in %.3f s", time.perf_counter() - t0)
    parts = [C for C, _ in parts]
    return (parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)), intercept
