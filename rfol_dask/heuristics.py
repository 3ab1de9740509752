"""Input scales from the data: the median heuristic and the input metric of ``pca_power``.

Median heuristic (like scikit-learn's ``SVR(gamma="scale")``): the kernel bandwidth is set so
that the typical pair of training inputs sits at kernel value ``exp(-1)``. Per frequency law of
:func:`rfol_dask.features.draw_frequencies`:

- ``"gaussian"``, kernel ``exp(-gamma ||x - y||_2^2)``: ``gamma = 1 / median ||x - y||_2^2``;
- ``"cauchy"``, kernel ``exp(-gamma ||x - y||_1)``: ``gamma = 1 / median ||x - y||_1``;
- ``"student_t"``, frequencies ``gamma * N(0, I) * sqrt(nu / chi2_nu)``: a Matern-type kernel of
  ``gamma ||x - y||_2``, so ``gamma = 1 / median ||x - y||_2`` (a typical pair at the Matern kernel
  of smoothness ``nu / 2`` at ``sqrt(nu)``: ``exp(-1)`` for ``nu = 1``, 0.48 for ``nu = 3``,
  ``exp(-1/2)`` as ``nu -> infinity``, where the law is the Gaussian ``N(0, gamma^2)``);
- ``"rational_quadratic"``, kernel ``(1 + gamma ||x - y||_2^2 / a)^-a``: like the Gaussian,
  ``gamma = 1 / median ||x - y||_2^2`` (a typical pair at kernel value ``(1 + 1 / a)^-a``: 1/2
  for ``a = 1``, ``exp(-1)`` as ``a -> infinity``);

and for the exact kernels of :mod:`rfol_dask.baselines` (functions of ``||x - y||_2 / l``)
``length_scale = median ||x - y||_2``. The median runs over all pairs of a random sample of
training rows (at most ``max_rows``, fewer for wide inputs so that the distances cost at most
about ``_PAIR_FLOPS``; see :func:`sample_rows`): nothing but that sample is read.
"""

import dask.array as da
import numpy as np
from scipy.spatial.distance import pdist

from . import backend

#: the distance whose median sets ``gamma = 1 / median`` for each frequency law
GAMMA_METRIC = {
    "gaussian": "sqeuclidean",
    "cauchy": "cityblock",
    "student_t": "euclidean",
    "rational_quadratic": "sqeuclidean",
}

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
        rows = backend.to_numpy(rows)  # CuPy chunks give a CuPy sample
    # CuPy, array_api_strict, ...: index where U lives, move the sample
    elif backend.is_array_api(U):
        xp = backend.namespace(U)
        rows = backend.to_numpy(xp.take(U, xp.asarray(idx), axis=0))
    else:
        rows = U[idx]
    return np.asarray(rows, dtype=np.float64)


def median_distance(X, metric="sqeuclidean"):
    """Median over all pairs ``i < j`` of rows of the numpy ``X`` (k, n) of ``metric``
    (``"sqeuclidean"``, ``"euclidean"`` or ``"cityblock"``). Zero distances (repeated rows) are
    left out; returns ``nan`` if there is no pair at a positive distance. The rows are measured
    divided by their largest absolute value, so inputs of any representable scale neither
    overflow nor underflow (the median itself may: ``inf`` or 0). Memory ``k^2 / 2``."""
    if metric not in ("sqeuclidean", "euclidean", "cityblock"):
        raise ValueError(
            f"unknown metric {metric!r}; choose 'sqeuclidean', 'euclidean' or 'cityblock'"
        )
    X = np.asarray(X, dtype=np.float64)
    scale = float(np.max(np.abs(X))) if X.size else 0.0
    if not 0 < scale < np.inf:
        return float("nan")
    d = pdist(X / scale, metric)
    d = d[d > 0]
    if not d.size:
        return float("nan")
    with np.errstate(over="ignore", under="ignore"):
        return float(np.median(d) * np.float64(scale) ** (2 if metric == "sqeuclidean" else 1))


def _pair_rows(U, max_rows):
    return int(min(max_rows, max(2, np.sqrt(2 * _PAIR_FLOPS / max(1, U.shape[1])))))


def _sample_for_pairs(U, max_rows, random_state):
    return sample_rows(U, _pair_rows(U, max_rows), random_state)


#: training rows sampled for the principal directions of the input metric (:func:`pca_metric`)
PCA_ROWS = 4000


def pca_metric(X, power, rtol=1e-6):
    """The input metric ``T`` (n, r) of ``pca_power = power`` from the sample ``X`` (k, n).

    ``T = [v_1 w_1, ..., v_r w_r]``: the principal directions ``v_j`` of the centred sample
    (singular values ``s_j``) weighted by ``w_j = (s_j / s_1)^power``, so that the distance
    ``||T^T (u - u')||`` weighs the inputs' component along ``v_j`` by ``w_j``. ``power > 0``
    stresses the leading (large-variance, on smooth data the smooth) directions, ``0`` keeps
    the Euclidean distance on the span of the sample, ``power < 0`` whitens. Directions whose
    share of a typical distance, ``(s_j / s_1)^(1 + power)``, is below ``rtol`` (or with
    ``s_j <= 1e-10 s_1``) are left out. All inputs equal: the identity (Euclidean).
    Cost: one SVD of (k, n); memory ``k n + n r``.
    """
    X = np.asarray(X, dtype=np.float64)
    # the SVD would not converge; the fit's own check names the samples
    if not np.all(np.isfinite(X)):
        return np.eye(X.shape[1])
    X = X - X.mean(axis=0)
    _, sv, Vt = np.linalg.svd(X, full_matrices=False)
    if not sv.size or not sv[0] > 0:
        return np.eye(X.shape[1])
    return weighted_directions(Vt.T, sv / sv[0], power, rtol=rtol)


def weighted_directions(directions, ratio, power, max_directions=None, rtol=1e-6):
    """The principal ``directions`` (n, k), in decreasing order of ``ratio = s_j / s_1`` (k,),
    weighted by ``ratio^power``: those with ``ratio^(1 + power) < rtol`` or ``ratio <= 1e-10``
    left out, then at most ``max_directions`` kept. The rule of :func:`pca_metric` and of the
    kernels' ``pca_power`` (:func:`rfol_dask.baselines.transform.pca_from_scatter`).

    Each direction's sign is set so that its product with a fixed generic vector (standard normals
    of seed 0) is positive: an SVD's or ``eigh``'s signs are arbitrary (they flipped with the
    inputs' rounding to float32, and may differ between LAPACK builds), and the frequencies drawn
    through the metric, ``Omega = T Omega_r``, depend on them: one seed gave another model. (The
    sign of the largest entry, scikit-learn's ``svd_flip``, is no rule for smooth inputs on a grid,
    whose directions have entries of equal magnitude and opposite signs.)"""
    keep = np.flatnonzero((ratio > 1e-10) & (ratio ** (1.0 + power) >= rtol))[:max_directions]
    D = np.asarray(directions)[:, keep]
    side = np.random.default_rng(0).standard_normal(D.shape[0]) @ D
    return np.ascontiguousarray(D * np.where(side < 0, -1.0, 1.0) * ratio[keep] ** power)


METRIC_NAMES = {
    "sqeuclidean": "squared distance",
    "euclidean": "distance",
    "cityblock": "l1 distance",
}


def _from_median(med, what):
    """``med`` of :func:`median_distance`; 1.0 for ``nan`` (all sampled inputs coincide); a
    ValueError for a median beyond float64 (0 or ``inf``: no usable scale follows from it)."""
    if np.isnan(med):
        return 1.0
    if not 0 < med < np.inf or not 0 < 1 / med < np.inf:
        raise ValueError(
            f"the median {what} of the inputs is {med:.3g}, beyond the range of float64: "
            "rescale the inputs (e.g. to unit spread)"
        )
    return med


def _median_gammas_of(X, distributions):
    meds = {
        metric: median_distance(X, metric)
        for metric in {GAMMA_METRIC[law] for law in distributions}
    }
    return {
        law: 1.0 / _from_median(meds[GAMMA_METRIC[law]], METRIC_NAMES[GAMMA_METRIC[law]])
        for law in distributions
    }


def input_scales(U, distributions, power=None, *, max_rows=2000, random_state=None):
    """The input metric and the median-heuristic gammas from one sample of the rows of ``U``
    (M, n; numpy, dask or array API; one read for dask input): ``(T, {law: gamma})``.

    ``power`` None: ``T`` is None and the gammas are :func:`median_gammas`'. Else ``T`` is
    :func:`pca_metric` of a sample of :data:`PCA_ROWS` rows and each law's gamma is
    measured in its distance, ``||T^T (u - u')||`` (on an evenly spread part of the sample of the
    size :func:`median_gammas` uses)."""
    for law in distributions:  # before anything is read
        if law not in GAMMA_METRIC:
            raise ValueError(f"unknown distribution {law!r}; choose one of {tuple(GAMMA_METRIC)}")
    rows = _pair_rows(U, max_rows)
    if power is None:
        return None, _median_gammas_of(sample_rows(U, rows, random_state), distributions)
    X = sample_rows(U, max(rows, PCA_ROWS), random_state)
    T = pca_metric(X, power)
    return T, _median_gammas_of(X[:: max(1, len(X) // rows)][:rows] @ T, distributions)


def median_gammas(U, distributions, *, max_rows=2000, random_state=None):
    """:func:`median_gamma` of several laws from one sample of ``U`` (one read for dask input):
    a dict law -> gamma."""
    return input_scales(U, distributions, max_rows=max_rows, random_state=random_state)[1]


def median_gamma(U, distribution="cauchy", *, max_rows=2000, random_state=None):
    """``gamma = 1 / median distance`` of the law's kernel (see the module docstring) over a
    random sample of the rows of ``U`` (M, n; numpy or dask). Falls back to ``1.0`` when all
    sampled inputs coincide."""
    return median_gammas(U, [distribution], max_rows=max_rows, random_state=random_state)[
        distribution
    ]


def median_length_scale(U, *, max_rows=2000, random_state=None):
    """``l = median ||x - y||_2`` over a random sample of the rows of ``U`` (M, n; numpy or
    dask): the length scale of the kernels of :mod:`rfol_dask.baselines.kernels` at which a
    typical pair has kernel argument 1. Falls back to ``1.0`` when all sampled inputs coincide."""
    return _from_median(
        median_distance(_sample_for_pairs(U, max_rows, random_state), "euclidean"), "distance"
    )
