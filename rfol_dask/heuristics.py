"""Input scales from the data: the median heuristic and the input metric of ``pca_power``.

Median heuristic (like scikit-learn's ``SVR(gamma="scale")``): ``gamma = 1 / median`` of the
distance each frequency law's kernel is a function of (:data:`GAMMA_METRIC`: squared Euclidean for
``"gaussian"`` and ``"rational_quadratic"``, l1 for ``"cauchy"``, Euclidean for ``"student_t"``),
and ``length_scale = median ||x - y||_2`` for the exact kernels, over all pairs of a random sample
of training rows (:func:`sample_rows`): nothing but that sample is read.
"""

import dask.array as da
import numpy as np
from scipy.spatial.distance import pdist

from . import backend
from .features import check_random_state

#: the distance whose median sets ``gamma = 1 / median`` for each frequency law
GAMMA_METRIC = {
    "gaussian": "sqeuclidean",
    "cauchy": "cityblock",
    "student_t": "euclidean",
    "rational_quadratic": "sqeuclidean",
}

#: budget of the pairwise distances (about ``rows^2 / 2 * n`` flops)
_PAIR_FLOPS = 4e8
#: rows sampled for the median heuristic: 499,500 pairs put the median within about 2 % of that of
#: 2000 rows (four times the pairs and the time: 0.23 s for three laws of 64 inputs)
MEDIAN_ROWS = 1000


def sample_rows(U, max_rows=2000, random_state=None, window=5):
    """A random sample of at most ``max_rows`` rows of ``U`` (M, n; numpy, dask or array API) as a
    float64 numpy array in row order, drawn from the first ``window * max_rows`` rows: the same rows
    whatever the chunking, one small read for dask (i.i.d. samples; shuffle ordered data first)."""
    rng = check_random_state(random_state)
    pool = min(U.shape[0], window * max_rows)
    idx = np.sort(rng.choice(pool, size=min(max_rows, pool), replace=False))
    if isinstance(U, da.Array):
        from .progress import compute

        (rows,) = compute(U[idx], desc="median heuristic (sample of the inputs)")
    elif backend.is_array_api(U):  # CuPy, array_api_strict, ...: indexed where U lives
        rows = backend.namespace(U).take(U, backend.namespace(U).asarray(idx), axis=0)
    else:
        rows = U[idx]
    return np.asarray(backend.to_numpy(rows), dtype=np.float64)


def median_distance(X, metric="sqeuclidean"):
    """Median of ``metric`` over all pairs of distinct rows of the numpy ``X`` (k, n), ``nan`` if
    none; measured on ``X`` divided by its largest absolute value (no overflow in the sums)."""
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


#: training rows sampled for the principal directions of the input metric (:func:`pca_metric`)
PCA_ROWS = 4000


def pca_metric(X, power, rtol=1e-6):
    """The input metric ``T`` (n, r) of ``pca_power = power`` from the sample ``X`` (k, n): the
    principal directions ``v_j`` of the centred sample weighted by ``(s_j / s_1)^power``
    (:func:`weighted_directions`); the identity where all inputs are equal or some not finite."""
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
    left out, then at most ``max_directions`` kept. Each direction's sign makes its product with
    a fixed generic vector positive: ``eigh``'s and SVD's signs are arbitrary (they flipped with
    float32 rounding), and the frequencies ``T Omega_r`` of one seed must not."""
    keep = np.flatnonzero((ratio > 1e-10) & (ratio ** (1.0 + power) >= rtol))[:max_directions]
    D = np.asarray(directions)[:, keep]
    side = np.random.default_rng(0).standard_normal(D.shape[0]) @ D
    return np.ascontiguousarray(D * np.where(side < 0, -1.0, 1.0) * ratio[keep] ** power)


METRIC_NAMES = dict(sqeuclidean="squared distance", euclidean="distance", cityblock="l1 distance")


def _from_median(med, what):
    """``med``; 1.0 for ``nan`` (all sampled inputs coincide); ValueError for 0 or ``inf``."""
    if np.isnan(med):
        return 1.0
    if not 0 < med < np.inf or not 0 < 1 / med < np.inf:
        raise ValueError(
            f"the median {what} of the inputs is {med:.3g}, beyond the range of float64: "
            "rescale the inputs (e.g. to unit spread)"
        )
    return med


def _median_gammas_of(X, laws):
    metrics = dict.fromkeys(GAMMA_METRIC[law] for law in laws)  # in the laws' order
    med = {d: _from_median(median_distance(X, d), METRIC_NAMES[d]) for d in metrics}
    return {law: 1.0 / med[GAMMA_METRIC[law]] for law in laws}


def input_scales(U, distributions, power=None, *, max_rows=MEDIAN_ROWS, random_state=None):
    """``(T, {law: gamma})`` from one sample of the rows of ``U``: the input metric of ``power``
    (:func:`pca_metric` of :data:`PCA_ROWS` rows; None for None) and each law's median gamma in the
    distance ``||T^T (u - u')||``."""
    for law in distributions:  # before anything is read
        if law not in GAMMA_METRIC:
            raise ValueError(f"unknown distribution {law!r}; choose one of {tuple(GAMMA_METRIC)}")
    rows = _pair_rows(U, max_rows)
    if power is None:
        return None, _median_gammas_of(sample_rows(U, rows, random_state), distributions)
    X = sample_rows(U, max(rows, PCA_ROWS), random_state)
    T = pca_metric(X, power)
    return T, _median_gammas_of(X[:: max(1, len(X) // rows)][:rows] @ T, distributions)


def median_gammas(U, distributions, *, max_rows=MEDIAN_ROWS, random_state=None):
    """:func:`median_gamma` of several laws from one sample of ``U``: a dict law -> gamma."""
    return input_scales(U, distributions, max_rows=max_rows, random_state=random_state)[1]


def median_gamma(U, distribution="cauchy", *, max_rows=MEDIAN_ROWS, random_state=None):
    """``gamma = 1 / median distance`` of the law's kernel over a sample of the rows of ``U``
    (1.0 when all sampled inputs coincide)."""
    gammas = median_gammas(U, [distribution], max_rows=max_rows, random_state=random_state)
    return gammas[distribution]


def median_length_scale(U, *, max_rows=MEDIAN_ROWS, random_state=None):
    """``l = median ||x - y||_2`` over a sample of the rows of ``U``, the exact kernels' length
    scale (1.0 when all sampled inputs coincide)."""
    X = sample_rows(U, _pair_rows(U, max_rows), random_state)
    return _from_median(median_distance(X, "euclidean"), "distance")
