"""Random frequency laws and the random Fourier feature map.

``phi(U) = sqrt(2 / N) cos(U @ Omega + b)`` with ``Omega`` (n, N) drawn from

- ``"cauchy"``: i.i.d. ``gamma * standard_cauchy`` entries (tensor-product Cauchy); the
  features approximate the kernel ``exp(-gamma ||x - y||_1)``;
- ``"gaussian"``: i.i.d. ``N(0, 2 gamma)`` entries; kernel ``exp(-gamma ||x - y||^2)``;
- ``"student_t"``: ``sqrt(nu / chi2_nu) * N(0, gamma^2)`` with one chi-square draw per
  feature (a multivariate t law); kernel of Matern type with smoothness ``nu / 2``;

and ``b ~ U(0, 2 pi)``. Frequencies are drawn with numpy from the seed, in column blocks
with streams of their own, so that a seed fixes the model whatever the chunking and any
slab of columns can be drawn where it is needed (never ``dask.array.random``).
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


#: columns of ``Omega`` drawn from one random stream: any slab of columns can be drawn alone
FREQUENCY_BLOCK = 256


def _seed_sequence(random_state):
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.SeedSequence(random_state)
    return np.random.SeedSequence(int(check_random_state(random_state).integers(2**63)))


def draw_frequencies(n_inputs, n_features, distribution="cauchy", gamma=1.0, nu=None,
                     random_state=None, dtype=np.float64, columns=None):
    """Draw ``Omega`` (n_inputs, n_features) and ``b`` (n_features,), or with ``columns=(f0, f1)``
    only their columns ``f0:f1``.

    Columns are drawn in blocks of :data:`FREQUENCY_BLOCK`, block ``k`` from its own stream
    (the seed's ``SeedSequence`` with spawn key ``k``), so a worker can draw the slab it needs
    without the rest, and the first ``N'`` columns of a draw of ``N`` features are the draw
    of ``N'`` features (one seed, nested models). The draw is made in float64 and cast, so float32 and float64 models of
    one seed share their frequencies. Memory: the output plus one block.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose one of {DISTRIBUTIONS}")
    if distribution == "student_t" and (nu is None or not nu > 0):
        raise ValueError(f"distribution='student_t' needs nu > 0 degrees of freedom, got nu={nu!r}")
    seq = _seed_sequence(random_state)
    n, (f0, f1) = int(n_inputs), (0, int(n_features)) if columns is None else map(int, columns)
    omega, b = np.empty((n, f1 - f0), dtype=dtype), np.empty(f1 - f0, dtype=dtype)
    B = FREQUENCY_BLOCK
    for k in range(f0 // B, -(-f1 // B)):
        # always a whole block (the last one sliced): the first N' columns of any draw are the
        # draw of N' features
        rng = np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=seq.spawn_key + (k,)))
        if distribution == "cauchy":
            om = gamma * rng.standard_cauchy((n, B))
        elif distribution == "gaussian":
            om = np.sqrt(2.0 * gamma) * rng.standard_normal((n, B))
        else:
            om = gamma * rng.standard_normal((n, B)) * np.sqrt(nu / rng.chisquare(nu, size=B))
        bk = rng.uniform(0.0, 2.0 * np.pi, size=B)
        lo, hi = max(f0, k * B), min(f1, k * B + B)
        omega[:, lo - f0:hi - f0] = om[:, lo - k * B:hi - k * B]
        b[lo - f0:hi - f0] = bk[lo - k * B:hi - k * B]
    return omega, b


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


def feature_map(U, omega, b, out=None, shift=None, n_features=None):
    """``sqrt(2 / N) cos(U @ omega + b) - shift`` for a numpy block ``U`` (k, n) -> (k, N).

    ``omega`` (n, N') and ``b`` (N',) may be a slab of ``N'`` of the model's ``n_features``
    columns (``N``, default ``N'``).

    Works in place on one (k, N) buffer (``out`` if given): memory ``k * N * itemsize``.
    The projection runs in the BLAS; the cosine and the other elementwise passes are split
    over as many threads as the BLAS may use, on slabs of rows.
    """
    n_features = omega.shape[1] if n_features is None else n_features
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
