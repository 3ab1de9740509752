"""``RandomFeatureOperatorCV``: law x gamma x alpha (x N) chosen by validation on the training
data, on the search machinery of :mod:`rfol_dask.selection` (one pass over feature slabs per
stage and law, the validation cross-Gram in the Gram's pass, one projection per slab for every
gamma, the ridge path over alpha)."""

from __future__ import annotations

import functools
import numbers
import sys

import dask
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from .backend import take_rows
from .estimator import OperatorEstimator
from .features import DISTRIBUTIONS, NU_LAWS, draw_frequencies, integer_seed
from .placement import pinned, worker_addresses
from .progress import compute
from .rf_operator import RandomFeatureOperator
from .selection import (
    DEFAULT_GAMMAS,
    DEFAULT_REFINE,
    SelectionCV,
    arrange_rows,
    best_row,
    beyond_edge,
    final_best,
    grid_step,
)
from .solve.graph import after as _after  # after: a parameter name here
from .solve.graph import tree_sum
from .tuning import (
    add_validation,
    floored_path_errors,
    frequency_scale,
    input_scales,
    path_method,
    slab_bounds,
    sum_validation,
    validation_grams,
    validation_slab,
)

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
#: while N grows, a gamma whose best validation error at a checkpoint exceeds the best one seen
#: there (by any gamma) by more than this fraction is dropped
GROWTH_PRUNE = 0.25
#: the growth stage adds up to this many gammas beyond the edge of ``growth_refine`` (one step of
#: its grid at a time) while the best growth model sits on that edge
GROWTH_EXTEND = 2

#: the limit stage (before the growth) scores every law with this many features per training row,
#: near the kernel the features converge to as N grows, whose best gamma is where a large-N
#: model's best gamma goes (on Navier-Stokes high 32 to 128 times the one searched at N = 4000)
LIMIT_FEATURES_PER_ROW = 16
#: ... on at least this fraction of the training rows: the gamma that wins near the kernel limit
#: drifts with the rows (Navier-Stokes high, 16000 training rows: 1/256 of the median gamma wins on
#: 2000 rows, by 0.7 %, and 1/64 on 4000, by 8 %)
LIMIT_ROWS_FRACTION = 0.25
#: ... and only where the growth spans at least this factor over the searched N: over fewer
#: doublings ``growth_refine`` reaches the gamma a larger N wants, and the stage (every law over
#: the grid) cost more than the growth itself (2000 -> 4000 features on 1200 samples: 5x a plain
#: search at 4000, 2.2x without it)
LIMIT_MIN_GROWTH = 4

#: the fine and growth stages solve the alphas within this many grid steps of the best one so far
#: (widened while the best sits on the window's edge) where one Cholesky per alpha beats an ``eigh``
WINDOW_HALF_WIDTH = 1


class RandomFeatureOperatorCV(SelectionCV):
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
        Multiples of each law's median-heuristic gamma (:func:`rfol_dask.tuning.median_gamma`);
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
        (:data:`rfol_dask.selection.FINALIST_TIE`). ``"refine"`` ((0.5, 1, 2)): the fine stage's
        factors of each finalist's gamma, stepped beyond an edge winner up to twice. ``"fine"``
        (0.5): the fine stage's fraction of the rows, then its winner (and twice its gamma
        where within 5 %) at full size (stage ``"final"``); None or 1: no final stage.
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
    best_params_ : dict
        ``distribution``, ``gamma``, ``alpha``, ``n_features`` of the winner (and ``nu`` where its
        law takes one, ``pca_power`` where ``pca_power`` is not None), as ``best_estimator_``
        was fitted: ``RandomFeatureOperator(**best_params_, random_state=random_state_)`` is
        that model. Where a dask refit's Cholesky could not take the validated alpha, the
        ridge used (with the jitter policy's warning).
    best_score_ : float
        The winner's validation score, ``-mean relative L2 error`` (greater is better).
    best_index_ : int
        The winner's row in ``cv_results_``.
    cv_results_ : SearchResults
        One row per candidate: ``stage`` ("coarse", "fine", "final", "full", "limit" or
        "growth"), ``family``
        (the law), ``scale_multiple``, ``gamma``, ``n_features``, ``alpha``, ``n_train_rows``,
        ``mean_relative_l2``, ``mean_test_score``, ``std_test_score``, ``split<k>_test_score``,
        ``rank_test_score`` (within the stage), ``alpha_floor`` (the rounding floor of the
        candidate's Gram, the largest of its splits': ``2 eps trace / sqrt(M_t)``,
        :func:`rfol_dask.tuning.rounding_floor`). ``.to_dataframe()`` with pandas. A NaN score: an
        alpha a stage after the coarse one left unsolved (the fine, final and growth stages solve
        only the alphas near the best so far), or one below ``alpha_floor``,
        where rounding dominates the validation predictions; it ranks last.
    best_estimator_ : RandomFeatureOperator
        The winner refitted on all training data; ``predict``, ``score`` and ``save`` delegate to
        it.
    median_scales_ : dict
        Each law's median-heuristic gamma (in the input metric of ``pca_power``).
    input_metric_ : ndarray of shape (n, r) or None
        The input metric of ``pca_power`` (:func:`rfol_dask.tuning.pca_metric`; None without it).
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

    Cost per stage, for each split and law, with ``S`` gammas: one pass over the feature
    slabs, ``2 M n N`` (projection) ``+ S (M_t^2 + 2 M_v M_t) N`` flops, then per gamma (and N)
    one ``eigh`` of the ``M_t x M_t`` Gram and ``2 M_v M_t m`` per alpha. Memory: ``S`` pairs of
    Grams ``8 (M_t^2 + M_v M_t)`` bytes (the gammas are split in groups that fit
    ``max_gram_bytes`` / 60 % of the memory) plus two ``M x slab`` buffers. Only the dual is
    searched (the ``M_t x M_t`` Gram), whatever ``N``.
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
        for law in self.distributions:
            if law not in DISTRIBUTIONS:
                raise ValueError(
                    f"unknown distribution {law!r} in distributions; choose from {DISTRIBUTIONS}"
                )
        if "student_t" in self.distributions and self.nu is None:
            raise ValueError(
                "distributions includes 'student_t': pass its degrees of freedom nu > 0, e.g. nu=3"
            )
        self._check_grids(gammas=self.gammas, alphas=self.alphas)
        self._check_grids(growth_refine=self._st["growth_refine"])
        if not isinstance(self._st["limit_gammas"], str):
            self._check_grids(limit_gammas=self._st["limit_gammas"])
        searched = np.max(np.atleast_1d(self.n_features))
        if self.max_features is not None and self.max_features < searched:
            raise ValueError(
                f"max_features={self.max_features} is below the searched n_features ({searched}): "
                "the "
                f"growth starts from the searched N; pass max_features >= n_features, or None"
            )

    def _base_estimator(self, **best):
        powers = self._powers()
        best = {
            "pca_power": powers[0] if len(powers) == 1 else None,
            "nu": self.nu,
            **best,
        }  # best_params_ win
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
        """The ``n_features`` a winner may have: the searched ones and, with ``max_features``, the
        growth's checkpoints from each (the limit stage's lie below ``max_features``)."""
        Ns = set(self._n_list())
        if self.max_features is not None:
            Ns.update(
                N for N0 in self._n_list() for N in growth_checkpoints(N0, int(self.max_features))
            )
        return "n_features", sorted(Ns)

    def _set_metric(self, U, client, power):
        """The input metric of ``power`` and each law's median gamma in it (one sample of ``U``)."""
        laws = list(self.distributions)
        if client is not None:  # U: the stacked inputs persisted on the cluster
            self.input_metric_, self.median_scales_ = client.compute(
                dask.delayed(input_scales)(U, laws, power, random_state=self._seed)
            ).result()
        else:
            self.input_metric_, self.median_scales_ = input_scales(
                U, laws, power, random_state=self._seed
            )

    def _families(self):
        return list(self.distributions)

    def _multiples(self):
        return DEFAULT_GAMMAS if self.gammas is None else self.gammas

    def _n_list(self):
        Ns = (
            [self.n_features]
            if isinstance(self.n_features, numbers.Integral)
            else list(self.n_features)
        )
        return sorted({int(N) for N in Ns})

    def _params_of(self, row):
        params = {
            "distribution": str(row["family"]),
            "gamma": float(row["gamma"]),
            "alpha": float(row["alpha"]),
            "n_features": int(row["n_features"]),
        }
        if (
            params["distribution"] in NU_LAWS
        ):  # the law's shape: RandomFeatureOperator(**best_params_) is the winner
            params["nu"] = None if self.nu is None else float(self.nu)
        if "pca_power" in row:
            params["pca_power"] = None if row["pca_power"] is None else float(row["pca_power"])
        return params

    def _search_memory(self, M_t, M_v):
        """Beside a training Gram, at the least (one gamma per pass): the cross-Gram and the
        other nested ``N``'s Gram pairs (``8 (M_t + M_v) M_t`` each), the solve's copy of a
        Gram and two ``M x slab`` buffers (``M = M_t + M_v``,
        :func:`rfol_dask.tuning.slab_bounds`)."""
        Ns, M = self._n_list(), M_t + M_v
        width = max(f1 - f0 for f0, f1 in slab_bounds(Ns[-1], M, Ns))
        held = {
            (
                f"{len(Ns)} cross-Grams of {M_v} x {M_t}"
                if len(Ns) > 1
                else f"the {M_v} x {M_t} cross-Gram"
            ): 8 * len(Ns) * M_v * M_t
        }
        if len(Ns) > 1:
            held[f"the Grams of {len(Ns) - 1} more n_features"] = 8 * (len(Ns) - 1) * M_t * M_t
        held["the solve's copy of a Gram"] = 8 * M_t * M_t
        held[f"two {M} x {width} feature slabs"] = 2 * 8 * M * width
        return held

    def _gram_group(self, M_t, M_v, n_segments, client, summed=0):
        """How many gammas' Grams and cross-Grams (``n_segments`` each: one per nested ``N``, or in
        the growth one per split, all held at once) one pass may hold: half the search's memory
        budget (:meth:`_search_budget`: on GPUs :data:`DEVICE_SHARE` of their free memory) over
        ``8 (M_t + M_v) M_t n_segments`` bytes, at least one. ``summed``: pairs more per gamma that
        a worker holds beside them while it sums (the growth's first worker: the new sum and the one
        that comes over), all of them within the whole budget (with one split,
        three pairs a gamma)."""
        per, budget = 8.0 * (M_t + M_v) * M_t, self._search_budget(client).bytes
        group = 0.5 * budget // (per * n_segments)
        if summed:
            group = min(group, budget // (per * (n_segments + summed)))
        return max(1, int(group))

    def _stage_errors(
        self, X, Y, train, valid, client, law, mults, Ns, alpha_center=None, after=None
    ):
        """Validation errors of one split, then each Gram's rounding floor: (len(mults), len(Ns),
        n_alpha + 1), or their delayed value. ``after``: on a cluster, the delayed errors of the
        split before, which this split's first Grams wait for (the splits of a stage are computed
        together: else every split's Grams were held at once, where the group counts one's)."""
        N = Ns[-1]
        freq = functools.partial(
            draw_frequencies,
            self.n_features_in_,
            N,
            law,
            1.0,
            self.nu,
            self._seed,
            metric=self.input_metric_,
        )
        scales = [frequency_scale(law, m * self.median_scales_[law]) for m in mults]
        M_t, M_v = len(train), len(valid)
        group = self._gram_group(M_t, M_v, len(Ns), client)
        slabs = slab_bounds(N, M_t + M_v, Ns)
        args = (
            self._alphas(),
            self.fit_intercept,
            self._st["alpha_path"],
            alpha_center,
            WINDOW_HALF_WIDTH,
            self._eps,
        )
        if client is None:
            Xa, Yt, Yv = arrange_rows(X, train, valid), take_rows(Y, train), take_rows(Y, valid)
            out = []
            for g0 in range(0, len(scales), group):
                sc = scales[g0 : g0 + group]
                acc = None
                for f0, f1 in slabs:
                    acc = validation_slab(acc, Xa, M_t, freq, N, f0, f1, sc, Ns, self.fit_intercept)
                out += [
                    [_path_errors(acc, k, Ns, g, Yt, Yv, *args) for g in range(len(Ns))]
                    for k in range(len(sc))
                ]
            return np.asarray(out)
        workers = worker_addresses(client)
        Xa = dask.delayed(arrange_rows)(X, train, valid)
        Yt, Yv = dask.delayed(take_rows)(Y, train), dask.delayed(take_rows)(Y, valid)
        out, last, summed = [], after, None
        for g0 in range(0, len(scales), group):
            sc = scales[g0 : g0 + group]
            step = functools.partial(
                dask.delayed(validation_slab),
                X=Xa,
                n_train=M_t,
                frequencies=freq,
                n_features=N,
                scales=sc,
                segments=Ns,
                fit_intercept=self.fit_intercept,
            )
            # one group's Grams at a time on the first worker, and one solve at a time (each solve
            # uses every core and a copy of a Gram): each waits for the task before it; the other
            # workers start a group once the group before is summed (else each held every group's):
            # they wait for a token made beside that sum (waiting for the sum itself fetched a copy)
            gates = [last] + [last if summed is None else summed] * (len(workers) - 1)
            ends, where = _chains([None] * len(workers), workers, slabs, step, gates)
            total = tree_sum(ends, dask.delayed(add_validation), where)  # ends on the first worker
            with pinned(where[0]):
                summed = dask.delayed(_after)(None, total)
            row = []
            with pinned(where[0]):  # where the total is: a solve elsewhere fetched a copy of it
                for k in range(len(sc)):
                    row.append([])
                    for g in range(len(Ns)):
                        last = dask.delayed(_path_errors)(
                            dask.delayed(_after)(total, last), k, Ns, g, Yt, Yv, *args
                        )
                        row[-1].append(last)
            out += row
        return dask.delayed(np.asarray)(out)

    def _extend(self, X, Y, splits, client, rows):
        """The limit stage (:meth:`_limit_stage`), then the growth stage (``max_features``): the
        search's winner at ``N, 2 N, ...`` features, at its gamma times ``growth_refine`` (and
        the limit stage's best law and gamma times ``growth_refine`` when that is another law or
        outside those multiples), the centre multiples first, in groups of one law that fit the
        memory budget; each anchor's multiples are extended beyond their edge while its best
        growth model sits there (:data:`GROWTH_EXTEND`)."""
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
            if limit["family"] != anchors[0][0] or not refine[0] * (1 - 1e-9) <= ratio <= refine[
                -1
            ] * (1 + 1e-9):
                anchors.append(
                    (limit["family"], limit["scale_multiple"], self._alpha_index(limit["alpha"]))
                )
        order = refine[np.argsort(np.abs(np.log(refine)), kind="stable")]
        pending = [(a * r, i) for r in order for i, (_, a, _) in enumerate(anchors)]
        # the searched anchor's gammas are pruned against every gamma's best error at a checkpoint,
        # the limit anchor's (expected to trail at small N) against their own only
        overall, own = {}, {}
        rules = [([overall], overall), ([overall, own], own)]
        # every split's running sums are kept from one checkpoint to the next: a gamma holds one
        # pair per split
        # and on a cluster the first worker two more while it sums them; counted wherever the search
        # runs,
        # so that it groups its gammas, and so prunes them, alike on one machine and on a cluster
        group = self._gram_group(
            len(splits[0][0]), len(splits[0][1]), len(splits), client, summed=2
        )
        of, grown, extended = {}, [], [0] * len(anchors)  # of: (law, multiple) -> anchor
        while pending:
            law = anchors[pending[0][1]][0]  # one pass draws one law's frequencies
            chunk = [p for p in pending if anchors[p[1]][0] == law][:group]
            pending = [p for p in pending if p not in chunk]
            of.update({(law, m): i for m, i in chunk})
            grown += self._grow(
                X,
                Y,
                splits,
                client,
                law,
                best["n_features"],
                [m for m, _ in chunk],
                [rules[i] for _, i in chunk],
                [anchors[i][2] for _, i in chunk],
            )
            for i in range(len(anchors) if not pending and step is not None else 0):
                mine = [r for r in grown if of[(r["family"], r["scale_multiple"])] == i]
                beyond = beyond_edge(mine, step, 1) if extended[i] < GROWTH_EXTEND else None
                tried = [m for (fam, m) in of if fam == anchors[i][0]]
                if beyond is not None and not np.isclose(beyond[0], tried).any():
                    pending.append((float(beyond[0]), i))
                    extended[i] += 1
        return out + grown

    def _limit_stage(self, X, Y, splits, client, best):
        """Rows of the limit stage (see ``limit_gammas``): every searched law over the grid on a
        subsample of rows with :data:`LIMIT_FEATURES_PER_ROW` features per training row (at most
        ``max_features``), all alphas; [] when skipped. Cost per law and gamma: a Gram of
        ``rows x rows`` over ``16 rows`` features, ``16 rows^3`` flops (Navier-Stokes high, 4000
        of 16000 training rows: about 40 s on 2 cores, a few % of the growth)."""
        limit = self._st["limit_gammas"]
        if limit is None:
            return []
        mults = np.asarray(self._multiples() if isinstance(limit, str) else limit, dtype=float)
        n_train = min(len(tr) for tr, _ in splits)
        n_rows = min(
            n_train,
            max(
                self._n_rows(n_train, self._st["coarse"] or 0.125),
                best["n_features"] // 4,
                int(LIMIT_ROWS_FRACTION * n_train),
            ),
        )
        N = min(int(self.max_features), LIMIT_FEATURES_PER_ROW * n_rows)
        if N <= best["n_features"] or self.max_features < LIMIT_MIN_GROWTH * best["n_features"]:
            return []
        sub, out = self._subsample(splits, n_rows), []
        step = grid_step(mults, 4.0)
        for law in self._families():
            rows = self._stage(X, Y, sub, client, law, mults, [N], len(sub[0][0]), "limit")
            for _ in range(
                3
            ):  # the best on the grid's edge: two steps beyond it, as the coarse stage
                new = beyond_edge(rows, step, 2)
                if new is None:
                    break
                rows += self._stage(X, Y, sub, client, law, new, [N], len(sub[0][0]), "limit")
            out += rows
        return out

    def _grow(self, X, Y, splits, client, law, N0, mults, rules, centers):
        """Growth rows of the scale multiples ``mults`` of ``law`` from ``N0`` features: one pass
        over nested slabs, a multiple dropping out once it gains less than ``growth_tol`` over the
        previous checkpoint or is more than :data:`GROWTH_PRUNE` above its record. ``rules[k]`` of
        multiple ``k``: (the records it updates, the record it is held to); a record maps a
        checkpoint N to the best validation error seen there. ``centers[k]``: the index of the
        alpha its first window is centred on."""
        N_max = int(self.max_features)
        checkpoints = growth_checkpoints(N0, N_max)
        scales = [frequency_scale(law, m * self.median_scales_[law]) for m in mults]
        freq = functools.partial(
            draw_frequencies,
            self.n_features_in_,
            N_max,
            law,
            1.0,
            self.nu,
            self._seed,
            metric=self.input_metric_,
        )
        centers = list(centers)
        state = []  # per split: inputs arranged, training and validation outputs, accumulators
        for tr, va in splits:
            parts = [(arrange_rows, X, tr, va), (take_rows, Y, tr), (take_rows, Y, va)]
            if client is None:
                data = [f(*a) for f, *a in parts]
            else:
                data = client.persist([dask.delayed(f)(*a) for f, *a in parts])
            state.append([*data, [None] * len(worker_addresses(client))])
        slabs = slab_bounds(N_max, len(splits[0][0]) + len(splits[0][1]), checkpoints)
        out, previous, done = [], np.full(len(scales), np.inf), 0
        for Nk in checkpoints:
            new = [(f0, f1) for f0, f1 in slabs if done <= f0 and f1 <= Nk]
            done = Nk
            errs = self._checkpoint(splits, state, new, Nk, freq, scales, centers, client)
            errs, floors = errs[:, :-1], errs[:, -1]  # (scales, alphas, splits), (scales, splits)
            out += self._rows(
                errs[:, None], floors[:, None], law, mults, [Nk], len(splits[0][0]), "growth"
            )
            mean = np.mean(errs, axis=-1)  # NaN: an alpha left unsolved
            mean = np.where(np.isnan(mean), np.inf, mean)
            best_k = mean.min(axis=1)
            for (updates, _), e in zip(rules, best_k, strict=False):
                for record in updates:
                    record[Nk] = min(record.get(Nk, np.inf), e)
            held = np.array([rule[1][Nk] for rule in rules])
            if self.progress:
                for m, e, h in zip(mults, best_k, held, strict=False):
                    print(
                        f"selection (growth): {law}, gamma = {m:.3g} x median, N = {Nk}: best "
                        f"validation error {e:.4g} (its record at this N: {h:.4g})",
                        file=sys.stderr,
                        flush=True,
                    )
            # each gamma grows on while a doubling gains growth_tol and it is not far behind its
            # record
            keep = np.flatnonzero(
                (best_k < previous * (1.0 - self._st["growth_tol"]))
                & (best_k <= held * (1.0 + GROWTH_PRUNE))
            )
            if len(keep) == 0:
                break
            centers = [int(np.argmin(mean[k])) for k in keep]
            previous, mults, rules = (
                best_k[keep],
                [mults[k] for k in keep],
                [rules[k] for k in keep],
            )
            if len(keep) < len(scales):  # the dropped gammas' sums are freed
                scales = [scales[k] for k in keep]
                for st in state:
                    st[3] = [
                        a
                        if a is None
                        else _select(a, keep)
                        if client is None
                        else client.persist(dask.delayed(_select)(a, keep))
                        for a in st[3]
                    ]
        return out

    def _checkpoint(self, splits, state, new, Nk, freq, scales, centers, client):
        """The running sums of every split advanced over the ``new`` slabs, and the validation
        errors at ``Nk`` features, then each Gram's floor: (scales, alphas + 1, splits). On a
        cluster the sums stay on their workers, summed pairwise where they are into new ones
        (which the later sums add into); a split's sums start once the split before is scored."""
        N_max = freq.args[1]
        errs = []
        for (tr, _va), st in zip(splits, state, strict=False):
            Xa, Yt, Yv, accs = st
            opts = dict(
                X=Xa,
                n_train=len(tr),
                frequencies=freq,
                n_features=N_max,
                scales=scales,
                segments=[N_max],
                fit_intercept=self.fit_intercept,
            )
            # the running sums carry sqrt(2 / N_max): segments (Nk, N_max) rescale them to Nk
            args = [
                (
                    k,
                    (Nk, N_max),
                    0,
                    Yt,
                    Yv,
                    self._alphas(),
                    self.fit_intercept,
                    self._st["alpha_path"],
                    centers[k],
                    WINDOW_HALF_WIDTH,
                    self._eps,
                )
                for k in range(len(scales))
            ]
            if client is None:
                acc = accs[0]
                for f0, f1 in new:
                    acc = validation_slab(acc, f0=f0, f1=f1, **opts)
                st[3] = [acc]
                errs.append([_path_errors(acc, *a) for a in args])
                continue
            workers = worker_addresses(client)
            step = functools.partial(dask.delayed(validation_slab), **opts)
            accs, where = _chains(accs, workers, new, step)
            accs = client.persist(accs)
            st[3] = accs + [None] * (len(workers) - len(accs))
            last = errs[-1][-1] if errs else None
            total = (
                accs[0]
                if len(accs) == 1
                else tree_sum(
                    accs,
                    dask.delayed(add_validation),
                    where,
                    first=functools.partial(_gated_sum, gate=last),
                )
            )
            row = []
            with pinned(where[0]):  # where the total is: one solve at a time
                for a in args:
                    last = dask.delayed(_path_errors)(dask.delayed(_after)(total, last), *a)
                    row.append(last)
            errs.append(row)
        if client is not None:
            (errs,) = compute(
                errs, client=client, progress=self.progress, desc=f"selection (growth, N = {Nk})"
            )
        return np.moveaxis(np.asarray(errs, dtype=float), 0, -1)


def growth_checkpoints(N0, N_max):
    """The ``n_features`` the growth stage scores from ``N0``: ``N0, 2 N0, 4 N0, ...`` and
    ``N_max``."""
    return sorted({*(N0 * 2**k for k in range(int(np.log2(N_max / N0)) + 1)), N_max})


def _chains(accs, workers, slabs, step, gates=None):
    """Per worker, its accumulator (None: none yet) advanced by ``step(acc, f0=, f1=)`` (delayed)
    over its share of ``slabs`` (consecutive groups, one per worker); the accumulators that
    exist afterwards, and their workers. ``gates``: per worker, a delayed task (or None) that a
    chain starting without an accumulator waits for."""
    groups = np.array_split(np.arange(len(slabs)), len(workers))
    out, where = [], []
    for w, acc, gate, idx in zip(
        workers, accs, gates or [None] * len(workers), groups, strict=False
    ):
        with pinned(w):
            for i in idx:
                if acc is None and gate is not None:
                    acc = dask.delayed(_after)(None, gate)
                acc = step(acc, f0=slabs[i][0], f1=slabs[i][1])
        if acc is not None:
            out.append(acc)
            where.append(w)
    return out, where


def _gated_sum(a, b, gate=None):
    """The delayed :func:`rfol_dask.tuning.sum_validation` of ``a`` and ``b``, once the delayed
    ``gate`` (or None) is done."""
    return dask.delayed(sum_validation)(a if gate is None else dask.delayed(_after)(a, gate), b)


def _select(acc, keep):
    """The :func:`validation_slab` accumulator of the scales ``keep`` only."""
    return [acc[k] for k in keep]


def _path_errors(
    acc,
    k,
    segments,
    g,
    V_train,
    V_valid,
    alphas,
    fit_intercept,
    method,
    center=None,
    half_width=2,
    eps=None,
):
    """Validation errors of scale ``k`` and ``segments[g]`` features, then the alphas' rounding
    floor of that model's Gram (:func:`rfol_dask.tuning.floored_path_errors`): (n_alpha + 1,)."""
    # the Cholesky paths solve in the accumulator's own Gram and leave it as it was: no M_t^2 copy
    in_place = path_method(len(alphas), V_train.shape[0], method, center, half_width) != "eigh"
    G, K, factor = validation_grams(acc, k, segments, g, copy=not in_place)
    errs = floored_path_errors(
        G,
        K,
        V_train,
        V_valid,
        np.asarray(alphas) / factor,
        fit_intercept,
        method,
        center,
        half_width,
        eps=eps,
    )
    errs[-1] *= factor  # the floor in the alphas' units
    return errs
