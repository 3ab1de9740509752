"""Hyperparameters from the data: the median heuristic and the ridge (alpha) path.

Median heuristic (like scikit-learn's ``SVR(gamma="scale")``): the kernel bandwidth is set so
that the typical pair of training inputs sits at kernel value ``exp(-1)``. Per frequency law of
:func:`rfol_dask.features.draw_frequencies`:

- ``"gaussian"``, kernel ``exp(-gamma ||x - y||_2^2)``: ``gamma = 1 / median ||x - y||_2^2``;
- ``"cauchy"``, kernel ``exp(-gamma ||x - y||_1)``: ``gamma = 1 / median ||x - y||_1``;
- ``"student_t"``, frequencies ``gamma * N(0, I) * sqrt(nu / chi2_nu)``: a Matern-type kernel of
  ``gamma ||x - y||_2``, so ``gamma = 1 / median ||x - y||_2``;

and for the exact kernels of :mod:`rfol_dask.baselines` (functions of ``||x - y||_2 / l``)
``length_scale = median ||x - y||_2``. The median runs over all pairs of a random sample of
training rows (at most ``max_rows``, fewer for wide inputs so that the distances cost at most
about ``_PAIR_FLOPS``; see :func:`sample_rows`): nothing but that sample is read.

Ridge path: one symmetric eigendecomposition of the (centred) dual Gram ``G = Q diag(lam) Q^T``
gives the solution for every ``alpha``: ``Beta(alpha) = Q (lam + alpha)^-1 Q^T V``
(:class:`EigenPath`), instead of one Cholesky factorisation per alpha.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from scipy.spatial.distance import pdist

__all__ = ["sample_rows", "median_distance", "median_gamma", "median_length_scale", "GAMMA_METRIC"]

#: the distance whose median sets ``gamma = 1 / median`` for each frequency law
GAMMA_METRIC = {"gaussian": "sqeuclidean", "cauchy": "cityblock", "student_t": "euclidean"}

#: budget of the pairwise distances (about ``rows^2 / 2 * n`` flops)
_PAIR_FLOPS = 4e8


def _rng(random_state):
    from .features import check_random_state

    return check_random_state(random_state)


def sample_rows(U, max_rows=2000, random_state=None, window=5):
    """A random sample of at most ``max_rows`` rows of ``U`` (M, n; numpy or dask) as a float64
    numpy array, in increasing row order.

    The rows are drawn without replacement from the first ``window * max_rows`` samples (all
    of them when ``M`` is smaller), so the sample does not depend on the chunking (numpy and
    dask input give the same rows) and dask input reads only the chunks of that leading window
    (one small ``compute``). The data sets' samples are i.i.d., so a leading window is a
    random subset; shuffle ordered data first.
    """
    rng = _rng(random_state)
    pool = min(U.shape[0], window * max_rows)
    idx = np.sort(rng.choice(pool, size=min(max_rows, pool), replace=False))
    if isinstance(U, da.Array):
        from .progress import compute

        (rows,) = compute(U[idx], desc="median heuristic (sample of the inputs)")
    else:
        rows = U[idx]
    return np.asarray(rows, dtype=np.float64)


def median_distance(X, metric="sqeuclidean"):
    """Median over all pairs ``i < j`` of rows of the numpy ``X`` (k, n) of ``metric``
    (``"sqeuclidean"``, ``"euclidean"`` or ``"cityblock"``). Zero distances (repeated rows) are
    left out; returns ``nan`` if there is no pair at a positive distance. Memory ``k^2 / 2``."""
    if metric not in ("sqeuclidean", "euclidean", "cityblock"):
        raise ValueError(f"unknown metric {metric!r}; choose 'sqeuclidean', 'euclidean' or 'cityblock'")
    d = pdist(np.asarray(X, dtype=np.float64), metric)
    d = d[d > 0]
    return float(np.median(d)) if d.size else float("nan")


def _sample_for_pairs(U, max_rows, random_state):
    rows = int(min(max_rows, max(2, np.sqrt(2 * _PAIR_FLOPS / max(1, U.shape[1])))))
    return sample_rows(U, rows, random_state)


def median_gamma(U, distribution="cauchy", *, max_rows=2000, random_state=None):
    """``gamma = 1 / median distance`` of the law's kernel (see the module docstring) over a
    random sample of the rows of ``U`` (M, n; numpy or dask). Falls back to ``1.0`` when all
    sampled inputs coincide."""
    if distribution not in GAMMA_METRIC:
        raise ValueError(f"unknown distribution {distribution!r}; choose one of {tuple(GAMMA_METRIC)}")
    med = median_distance(_sample_for_pairs(U, max_rows, random_state), GAMMA_METRIC[distribution])
    return 1.0 / med if np.isfinite(med) else 1.0


def median_length_scale(U, *, max_rows=2000, random_state=None):
    """``l = median ||x - y||_2`` over a random sample of the rows of ``U`` (M, n; numpy or
    dask): the length scale of the kernels of :mod:`rfol_dask.baselines.kernels` at which a
    typical pair has kernel argument 1. Falls back to ``1.0`` when all sampled inputs coincide."""
    med = median_distance(_sample_for_pairs(U, max_rows, random_state), "euclidean")
    return med if np.isfinite(med) else 1.0
