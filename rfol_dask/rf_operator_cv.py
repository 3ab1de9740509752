"""``RandomFeatureOperatorCV``: law x gamma x alpha (x N) chosen by validation on the training
data, on the search of :mod:`rfol_dask.selection`."""

from __future__ import annotations

import numbers

import dask
import numpy as np

from .estimator import OperatorEstimator
from .feature_passes import GROWTH_PRUNE, FeaturePasses, growth_checkpoints
from .features import DISTRIBUTIONS, NU_LAWS, integer_seed
from .params import Interval, StrOptions
from .rf_operator import RandomFeatureOperator
from .selection import DEFAULT_GAMMAS, DEFAULT_REFINE, SelectionCV
from .stages import best_row, beyond_edge, final_best, grid_step
from .tuning import input_scales

__all__ = [
    "RandomFeatureOperatorCV",
    "DEFAULT_LAWS",
    "DEFAULT_GROWTH_REFINE",
    "GROWTH_PRUNE",
    "GROWTH_EXTEND",
    "LIMIT_FEATURES_PER_ROW",
    "LIMIT_ROWS_FRACTION",
    "LIMIT_MIN_GROWTH",
]

#: the frequency laws searched by default
DEFAULT_LAWS = ("cauchy", "gaussian", "rational_quadratic")
#: the multiples of the searched gamma scored while N grows
DEFAULT_GROWTH_REFINE = (0.5, 1.0, 2.0)
#: the growth stage adds up to this many gammas beyond the edge of ``growth_refine``, one step at a
#: time, while the best growth model sits on that edge
GROWTH_EXTEND = 2
#: the limit stage (before the growth) scores every law with this many features per training row,
#: near the kernel limit, whose best gamma is where a large-N model's goes
LIMIT_FEATURES_PER_ROW = 16
#: ... on at least this fraction of the training rows (the limit's best gamma drifts with the rows)
LIMIT_ROWS_FRACTION = 0.25
#: ... and only where ``max_features`` is at least this factor over the searched N (over fewer
#: doublings ``growth_refine`` reaches the gamma a larger N wants, and the stage costs more)
LIMIT_MIN_GROWTH = 4


class RandomFeatureOperatorCV(FeaturePasses, SelectionCV):
    """RandomFeatureOperator with its law, gamma and alpha chosen by validation.

    Searches ``distribution`` x ``gamma`` x ``alpha`` (and optionally ``n_features``) of
    :class:`~rfol_dask.RandomFeatureOperator`, then refits the winner on all training data.

    Parameters
    ----------
    n_features : int or sequence of int, default=1000
        ``N``; a sequence is searched too (nested models of one draw, one pass for all).
    max_features : int or None, default=None
        Grow ``N`` after the search: the winner's law at its gamma times ``growth_refine`` is
        scored at ``N, 2 N, 4 N, ...`` up to ``max_features`` on the same validation split(s),
        one pass over the frequencies per gamma. A gamma stops once a doubling gains less than
        ``growth_tol`` or its error is more than 25 % above the best at that ``N``; the best
        (stage ``"growth"``) is refitted. Cost about one fit at the largest ``N`` reached per
        gamma. None: no growth.
    distributions : sequence of {"cauchy", "gaussian", "student_t", "rational_quadratic"}, \
default=("cauchy", "gaussian", "rational_quadratic")
        Frequency laws searched.
    gammas : sequence of float, default=None
        Multiples of each law's median-heuristic gamma (:func:`rfol_dask.heuristics.median_gamma`);
        default ``4^-5 ... 4^2`` (:data:`rfol_dask.selection.DEFAULT_GAMMAS`).
    alphas : sequence of float, default=None
        Ridge values (> 0); default ``1e-16 ... 10`` (:data:`rfol_dask.selection.DEFAULT_ALPHAS`).
    nu : float, default=None
        Degrees of freedom of ``"student_t"`` (required with it) and shape ``a`` of
        ``"rational_quadratic"`` (None: 1).
    pca_power : float, None or sequence of (float or None), default=None
        The input metric (``RandomFeatureOperator``'s). A sequence is searched: a whole search
        per value on the same data (the cost times the number of values); ``cv_results_`` gets
        a ``pca_power`` column.
    cv : None, int or scikit-learn splitter, default=None
        None: validate on the last 20 % of the training samples; an int: that many (unshuffled)
        K folds; a splitter: its ``split(U)``; or a list of (train, validation) index arrays.
        Scores are averaged over splits (samples whose output is identically zero are left out;
        a split with no other is left out, with a warning).
    stages : dict or None, default=None
        Settings of the stages, any of these (default in brackets; successive halving, as
        ``HalvingGridSearchCV``'s ``factor`` and ``min_resources``):
        ``"coarse"`` (0.125): the coarse stage's fraction of the features (at least 256) and
        rows (at least 200 training rows), over the whole grid, extended at its edge; None: one
        stage at full size. ``"finalists"`` (2): laws passed on, those within 2 % of the best
        (:data:`rfol_dask.stages.FINALIST_TIE`). ``"refine"`` ((0.5, 1, 2)): the fine stage's
        factors of each finalist's gamma, stepped beyond an edge winner up to twice. ``"fine"``
        (0.5): the fine stage's fraction of the rows and of ``N`` (one ``n_features``; at least
        256), then its winner (and twice its gamma where within 5 %) at full size (stage
        ``"final"``); None or 1: no final stage.
        ``"alpha_path"`` ("auto"): ``"eigh"``, ``"cholesky"`` or the cheaper
        (:func:`rfol_dask.tuning.path_errors`; with ``"auto"`` the later stages solve only the
        alphas around the best). ``"score_outputs"`` (None): score on a Gaussian sketch of this
        many output combinations (:func:`rfol_dask.selection.sketch_outputs`).
        ``"growth_tol"`` (0.01), ``"growth_refine"`` ((0.5, 1, 2)): see ``max_features``.
        ``"limit_gammas"`` ("gammas"): before the growth, every law at these multiples (the
        search's grid) with 16 features per training row, near the kernel limit, whose best
        law and gamma are grown too when they differ; only where ``max_features`` is at least
        4 times the searched N (:data:`LIMIT_MIN_GROWTH`); None: no limit stage.
    refit : bool or dict, default=True
        Refit the winner on all training data as ``best_estimator_``; a dict: with these
        settings of it, ``"solver"`` ({"auto", "dual", "primal"}), ``"column_block"``,
        ``"recovery"`` (as ``RandomFeatureOperator``'s). False: the search's results only.
    fit_intercept : bool, default=True
        Centre features and outputs (an intercept per output component).
    dtype : {None, "float32", "float64"}, default=None
        Precision of ``best_estimator_``; None: float64, the search's. With ``"float32"`` no
        alpha below the rounding floor of float32 is scored (the refit could not take it).
    random_state : int, Generator or None, default=None
        Seed of the frequencies: ``best_estimator_`` has exactly the searched ones.
    max_gram_bytes : int, default=None
        Memory budget of a Gram (the search groups its gammas to fit it); the search's least
        peak and, with ``refit``, every refit a winner may need are checked before the search.
    progress : bool, default=False
        Progress bars for dask input.
    device : {"cpu", "cuda"}, default="cpu"
        Where the search runs and ``best_estimator_`` is refitted and predicts, as in
        :class:`rfol_dask.RandomFeatureOperator` (CuPy input is searched where it lives).

    Attributes
    ----------
    input_name_, output_name_ : str
        The input and output variables a Dataset or store is read by (``fit(input=,
        output=)``, or the DataArrays' own names; default ``"input"``, ``"output"``).
    sample_dim_ : str
        The sample dim of DataArrays (``fit(sample_dim=)``, default ``"sample"``).
    best_params_ : dict
        ``distribution``, ``gamma``, ``alpha``, ``n_features`` of the winner (and ``nu`` where its
        law takes one, ``pca_power`` where ``pca_power`` is not None), as ``best_estimator_``
        was fitted: ``RandomFeatureOperator(**best_params_, random_state=random_state_)`` is
        that model. Where the refit's Gram (all training rows) could not take the validated
        alpha, the best candidate validated at the ridge it took or above, refitted instead (or,
        without one, the ridge used), with the jitter policy's warning.
    best_score_ : float
        The winner's validation score, ``-mean relative L2 error`` (greater is better).
    best_index_ : int
        The winner's row in ``cv_results_`` (the refitted candidate's: see ``best_params_``).
    cv_results_ : SearchResults
        One row per candidate: ``stage`` ("coarse", "fine", "final", "full", "limit" or "growth"),
        ``family`` (the law), ``scale_multiple``, ``gamma``, ``n_features``, ``alpha``,
        ``n_train_rows``, ``mean_relative_l2``, ``mean_test_score``, ``std_test_score``,
        ``split<k>_test_score``, ``rank_test_score`` (within the stage), ``alpha_floor`` (the
        rounding floor of the candidate's Gram, :func:`rfol_dask.tuning.rounding_floor`).
        ``.to_dataframe()`` with pandas. A NaN score, ranked last: an alpha a later stage left
        unsolved (they solve only the alphas near the best so far) or one below ``alpha_floor``.
    best_estimator_ : RandomFeatureOperator
        The winner refitted on all training data; ``predict``, ``score``, ``save`` delegate to it.
    median_scales_ : dict
        Each law's median-heuristic gamma (in the input metric of ``pca_power``).
    input_metric_ : ndarray of shape (n, r) or None
        The input metric of ``pca_power`` (:func:`rfol_dask.heuristics.pca_metric`; else None).
    random_state_ : int
        The seed of the frequencies.
    search_time_, refit_time_ : float
        Seconds of the search (including the median heuristic) and of the refit.
    n_splits_ : int
        Number of validation splits scored.
    n_features_in_, input_shape_, output_shape_, input_dims_, output_dims_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_coords_, output_coords_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_grid_, output_grid_, input_periods_, output_periods_, output_attrs_, output_coord_attrs_
        As in :class:`rfol_dask.RandomFeatureOperator`.

    Cost per stage, split and law with ``S`` gammas: one pass over the feature slabs, ``2 M n N +
    S (M_t^2 + 2 M_v M_t) N`` flops, then per gamma and N one ``eigh`` of the ``M_t x M_t`` dual
    Gram and ``2 M_v M_t m`` per alpha; memory ``S`` Gram pairs (grouped to fit the budget).
    """

    _parameter_constraints = {
        "n_features": [Interval(numbers.Integral, 1, None, closed="left"), "array-like"],
        "max_features": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "distributions": ["array-like"],
        "gammas": ["array-like", None],
        "alphas": ["array-like", None],
        "nu": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "pca_power": [Interval(numbers.Real, None, None, closed="neither"), None, "array-like"],
        "cv": [Interval(numbers.Integral, 2, None, closed="left"), "cv_object", None],
        "stages": [dict, None],
        "refit": ["boolean", dict],
        "random_state": ["random_state", np.random.Generator, np.random.SeedSequence],
        **{
            k: v
            for k, v in OperatorEstimator._common_constraints.items()
            if k not in ("column_block", "recovery")
        },
    }
    _stage_constraints = {
        **SelectionCV._stage_constraints,
        "finalists": [Interval(numbers.Integral, 1, None, closed="left")],
        "score_outputs": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "growth_tol": [Interval(numbers.Real, 0, None, closed="left")],
        "growth_refine": ["array-like"],
        "limit_gammas": [StrOptions({"gammas"}), "array-like", None],
    }
    _stage_defaults = {
        "coarse": 0.125,
        "refine": DEFAULT_REFINE,
        "fine": 0.5,
        "finalists": 2,
        "alpha_path": "auto",
        "score_outputs": None,
        "growth_tol": 0.01,
        "growth_refine": DEFAULT_GROWTH_REFINE,
        "limit_gammas": "gammas",
    }
    _base_class = RandomFeatureOperator
    _refit_keys = ("solver", "column_block", "recovery")

    def __init__(
        self,
        *,
        n_features=1000,
        max_features=None,
        distributions=DEFAULT_LAWS,
        gammas=None,
        alphas=None,
        nu=None,
        pca_power=None,
        cv=None,
        stages=None,
        refit=True,
        fit_intercept=True,
        dtype=None,
        random_state=None,
        max_gram_bytes=None,
        progress=False,
        device="cpu",
    ):
        self.n_features = n_features
        self.max_features = max_features
        self.distributions = distributions
        self.gammas = gammas
        self.alphas = alphas
        self.nu = nu
        self.pca_power = pca_power
        self.cv = cv
        self.stages = stages
        self.refit = refit
        self.fit_intercept = fit_intercept
        self.dtype = dtype
        self.random_state = random_state
        self.max_gram_bytes = max_gram_bytes
        self.progress = progress
        self.device = device

    def _check_params(self):
        super()._check_params()
        if not len(self.distributions):
            raise ValueError(f"distributions is empty: give at least one of {DISTRIBUTIONS}")
        for law in [d for d in self.distributions if d not in DISTRIBUTIONS][:1]:
            raise ValueError(
                f"unknown distribution {law!r} in distributions; choose from {DISTRIBUTIONS}"
            )
        if "student_t" in self.distributions and self.nu is None:
            raise ValueError(
                "distributions includes 'student_t': pass its degrees of freedom nu > 0, e.g. nu=3"
            )
        limit = self._st["limit_gammas"]
        self._check_grids(
            gammas=self.gammas, alphas=self.alphas, growth_refine=self._st["growth_refine"]
        )
        self._check_grids(limit_gammas=None if isinstance(limit, str) else limit)
        searched = np.max(np.atleast_1d(self.n_features))
        if self.max_features is not None and self.max_features < searched:
            raise ValueError(
                f"max_features={self.max_features} is below the searched n_features ({searched}): "
                f"the growth starts from the searched N; pass max_features >= n_features, or None"
            )

    def _base_estimator(self, **best):
        powers = self._powers()
        # best_params_ win
        best = {"pca_power": powers[0] if len(powers) == 1 else None, "nu": self.nu, **best}
        return RandomFeatureOperator(
            fit_intercept=self.fit_intercept,
            dtype=self._refit_dtype().name,
            random_state=self.random_state_,
            max_gram_bytes=self.max_gram_bytes,
            progress=self.progress,
            device=self.device,
            **self._refit_settings(),
            **best,
        )

    def _seed_search(self):
        self._seed = self.random_state_ = integer_seed(self.random_state)

    def _refit_candidates(self):
        """The ``n_features`` a winner may have: the searched ones and the growth's checkpoints."""
        Ns, top = self._n_list(), self.max_features
        grown = [N for N0 in Ns for N in growth_checkpoints(N0, int(top))] if top else []
        return "n_features", sorted({*Ns, *grown})

    def _set_metric(self, U, client, power):
        """The input metric of ``power`` and each law's median gamma in it (one sample of ``U``)."""
        args = (U, list(self.distributions), power)
        if client is None:
            self.input_metric_, self.median_scales_ = input_scales(*args, random_state=self._seed)
        else:  # U: the stacked inputs persisted on the cluster
            scales = client.compute(dask.delayed(input_scales)(*args, random_state=self._seed))
            self.input_metric_, self.median_scales_ = scales.result()

    def _families(self):
        return list(self.distributions)

    def _multiples(self):
        return DEFAULT_GAMMAS if self.gammas is None else self.gammas

    def _n_list(self):
        N = self.n_features
        return sorted({int(n) for n in ([N] if isinstance(N, numbers.Integral) else N)})

    def _params_of(self, row):
        params = {
            "distribution": str(row["family"]),
            "gamma": float(row["gamma"]),
            "alpha": float(row["alpha"]),
            "n_features": int(row["n_features"]),
        }
        # the law's shape: RandomFeatureOperator(**best_params_) is the winner
        if params["distribution"] in NU_LAWS:
            params["nu"] = None if self.nu is None else float(self.nu)
        if "pca_power" in row:
            params["pca_power"] = None if row["pca_power"] is None else float(row["pca_power"])
        return params

    def _extend(self, X, Y, splits, client, rows):
        """The limit stage, then the growth stage: the winner (and the limit stage's best where it
        differs) at ``N, 2 N, ...`` features and its gamma times ``growth_refine``, the centre
        first, in groups of one law, extended beyond an edge best (:data:`GROWTH_EXTEND`)."""
        best = final_best(rows)
        if self.max_features is None or self.max_features <= best["n_features"]:
            return []
        refine = np.unique(np.asarray(self._st["growth_refine"], dtype=float))
        step = grid_step(refine)
        # anchors: (law, gamma multiple, index of the alpha its windows start at)
        anchors = [(best["family"], best["scale_multiple"], self._alpha_index(best["alpha"]))]
        out = self._limit_stage(X, Y, splits, client, best)
        if out:
            limit = best_row(out)
            ratio = limit["scale_multiple"] / anchors[0][1]
            inside = refine[0] * (1 - 1e-9) <= ratio <= refine[-1] * (1 + 1e-9)
            other = (limit["family"], limit["scale_multiple"], self._alpha_index(limit["alpha"]))
            if other[0] != anchors[0][0] or not inside:
                anchors.append(other)
        order = refine[np.argsort(np.abs(np.log(refine)), kind="stable")]
        pending = [(a * r, i) for r in order for i, (_, a, _) in enumerate(anchors)]
        # the searched anchor's gammas are pruned against every gamma's best error at a checkpoint,
        # the limit anchor's (expected to trail at small N) against their own only
        overall, own = {}, {}
        rules = [([overall], overall), ([overall, own], own)]
        # a gamma holds one pair of running sums per split, and on a cluster two more while they
        # are summed: counted wherever the search runs, so that it groups its gammas alike
        M_t, M_v, N0 = len(splits[0][0]), len(splits[0][1]), best["n_features"]
        group = self._gram_group(M_t, M_v, len(splits), client, summed=2)
        of, grown, extended = {}, [], [0] * len(anchors)  # of: (law, multiple) -> anchor
        while pending:
            law = anchors[pending[0][1]][0]  # one pass draws one law's frequencies
            chunk = [p for p in pending if anchors[p[1]][0] == law][:group]
            pending = [p for p in pending if p not in chunk]
            of.update({(law, m): i for m, i in chunk})
            mults, idx = [m for m, _ in chunk], [i for _, i in chunk]
            rules_of, centers = [rules[i] for i in idx], [anchors[i][2] for i in idx]
            grown += self._grow(X, Y, splits, client, law, N0, mults, rules_of, centers)
            for i in range(len(anchors) if not pending and step is not None else 0):
                mine = [r for r in grown if of[(r["family"], r["scale_multiple"])] == i]
                beyond = beyond_edge(mine, step, 1) if extended[i] < GROWTH_EXTEND else None
                tried = [m for (fam, m) in of if fam == anchors[i][0]]
                if beyond is not None and not np.isclose(beyond[0], tried).any():
                    pending.append((float(beyond[0]), i))
                    extended[i] += 1
        return out + grown

    def _limit_stage(self, X, Y, splits, client, best):
        """Rows of the limit stage (``limit_gammas``): every law over the grid on a subsample of
        rows with :data:`LIMIT_FEATURES_PER_ROW` features per training row; [] when skipped."""
        limit = self._st["limit_gammas"]
        if limit is None:
            return []
        mults = np.asarray(self._multiples() if isinstance(limit, str) else limit, dtype=float)
        n_train = min(len(tr) for tr, _ in splits)
        n_rows = max(
            self._n_rows(n_train, self._st["coarse"] or 0.125),
            best["n_features"] // 4,
            int(LIMIT_ROWS_FRACTION * n_train),
        )
        n_rows = min(n_train, n_rows)
        N = min(int(self.max_features), LIMIT_FEATURES_PER_ROW * n_rows)
        if N <= best["n_features"] or self.max_features < LIMIT_MIN_GROWTH * best["n_features"]:
            return []
        sub, out = self._subsample(splits, n_rows), []
        step = grid_step(mults, 4.0)
        for law in self._families():
            rows = self._stage(X, Y, sub, client, law, mults, [N], len(sub[0][0]), "limit")
            # the best on the grid's edge: two steps beyond it, as the coarse stage
            for _ in range(3):
                new = beyond_edge(rows, step, 2)
                if new is None:
                    break
                rows += self._stage(X, Y, sub, client, law, new, [N], len(sub[0][0]), "limit")
            out += rows
        return out
