"""Model selection on the training data: :class:`RandomFeatureOperatorCV` (and the shared
search behind ``baselines.KernelOperatorCV``).

A search scores every (family, scale, N, alpha) by the mean relative L2 error on validation
rows of the TRAINING data (default: the last 20 %; ``cv=`` an int or a scikit-learn splitter
for K folds), then refits the winner on all training data (``best_estimator_``). It is cheap
because (see :mod:`rfol_dask.tuning`):

- the ridge path: one eigendecomposition of each training Gram gives every alpha (or one
  Cholesky factorisation per alpha where that is cheaper: short alpha grids, large Grams);
- the validation cross-Gram is summed in the same pass over feature slabs as the Gram;
- the Gaussian, Cauchy and Student-t laws are scale families: one projection ``U Z`` per slab
  serves every gamma of a sweep; nested N come out of the same pass;
- two stages: a coarse one over the whole grid on a subsample of rows and features
  (``coarse``), then a fine one at full size around the coarse winner (``refine``); where one
  Cholesky factorisation per alpha of the five alphas around the coarse winner's is cheaper than
  an ``eigh`` (large Grams), the fine stage solves only those (widened while the best is on the
  window's edge) and the other alphas score NaN in ``cv_results_``.

dask input runs the Gram passes as one graph per stage and family on the workers, on inputs stacked and
persisted on the cluster once (without a distributed client the inputs are gathered here; the
median heuristic samples those), so the search reads the data once; the refit reads it again.
"""

from __future__ import annotations

import functools
import numbers
import time

import dask
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from . import backend
from .estimator import OperatorEstimator
from .gram import check_finite
from .features import DISTRIBUTIONS, FREQUENCY_BLOCK, draw_frequencies, integer_seed
from .memory import memory_budget
from .placement import pinned, worker_addresses
from .progress import active_client, compute
from .rf_operator import RandomFeatureOperator
from .solve.graph import tree_sum
from .tuning import (add_validation, frequency_scale, median_gammas, path_errors, slab_bounds, validation_grams,
                     validation_slab)

__all__ = ["RandomFeatureOperatorCV", "SearchResults", "SelectionCV", "DEFAULT_ALPHAS", "DEFAULT_GAMMAS"]

#: default ridge grid (the centred Gram of unit-variance features has a diagonal of about 1)
DEFAULT_ALPHAS = tuple(10.0 ** np.arange(-16, 2))
#: default multiples of the median-heuristic gamma: 4^-5 = 1/1024 to 4^2 = 16 (more than four decades)
DEFAULT_GAMMAS = tuple(4.0 ** np.arange(-5, 3))
#: default fine-stage factors around the coarse winner's scale (a grid of factor 2 there)
DEFAULT_REFINE = (0.5, 1.0, 2.0)
#: the coarse stage keeps at least this many training rows (all if there are fewer)
MIN_COARSE_ROWS = 200


class SearchResults(dict):
    """``cv_results_``: a dict of equal-length numpy arrays, one entry per candidate (row).

    ``to_dataframe()`` gives a ``pandas.DataFrame`` (pandas needed).
    """

    def to_dataframe(self):
        import pandas as pd

        return pd.DataFrame(dict(self))


def _score(row):
    """The ranking key of a results row (a NaN score ranks last)."""
    score = row["mean_test_score"]
    return -np.inf if np.isnan(score) else score


def _arrange(U, train, valid):
    """The rows ``train`` then ``valid`` of ``U`` in one float64 array (M_t + M_v, n)."""
    return np.ascontiguousarray(np.concatenate([U[train], U[valid]]), dtype=np.float64)


def _stack(starts, name, *blocks):
    """Row blocks stacked into one float64 array, checked for NaN / Inf."""
    out = np.empty((int(starts[-1]), np.shape(blocks[0])[1]))
    for i, B in enumerate(blocks):
        B = backend.to_numpy(B)  # the search runs on the host, whatever the input's device
        check_finite(B, starts[i], name)
        out[starts[i]:starts[i + 1]] = B
    return out


class SelectionCV(OperatorEstimator):
    """Base of the selection estimators (see the module docstring); not used directly.

    Subclasses give the base estimator (``_base_estimator``), the families and their median
    scale (``_families``, ``_median_scales``), the validation errors of one stage
    (``_stage_errors``) and the winner's parameters (``_params_of``).
    """

    _param_name = "gamma"  # the scale parameter of the base estimator
    _alpha_name = "alpha"  # its ridge parameter
    _distributed_search = True  # False: dask input is gathered and searched in memory

    # ------------------------------------------------------------------ delegation
    def predict(self, X, **kwargs):
        """``best_estimator_.predict`` (see the base estimator)."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X, **kwargs)

    def score(self, X, y=None, sample_weight=None):
        """``best_estimator_.score``: R^2 (use :data:`rfol_dask.metrics.relative_l2_scorer` for the
        relative L2 error)."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.score(X, y, sample_weight)

    def save(self, path):
        """Save ``best_estimator_`` (load it with the base estimator's ``load``)."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.save(path)

    @classmethod
    def load(cls, path):
        raise TypeError(f"{cls.__name__}.save writes its best_estimator_: load it with that estimator's load, "
                        "e.g. RandomFeatureOperator.load(path)")

    def _predict_kernel(self):  # pragma: no cover - predict is delegated
        return self.best_estimator_._predict_kernel()

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, input_grid=None, output_grid=None):
        """Search on the training data (``X``, ``y`` as in the base estimator's ``fit``), then
        refit the winner on all of it as ``best_estimator_``. No test data is involved."""
        t0 = time.perf_counter()
        super().fit(X, y, input_grid=input_grid, output_grid=output_grid)
        self.search_time_ = time.perf_counter() - t0
        if self.refit:
            t1 = time.perf_counter()
            self.best_estimator_ = self._base_estimator(**self.best_params_).fit(
                X, y, input_grid=input_grid, output_grid=output_grid)
            self.refit_time_ = time.perf_counter() - t1
        return self

    def _splits(self, M):
        """``[(train rows, validation rows)]`` of the training set (M samples)."""
        from sklearn.model_selection import KFold

        if self.cv is None:
            n_valid = max(1, int(round(0.2 * M)))
            splits = [(np.arange(M - n_valid), np.arange(M - n_valid, M))]
        elif isinstance(self.cv, numbers.Integral):
            splits = list(KFold(int(self.cv)).split(np.zeros((M, 1))))
        elif hasattr(self.cv, "split"):
            splits = list(self.cv.split(np.zeros((M, 1))))
        else:  # an iterable of (train, validation) index arrays
            splits = list(self.cv)
        for tr, va in splits:
            if len(tr) < 2 or len(va) < 1:
                raise ValueError(f"{type(self).__name__} needs at least 2 training and 1 validation sample per "
                                 f"split; got n_samples = {M} ({len(tr)} / {len(va)}): pass more samples or "
                                 "another cv")
        return [(np.asarray(tr), np.asarray(va)) for tr, va in splits]

    def _data(self, U, V, lazy):
        """The training data for the Gram passes: numpy arrays, or (distributed client) delayed
        stacked arrays persisted on the cluster, and the client."""
        client = active_client() if lazy and self._distributed_search else None
        if lazy:
            U = U.rechunk({1: -1})
            V = V.rechunk({0: U.chunks[0], 1: -1})
        if client is None:
            if lazy:
                U, V = compute(U, V, desc="selection (read the training data)")
            U, V = (_stack([0, X.shape[0]], name, X) for X, name in ((U, "U"), (V, "V")))
            return U, V, None
        starts = np.concatenate([[0], np.cumsum(U.chunks[0])]).astype(int)
        Us = dask.delayed(_stack)(starts, "U", *U.to_delayed().ravel())
        Vs = dask.delayed(_stack)(starts, "V", *V.to_delayed().ravel())
        Us, Vs = client.persist([Us, Vs])
        return Us, Vs, client

    def _fit_arrays(self, U, V, lazy, dtype):
        """The search: fills ``cv_results_``, ``best_params_``, ``best_score_``."""
        M = U.shape[0]
        splits = self._splits(M)
        X, Y, client = self._data(U, V, lazy)
        # the median heuristic samples the gathered (or persisted) inputs: no extra read of the data
        self._prepare(X, False, client)
        try:
            rows = self._search(X, Y, splits, client)
        finally:
            if client is not None:
                client.cancel([X, Y])
        self.cv_results_ = SearchResults({k: np.asarray([r[k] for r in rows]) for k in rows[0]})
        final = [r for r in rows if r["stage"] == rows[-1]["stage"]]
        best = max(final, key=_score)
        self.best_score_ = float(best["mean_test_score"])
        self.best_params_ = self._params_of(best)
        self.n_splits_ = len(splits)

    def _stage(self, X, Y, splits, client, family, scales, Ns, rows_used, name, alpha_center=None):
        """Rows of the results table for one family over ``scales`` x ``Ns`` x alphas (around the
        index ``alpha_center`` only, where that is cheaper: :func:`rfol_dask.tuning.path_errors`)."""
        alphas = self._alphas()
        self._alpha_center = alpha_center
        scales = self._family_multiples(family, scales)
        errs = [self._stage_errors(X, Y, tr, va, client, family, scales, Ns) for tr, va in splits]
        if client is not None:
            (errs,) = compute(errs, client=client, progress=self.progress, desc=f"selection ({name}, {family})")
        errs = np.stack([np.asarray(e) for e in errs], axis=-1)  # (scales, Ns, alphas, splits)
        out = []
        for i, mult in enumerate(scales):
            for j, N in enumerate(Ns):
                for a, alpha in enumerate(alphas):
                    e = errs[i, j, a]
                    row = {"stage": name, "family": family, "scale_multiple": float(mult),
                           self._param_name: float(mult * self.median_scales_[family]),
                           "n_features": int(N) if N is not None else -1, self._alpha_name: float(alpha),
                           "n_train_rows": int(rows_used), "mean_relative_l2": float(np.mean(e)),
                           "mean_test_score": -float(np.mean(e)), "std_test_score": float(np.std(e))}
                    row.update({f"split{k}_test_score": -float(v) for k, v in enumerate(e)})
                    out.append(row)
        return out

    def _search(self, X, Y, splits, client):
        families, mults = self._families(), np.asarray(self._multiples(), dtype=float)
        Ns = self._n_list()
        n_train = min(len(tr) for tr, _ in splits)
        frac = self.coarse
        n_coarse = n_train if frac is None else min(n_train, max(MIN_COARSE_ROWS, int(frac * n_train)))
        Nc = [None] if Ns == [None] or frac is None else [min(Ns[-1], max(FREQUENCY_BLOCK, int(frac * Ns[-1])))]
        coarse = (n_coarse < n_train or Nc[0] not in (None, Ns[-1])) and len(families) * len(mults) > len(self.refine)
        rows = []
        if coarse:
            rng = np.random.default_rng(self._seed)
            sub = []
            for tr, va in splits:
                k = min(len(tr), n_coarse)
                sub.append((np.sort(rng.choice(tr, k, replace=False)),
                            np.sort(rng.choice(va, max(1, round(len(va) * k / len(tr))), replace=False))))
            for fam in families:
                rows += self._stage(X, Y, sub, client, fam, mults, Nc, len(sub[0][0]), "coarse")
            best = max(rows, key=_score)
            # a winner on the edge of the grid: extend the grid that way (two steps at a time, at most 3 times)
            step = float(np.max(mults) / np.min(mults)) ** (1 / max(1, len(mults) - 1)) if len(mults) > 1 else 4.0
            for _ in range(3):
                fam = best["family"]
                tried = [r["scale_multiple"] for r in rows if r["family"] == fam]
                if len(self._family_multiples(fam, mults)) < 2 or min(tried) < best["scale_multiple"] < max(tried):
                    break
                edge, sign = (min(tried), -1) if best["scale_multiple"] == min(tried) else (max(tried), 1)
                rows += self._stage(X, Y, sub, client, fam, edge * step ** (sign * np.arange(1, 3)), Nc,
                                    len(sub[0][0]), "coarse")
                best = max(rows, key=_score)
            families = [best["family"]]
            mults = best["scale_multiple"] * np.asarray(self.refine, dtype=float)
            # the fine stage solves the alphas around the coarse winner's where that is cheaper
            center = int(np.argmin(np.abs(np.log(self._alphas()) - np.log(best[self._alpha_name]))))
        else:
            center = None
        name = "fine" if coarse else "full"
        for fam in families:
            rows += self._stage(X, Y, splits, client, fam, mults, Ns, len(splits[0][0]), name, center)
        ranks = {}
        for stage in {r["stage"] for r in rows}:
            part = [r for r in rows if r["stage"] == stage]
            order = np.argsort([-_score(r) for r in part], kind="stable")
            for rank, k in enumerate(order, start=1):
                ranks[id(part[k])] = rank
        for r in rows:
            r["rank_test_score"] = ranks[id(r)]
        return rows

    # ------------------------------------------------------------------ hooks
    def _check_grids(self, *names):
        """ValueError unless each named parameter is None or a non-empty sequence of positive numbers."""
        for name in names:
            values = getattr(self, name)
            if values is not None and (len(values) == 0 or not np.all(np.asarray(values, dtype=float) > 0)):
                raise ValueError(f"{name} must be a non-empty sequence of positive numbers; got {values!r}")

    def _family_multiples(self, family, mults):
        return mults

    def _n_list(self):
        return [None]

    def _alphas(self):
        alphas = getattr(self, self._alpha_name + "s")
        return np.asarray(DEFAULT_ALPHAS if alphas is None else alphas, dtype=float)


class RandomFeatureOperatorCV(SelectionCV):
    """RandomFeatureOperator with its law, gamma and alpha chosen by validation on the training data.

    Searches ``distribution`` x ``gamma`` x ``alpha`` (and optionally ``n_features``) of
    :class:`~rfol_dask.RandomFeatureOperator`, then refits the winner on all training data.

    Parameters
    ----------
    n_features : int or sequence of int, default=1000
        ``N``; a sequence is searched too (nested models of one draw, one pass for all).
    distributions : sequence of {"cauchy", "gaussian", "student_t"}, default=("cauchy", "gaussian")
        Frequency laws searched.
    gammas : sequence of float, default=None
        Multiples of each law's median-heuristic gamma (:func:`rfol_dask.tuning.median_gamma`);
        default ``4^-5 ... 4^2`` (:data:`DEFAULT_GAMMAS`, more than four decades).
    alphas : sequence of float, default=None
        Ridge values (> 0); default ``1e-16 ... 10`` (:data:`DEFAULT_ALPHAS`; the paper's
        advection settings use 1e-15).
    nu : float, default=None
        Degrees of freedom for ``"student_t"``.
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

    def _prepare(self, U, lazy, client=None):
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

    def _stage_errors(self, X, Y, train, valid, client, law, mults, Ns):
        """Validation errors (len(mults), len(Ns), n_alpha) of one split, or their delayed value."""
        N = Ns[-1]
        freq = functools.partial(draw_frequencies, self.n_features_in_, N, law, 1.0, self.nu, self._seed)
        scales = [frequency_scale(law, m * self.median_scales_[law]) for m in mults]
        M_t, M_v = len(train), len(valid)
        per = 8.0 * (M_t + M_v) * M_t * len(Ns)
        budget = memory_budget(self.max_gram_bytes, client).bytes
        group = max(1, int(0.5 * budget // per))
        slabs = slab_bounds(N, M_t + M_v, Ns)
        args = (self._alphas(), self.fit_intercept, self.alpha_path, self._alpha_center)
        if client is None:
            Xa, Yt, Yv = _arrange(X, train, valid), Y[train], Y[valid]
            out = []
            for g0 in range(0, len(scales), group):
                sc = scales[g0:g0 + group]
                acc = None
                for f0, f1 in slabs:
                    acc = validation_slab(acc, Xa, M_t, freq, N, f0, f1, sc, Ns, self.fit_intercept)
                out += [[_path_errors(acc, k, Ns, g, Yt, Yv, *args) for g in range(len(Ns))] for k in range(len(sc))]
            return np.asarray(out)
        workers = worker_addresses(client)
        Xa = dask.delayed(_arrange)(X, train, valid)
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
