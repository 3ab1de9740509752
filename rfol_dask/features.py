"""Random frequency laws (:func:`draw_frequencies`) and the random Fourier feature map
``phi(U) = sqrt(2 / N) cos((U - c) @ Omega + b)`` (:func:`feature_map`)."""

from __future__ import annotations

import contextlib
import functools
import importlib
from types import ModuleType

import numpy as np
from numpy.typing import DTypeLike

from . import backend
from .linalg import blas_threads

DISTRIBUTIONS = ("cauchy", "gaussian", "student_t", "rational_quadratic")
#: the laws whose shape ``nu`` sets (the others ignore it)
NU_LAWS = ("student_t", "rational_quadratic")


def check_random_state(seed):
    """A ``numpy.random.Generator`` from None, an int, a SeedSequence, Generator or RandomState."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.Generator(seed._bit_generator)
    if seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        return np.random.default_rng(seed)
    msg = "random_state must be None, an int, a numpy SeedSequence or Generator; got "
    raise TypeError(msg + type(seed).__name__)


def integer_seed(random_state):
    """An integer seed for ``random_state``, from which any worker draws the same frequencies."""
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(random_state)
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1)[0])
    return int(check_random_state(random_state).integers(2**32))


#: samples whose mean is a model's input centre (:func:`input_centre`)
CENTRE_ROWS = 64


def input_centre(dtype: DTypeLike, *blocks, rows: int = CENTRE_ROWS) -> np.ndarray:
    """The input centre ``c`` (n,): the mean of the first ``rows`` samples, as ``dtype``."""
    head, left = [], rows
    for B in blocks:
        if left <= 0:
            break
        head.append(backend.to_numpy(B[: min(left, B.shape[0]), ...]))
        left -= head[-1].shape[0]
    return np.mean(np.concatenate(head), axis=0, dtype=np.float64).astype(dtype)


#: columns of ``Omega`` drawn from one random stream: any slab of columns can be drawn alone
FREQUENCY_BLOCK = 256


def _seed_sequence(random_state):
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.SeedSequence(random_state)
    return np.random.SeedSequence(integer_seed(random_state))


def draw_frequencies(
    n_inputs: int,
    n_features: int,
    distribution: str = "cauchy",
    gamma: float = 1.0,
    nu: float | None = None,
    random_state: int | np.random.Generator | np.random.SeedSequence | None = None,
    dtype: DTypeLike = np.float64,
    columns: tuple[int, int] | None = None,
    xp: ModuleType | None = None,
    metric: np.ndarray | None = None,
    input_centre: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw the random frequencies ``Omega`` and phases ``b`` of the feature map.

    Block ``k`` of :data:`FREQUENCY_BLOCK` columns comes from its own stream (spawn key ``k``):
    any slab of columns is drawn alone, and float32 and float64 models share the draw; the
    phases ``b`` are uniform on ``[0, 2 pi)``.

    Parameters
    ----------
    n_inputs : int
        Input width ``n`` (rows of ``Omega``).
    n_features : int
        Number of features ``N`` (columns of ``Omega``).
    distribution : {"cauchy", "gaussian", "student_t", "rational_quadratic"}, default="cauchy"
        Frequency law: i.i.d. ``gamma * standard_cauchy`` entries (kernel ``exp(-gamma ||x -
        y||_1)``); i.i.d. ``N(0, 2 gamma)`` (``exp(-gamma ||x - y||^2)``); ``sqrt(nu / chi2_nu)
        N(0, gamma^2)``, one chi-square per feature (Matern-type, smoothness ``nu / 2``); or
        ``sqrt(2 gamma t / a) N(0, I)``, one ``t ~ Gamma(a, 1)`` per feature, ``a = nu`` (1 if
        None): kernel ``(1 + gamma ||x - y||^2 / a)^-a``.
    gamma : float, default=1.0
        Frequency scale (> 0).
    nu : float, optional
        Degrees of freedom of ``"student_t"`` (> 0, required), or the shape ``a`` of
        ``"rational_quadratic"`` (> 0; None: 1); ignored by the others.
    random_state : int, Generator, SeedSequence or None, default=None
        Seed; an int or SeedSequence fixes the draw whatever ``columns`` asks for.
    dtype : numpy dtype, default=np.float64
        Dtype of the returned arrays.
    columns : tuple of (int, int), optional
        Draw only the columns ``f0:f1`` of the ``n_features``.
    xp : array namespace, optional
        Namespace of the returned arrays (default numpy); the values do not depend on it.
    metric : ndarray of shape (n_inputs, r), optional
        An input metric ``T`` (:func:`rfol_dask.tuning.pca_metric`): ``omega = T omega_r``.
    input_centre : ndarray of shape (n_inputs,), optional
        The model's input centre ``c``: the phases ``b = (b0 + c @ omega) mod 2 pi``.

    Returns
    -------
    omega : ndarray of shape (n_inputs, N')
        The frequencies, ``N' = n_features`` or ``f1 - f0``, in ``xp``.
    b : ndarray of shape (N',)
        The phases.
    """
    shape, seq = _law_shape(distribution, nu), _seed_sequence(random_state)
    n, (f0, f1) = int(n_inputs), (0, int(n_features)) if columns is None else map(int, columns)
    if metric is not None and np.shape(metric)[0] != n:
        raise ValueError(f"metric has {np.shape(metric)[0]} rows, expected n_inputs={n}")
    r = n if metric is None else int(np.shape(metric)[1])  # the dimension the law draws in
    if input_centre is not None:
        input_centre = np.asarray(backend.to_numpy(input_centre), dtype=np.float64)
        if input_centre.shape != (n,):
            raise ValueError(f"input_centre has shape {input_centre.shape}, expected ({n},)")
    host, dt, B = xp is None or xp is np, np.dtype(dtype), FREQUENCY_BLOCK
    xp, xdt = (np, dt) if host else (xp, getattr(xp, dt.name))  # the namespace's dtype object
    omega, b = xp.empty((n, f1 - f0), dtype=xdt), xp.empty(f1 - f0, dtype=xdt)
    device = contextlib.nullcontext  # CuPy: each pool thread puts its block on omega's GPU
    if not host and backend.is_cupy(xp):
        device = functools.partial(importlib.import_module("cupy").cuda.Device, omega.device.id)

    def block(k):
        # always a whole block: the first N' columns of any draw are the draw of N' features
        ss = np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, k))
        om, bk = _draw_block(np.random.default_rng(ss), distribution, gamma, nu, shape, r, B)
        lo, hi = max(f0, k * B), min(f1, k * B + B)
        om, bk = om[:, lo - k * B : hi - k * B], bk[lo - k * B : hi - k * B]
        if metric is not None:
            om = metric @ om
        if input_centre is not None:  # float64, reduced before the cast, summed row by row
            bk = np.mod(bk + (input_centre[:, None] * om).sum(axis=0), 2.0 * np.pi)
        with device():
            if not host:  # cast on the host, one contiguous transfer per block
                om, bk = xp.asarray(np.ascontiguousarray(om, dtype=dt)), xp.asarray(bk.astype(dt))
            omega[:, lo - f0 : hi - f0] = om
            b[lo - f0 : hi - f0] = bk

    blocks = range(f0 // B, -(-f1 // B))
    threads = min(len(blocks), blas_threads()) if n * (f1 - f0) >= 2**20 else 1
    list(map(block, blocks) if threads <= 1 else _pool(threads).map(block, blocks))
    return omega, b


def _law_shape(distribution, nu):  # the rational quadratic's shape; ValueError for a bad law/nu
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose one of {DISTRIBUTIONS}")
    if distribution == "student_t" and (nu is None or not nu > 0):
        raise ValueError(f"distribution='student_t' needs nu > 0 degrees of freedom, got nu={nu!r}")
    if distribution == "rational_quadratic" and nu is not None and not nu > 0:
        raise ValueError(
            f"distribution='rational_quadratic' needs a shape nu > 0 (or None for 1), got nu={nu!r}"
        )
    return 1.0 if nu is None else float(nu)


def _draw_block(rng, distribution, gamma, nu, shape, r, B):  # frequencies (r, B), phases (B,)
    if distribution == "cauchy":
        om = gamma * rng.standard_cauchy((r, B))
    elif distribution == "gaussian":
        om = np.sqrt(2.0 * gamma) * rng.standard_normal((r, B))
    elif distribution == "student_t":
        om = gamma * rng.standard_normal((r, B)) * np.sqrt(nu / rng.chisquare(nu, size=B))
    else:  # rational_quadratic: a Gamma(a, 1) scale mixture of the Gaussian law
        om = np.sqrt(2.0 * gamma / shape) * rng.standard_normal((r, B))
        om = om * np.sqrt(rng.standard_gamma(shape, B))
    return om, rng.uniform(0.0, 2.0 * np.pi, size=B)


@functools.cache
def _pool(threads):
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(threads, thread_name_prefix="rfol-features")


def _slabs(M, rows):
    return [(s, min(s + rows, M)) for s in range(0, M, rows)]


#: :func:`feature_map` centres rows in blocks of about this many bytes, at least 256 rows
CENTRE_BLOCK_BYTES, CENTRE_BLOCK_ROWS = 2**23, 256


def _centred_blocks(U):
    row_bytes = max(1, U.shape[1] * backend.itemsize(U.dtype))
    return _slabs(U.shape[0], max(CENTRE_BLOCK_ROWS, CENTRE_BLOCK_BYTES // row_bytes))


def feature_map(
    U: np.ndarray,
    omega: np.ndarray,
    b: np.ndarray,
    out: np.ndarray | None = None,
    shift: np.ndarray | None = None,
    n_features: int | None = None,
    input_centre: np.ndarray | None = None,
) -> np.ndarray:
    """Compute the features ``sqrt(2 / N) cos((U - c) @ omega + b) - shift`` of a block.

    Parameters
    ----------
    U : ndarray of shape (k, n)
        A block of input functions.
    omega : ndarray of shape (n, N')
        Frequencies: all ``N`` of the model's, or a slab of ``N'`` of them.
    b : ndarray of shape (N',)
        Phases of the same columns.
    out : ndarray of shape (k, N'), optional
        Buffer to write the features into (its dtype must be that of ``U @ omega``).
    shift : ndarray of shape (N',), optional
        Subtracted from every row (the training column means, to centre).
    n_features : int, optional
        The model's ``N`` in the scale ``sqrt(2 / N)`` (default ``N'``).
    input_centre : ndarray of shape (n,), optional
        The model's input centre ``c``, subtracted from the rows of ``U`` before the cast.

    Returns
    -------
    ndarray of shape (k, N')
        The features in the dtype of ``U @ omega`` (``out`` if given).
    """
    n_features = omega.shape[1] if n_features is None else n_features
    xp = backend.namespace(U, omega, b)  # numpy, unless another namespace
    if not backend.is_fast(xp):
        return _feature_map_generic(xp, U, omega, b, out, shift, n_features, input_centre)
    if input_centre is None:
        Z = np.matmul(U, omega, out=out)
    else:  # centred in the wider dtype of U and c, written into a scratch of omega's
        Z = np.empty((U.shape[0], omega.shape[1]), dtype=omega.dtype) if out is None else out
        c = np.asarray(input_centre)
        blocks = _centred_blocks(U)
        rows = blocks[0][1] - blocks[0][0] if blocks else 0
        scratch = np.empty((rows, U.shape[1]), dtype=omega.dtype)
        for s, e in blocks:
            np.subtract(U[s:e], c, out=scratch[: e - s], casting="same_kind")
            np.matmul(scratch[: e - s], omega, out=Z[s:e])
    scale = Z.dtype.type(np.sqrt(2.0 / n_features))

    def finish(block):
        block += b
        np.cos(block, out=block)
        block *= scale
        if shift is not None:
            block -= shift

    threads = blas_threads() if Z.size >= 2**20 else 1  # on 2 MiB slabs of rows
    slabs = _slabs(Z.shape[0], max(1, 2**21 // max(1, Z.shape[1] * Z.itemsize)))
    run = map if threads <= 1 or len(slabs) == 1 else _pool(threads).map
    list(run(lambda se: finish(Z[se[0] : se[1]]), slabs))
    return Z


def _feature_map_generic(xp, U, omega, b, out, shift, n_features, input_centre=None):
    """:func:`feature_map` in the arrays' own namespace (in place on CuPy)."""
    if input_centre is None:
        Z = U @ omega
    else:  # a block of centred rows at a time, cast to omega's dtype
        c = backend.to_namespace(input_centre, xp)
        Z = xp.empty((U.shape[0], omega.shape[1]), dtype=omega.dtype)
        for s, e in _centred_blocks(U):
            X = xp.astype(U[s:e, ...] - c, omega.dtype, copy=False)
            if backend.is_cupy(xp):
                xp.matmul(X, omega, out=Z[s:e, ...])
            else:
                Z[s:e, ...] = X @ omega
    Z += b
    if backend.is_cupy(xp):  # in place: one (k, N') buffer, as on the CPU
        import cupy

        cupy.cos(Z, out=Z)
    else:
        Z = xp.cos(Z)
    Z *= float(np.sqrt(2.0 / n_features))
    if shift is not None:
        Z -= shift
    if out is not None:
        out[...] = Z
    return Z if out is None else out
