"""The streamed dask dual: each worker sums ``A_f A_f^T`` over its feature slabs (``A`` never
whole), the Grams are reduced and solved on one worker, and ``C = A^T Beta`` is made where the
slabs are, from slabs cached on the workers' disks (config ``rfol_dask.feature-cache``) or, in
the rows mode (config ``rfol_dask.device-features``), from features each worker keeps."""

from __future__ import annotations

import contextlib
import functools
import glob
import logging
import operator
import os
import shutil
import tempfile
import time
import uuid
from types import SimpleNamespace

import dask
import dask.local
import dask.threaded
import numpy as np
from dask.base import get_scheduler

from .. import backend
from ..backend import sized_by_arrays, symmetrize, syrk, to_numpy
from ..factor import DualFactor, dual_factor, dual_intercept, dual_solve
from ..features import feature_map
from ..gram import SHIFT_ROWS, slab_features, slab_shift, stack_rows
from ..linalg import blas_limits
from ..memory import device_free_bytes, free_bytes
from ..placement import current_worker, pinned, worker_addresses, worker_threads
from .graph import TaskNames, compute_fit, feature_slabs, tree_sum

logger = logging.getLogger("rfol_dask")

#: the rows mode adds the Gram strip of at least this many rows (whole row blocks) at a time
ROW_STEP = 1024
#: the feature cache of a fit: a directory ``rfol-cache-<32 hex digits>``
CACHE_NAME = "rfol-cache-"
#: a cache directory in the temporary directory untouched this long is a killed fit's: swept
STALE_CACHE_S = 24 * 3600
#: the frequencies of device slabs between a fit's two passes, by ``(token, f0)``, per process
_KEPT_FREQUENCIES = {}


def row_steps(starts, at_least=None):
    """Consecutive groups of the row blocks at ``starts``, of ``at_least`` rows but the last."""
    steps, first, at_least = [], 0, ROW_STEP if at_least is None else at_least
    for i in range(1, len(starts)):
        if starts[i] - starts[first] >= at_least or i == len(starts) - 1:
            steps.append(list(range(first, i)))
            first = i
    return steps


def _cache_dir(token, worker=None):
    base = worker.local_directory if worker is not None else tempfile.gettempdir()
    return os.path.join(base, CACHE_NAME + token)


def sweep_stale_caches(max_age=STALE_CACHE_S):
    """Remove the local fits' cache directories untouched for ``max_age`` seconds (killed fits)."""
    root = glob.escape(tempfile.gettempdir())
    for path in glob.glob(os.path.join(root, CACHE_NAME + "[0-9a-f]" * 32)):
        with contextlib.suppress(OSError):  # removed meanwhile
            if time.time() - os.path.getmtime(path) > max_age:
                shutil.rmtree(path, ignore_errors=True)


def open_cache(token, dask_worker=None):
    """Make the cache directory of the fit ``token``; slabs are cached only while it exists."""
    os.makedirs(_cache_dir(token, dask_worker), exist_ok=True)


def remove_cache(token, dask_worker=None):
    """Delete the cache directory of the fit ``token`` and its kept frequencies."""
    path = _cache_dir(token, dask_worker)
    for _ in range(5):  # a task writing a slab meanwhile makes rmtree fail: again
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            break
        time.sleep(0.05)
    for key in [k for k in _KEPT_FREQUENCIES if k[0] == token]:
        _KEPT_FREQUENCIES.pop(key, None)


def _slab_file(token, f0):
    return os.path.join(_cache_dir(token, current_worker()), f"slab-{f0}.npy")


def _slab_frequencies(token, U, frequencies, f0, f1, keep):
    """The recipe of ``(omega, b)`` of the columns ``f0:f1`` (on a GPU drawn once and kept)."""
    if isinstance(U, np.ndarray) or token is None:
        return frequencies
    pair = _KEPT_FREQUENCIES.pop((token, f0), None)
    if pair is None:  # not drawn ahead (:func:`draw_slab`) or not kept
        pair = tuple(_like(a, U) for a in frequencies(columns=(f0, f1)))
        nbytes = sum(a.size * backend.itemsize(a.dtype) for a in pair)
        keep = keep and _room(token, backend.namespace(U), nbytes)
    if keep:
        _keep(token, f0, pair)
    return lambda columns: pair


def _keep(token, f0, pair):
    """Keep ``pair`` for slab ``f0`` unless the fit ``token`` has ended."""
    _KEPT_FREQUENCIES[(token, f0)] = pair
    if not os.path.isdir(_cache_dir(token, current_worker())):
        _KEPT_FREQUENCIES.pop((token, f0), None)


def _room(token, xp, nbytes, reserve=0):
    """True while the fit ``token`` runs and ``xp`` has ``reserve + 4 nbytes + 1 GiB`` free."""
    running = os.path.isdir(_cache_dir(token, current_worker()))
    return running and free_bytes(xp) > reserve + 4 * nbytes + 2**30


def draw_slab(token, frequencies, f0, f1, device, nbytes, reserve):
    """Draw the frequencies of the columns ``f0:f1`` and keep them on ``device`` if it has room."""
    xp = backend.device_namespace(device)
    if _room(token, xp, nbytes, reserve):
        with blas_limits(backend.host_threads_per_gpu()):
            pair = tuple(backend.to_namespace(a, xp) for a in frequencies(columns=(f0, f1)))
        if _room(token, xp, 0, reserve):  # still, now that they are there
            _keep(token, f0, pair)
    return f0


def _on_device(B, device):
    return backend.to_namespace(B, backend.compute_namespace(device, B))


def _symmetric(K):  # numpy's SYRK fills the lower triangle only
    return symmetrize(K, "lower") if isinstance(K, np.ndarray) else K


def _colsum(X):
    return backend.namespace(X).sum(X, axis=0)


def _like(X, ref):
    return backend.to_namespace(X, backend.namespace(ref))


def _slab_threads(U):
    """BLAS threads of a slab task: the worker's on the CPU, the host cores per GPU on a GPU."""
    return worker_threads() if isinstance(U, np.ndarray) else backend.host_threads_per_gpu()


def gram_slab(K, U, frequencies, fit, f0, f1, after=None):
    """``K + A_f A_f^T`` in place for the columns ``f0:f1``; ``A_f`` cached on the disk if room."""
    with blas_limits(_slab_threads(U)):
        recipe = _slab_frequencies(fit.token, U, frequencies, f0, f1, True)
        A, _ = slab_features(U, recipe, fit.n_features, f0, f1, fit.fit_intercept)
        K = syrk(A, trans=False, C=K)
    if fit.token is None or not isinstance(A, np.ndarray):  # device slabs are made again instead
        return K
    path = _slab_file(fit.token, f0)
    try:
        if shutil.disk_usage(os.path.dirname(path)).free > 4 * A.nbytes + 2**30:
            np.save(path, A)
    except OSError:  # the cache is closed (the fit ended) or the disk is full: made again later
        if os.path.exists(path):
            os.remove(path)
    return K


def coef_slab(U, frequencies, fit, f0, f1, Beta, after=None):
    """Rows ``f0:f1`` of ``C = A^T Beta`` and ``s_f^T C_f``, from the cached slab or a new one."""
    with blas_limits(_slab_threads(U)):
        A, path = None, fit.token and _slab_file(fit.token, f0)
        if path and os.path.exists(path):  # taken: deleted from the disk
            A = np.load(path)
            os.remove(path)
        recipe = _slab_frequencies(fit.token, U, frequencies, f0, f1, False)
        args = (recipe, fit.n_features, f0, f1, fit.fit_intercept)
        made, shift = slab_features(U if A is None else U[:SHIFT_ROWS], *args)  # cached: the shift
        return _coef_rows(made if A is None else A, Beta, shift, f0, f1, fit.out)


def _coef_rows(A, Beta, shift, f0, f1, out):
    """``C_f = A^T Beta`` on the host (into ``out[f0:f1]`` if given: None) and ``s_f^T C_f``."""
    rows = None if out is None else out[f0:f1]
    if isinstance(A, np.ndarray) and isinstance(Beta, np.ndarray):
        Cf = rows = np.matmul(A.T, Beta, out=rows)
    elif rows is None:  # on the device; the rows come back to the host
        rows = to_numpy(Cf := A.T @ Beta)
    elif backend.is_cupy(backend.namespace(Cf := A.T @ Beta)) and Cf.flags.c_contiguous:
        Cf.get(out=rows)  # no host copy on the way
    else:
        rows[...] = to_numpy(Cf)
    return (None if out is not None else rows), (None if shift is None else to_numpy(shift @ Cf))


@sized_by_arrays
class Resident:
    """A worker's rows-mode state: features ``A`` from column ``g0``, shifts, frequencies, Gram."""

    __slots__ = ("A", "K", "g0", "shifts", "pairs")


def gram_rows(acc, B, start, frequencies, fit, slabs, last=False, after=None):
    """Add the features of the row block ``B`` and its Gram strip to ``acc`` (None: a new one)."""
    M, xp, dt = fit.M, backend.namespace(B), B.dtype
    with blas_limits(_slab_threads(B)):
        if acc is None:
            acc, g0 = Resident(), slabs[0][0]
            acc.g0, acc.A, acc.pairs = g0, xp.empty((M, slabs[-1][1] - g0), dtype=dt), {}
            numpy = isinstance(B, np.ndarray)
            acc.K = np.zeros((M, M), dtype=dt, order="F") if numpy else xp.zeros((M, M), dtype=dt)
            for f0, f1 in slabs:
                recipe = _slab_frequencies(fit.token, B, frequencies, f0, f1, False)
                acc.pairs[f0] = tuple(_like(a, B) for a in recipe(columns=(f0, f1)))
            shift = functools.partial(slab_shift, B, n_features=fit.n_features)
            acc.shifts = {f0: shift(*acc.pairs[f0]) for f0, _ in slabs if fit.fit_intercept}
        e = start + B.shape[0]
        for f0, f1 in slabs:
            acc.A[start:e, f0 - acc.g0 : f1 - acc.g0] = feature_map(
                B, *acc.pairs[f0], shift=acc.shifts.get(f0), n_features=fit.n_features
            )
        acc.K[start:e, :e] = acc.A[start:e, ...] @ acc.A[:e, ...].T
        if not isinstance(acc.K, np.ndarray) and start:
            acc.K[:start, start:e] = acc.K[start:e, :start].T
    if last:
        acc.pairs = None
    return acc


def resident_gram(acc):
    """Hand over the Gram of a :class:`Resident` (made again from ``A`` if gone)."""
    K, acc.K = acc.K, None
    if K is None:
        with blas_limits(_slab_threads(acc.A)):
            K = syrk(acc.A, trans=False)
    return K


def coef_rows(acc, frequencies, fit, f0, f1, Beta, after=None):
    """:func:`coef_slab` from the worker's resident features."""
    with blas_limits(_slab_threads(acc.A)):
        A = acc.A[:, f0 - acc.g0 : f1 - acc.g0]
        return _coef_rows(A, Beta, acc.shifts.get(f0), f0, f1, fit.out)


def rows_need(M, width, m, n_inputs, itemsize, n_workers=1):
    """Bytes a worker's device holds in the rows mode, 1 GiB for the libraries included."""
    grams = 2 if n_workers > 1 else 1
    held = itemsize * (M * width + grams * M * M + 2 * M * m + (n_inputs + 1) * width)
    return int(1.25 * held) + 2**30


def feature_mode(client, draw_on, M, N, m, n_inputs, itemsize, n_workers):
    """``"rows"`` or ``"slabs"`` (config ``rfol_dask.device-features``; auto: rows if room)."""
    mode = dask.config.get("rfol_dask.device-features", "auto")
    if mode not in (modes := ("auto", "rows", "slabs")):
        raise ValueError(f"rfol_dask.device-features must be one of {modes}, got {mode!r}")
    if mode != "auto" or draw_on is None:
        return "slabs" if mode == "auto" else mode
    need = rows_need(M, -(-N // max(1, n_workers)), m, n_inputs, itemsize, n_workers)
    if client is None:
        return "rows" if device_free_bytes(draw_on) > need else "slabs"
    return "rows" if min(client.run(device_free_bytes, draw_on).values()) > need else "slabs"


def _gram_tasks(names, fit, group, data, starts, frequencies):
    """The delayed Gram of one worker's feature ``group`` and its :class:`Resident` (or None)."""
    M, width, rows_mode = fit.M, group[-1][1] - group[0][0], isinstance(data, list)
    drawn = [None] * len(group)
    for k, (f0, f1) in enumerate(group if fit.draw_on is not None and fit.token else []):
        # kept free beside the frequencies: Gram, V, and U and two slabs, or the features
        held = M * (M + fit.m) + M * (width if rows_mode else fit.n_inputs + 2 * (f1 - f0))
        nbytes, held = fit.itemsize * (fit.n_inputs + 1) * (f1 - f0), fit.itemsize * held
        args = (fit.token, frequencies, f0, f1, fit.draw_on, nbytes, held)
        drawn[k] = dask.delayed(draw_slab)(*args, dask_key_name=names("draw-slab", f0))
    K = None
    if not rows_mode:
        for (f0, f1), after in zip(group, drawn, strict=True):
            kw = dict(dask_key_name=names("gram-slab", f0))
            K = dask.delayed(gram_slab)(K, data, frequencies, fit, f0, f1, after, **kw)
        return K, None
    for i, B in enumerate(data):
        name = names("gram-rows", f"{group[0][0]}-{i}")
        args = (starts[i], frequencies, fit, group, i == len(data) - 1, drawn if i == 0 else None)
        K = dask.delayed(gram_rows)(K, B, *args, dask_key_name=name)
    return dask.delayed(resident_gram)(K, dask_key_name=names("resident-gram", group[0][0])), K


def dual_stream_graph(Ub, Vb, starts, frequencies, fit, client, input_centre=None):
    """``[((f0, f1), delayed rows of C)]``, the intercept (less the shifts' part), the factor."""
    names, workers = TaskNames(), worker_addresses(client)
    groups = feature_slabs(fit.M, fit.n_features, len(workers), fit.itemsize, fit.slab_bytes)
    centre = None if input_centre is None else input_centre.task
    if centre is not None:  # the recipe every task draws with, the centre bound into it
        frequencies = dask.delayed(functools.partial, pure=True)(frequencies, input_centre=centre)
    if fit.draw_on is not None:  # each block moved to the device as soon as it is read
        move = dask.delayed(_on_device)
        Ub, Vb = (
            [move(B, fit.draw_on, dask_key_name=names(what, i)) for i, B in enumerate(blocks)]
            for what, blocks in (("device-inputs", Ub), ("device-outputs", Vb))
        )
    stack, steps = dask.delayed(stack_rows), row_steps(starts) if fit.mode == "rows" else []
    data = []  # U stacked whole, or (rows mode) by row steps
    if not steps:
        name = names("stack-inputs")
        data = stack(starts, fit.dtype, fit.device, *Ub, centre=centre, dask_key_name=name)
    for k, s in enumerate(steps):
        offsets = [int(starts[i] - starts[s[0]]) for i in (*s, s[-1] + 1)]
        kw = dict(offset=int(starts[s[0]]), centre=centre, dask_key_name=names("check-inputs", k))
        data.append(stack(offsets, fit.dtype, fit.device, *Ub[s[0] : s[-1] + 1], **kw))
    row_starts = [int(starts[s[0]]) for s in steps]
    parts = []  # (the Gram, the Resident or None) of each worker
    for w, group in zip(workers, groups, strict=False):
        with pinned(w):
            parts.append(_gram_tasks(names, fit, group, data, row_starts, frequencies))
    grams, residents = zip(*parts, strict=True)
    K = tree_sum(grams, dask.delayed(operator.iadd), workers)  # ends on workers[0]
    with pinned(workers[0]):
        K, kw = dask.delayed(_symmetric)(K), dict(dask_key_name=names("stack-outputs"))
        V = dask.delayed(stack_rows)(
            starts, fit.dtype, fit.device, *Vb, name="V", fortran=True, **kw
        )
        V = dask.delayed(_like)(V, K)
        args = (K, dask.delayed(_colsum)(V), fit.alpha, fit.fit_intercept)
        fac = dask.delayed(dual_factor)(*args, warn=False, dask_key_name=names("dual-factor"))
        Beta = dask.delayed(dual_solve)(fac, V, 0, True, True, dask_key_name=names("dual-solve"))
        info = dask.delayed(DualFactor.without_factor)(fac)  # the factor is freed after the solve
    slabs = []
    for w, group, resident in zip(workers, groups, residents, strict=False):
        rows, (src, make, what) = None, (data, coef_slab, "coef-slab")
        if resident is not None:
            src, make, what = resident, coef_rows, "coef-rows"
        for f0, f1 in group:
            with pinned(w):
                kw = dict(dask_key_name=names(what, f0))
                rows = dask.delayed(make)(src, frequencies, fit, f0, f1, Beta, rows, **kw)
            slabs.append(((f0, f1), rows))
    intercept = dask.delayed(_host_intercept)(info, Beta, dask_key_name=names("dual-intercept"))
    return slabs, intercept, info


def _host_intercept(info, Beta):
    """The intercept as numpy, made on the worker: a client without a GPU cannot unpickle CuPy."""
    return to_numpy(dual_intercept(info, Beta))


def fit_streamed(Ub, Vb, starts, frequencies, *, client, progress, input_centre=None, **settings):
    """Run :func:`dual_stream_graph` in a feature cache removed afterwards: numpy ``(C, c0)``."""
    cache = dask.config.get("rfol_dask.feature-cache", "disk")
    if cache not in ("disk", "none", None):  # None: the environment's "none", as dask reads it
        raise ValueError(f"rfol_dask.feature-cache must be 'disk' or 'none', got {cache!r}")
    fit = SimpleNamespace(**settings, M=int(starts[-1]), out=None)
    fit.itemsize, (N, m) = np.dtype(fit.dtype).itemsize, (fit.n_features, fit.m)
    fit.token = uuid.uuid4().hex if cache == "disk" else None
    coef = np.empty((N, m), dtype=fit.dtype)
    if client is None and get_scheduler() in (None, dask.threaded.get, dask.local.get_sync):
        fit.out = coef
    sizes = (fit.M, N, m, fit.n_inputs, fit.itemsize, len(worker_addresses(client)))
    fit.mode = feature_mode(client, fit.draw_on, *sizes)
    logger.debug("streamed dual: %s mode", fit.mode)
    got = {"shift": np.zeros(m, dtype=fit.dtype)}

    def consume(i, result):
        if i == len(slabs):
            got["intercept"] = result
            return
        (f0, f1), (rows, shifted) = slabs[i][0], result
        if rows is not None:
            coef[f0:f1] = rows
        if shifted is not None:
            got["shift"] += shifted

    try:
        if fit.token and client is None:
            sweep_stale_caches()
            open_cache(fit.token)
        elif fit.token:
            client.run(open_cache, fit.token)
        graph = dual_stream_graph(Ub, Vb, starts, frequencies, fit, client, input_centre)
        slabs, intercept, factor = graph
        kw = dict(progress=progress, client=client, alpha=fit.alpha, centre=input_centre)
        tasks = (*(slab for _, slab in slabs), intercept)
        compute_fit(*tasks, desc="fit (dual)", consume=consume, factor=factor, **kw)
    finally:
        if fit.token:
            remove_cache(fit.token)
            with contextlib.suppress(OSError):  # a cluster going down takes its scratch space
                if client is not None:
                    client.run(remove_cache, fit.token)
    return coef, got["intercept"] - got["shift"]
