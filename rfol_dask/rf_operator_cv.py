"""``RandomFeatureOperatorCV``: law x gamma x alpha (x N) chosen by validation on the training
data, on the search machinery of :mod:`rfol_dask.selection` (one pass over feature slabs per
stage and law, the validation cross-Gram in the Gram's pass, one projection per slab for every
gamma, the ridge path over alpha)."""

from __future__ import annotations

import functools
import numbers

import dask
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from .estimator import OperatorEstimator
from .features import DISTRIBUTIONS, draw_frequencies, integer_seed
from .memory import memory_budget
from .placement import pinned, worker_addresses
from .rf_operator import RandomFeatureOperator
from .selection import DEFAULT_GAMMAS, DEFAULT_REFINE, SelectionCV, arrange_rows
from .solve.graph import tree_sum
from .tuning import (add_validation, frequency_scale, median_gammas, path_errors, slab_bounds, validation_grams,
                     validation_slab)

__all__ = ["RandomFeatureOperatorCV"]


class RandomFeatureOperatorCV(SelectionCV):
    """RandomFeatureOperator with its law, gamma and alpha chosen by validation on the training data.

    Searches ``distribution`` x ``gamma`` x ``alpha`` (and optionally ``n_features``) of
    :class:`~rfol_dask.RandomFeatureOperator`, then refits the winner on all training data.

    Parameters
    ----------
    n_features : int or sequence of int, default=1000
        ``N``; a sequence is searched too (nested models of one draw, one pass for all).
    distributions : sequence of {"cauchy", "gaussian", "student_t", "rational_quadratic"}, default=("cauchy", "gaussian")
        Frequency laws searched. ``"rational_quadratic"`` is opt-in: on Burgers the coarse stage
        did not choose it, though searched alone (and grown to N = 128000 at half its gamma) it
        came within 1.11 x the inverse quadratic kernel (``benchmarks/README.md``, "A rational
        quadratic law").
    gammas : sequence of float, default=None
        Multiples of each law's median-heuristic gamma (:func:`rfol_dask.tuning.median_gamma`);
        default ``4^-5 ... 4^2`` (:data:`DEFAULT_GAMMAS`, more than four decades).
    alphas : sequence of float, default=None
        Ridge values (> 0); default ``1e-16 ... 10`` (:data:`DEFAULT_ALPHAS`; the paper's
        advection settings use 1e-15).
    nu : float, default=None
        Degrees of freedom for ``"student_t"`` (required with it) and shape ``a`` of
        ``"rational_quadratic"`` (None: 1); one value serves both when both are searched.
    cv : None, int or scikit-learn splitter, default=None
        None: validate on the last 20 % of the training samples; an int: that many
        (unshuffled) K folds; a splitter: its ``split(U)``; or an iterable of (train, validation)
        index arrays. Scores are averaged over splits (validation samples whose output is
        identically zero are left out of the relative error).
    coarse : float or None, default=0.125
        Coarse stage on this fraction of the features (at least 256) and of the (training and
        validation) rows (at least 200 training rows), over the whole grid (extended by two
        grid steps, up to three times, while the winner is on its edge); then a fine stage at
        full size for the coarse winner's law only, at its gamma times ``refine``. None: one
        stage, the whole grid at full size.
    refine : sequence of float, default=(0.5, 1, 2)
        Fine-stage factors applied to the coarse winner's gamma.
    refit : bool, default=True
        Refit the winner on all training data as ``best_estimator_``.
    alpha_path : {"auto", "eigh", "cholesky"}, default="auto"
        How each Gram is solved for all alphas: one eigendecomposition, one Cholesky
        factorisation per alpha, or the cheaper of the two (:func:`rfol_dask.tuning.path_errors`).
        With ``"auto"`` the fine stage solves only the five alphas around the coarse winner's
        (widened while the best is on the window's edge) where that is cheaper than an ``eigh``.
    fit_intercept : bool, default=True
        Centre features and outputs (an intercept per output component).
    solver : {"auto", "dual", "primal"}, default="auto"
        Solver of ``best_estimator_`` (the search itself always uses the dual Gram, in float64).
    dtype : {None, "float32", "float64"}, default=None
        Working precision of ``best_estimator_``.
    random_state : int, Generator or None, default=None
        Seed of the base draw of the frequencies: the refitted winner
        (``random_state=random_state_``) has exactly the searched frequencies.
    column_block : int, default=None
        Passed to ``best_estimator_``.
    max_gram_bytes : int, default=None
        Memory budget of a Gram (the search groups its gammas to fit it); passed on.
    progress : bool, default=False
        Progress bars for dask input.
    recovery : str, dict or 2-tuple, default="cubic"
        Recovery maps of ``best_estimator_``.
    device : {"cpu", "cuda"}, default="cpu"
        Where ``best_estimator_`` is refitted and predicts (see
        :class:`rfol_dask.RandomFeatureOperator`). The search itself runs on the CPU: input on a
        GPU (CuPy) is copied to the host for it.

    Attributes
    ----------
    best_params_ : dict
        ``distribution``, ``gamma``, ``alpha``, ``n_features`` of the winner.
    best_score_ : float
        Its validation score, ``-mean relative L2 error`` (greater is better).
    cv_results_ : SearchResults
        One row per candidate: ``stage`` ("coarse", "fine" or "full"), ``family``
        (the law), ``scale_multiple``, ``gamma``, ``n_features``, ``alpha``, ``n_train_rows``,
        ``mean_relative_l2``, ``mean_test_score``, ``std_test_score``, ``split<k>_test_score``,
        ``rank_test_score`` (within the stage). ``.to_dataframe()`` with pandas. A NaN score: an
        alpha the fine stage left unsolved (see ``alpha_path``); it ranks last.
    best_estimator_ : RandomFeatureOperator
        The winner refitted on all training data; ``predict``, ``score`` and ``save`` delegate to it.
    median_scales_ : dict
        Each law's median-heuristic gamma.
    random_state_ : int
        The seed of the frequencies.
    search_time_, refit_time_ : float
        Seconds of the search (including the median heuristic) and of the refit.
    n_splits_ : int
        Number of validation splits.
    n_features_in_, input_shape_, output_shape_, input_dims_, output_dims_, input_coords_, output_coords_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_grid_, output_grid_, input_periods_, output_periods_, output_attrs_, output_coord_attrs_
        As in :class:`rfol_dask.RandomFeatureOperator`.

    Cost per stage, for each split and law, with ``S`` gammas: one pass over the feature
    slabs, ``2 M n N`` (projection) ``+ S (M_t^2 + 2 M_v M_t) N`` flops, then per gamma (and N)
    one ``eigh`` of the ``M_t x M_t`` Gram and ``2 M_v M_t m`` per alpha. Memory: ``S`` pairs of
    Grams ``8 (M_t^2 + M_v M_t)`` bytes (the gammas are split in groups that fit
    ``max_gram_bytes`` / 60 % of the memory) plus two ``M x slab`` buffers. Only the dual is
    searched (the ``M_t x M_t`` Gram), whatever ``N``.
    """

    _parameter_constraints = {
        "n_features": [Interval(numbers.Integral, 1, None, closed="left"), "array-like"],
        "distributions": ["array-like"],
        "gammas": ["array-like", None],
        "alphas": ["array-like", None],
        "nu": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "cv": [Interval(numbers.Integral, 2, None, closed="left"), "cv_object", None],
        "coarse": [Interval(numbers.Real, 0, 1, closed="right"), None],
        "refine": ["array-like"],
        "refit": ["boolean"],
        "alpha_path": [StrOptions({"auto", "eigh", "cholesky"})],
        "solver": [StrOptions({"auto", "dual", "primal"})],
        "random_state": ["random_state", np.random.Generator, np.random.SeedSequence],
        **OperatorEstimator._common_constraints,
    }

    def __init__(self, *, n_features=1000, distributions=("cauchy", "gaussian"), gammas=None, alphas=None, nu=None,
                 cv=None, coarse=0.125, refine=DEFAULT_REFINE, refit=True, alpha_path="auto", fit_intercept=True,
                 solver="auto", dtype=None, random_state=None, column_block=None, max_gram_bytes=None,
                 progress=False, recovery="cubic", device="cpu"):
        self.n_features = n_features
        self.distributions = distributions
        self.gammas = gammas
        self.alphas = alphas
        self.nu = nu
        self.cv = cv
        self.coarse = coarse
        self.refine = refine
        self.refit = refit
        self.alpha_path = alpha_path
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.dtype = dtype
        self.random_state = random_state
        self.column_block = column_block
        self.max_gram_bytes = max_gram_bytes
        self.progress = progress
        self.recovery = recovery
        self.device = device

    def _check_params(self):
        super()._check_params()
        for law in self.distributions:
            if law not in DISTRIBUTIONS:
                raise ValueError(f"unknown distribution {law!r} in distributions; choose from {DISTRIBUTIONS}")
        if "student_t" in self.distributions and self.nu is None:
            raise ValueError("distributions includes 'student_t': pass its degrees of freedom nu > 0, e.g. nu=3")
        self._check_grids("gammas", "alphas", "refine")

    def _base_estimator(self, **best):
        return RandomFeatureOperator(nu=self.nu, fit_intercept=self.fit_intercept, solver=self.solver,
                                     dtype=self.dtype, random_state=self.random_state_,
                                     column_block=self.column_block, max_gram_bytes=self.max_gram_bytes,
                                     progress=self.progress, recovery=self.recovery, device=self.device, **best)

    def _prepare(self, U, client=None):
        self._seed = self.random_state_ = integer_seed(self.random_state)
        laws = list(self.distributions)
        if client is not None:  # U: the stacked inputs persisted on the cluster
            self.median_scales_ = client.compute(dask.delayed(median_gammas)(U, laws, random_state=self._seed)).result()
        else:
            self.median_scales_ = median_gammas(U, laws, random_state=self._seed)

    def _families(self):
        return list(self.distributions)

    def _multiples(self):
        return DEFAULT_GAMMAS if self.gammas is None else self.gammas

    def _n_list(self):
        Ns = [self.n_features] if isinstance(self.n_features, numbers.Integral) else list(self.n_features)
        return sorted({int(N) for N in Ns})

    def _params_of(self, row):
        return {"distribution": str(row["family"]), "gamma": float(row["gamma"]), "alpha": float(row["alpha"]),
                "n_features": int(row["n_features"])}

    def _stage_errors(self, X, Y, train, valid, client, law, mults, Ns, alpha_center=None):
        """Validation errors (len(mults), len(Ns), n_alpha) of one split, or their delayed value."""
        N = Ns[-1]
        freq = functools.partial(draw_frequencies, self.n_features_in_, N, law, 1.0, self.nu, self._seed)
        scales = [frequency_scale(law, m * self.median_scales_[law]) for m in mults]
        M_t, M_v = len(train), len(valid)
        per = 8.0 * (M_t + M_v) * M_t * len(Ns)
        budget = memory_budget(self.max_gram_bytes, client).bytes
        group = max(1, int(0.5 * budget // per))
        slabs = slab_bounds(N, M_t + M_v, Ns)
        args = (self._alphas(), self.fit_intercept, self.alpha_path, alpha_center)
        if client is None:
            Xa, Yt, Yv = arrange_rows(X, train, valid), Y[train], Y[valid]
            out = []
            for g0 in range(0, len(scales), group):
                sc = scales[g0:g0 + group]
                acc = None
                for f0, f1 in slabs:
                    acc = validation_slab(acc, Xa, M_t, freq, N, f0, f1, sc, Ns, self.fit_intercept)
                out += [[_path_errors(acc, k, Ns, g, Yt, Yv, *args) for g in range(len(Ns))] for k in range(len(sc))]
            return np.asarray(out)
        workers = worker_addresses(client)
        Xa = dask.delayed(arrange_rows)(X, train, valid)
        Yt, Yv = dask.delayed(_take)(Y, train), dask.delayed(_take)(Y, valid)
        groups = [list(g) for g in np.array_split(np.arange(len(slabs)), min(len(workers), len(slabs))) if len(g)]
        out = []
        for g0 in range(0, len(scales), group):
            sc = scales[g0:g0 + group]
            accs = []
            for w, idx in zip(workers, groups):
                with pinned(w):
                    acc = None
                    for i in idx:
                        f0, f1 = slabs[i]
                        acc = dask.delayed(validation_slab)(acc, Xa, M_t, freq, N, f0, f1, sc, Ns, self.fit_intercept)
                accs.append(acc)
            total = tree_sum(accs, dask.delayed(add_validation))
            out += [[dask.delayed(_path_errors)(total, k, Ns, g, Yt, Yv, *args) for g in range(len(Ns))]
                    for k in range(len(sc))]
        return dask.delayed(np.asarray)(out)


def _take(Y, rows):
    return Y[rows]


def _path_errors(acc, k, segments, g, V_train, V_valid, alphas, fit_intercept, method, center=None):
    """Validation errors (n_alpha,) of scale ``k`` and ``segments[g]`` features (:func:`path_errors`)."""
    G, K = validation_grams(acc, k, segments, g)
    return path_errors(G, K, V_train, V_valid, alphas, fit_intercept, method, center)
