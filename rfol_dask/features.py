"""Random frequency laws and the random Fourier feature map.

``phi(U) = sqrt(2 / N) cos(U @ Omega + b)`` with ``Omega`` (n, N) drawn from

- ``"cauchy"``: i.i.d. ``gamma * standard_cauchy`` entries (tensor-product Cauchy); the
  features approximate the kernel ``exp(-gamma ||x - y||_1)``;
- ``"gaussian"``: i.i.d. ``N(0, 2 gamma)`` entries; kernel ``exp(-gamma ||x - y||^2)``;
- ``"student_t"``: ``sqrt(nu / chi2_nu) * N(0, gamma^2)`` with one chi-square draw per
  feature (a multivariate t law); kernel of Matern type with smoothness ``nu / 2``;

and ``b ~ U(0, 2 pi)``. Frequencies are always drawn with numpy on the client so that a
seed fixes the model whatever the chunking (never ``dask.array.random``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["DISTRIBUTIONS", "draw_frequencies", "feature_map", "check_random_state"]

DISTRIBUTIONS = ("cauchy", "gaussian", "student_t")


def check_random_state(seed):
    """A ``numpy.random.Generator`` from ``None``, an int, a ``SeedSequence`` or a Generator.

    A ``numpy.random.RandomState`` is accepted too (its bit generator is reused).
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.Generator(seed._bit_generator)
    if seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        return np.random.default_rng(seed)
    raise TypeError(
        f"random_state must be None, an int, a numpy SeedSequence or Generator; got {type(seed).__name__}"
    )


def draw_frequencies(n_inputs, n_features, distribution="cauchy", gamma=1.0, nu=None,
                     random_state=None, dtype=np.float64):
    """Draw ``Omega`` (n_inputs, n_features) and ``b`` (n_features,).

    Memory: ``8 * n_inputs * n_features`` bytes for float64 ``Omega``.
    The draw is made in float64 and cast, so float32 and float64 models of one seed
    share their frequencies.
    """
    rng = check_random_state(random_state)
    shape = (int(n_inputs), int(n_features))
    if distribution == "cauchy":
        omega = gamma * rng.standard_cauchy(shape)
    elif distribution == "gaussian":
        omega = np.sqrt(2.0 * gamma) * rng.standard_normal(shape)
    elif distribution == "student_t":
        if nu is None or not nu > 0:
            raise ValueError(f"distribution='student_t' needs nu > 0 degrees of freedom, got nu={nu!r}")
        scale = np.sqrt(nu / rng.chisquare(nu, size=shape[1]))
        omega = gamma * rng.standard_normal(shape) * scale
    else:
        raise ValueError(f"unknown distribution {distribution!r}; choose one of {DISTRIBUTIONS}")
    b = rng.uniform(0.0, 2.0 * np.pi, size=shape[1])
    return omega.astype(dtype, copy=False), b.astype(dtype, copy=False)


def _blas_threads():
    """Threads the BLAS may use here (1 inside a default dask worker): the elementwise work
    of the feature map is split over as many threads."""
    from threadpoolctl import threadpool_info

    counts = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return max(1, min(counts)) if counts else 1


_POOL = {}


def _rowwise(func, Z, threads, slab_bytes=2**21):
    """Apply the in-place ``func`` to slabs of rows of ``Z`` (about 2 MiB each, so that the
    elementwise passes stay in cache) on ``threads`` threads (numpy releases the GIL)."""
    rows = max(1, slab_bytes // max(1, Z.shape[1] * Z.itemsize))
    slabs = [(s, min(s + rows, Z.shape[0])) for s in range(0, Z.shape[0], rows)]
    if threads <= 1 or len(slabs) == 1:
        for a, e in slabs:
            func(Z[a:e])
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = _POOL.get(threads)
    if pool is None:
        pool = _POOL[threads] = ThreadPoolExecutor(threads, thread_name_prefix="rfol-features")
    list(pool.map(lambda ae: func(Z[ae[0]:ae[1]]), slabs))


def feature_map(U, omega, b, out=None, shift=None):
    """``sqrt(2 / N) cos(U @ omega + b) - shift`` for a numpy block ``U`` (k, n) -> (k, N).

    Works in place on one (k, N) buffer (``out`` if given): memory ``k * N * itemsize``.
    The projection runs in the BLAS; the cosine and the other elementwise passes are split
    over as many threads as the BLAS may use, on slabs of rows.
    """
    n_features = omega.shape[1]
    Z = np.matmul(U, omega, out=out)
    scale = Z.dtype.type(np.sqrt(2.0 / n_features))

    def finish(block):
        block += b
        np.cos(block, out=block)
        block *= scale
        if shift is not None:
            block -= shift

    _rowwise(finish, Z, _blas_threads() if Z.size >= 2**20 else 1)
    return Z
