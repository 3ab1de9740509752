"""KernelOperatorCV: the exact kernel baseline with its kernel, length scale and nugget chosen by
validation on the training data (the search of :mod:`rfol_dask.selection`).

Per split the squared distances are computed once and every (kernel, length scale) is an
elementwise map of them; one eigendecomposition of each centred training Gram gives every nugget
(:func:`rfol_dask.tuning.path_errors`). The linear kernel is scored as :class:`KernelOperator`
refits it: in the primal with fewer inputs than training samples, else by the eigen path without
the Gram's directions of rounding.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

from ..backend import as_fortran, centre_gram, copy, diagonal, fill_diagonal, namespace, take_rows
from ..estimator import OperatorEstimator
from ..params import Interval
from ..selection import DEFAULT_REFINE, SelectionCV
from ..tuning import floored_path_errors, rounding_floor
from .kernel import KernelOperator, pca, transform_inputs
from .kernels import KERNELS, kernel_values, sq_distances

__all__ = ["KernelOperatorCV", "DEFAULT_LENGTH_SCALES"]

#: default multiples of the median-heuristic length scale: 4^-2 = 1/16 to 4^2 = 16
DEFAULT_LENGTH_SCALES = tuple(4.0 ** np.arange(-2, 3))
_REFIT = ("column_block", "recovery")  # the refit's settings that refit= (a dict) may give
_SHARED = ("n_components", "fit_intercept", "max_gram_bytes", "progress", "device")


def centred_kernels(D2_tt, D2_vt, kernel, length_scale, fit_intercept, X_t=None, X_v=None):
    """Centred training Gram ``H K_tt H`` (M_t, M_t), validation cross-Gram (M_v, M_t) and the
    trace of ``K_tt`` (it sets the rounding floor) for one kernel and length scale, from the
    squared distances (``"linear"``: from ``X_t``, ``X_v``), as :class:`KernelOperator` fits."""
    if kernel == "linear":
        K_tt, K_vt = X_t @ X_t.T, X_v @ X_t.T
    else:
        K_tt, K_vt = (kernel_values(copy(D2), kernel, length_scale) for D2 in (D2_tt, D2_vt))
    xp = namespace(K_tt)
    trace = float(xp.sum(diagonal(K_tt)))
    if fit_intercept:
        r = xp.mean(K_tt, axis=0)
        c = xp.mean(r)
        K_vt -= xp.mean(K_vt, axis=1)[:, None]
        K_vt -= r[None, :] - c
        K_tt = centre_gram(K_tt, r, c)  # exactly symmetric, as the factorisation needs
    return K_tt, K_vt, trace


class KernelOperatorCV(SelectionCV):
    """KernelOperator with its kernel, length scale and nugget chosen by validation.

    See :class:`rfol_dask.RandomFeatureOperatorCV` for the search; the winner is refitted on all
    training data.

    Parameters
    ----------
    kernels : sequence of str, default=("rbf", "matern52", "inverse_quadratic")
        Kernels searched (:data:`rfol_dask.baselines.KERNELS`; ``"linear"`` has no length scale).
    length_scales : sequence of float, default=None
        Multiples of the median-heuristic length scale (``KernelOperator(length_scale="median")``);
        default ``4^-2 ... 4^2``.
    nuggets : sequence of float, default=None
        Ridge values (> 0) on the centred Gram; default ``1e-16 ... 10``.
    n_components : int, default=None
        Input PCA (fitted on all training inputs before the search).
    pca_power : float, None or sequence of (float or None), default=None
        The input metric of every candidate and of the refit (``KernelOperator``'s). A sequence
        is searched: a whole search per value (the cost times the number of values);
        ``cv_results_`` gets a ``pca_power`` column.
    cv : None, int or scikit-learn splitter, default=None
        Validation splits, as in :class:`rfol_dask.RandomFeatureOperatorCV`.
    stages : dict or None, default=None
        Settings of the stages, as in :class:`rfol_dask.RandomFeatureOperatorCV`: ``"coarse"``
        (0.25 of the rows, at least 200), ``"refine"`` ((0.5, 1, 2): factors of the coarse
        winner's length scale), ``"fine"`` (0.5: then the fine winner, and half its length
        scale where within 5 %, at full size), ``"alpha_path"`` ("auto"; the linear kernel's
        dual is scored by ``"eigh"``, as its refit solves it).
    refit : bool or dict, default=True
        Refit the winner on all training data as ``best_estimator_``; a dict: with these
        settings of it, ``"column_block"``, ``"recovery"``. False: the search's results only.
    fit_intercept : bool, default=True
        Centre in feature space and fit an intercept per output component.
    dtype : {None, "float32", "float64"}, default=None
        Precision of ``best_estimator_``; None: float64, the search's. With ``"float32"`` no
        nugget below the rounding floor of float32 is scored.
    max_gram_bytes : int, default=None
        Memory budget of the search and of ``best_estimator_``, both checked before the search.
    progress : bool, default=False
        Progress bars for dask input.
    device : {"cpu", "cuda"}, default="cpu"
        Where the search runs and ``best_estimator_`` is refitted and predicts (see
        :class:`rfol_dask.RandomFeatureOperator`).

    Attributes
    ----------
    best_params_ : dict
        ``kernel``, ``length_scale``, ``nugget`` (and ``pca_power`` where ``pca_power`` is not
        None): ``best_estimator_``'s. The refit solves by an eigendecomposition where a
        Cholesky factorisation cannot take the validated nugget, as the search scored it.
    best_score_, best_index_, cv_results_, best_estimator_, search_time_, refit_time_
        As in :class:`rfol_dask.RandomFeatureOperatorCV` (``cv_results_`` has ``family`` = the
        kernel, ``length_scale``, ``nugget`` and ``nugget_floor`` columns; the floor is that of
        the uncentred kernel matrix, whose entries the centring subtracts: ``2 eps sqrt(M_t)`` for
        the kernels of unit diagonal).
    median_scales_ : dict
        The median-heuristic length scale of each kernel (one value).
    n_splits_ : int
        Number of validation splits scored.
    input_name_, output_name_, sample_dim_, n_features_in_, input_shape_, output_shape_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_dims_, output_dims_, input_coords_, output_coords_, input_grid_, output_grid_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_periods_, output_periods_, output_attrs_, output_coord_attrs_
        As in :class:`rfol_dask.RandomFeatureOperator`.

    Cost per split: ``3 M_t (M_t + M_v) n`` flops for the distances, then per (kernel, length
    scale) an elementwise map and an ``eigh`` of the ``M_t x M_t`` Gram (the linear kernel in the
    primal: ``M_t p^2`` flops and an ``eigh`` of ``p x p``). Memory: four ``M_t x M_t`` and two
    ``M_v x M_t`` arrays, checked against the budget before the search. dask input is gathered.
    """

    _param_name = "length_scale"
    _alpha_name = "nugget"
    _distributed_search = False
    _narrower = -1

    _parameter_constraints = {
        "kernels": ["array-like"],
        "length_scales": ["array-like", None],
        "nuggets": ["array-like", None],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "pca_power": [Interval(numbers.Real, None, None, closed="neither"), None, "array-like"],
        "cv": [Interval(numbers.Integral, 2, None, closed="left"), "cv_object", None],
        "stages": [dict, None],
        "refit": ["boolean", dict],
        **{k: v for k, v in OperatorEstimator._common_constraints.items() if k not in _REFIT},
    }
    _stage_defaults = {"coarse": 0.25, "refine": DEFAULT_REFINE, "fine": 0.5, "alpha_path": "auto"}
    _base_class = KernelOperator
    _refit_keys = _REFIT

    def __init__(
        self,
        *,
        kernels=("rbf", "matern52", "inverse_quadratic"),
        length_scales=None,
        nuggets=None,
        n_components=None,
        pca_power=None,
        cv=None,
        stages=None,
        refit=True,
        fit_intercept=True,
        dtype=None,
        max_gram_bytes=None,
        progress=False,
        device="cpu",
    ):
        self.kernels = kernels
        self.length_scales = length_scales
        self.nuggets = nuggets
        self.n_components = n_components
        self.pca_power = pca_power
        self.cv = cv
        self.stages = stages
        self.refit = refit
        self.fit_intercept = fit_intercept
        self.dtype = dtype
        self.max_gram_bytes = max_gram_bytes
        self.progress = progress
        self.device = device

    def _check_params(self):
        super()._check_params()
        if not len(self.kernels):
            raise ValueError(f"kernels is empty: give at least one of {KERNELS}")
        for kernel in self.kernels:
            if kernel not in KERNELS:
                raise ValueError(f"unknown kernel {kernel!r} in kernels; choose from {KERNELS}")
        self._check_grids(length_scales=self.length_scales, nuggets=self.nuggets)

    def _base_estimator(self, **best):
        powers = self._powers()
        best = {"pca_power": powers[0] if len(powers) == 1 else None, **best}
        shared = {k: getattr(self, k) for k in _SHARED}
        return KernelOperator(
            dtype=self._refit_dtype().name, **shared, **self._refit_settings(), **best
        )

    def _refit_candidates(self):
        """The kernels whose refits differ in memory (the linear kernel's primal, the others'
        dual); ``(None, [None])`` without the linear kernel."""
        return ("kernel", list(self.kernels)) if "linear" in self.kernels else (None, [None])

    def _set_metric(self, U, client, power):
        """The input PCA of ``n_components`` and ``power``, the median length scale in it, and no
        cached distances."""
        self._distances = None
        on = self.n_components is not None or power is not None
        self._pca = pca(U, self.n_components, power) if on else (None, None)
        self._transform = functools.partial(
            transform_inputs, mean=self._pca[0], components=self._pca[1], dtype=np.float64
        )
        ell = KernelOperator(kernel="rbf")._resolve_length_scale(U, self._transform)
        self.median_scales_ = {k: (1.0 if k == "linear" else ell) for k in self.kernels}

    def _search_memory(self, M_t, M_v):
        return {
            f"the distances, a copy and the eigenvectors, {M_t} x {M_t} each": 3 * 8 * M_t * M_t,
            f"the validation distances and cross-Gram, {M_v} x {M_t} each": 2 * 8 * M_v * M_t,
        }

    def _families(self):
        return list(self.kernels)

    def _multiples(self):
        return DEFAULT_LENGTH_SCALES if self.length_scales is None else self.length_scales

    def _family_multiples(self, family, mults):
        return [1.0] if family == "linear" else mults

    def _params_of(self, row):
        params = {"kernel": str(row["family"]), "nugget": float(row["nugget"])}
        if row["family"] != "linear":
            params["length_scale"] = float(row["length_scale"])
        if "pca_power" in row:
            params["pca_power"] = None if row["pca_power"] is None else float(row["pca_power"])
        return params

    def _split_distances(self, X, train, valid, need):
        """Transformed inputs of one split and (``need``) their squared distances, kept for the
        other kernels of the stage (the last split only; dropped when the search ends)."""
        key = (train.tobytes(), valid.tobytes())
        cached = getattr(self, "_distances", None)
        if cached is None or cached[0] != key or (need and cached[1][2] is None):
            X_t, X_v = (self._transform(take_rows(X, rows), 0) for rows in (train, valid))
            D2_tt = D2_vt = None
            if need:
                D2_tt, D2_vt = fill_diagonal(sq_distances(X_t, X_t), 0.0), sq_distances(X_v, X_t)
            cached = self._distances = (key, (X_t, X_v, D2_tt, D2_vt))
        return cached[1]

    def _fit_arrays(self, U, V, lazy, dtype):
        try:
            return super()._fit_arrays(U, V, lazy, dtype)
        finally:
            self._distances = None  # the fitted estimator keeps no M_t x M_t arrays

    def _stage_errors(
        self, X, Y, train, valid, client, kernel, mults, Ns, alpha_center=None, after=None
    ):
        """Validation errors of one split, then each Gram's rounding floor: (len(mults), 1,
        n_nugget + 1) (``after`` is not used). The linear kernel is scored as it is refitted (in
        the primal, or by the eigen path without the directions of rounding)."""
        X_t, X_v, D2_tt, D2_vt = self._split_distances(X, train, valid, kernel != "linear")
        Y_t, Y_v, out = take_rows(Y, train), take_rows(Y, valid), []
        args = (Y_t, Y_v, self._alphas(), self.fit_intercept, self._st["alpha_path"], alpha_center)
        if kernel == "linear" and KernelOperator(kernel="linear")._primal(X.shape[0], X_t.shape[1]):
            if self.fit_intercept:  # the primal of the inputs centred by the training mean
                xbar = namespace(X_t).mean(X_t, axis=0)
                X_t, X_v = X_t - xbar, X_v - xbar
            G = as_fortran(X_t.T @ X_t)
            return np.asarray([[floored_path_errors(G, X_v, *args, design=X_t, eps=self._eps)]])
        for m in mults:
            ell = m * self.median_scales_[kernel]
            G, K, trace = centred_kernels(D2_tt, D2_vt, kernel, ell, self.fit_intercept, X_t, X_v)
            drop = rounding_floor(G, trace, bound=True) if kernel == "linear" else None
            G = as_fortran(G)
            out.append([floored_path_errors(G, K, *args, trace=trace, drop=drop, eps=self._eps)])
        return np.asarray(out)
