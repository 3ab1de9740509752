"""Model selection on the training data: the search shared by
:class:`rfol_dask.RandomFeatureOperatorCV` and ``baselines.KernelOperatorCV``.

Every (family, scale, N, alpha) is scored by the mean relative L2 error on validation rows of the
training data, in stages (:mod:`rfol_dask.stages`), on the ridge paths of :mod:`rfol_dask.tuning`;
the winner is refitted on all training data (``best_estimator_``). dask input is stacked and
persisted on the cluster once (gathered here without a distributed client) and the Gram passes run
as one graph per stage and family on the workers.
"""

from __future__ import annotations

import numbers
import time
import warnings

import dask
import numpy as np
from dask.array.utils import meta_from_array
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from . import backend
from .estimator import OperatorEstimator, all_or_nothing
from .exceptions import SelectionWarning
from .gram import stack_rows
from .linalg import recorded_ridges
from .memory import DEVICE_SHARE, check_gram_memory, gram_device, memory_budget
from .params import Interval, StrOptions, validate_parameter_constraints
from .progress import active_client, compute, release
from .stacklevel import user_stacklevel
from .stages import StagedSearch, _rank, _score, final_best

__all__ = [
    "SearchResults",
    "SelectionCV",
    "DEFAULT_ALPHAS",
    "DEFAULT_GAMMAS",
    "DEFAULT_REFINE",
    "DEVICE_SHARE",
    "arrange_rows",
    "sketch_outputs",
]

#: default ridge grid (the centred Gram of unit-variance features has a diagonal of about 1), in
#: exact decimals (1e-05, not 10.0 ** -5)
DEFAULT_ALPHAS = tuple(float(f"1e{k}") for k in range(-16, 2))
#: default multiples of the median-heuristic gamma: 4^-5 = 1/1024 to 4^2 = 16
DEFAULT_GAMMAS = tuple(4.0 ** np.arange(-5, 3))
#: default fine-stage factors around the coarse winner's scale (a grid of factor 2 there)
DEFAULT_REFINE = (0.5, 1.0, 2.0)


class SearchResults(dict):
    """``cv_results_``: a dict of equal-length numpy arrays, one entry per candidate (row);
    ``to_dataframe()`` (pandas) and ``to_xarray()`` (dimension ``candidate``) convert it."""

    def to_dataframe(self):
        import pandas as pd

        return pd.DataFrame(dict(self))

    def to_xarray(self):
        import xarray as xr

        return xr.Dataset({k: ("candidate", np.asarray(v)) for k, v in self.items()})


def sketch_outputs(V, k, seed=None):
    """``V S`` (M, k): the outputs (M, m) times a Gaussian sketch ``S`` (m, k) of variance ``1 / k``
    from ``seed``. Ridge predictions are linear in the training outputs, so a search on ``V S``
    scores each model's predictions sketched alike (``||v S||^2`` estimates ``||v||^2``)."""
    S = np.random.default_rng(seed).standard_normal((V.shape[1], k)) / np.sqrt(k)
    return V @ (S if isinstance(V, np.ndarray) else backend.to_namespace(S, backend.namespace(V)))


def arrange_rows(U, train, valid):
    """The rows ``train`` then ``valid`` of ``U`` in one new float64 array, where ``U`` lives."""
    if isinstance(U, np.ndarray):
        return np.ascontiguousarray(np.concatenate([U[train], U[valid]]), dtype=np.float64)
    return backend.take_rows(U, np.concatenate([train, valid]))


class SelectionCV(StagedSearch, OperatorEstimator):
    """Base of the selection estimators (see the module docstring); not used directly.

    Subclasses give the base estimator (``_base_estimator``), the families (``_families``;
    ``_set_metric`` sets their ``median_scales_``), the validation errors of one stage
    (``_stage_errors``) and the winner's parameters (``_params_of``).
    """

    _param_name = "gamma"  # the scale parameter of the base estimator
    _alpha_name = "alpha"  # its ridge parameter
    _distributed_search = True  # False: dask input is gathered and searched in memory
    _narrower = 1  # the direction of narrower kernels: +1 a larger gamma, -1 a shorter length
    #: the settings of the stages (``stages=``, a dict of some of them) and their defaults
    _stage_constraints = {
        "coarse": [Interval(numbers.Real, 0, 1, closed="right"), None],
        "fine": [Interval(numbers.Real, 0, 1, closed="right"), None],
        "refine": ["array-like"],
        "alpha_path": [StrOptions({"auto", "eigh", "cholesky"})],
    }
    _stage_defaults: dict = {}
    _base_class = OperatorEstimator  # the estimator refitted
    _refit_keys: tuple = ()  # its settings that ``refit`` (a dict) may give

    def _check_params(self):
        """The parameters, the stage settings (``_st``: ``stages`` over defaults) and ``refit``."""
        self._validate_params()
        for what, given, allowed in (
            ("stages", self.stages, self._stage_defaults),
            ("refit", self.refit, self._refit_keys),
        ):
            unknown = sorted(set({} if given in (None, True, False) else given) - set(allowed))
            if unknown:
                raise ValueError(
                    f"unknown setting {unknown[0]!r} in {what}; choose from {sorted(allowed)}"
                )
        self._st = {**self._stage_defaults, **(self.stages or {})}
        validate_parameter_constraints(self._stage_constraints, self._st, "stages")
        self._check_grids(refine=self._st["refine"])
        powers = self._powers()
        if not powers or not all(
            q is None or (isinstance(q, numbers.Real) and np.isfinite(q)) for q in powers
        ):
            raise ValueError(
                "pca_power must be None, a number or a non-empty sequence of them, "
                f"got {self.pca_power!r}"
            )
        probe = self._base_class(**self._refit_settings())
        probe._validate_params()
        probe._check_recovery()

    def _refit_settings(self):
        return {} if isinstance(self.refit, bool) else dict(self.refit)

    def _refitted(self, method):
        """``best_estimator_``; NotFittedError saying why where there is none."""
        if not hasattr(self, "best_estimator_") and hasattr(self, "best_params_"):
            name = type(self).__name__
            seed = (
                " and random_state=random_state_ (the searched frequencies)"
                if hasattr(self, "random_state_")
                else ""
            )
            raise NotFittedError(
                f"This {name} instance was initialized with refit=False: {method} is available "
                "only after refitting on the best parameters; fit again with refit=True, or fit "
                f"{name.removesuffix('CV')} with best_params_{seed} yourself"
            )
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict(self, X, **kwargs):
        """``best_estimator_.predict`` (see the base estimator)."""
        return self._refitted("predict").predict(X, **kwargs)

    def score(self, X, y=None, sample_weight=None, **kwargs):
        """``best_estimator_.score``: R^2 (use :data:`rfol_dask.metrics.relative_l2_scorer` for the
        relative L2 error)."""
        return self._refitted("score").score(X, y, sample_weight, **kwargs)

    def save(self, path):
        """Save ``best_estimator_`` (load it with the base estimator's ``load``)."""
        return self._refitted("save").save(path)

    @classmethod
    def load(cls, path):
        raise TypeError(
            f"{cls.__name__}.save writes its best_estimator_: load it with that estimator's load, "
            f"{cls.__name__.removesuffix('CV')}.load(path)"
        )

    def _predict_kernel(self):  # pragma: no cover - predict is delegated
        return self.best_estimator_._predict_kernel()

    def fit(self, X, y=None, *, input_grid=None, output_grid=None, periods=None, **fit_params):
        """Search on the training data (``X``, ``y``, the grids, ``periods`` and ``fit_params``
        as in the base estimator's ``fit``: ``sample_weight`` is not supported), then refit the
        winner on all of it as ``best_estimator_``. No test data is involved. A search or refit
        that raises or is interrupted leaves the estimator as it was before (the previous search's
        results and ``best_estimator_`` together, or unfitted)."""
        kw = dict(input_grid=input_grid, output_grid=output_grid, periods=periods, **fit_params)
        with all_or_nothing(self) as work:  # on a copy published whole
            t0 = time.perf_counter()
            work._fit(X, y, **kw)
            work.search_time_ = time.perf_counter() - t0
            if self.refit is not False:
                t1 = time.perf_counter()
                work.best_estimator_ = work._refit_best(X, y, **kw)
                work.refit_time_ = time.perf_counter() - t1
            else:  # an earlier fit's winner would predict for this one's best_params_
                work.__dict__.pop("best_estimator_", None)
                work.__dict__.pop("refit_time_", None)
        return self

    def _refit_best(self, X, y, **kwargs):
        """The winner fitted on all training data. Where that Gram (more rows than the search's)
        cannot take the validated alpha, the best candidate of the winner's stage validated at the
        ridge used or above is refitted instead and becomes ``best_index_``, ``best_score_`` and
        ``best_params_``; without one, ``best_params_`` takes the ridge used. Warned either way."""
        name, res = self._alpha_name, self.cv_results_
        while True:
            with recorded_ridges() as raised:
                est = self._base_estimator(**self.best_params_).fit(X, y, **kwargs)
            for w in raised:
                warnings.warn(w, stacklevel=user_stacklevel())
            used = [w.ridge for w in raised if w.alpha == self.best_params_[name]]
            if not used:
                return est
            fitted = {**self.best_params_, name: used[0]}
            same = [res[k] == res[k][self.best_index_] for k in ("stage", "pca_power") if k in res]
            ok = np.logical_and.reduce([*same, res[name] >= used[0]])
            ok &= ~np.isnan(res["mean_test_score"])
            if ok.any():
                i = int(np.flatnonzero(ok)[np.argmax(res["mean_test_score"][ok])])
                self.best_index_, self.best_score_ = i, float(res["mean_test_score"][i])
                self.best_params_ = self._params_of({k: v[i] for k, v in res.items()})
            if not ok.any() or self.best_params_ == fitted:  # what was just fitted is the model
                self.best_params_ = fitted
                return est.set_params(**{name: used[0]})

    def _cast_dtype(self, data):
        """float64, the search's, whatever ``dtype`` says."""
        self._work_dtype(data)  # a bad dtype is refused before any work
        return np.dtype(np.float64)

    def _refit_dtype(self):
        """``dtype``, else float64 (a float32 refit could not take the ridges float64 validates)."""
        return np.dtype(self.dtype or np.float64)

    def _data(self, U, V, lazy):
        """``(U, V, client)``: the training data in float64 where the search runs, or (distributed
        client) stacked and persisted on the cluster."""
        client = active_client() if lazy and self._distributed_search else None
        device = self._device()
        if lazy:
            U = U.rechunk({1: -1})
            V = V.rechunk({0: U.chunks[0], 1: -1})
        if client is None:
            if lazy:
                U, V = compute(U, V, desc="selection (read the training data)")
            U, V = (
                stack_rows([0, X.shape[0]], np.float64, device, X, name=name)
                for X, name in ((U, "U"), (V, "V"))
            )
            return U, V, None
        starts = np.concatenate([[0], np.cumsum(U.chunks[0])]).astype(int)
        Us = dask.delayed(stack_rows)(starts, np.float64, device, *U.to_delayed().ravel(), name="U")
        Vs = dask.delayed(stack_rows)(starts, np.float64, device, *V.to_delayed().ravel(), name="V")
        Us, Vs = client.persist([Us, Vs])
        return Us, Vs, client

    def _search_memory(self, M_t, M_v):
        """``{what: bytes}`` the search holds beside one ``M_t x M_t`` training Gram (float64)."""
        return {}

    def _search_budget(self, client):
        """The memory budget of the search's Grams, by the fits' rule (``memory_budget``)."""
        return memory_budget(self.max_gram_bytes, client, device=self._grams_on)

    def _refit_candidates(self):
        """``(name, values)``: the base estimator's parameter by which the refits differ in memory,
        and the values a winner may take."""
        return None, [None]

    def _check_refit_memory(self, U, V, lazy, dtype):
        """With ``refit``, before the search, the error the base estimator's ``_check_memory`` would
        raise for the refit of any candidate, naming every value it would refuse."""
        if self.refit is False:
            return
        client = active_client() if lazy else None
        name, values = self._refit_candidates()
        refused = []
        for value in values:
            est = self._base_estimator(**({} if name is None else {name: value}))
            try:
                est._check_memory(U, V, lazy, dtype, client)
            except (ValueError, NotImplementedError) as exc:
                refused.append((value, exc))
        if not refused:
            return
        # a refit that cannot run at all is named first, with its type
        first = [e for _, e in refused if isinstance(e, NotImplementedError)] or [refused[0][1]]
        first = first[0]
        leave = ": leave those out of the search" if len(refused) < len(values) else ""
        at = "" if name is None else f" at {name}={', '.join(str(v) for v, _ in refused)} (of "
        at += "" if name is None else f"{', '.join(map(str, values))}{leave})"
        why = " for memory" if isinstance(first, ValueError) else ""
        raise type(first)(
            f"{type(self).__name__} would refit its winner on all {U.shape[0]} training samples "
            f"after the search, and that refit would be refused{why}{at}: {first}; or pass "
            "refit=False to search only"
        ) from first

    def _fit_arrays(self, U, V, lazy, dtype):
        """The search: fills ``cv_results_``, ``best_params_``, ``best_score_``."""
        splits = self._splits(U.shape[0])
        self._seed_search()
        self._eps = float(np.finfo(self._refit_dtype()).eps)  # no alpha the refit cannot use
        self._grams_on = gram_device(self._device(), meta_from_array(U))  # where the Grams live
        # before the data are read: the search's least peak on its largest split, then the refit
        M_t, M_v = max((len(tr), len(va)) for tr, va in splits)
        client = active_client() if lazy and self._distributed_search else None
        on, held = self._grams_on, self._search_memory(M_t, M_v)
        check_gram_memory(
            M_t, np.float64, self.max_gram_bytes, client, "search", device=on, held=held
        )
        self._check_refit_memory(U, V, lazy, self._refit_dtype())
        X, Y, client = self._data(U, V, lazy)
        splits = self._scored_splits(splits, Y, client)
        values, column = self._powers(), None if self.pca_power is None else "pca_power"
        k = self._st.get("score_outputs")
        # score on a sketch of the outputs (the refit sees them all)
        if k is not None and k < V.shape[1]:
            seed = getattr(self, "_seed", None)
            if client is None:
                Y = sketch_outputs(Y, k, seed)
            else:
                # the full outputs are released with their last reference (cancelling them would
                # cancel the sketch too)
                (Y,) = client.persist([dask.delayed(sketch_outputs)(Y, k, seed)])
        searches = []  # (metric value, its rows): one whole search per value, on the same data
        try:
            for value in values:
                self._set_metric(X, client, value)
                rows = self._search(X, Y, splits, client)
                rows += self._extend(X, Y, splits, client, rows)
                if column is not None:
                    for r in rows:
                        r[column] = value
                searches.append((value, rows))
            value, best = max(
                ((v, final_best(r)) for v, r in searches), key=lambda vb: _score(vb[1])
            )
            if len(values) > 1:
                self._set_metric(X, client, value)  # the winner's metric (and median scales) stay
        finally:
            if client is not None:
                from distributed import futures_of

                release(futures_of([X, Y]))  # not client.cancel: see progress.release
        rows = [r for _, part in searches for r in part]
        name = self._alpha_name
        if all(r[name] < r[f"{name}_floor"] for r in rows):
            raise ValueError(
                f"every {name} searched is below the rounding floor of its Gram (2 eps trace / "
                f"sqrt(M_t), up to {max(r[f'{name}_floor'] for r in rows):.3g}), where the "
                f"validation predictions are dominated by rounding: search {name}s at or above it"
            )
        _rank(rows)
        self.cv_results_ = SearchResults({k: np.asarray([r[k] for r in rows]) for k in rows[0]})
        self.best_index_ = next(i for i, r in enumerate(rows) if r is best)
        self.best_score_ = float(best["mean_test_score"])
        self.best_params_ = self._params_of(best)
        self.n_splits_ = len(splits)
        self._warn_floor(best)

    def _warn_floor(self, best):
        """A warning where the winner's alpha is the smallest of the user's grid at or above the
        rounding floor of its Gram and smaller ones were left out (the default grid: silently)."""
        name = self._alpha_name
        if getattr(self, name + "s") is None:
            return
        floor, alphas = best[f"{name}_floor"], self._alphas()
        below, above = alphas[alphas < floor], alphas[alphas >= floor]
        if len(below) and len(above) and best[name] == above.min():
            warnings.warn(
                f"the best {name}, {best[name]:g}, is the smallest searched one above the rounding "
                f"floor of its Gram ({name}_floor = {floor:.3g}: 2 eps trace / sqrt(M_t)); the "
                f"{len(below)} smaller {name}s were not scored (NaN in cv_results_): below it the "
                f"Gram's rounding, amplified by 1 / {name}, can dominate the validation "
                "predictions",
                SelectionWarning,
                stacklevel=user_stacklevel(),
            )

    def _powers(self):
        """``pca_power`` as the list of values searched, a whole search each on the same data."""
        q = self.pca_power
        return list(q) if isinstance(q, (list, tuple, np.ndarray)) else [q]

    def _set_metric(self, X, client, value):
        """Make ``value`` the metric of the next search (and set ``median_scales_``)."""

    def _check_grids(self, **grids):
        """ValueError unless each grid is None or a non-empty sequence of positive finite values."""
        for name, values in grids.items():
            if values is None:
                continue
            v = np.asarray(values, dtype=float)
            if v.size == 0 or not np.all(np.isfinite(v) & (v > 0)):
                raise ValueError(
                    f"{name} must be a non-empty sequence of positive, finite numbers; got "
                    f"{values!r}"
                )

    def _alphas(self):
        alphas = getattr(self, self._alpha_name + "s")
        return np.asarray(DEFAULT_ALPHAS if alphas is None else alphas, dtype=float)
