"""The estimator base of the operator learners: fit, predict, score, save and load. Subclasses
supply ``_fit_arrays(U, V, lazy, dtype)`` and ``_predict_kernel()`` (block function, arrays)."""

from __future__ import annotations

import contextlib
import functools
import numbers
import os
from collections.abc import Mapping, Sequence

import dask.array as da
import numpy as np
import xarray as xr
from dask.array.utils import meta_from_array
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from . import backend, inputs, io, persistence, stores
from . import recovery as rec
from .metrics import r2_score
from .params import Interval, StrOptions
from .placement import broadcast, worker_addresses
from .progress import active_client
from .resampling import ResamplingMixin

#: the types of the functions, data sets, grids and periods ``fit`` / ``predict`` take
Functions = ArrayLike | da.Array | xr.DataArray
Data = Functions | xr.Dataset | str | os.PathLike
Grid = Sequence[ArrayLike] | Mapping[str, ArrayLike]
Periods = float | Sequence[float | None] | Mapping[str, float | None]
#: the names a model remembers, and their defaults (models saved before they were kept)
NAMES = {"input_name_": "input", "output_name_": "output", "sample_dim_": "sample"}


@contextlib.contextmanager
def all_or_nothing(estimator):
    """Fit on the shallow copy this yields, whose ``__dict__`` replaces the estimator's when it
    ends: a failed fit leaves the previous model whole."""
    work = object.__new__(type(estimator))
    work.__dict__.update(vars(estimator))
    yield work
    estimator.__dict__ = vars(work)


def _published(estimator):
    """A view sharing the model's current ``__dict__``, which a concurrent fit replaces whole."""
    view = object.__new__(type(estimator))
    view.__dict__ = vars(estimator)
    return view


def _on(args, xp):
    """The arrays among ``args`` (fitted arrays of a predict kernel) as arrays of ``xp``."""
    moved = (isinstance(a, np.ndarray) or backend.is_array_api(a) for a in args)
    return tuple(backend.to_namespace(a, xp) if m else a for a, m in zip(args, moved, strict=True))


def _predict_chunk(blk, labels, p, *, block, device, name, sample_dim):
    """One chunk of a lazy prediction: CuPy chunks on their GPU, numpy ones on ``device``."""
    on_host = not backend.is_array_api(blk)
    xp = backend.device_namespace(device) if on_host else backend.namespace(blk)
    blk = backend.to_namespace(np.asarray(blk) if on_host else blk, xp)
    if not bool(xp.all(xp.isfinite(blk))):
        raise inputs.bad_samples(blk, np.ravel(labels), name, sample_dim, "predicting", part=True)
    Y = block(blk, *_on(p, xp))
    return backend.to_numpy(Y) if on_host else Y


class OperatorEstimator(ResamplingMixin, RegressorMixin, BaseEstimator):
    """Base of the operator learners (see the module docstring); not used directly."""

    _fitted_arrays: tuple = ("intercept_",)
    _fitted_scalars: tuple = tuple(NAMES)
    #: the constraints of the parameters every operator learner has (subclasses add theirs)
    _common_constraints: dict = {
        "fit_intercept": ["boolean"],
        "dtype": [StrOptions({"float32", "float64"}), type, np.dtype, None],
        "column_block": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "max_gram_bytes": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "progress": ["boolean"],
        "recovery": [StrOptions(set(rec.KINDS)), dict, tuple],
        "device": [StrOptions(set(backend.DEVICES))],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = tags.target_tags.single_output = True
        tags.input_tags.allow_nan = False
        return tags

    def _model_format(self):  # the lowest model format that reads this model right
        return 2

    def _older_scalars(self):  # fitted scalars of models saved before they were kept
        return dict(NAMES)

    def _names(self, *given):
        """The input and output variables and the sample dim: ``given``, else the model's."""
        return tuple(g or getattr(self, k, NAMES[k]) for g, k in zip(given, NAMES, strict=True))

    def _work_dtype(self, data):
        if self.dtype is not None:
            if (dt := np.dtype(self.dtype)) not in (np.float32, np.float64):
                raise ValueError(f"dtype must be float32 or float64, got {dt}")
            return dt
        dt = getattr(data, "dtype", None)
        dt = backend.to_numpy_dtype(dt) if dt is not None and backend.is_array_api(data) else dt
        return np.dtype(np.float32 if dt == np.float32 else np.float64)

    def _cast_dtype(self, data):
        return self._work_dtype(data)

    def _check_params(self):
        self._validate_params()
        self._check_recovery()

    def _device(self):
        return backend.check_device(getattr(self, "device", "cpu"))

    def fit(
        self,
        X: Data,
        y: Functions | None = None,
        *,
        input_grid: Grid | None = None,
        output_grid: Grid | None = None,
        periods: Periods | None = None,
        input: str | None = None,
        output: str | None = None,
        sample_dim: str | None = None,
        **fit_params,
    ) -> OperatorEstimator:
        """Fit the operator on pairs of input and output functions.

        numpy input is fitted in memory, dask input by one dask graph (on the active
        ``distributed.Client`` if any) unless it is under a tenth of the available memory.
        xarray ``X`` and ``y`` are paired by their sample labels, their grid dims by name. A fit
        that raises or is interrupted leaves the estimator as it was.

        Parameters
        ----------
        X : array-like, dask array or DataArray (M, n) or (M, *input_grid); Dataset or str
            The ``M`` input functions. A Dataset, or the path of a Zarr store or NetCDF file,
            gives ``X`` and ``y`` (its variables ``input`` and ``output``).
        y : array-like, dask array or DataArray (M,), (M, m) or (M, *output_grid), default=None
            The output functions; None only with a Dataset / store ``X``.
        input_grid, output_grid : sequence of 1-D arrays or mapping dim -> 1-D array, default=None
            The training grids of numpy / dask input (an increasing array per axis).
        periods : float, sequence of (float or None) or mapping dim -> float, default=None
            Periodic grid axes: one period for all, one per axis (None: not periodic) or by
            dim; default: the coordinates' ``period`` attributes.
        input, output : str, default=None
            The variables of a Dataset or store ``X`` (default ``"input"``, ``"output"``).
        sample_dim : str, default=None
            The dim of DataArrays that runs over the samples (default ``"sample"``).
        **fit_params : dict
            ``sample_weight=None`` only (weights are a ValueError, other keywords a TypeError).

        Returns
        -------
        OperatorEstimator
            ``self``, fitted.

        Raises
        ------
        ValueError
            If the samples of ``X`` and ``y`` differ, a variable or dim is not found, the data
            hold NaN / Inf (the samples are named), or the Gram does not fit in memory.
        TypeError
            For an unknown keyword, or data that are not real numbers.
        """
        kw = dict(input=input, output=output, sample_dim=sample_dim, **fit_params)
        with all_or_nothing(self) as work:
            work._fit(X, y, input_grid=input_grid, output_grid=output_grid, periods=periods, **kw)
        return self

    def _fit(self, X, y=None, *, input_grid=None, output_grid=None, periods=None, **kwargs):
        given = [kwargs.pop(k, None) for k in ("input", "output", "sample_dim")]
        if unknown := sorted(set(kwargs) - {"sample_weight"}):
            msg = f"{type(self).__name__}.fit() got an unexpected keyword argument {unknown[0]!r}"
            raise TypeError(msg)
        if kwargs.get("sample_weight") is not None:
            raise ValueError("sample_weight is not supported")
        self._check_params()
        *names, sample_dim = (g or d for g, d in zip(given, NAMES.values(), strict=True))
        U, V = io.read_pair(X, y, tuple(names), sample_dim)
        if V is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "call fit(X, y), or fit(dataset, input=..., output=...)"
            )
        labels = [inputs.own_name(a, d) for a, d in ((U, "X"), (V, "y"))]
        U = io.named(U, labels[0], sample_dim)
        V = io.align_samples(U, io.named(V, labels[1], sample_dim))
        u, v = io.as_operand(U, "U"), io.as_operand(V, "V")
        self.input_name_ = given[0] or (labels[0] if labels[0] != "X" else "input")
        self.output_name_ = given[1] or (labels[1] if labels[1] != "y" else "output")
        self.sample_dim_ = sample_dim
        try:
            Ud, Vd, in_shape, out_shape, lazy = inputs.fit_data(self, u, v)
            self._learn_grids(u, v, V, in_shape, out_shape, input_grid, output_grid, periods)
            if lazy and (client := active_client()) is not None:
                worker_addresses(client)  # a cluster without workers: waited for, else an error
            self._fit_arrays(Ud, Vd, lazy, self._work_dtype(Ud))
        except ValueError as exc:
            if "NaN or infinity" not in str(exc):
                raise
            # every bad sample, by label: a second pass on this error only
            ops = zip((u, v), labels, strict=True)
            found = (
                inputs.bad_samples(o.data, inputs.sample_labels(o), n, sample_dim) for o, n in ops
            )
            if errors := [str(e) for e in found if e is not None]:
                raise ValueError("; ".join(errors)) from exc
            raise
        inputs.check_fitted_finite(self)
        return self

    def predict(
        self,
        X: Data,
        *,
        input_grid: Grid | None = None,
        output_grid: Grid | None = None,
        input: str | None = None,
        sample_dim: str | None = None,
    ) -> np.ndarray | da.Array | xr.DataArray:
        """Predict the output functions of input functions ``X``.

        numpy in, numpy out; dask in, lazy out (chunks follow ``X``); xarray predictions carry
        the sample labels and the output grid, DataArray grid dims matched by name. It predicts
        with the model fitted when it was called, whatever a refit in another thread does.

        Parameters
        ----------
        X : array-like, dask array or DataArray (M, n) or (M, *input_grid); Dataset or str
            The input functions (a Dataset, Zarr store or NetCDF path: its input variable);
            arrays are read by position, a DataArray by its dims and coordinates.
        input_grid : sequence of 1-D arrays or mapping dim -> 1-D array, default=None
            The grid of numpy / dask ``X`` if not the training grid (resampled by ``R_U``).
        output_grid : sequence of 1-D arrays or mapping dim -> 1-D array, default=None
            Return the prediction on this grid (through ``R_V``).
        input : str, default=None
            The input variable of a Dataset or store ``X`` (default: ``input_name_``).
        sample_dim : str, default=None
            The sample dim of a DataArray ``X`` (default: ``sample_dim_``).

        Returns
        -------
        ndarray, dask array or DataArray of shape (M, *output_grid)
            The predictions in the working dtype, in the kind of ``X``.

        Raises
        ------
        ValueError
            If ``X`` has the wrong width, dims, grid labels or grid, holds NaN / Inf (the
            samples are named), or numpy predictions would not fit the available memory.
        TypeError
            If ``X`` holds complex or non-numeric values.
        """
        check_is_fitted(self)
        model = _published(self)
        name, _, sample_dim = model._names(input, None, sample_dim)
        if isinstance(X, (str, os.PathLike)) or hasattr(X, "data_vars"):
            X, _ = io.read_pair(X, names=(name, None), sample_dim=sample_dim)
        else:
            stores.check_sources(X)  # a missing chunk file: an error, not its fill value
        Y = model._predict(X, input_grid, output_grid, sample_dim)
        if isinstance(Y, xr.DataArray) and sample_dim != "sample":
            return Y.rename({"sample": sample_dim})
        return Y

    def _predict(self, U, input_grid, output_grid, sample_dim):
        """:meth:`predict` of the fitted model, its DataArrays' sample dim named ``sample``."""
        inputs.check_coordinate_order(self)
        name = inputs.own_name(U, "X")
        U = io.named(U, name, sample_dim, self.input_dims_, self.input_shape_)
        U = io.match_grid_labels(U, self.input_coords_, self.input_grid_, name)
        u = io.as_operand(U, name, sort=self._knows_grid("input"))
        new_grid = self._new_output_grid(output_grid)  # before anything is resampled or allocated
        inputs.check_prediction_memory(self, u.data, new_grid)  # numpy, before any resampling
        u = self._to_training_grid(U, u, input_grid)
        where = (inputs.sample_labels(u), name, sample_dim)
        if isinstance(u.data, da.Array):
            Y = self._predict_lazy(u.data, u.grid_shape, *where)
        else:  # array API arrays where they live; numpy on ``device``, numpy out
            X = inputs.predict_rows(self, u, *where)
            block, args = self._predict_kernel()
            here = backend.is_array_api(X)
            xp = backend.namespace(X) if here else backend.device_namespace(self._device())
            Y = block(backend.to_namespace(X, xp), *_on(args, xp))
            Y = Y if here else backend.to_numpy(Y)
        return self._output_on_grid(Y, u, output_grid, new_grid)

    def _predict_lazy(self, X, grid_shape, labels, name, sample_dim):
        """The lazy prediction of the dask array ``X`` (M, n): one task per sample chunk."""
        if X.ndim != 2:
            raise ValueError(f"X must be at least 2-D (n_samples, ...), got shape {X.shape}")
        inputs.refuse_not_real(X, name)
        inputs.check_width(self, X.shape[1], grid_shape)
        if self._device() != "cpu" and active_client() is None:  # computed here: say what lacks
            backend.device_namespace(self._device())
        X = X.rechunk({1: -1})
        labels = np.arange(X.shape[0]) if labels is None else np.asarray(labels)
        labels = da.from_array(labels[:, None], chunks=(X.chunks[0], 1))
        block, args = self._predict_kernel()
        (params,) = broadcast(active_client(), _on(args, np))  # shipped once, not in every task
        kw = dict(block=block, device=self._device(), name=name, sample_dim=sample_dim)
        run = functools.partial(_predict_chunk, **kw)
        dtype = backend.to_numpy(self.intercept_).dtype
        cupy = backend.is_array_api(meta_from_array(X))  # CuPy chunks: CuPy out
        meta = meta_from_array(X, ndim=2, dtype=dtype) if cupy else None
        chunks = (X.chunks[0], (self.intercept_.shape[0],))
        return da.map_blocks(run, X, labels, params, chunks=chunks, dtype=dtype, meta=meta)

    def score(
        self,
        X: Data,
        y: Functions | None = None,
        sample_weight: None = None,
        *,
        input: str | None = None,
        output: str | None = None,
        sample_dim: str | None = None,
    ) -> float:
        """Return the coefficient of determination R^2 of ``predict(X)`` against ``y``.

        Parameters
        ----------
        X : array-like, dask array or DataArray (M, n) or (M, *input_grid); Dataset or str
            Test input functions; a Dataset, Zarr store or NetCDF path holds both.
        y : array-like, dask array or DataArray (M,), (M, m) or (M, *output_grid), default=None
            True output functions; None only with a Dataset / store ``X``.
        sample_weight : None, default=None
            Not supported (anything but None raises ValueError).
        input, output : str, default=None
            The variables of a Dataset or store ``X`` (default: the model's).
        sample_dim : str, default=None
            The sample dim of DataArrays (default: the model's ``sample_dim_``).

        Returns
        -------
        float
            R^2 of every output grid point, averaged (:func:`rfol_dask.metrics.r2_score`).
        """
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported")
        model = _published(self)  # predictions and grids of one fit
        check_is_fitted(model)
        *names, sample_dim = model._names(input, output, sample_dim)
        U, V = io.read_pair(X, y, names, sample_dim)  # the stores' arrays checked here
        io.check_known_sizes(V.data if isinstance(V, xr.DataArray) else V, "y")
        dims = model._knows_grid("output") and getattr(model, "output_dims_", None)
        on_y = dims and isinstance(V, xr.DataArray) and all(d in V.coords for d in dims)
        grid = {d: np.sort(V[d].values) for d in dims} if on_y else None  # y's grid
        pred = model._predict(U, None, grid, sample_dim)  # its sample dim named "sample"
        dims_shape = (model.output_dims_, model.output_shape_)
        V = io.named(V, inputs.own_name(V, "y"), sample_dim, *dims_shape)
        if model._knows_grid("output"):
            V = io.ascending_grid(V)  # the order of pred
        return r2_score(V, pred)

    def save(self, path: str | os.PathLike, *, overwrite: bool = True) -> str | os.PathLike:
        """Save the fitted model to a Zarr store (written beside, then renamed into place).

        Parameters
        ----------
        path : str or os.PathLike
            Nothing, an empty directory, or an rfol_dask model (replaced if ``overwrite``).
        overwrite : bool, default=True
            Whether an existing model at ``path`` may be replaced.

        Returns
        -------
        str or os.PathLike
            ``path``, as given.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model is not fitted.
        ValueError
            If ``path`` holds anything but an rfol_dask model (left untouched), a model and
            ``overwrite`` is false, or is inside a model or the current directory.
        """
        check_is_fitted(self)
        target = io.user_path(path)  # '~' expanded, as xarray and zarr read paths
        persistence.check_model_path(target, overwrite)
        arrays, attrs = persistence.estimator_state(self)
        fmt = self._model_format()
        persistence.save_model(target, arrays, attrs, overwrite=overwrite, model_format=fmt)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> OperatorEstimator:
        """Load a model written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
            The Zarr store written by :meth:`save`.

        Returns
        -------
        OperatorEstimator
            A fitted instance of ``cls`` (numpy arrays, in memory).

        Raises
        ------
        FileNotFoundError
            If there is no model at ``path`` (nor a complete one an interrupted save left).
        ValueError
            If ``path`` is not a model, has a newer format, or an array is missing or damaged.
        """
        arrays, attrs = persistence.load_model(io.user_path(path))
        return persistence.restore_estimator(cls, arrays, attrs, path)
