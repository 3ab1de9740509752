"""The estimator base shared by the operator learners: inputs, grids, prediction, persistence.

Subclasses (``RandomFeatureOperator``, ``baselines.KernelOperator``) supply the numerics:
``_fit_arrays(U, V, lazy, dtype)`` fits on 2-D numpy or dask arrays, ``_predict_kernel()``
returns the block function and its fitted arrays, ``_fitted_arrays`` / ``_fitted_scalars`` name
what ``save`` writes. Everything about operands (numpy, dask, xarray, Dataset / Zarr path),
sklearn validation, training grids and the recovery maps ``R_U`` / ``R_V`` lives here once.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import os
from collections.abc import Mapping, Sequence

import dask.array as da
import numpy as np
import xarray as xr
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from . import backend, io, persistence, stores
from . import recovery as rec
from .exceptions import ComplexDataError
from .gram import check_finite
from .memory import check_prediction_memory
from .metrics import r2_score
from .placement import broadcast, worker_addresses
from .progress import active_client
from .resampling import ResamplingMixin

__all__ = ["OperatorEstimator"]

#: what ``fit`` / ``predict`` / ``score`` take as functions: array-likes, dask arrays, DataArrays
Functions = ArrayLike | da.Array | xr.DataArray
#: a training or test set given whole: a Dataset with ``input`` / ``output``, or its Zarr store path
Data = Functions | xr.Dataset | str | os.PathLike
#: a grid: one increasing coordinate array per axis, or a mapping dim -> coordinates
Grid = Sequence[ArrayLike] | Mapping[str, ArrayLike]
#: periods of grid axes: one for every axis, one (or None) per axis, or a mapping dim -> period
Periods = float | Sequence[float | None] | Mapping[str, float | None]


@contextlib.contextmanager
def all_or_nothing(estimator):
    """Run a fit of ``estimator`` as one step, on the shallow copy this yields: the fit sets its
    attributes as it goes (the frequencies before the solve) on the copy, and when it ends they
    replace the estimator's at once (its ``__dict__`` is replaced, never changed in place); if it
    raises anything (a KeyboardInterrupt from a notebook's interrupt included) the estimator is
    left as it was, the previous fitted model whole or no fitted attributes at all. Without this
    an interrupted refit kept the new frequencies beside the old coefficients and predicted
    silently wrong, and so did a ``predict`` in another thread while the refit ran
    (:func:`_published`)."""
    work = object.__new__(type(estimator))
    work.__dict__.update(vars(estimator))
    yield work
    estimator.__dict__ = vars(work)


def _published(estimator):
    """A view of the fitted model ``estimator`` holds now: an instance sharing its current
    ``__dict__``, which a fit in another thread replaces (:func:`all_or_nothing`) but does not
    change, so that everything a prediction reads is of one fit."""
    view = object.__new__(type(estimator))
    view.__dict__ = vars(estimator)
    return view


def _as_dask(x):
    """The in-memory side of a fit with one dask operand, as one dask chunk: CuPy arrays as they
    are (dask keeps them on their GPU; ``np.asarray`` of one raises), other array API arrays
    (which dask cannot hold) moved to numpy."""
    if backend.is_array_api(x):
        return da.asarray(x if backend.is_cupy(backend.namespace(x)) else backend.to_numpy(x))
    return da.asarray(np.asarray(x))


def _flatten(X, name="X"):
    """``(M, *grid) -> (M, prod(grid))`` for numpy-like ``X``; returns ``(X2, grid or None)``.

    Array-likes of at most two dimensions (lists, sparse matrices, ...) pass through unchanged
    for scikit-learn's validation to judge. Nested lists and tuples of more (``(M, nx, ny)``)
    are read as the numpy array they make, as ``np.asarray`` makes it, grids included
    (scikit-learn's validation refuses more than two dimensions).
    """
    X = _nested_array(X, name)
    if hasattr(X, "toarray") or not hasattr(X, "shape") or len(X.shape) <= 2:
        return X, None
    if backend.is_array_api(X):
        return backend.namespace(X).reshape(X, (X.shape[0], -1)), tuple(X.shape[1:])
    return np.reshape(np.asarray(X), (X.shape[0], -1)), tuple(X.shape[1:])


def _nested_array(X, name):
    """``np.asarray(X)`` for a list or tuple nested more than two deep (samples on a grid of two
    or more axes: ``(M, nx, ny)``), else ``X`` as it is (lists of at most two dimensions are left
    to scikit-learn's validation and its errors). ValueError naming ``name`` where the samples'
    grids differ in shape (a ragged list: numpy makes no array of it)."""
    if not isinstance(X, (list, tuple)):
        return X
    depth, inner = 0, X
    while isinstance(inner, (list, tuple)) and len(inner):
        depth, inner = depth + 1, inner[0]
    if depth + len(getattr(inner, "shape", ())) <= 2:  # rows, or a list of 1-D arrays: as before
        return X
    try:
        A = np.asarray(X)
    except ValueError as exc:
        raise ValueError(
            f"{name} is a nested list that is not a regular array of shape (n_samples, *grid): "
            f"every sample must have the same grid shape ({exc})"
        ) from exc
    except TypeError:  # of arrays numpy does not take implicitly (CuPy's): scikit-learn's error
        return X
    return A if A.ndim > 2 else X


def _on(args, xp):
    """The arrays among ``args`` (fitted arrays of a predict kernel) as arrays of ``xp``."""
    return tuple(
        backend.to_namespace(a, xp) if isinstance(a, np.ndarray) or backend.is_array_api(a) else a
        for a in args
    )


def _refuse_sample_weight(sample_weight):
    """ValueError for weights: every sample counts alike in the ridge problem (``None`` passes)."""
    if sample_weight is not None:
        raise ValueError("sample_weight is not supported")


def _num_samples(X):
    shape = getattr(X, "shape", None)
    if shape is None:
        try:
            return len(X)
        except TypeError:
            return None
    return shape[0] if len(shape) else None


def _refuse_not_real(X, name):
    """:class:`ComplexDataError` for complex values (scikit-learn's own error prints the whole array),
    a TypeError for datetimes and timedeltas (numpy counts them among the integers: scikit-learn's
    validation casts them to float, counts of their unit) and booleans, as dask operands are refused."""
    dtype = getattr(X, "dtype", None)
    if isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.complexfloating):
        raise ComplexDataError(
            f"Complex data not supported: {name} must hold real numbers, got dtype {dtype}"
        )
    if isinstance(dtype, np.dtype) and dtype.kind in "mMb":
        fix = f" (as 0 and 1: {name}.astype(float))" if dtype.kind == "b" else ""
        raise TypeError(f"{name} must hold real numbers, got dtype {dtype}{fix}")


def _predict_chunk(blk, p, block_info=None, *, block, device):
    """One chunk of a lazy prediction: ``block(blk, *p)``. CuPy chunks are computed on their GPU
    (CuPy out); numpy chunks where ``device`` says (numpy out)."""
    on_host = not backend.is_array_api(blk)
    xp = backend.device_namespace(device) if on_host else backend.namespace(blk)
    blk = backend.to_namespace(np.asarray(blk) if on_host else blk, xp)
    check_finite(blk, block_info[0]["array-location"][0][0] if block_info else 0, "X", "predicting")
    Y = block(blk, *_on(p, xp))
    return backend.to_numpy(Y) if on_host else Y


class OperatorEstimator(ResamplingMixin, RegressorMixin, BaseEstimator):
    """Base of the operator learners (see the module docstring); not used directly."""

    _fitted_arrays: tuple = ("intercept_",)
    _fitted_scalars: tuple = ()
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
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        tags.input_tags.allow_nan = False
        return tags

    # ------------------------------------------------------------------ helpers
    def _model_format(self):
        """The model format (:data:`rfol_dask.persistence.MODEL_FORMAT`) :meth:`save` writes: the
        lowest that reads this fitted model right, so that older rfol_dask versions load what
        they can and refuse only what they would misread."""
        return 2

    def _older_scalars(self):
        """Values of fitted scalars (``_fitted_scalars``) for models saved before they were kept:
        ``{name: value}`` (read by :func:`rfol_dask.persistence.restore_estimator`)."""
        return {}

    def _work_dtype(self, data):
        if self.dtype is not None:
            dt = np.dtype(self.dtype)
            if dt not in (np.float32, np.float64):
                raise ValueError(f"dtype must be float32 or float64, got {dt}")
            return dt
        dt = getattr(data, "dtype", None)
        dt = backend.to_numpy_dtype(dt) if dt is not None and backend.is_array_api(data) else dt
        return np.dtype(np.float32) if dt == np.float32 else np.dtype(np.float64)

    def _cast_dtype(self, data):
        """The dtype numpy input is cast to before :meth:`_fit_arrays`: the working dtype."""
        return self._work_dtype(data)

    def _check_fit_params(self, fit_params):
        """ValueError for a ``sample_weight`` other than None among ``fit``'s extra keywords,
        TypeError for any other keyword (as Python's for an unknown one)."""
        unknown = sorted(set(fit_params) - {"sample_weight"})
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.fit() got an unexpected keyword argument {unknown[0]!r}"
            )
        _refuse_sample_weight(fit_params.get("sample_weight"))

    def _check_params(self):
        self._validate_params()
        self._check_recovery()

    def _device(self):
        """The ``device`` parameter ("cpu" where a subclass has none)."""
        return backend.check_device(getattr(self, "device", "cpu"))

    def _check_arrays(self, U, V):
        """Validate and flatten array API operands of another namespace than numpy (CuPy: on
        their device); returns ``(U (M, n), V (M, m), input grid shape, output grid shape)``."""
        if backend.is_array_api(U) != backend.is_array_api(
            V
        ):  # one side numpy: moved to the other's
            xp = backend.namespace(U if backend.is_array_api(U) else V)
            U, V = (
                backend.to_namespace(np.asarray(U) if not backend.is_array_api(U) else U, xp),
                backend.to_namespace(np.asarray(V) if not backend.is_array_api(V) else V, xp),
            )
        xp = backend.namespace(U, V)
        if U.ndim < 2:
            raise ValueError(
                "U must be 2-D (n_samples, n_points) or more; reshape a single "
                "input function with U.reshape(1, -1)"
            )
        (U2, in_shape), (V2, out_shape) = _flatten(U, "U"), _flatten(V, "V")
        out_shape = out_shape if out_shape is not None else tuple(V.shape[1:])
        U2, V2 = self._check_lazy(U2, V2 if V2.ndim > 1 else xp.reshape(V2, (V2.shape[0], 1)))
        dt = self._work_dtype(U2)
        # copy=False: the array API's astype copies by default (on a GPU fit that was U and V once
        # more, 1.3 GB at 20000 x 4096 x 2)
        U2, V2 = (xp.astype(X, getattr(xp, dt.name), copy=False) for X in (U2, V2))
        check_finite(V2, 0, "V")
        return U2, V2, in_shape or (U2.shape[1],), out_shape

    def _check_lazy(self, U, V):
        """Validate dask operands from their metadata only (nothing is computed)."""
        if U.ndim != 2:
            raise ValueError(
                "U must be 2-D (n_samples, n_points) or more; reshape a single "
                "input function with U.reshape(1, -1)"
            )
        V = V[:, None] if V.ndim == 1 else V
        if U.shape[0] != V.shape[0]:
            raise ValueError(f"U has {U.shape[0]} samples but V has {V.shape[0]}; they must match")
        if U.shape[0] < 1 or U.shape[1] < 1:
            raise ValueError(f"U has shape {U.shape}: need at least one sample and one point")
        if V.shape[1] < 1:
            raise ValueError(
                f"V has shape {V.shape}: the output functions have no values; pass at least one "
                "output point per sample"
            )
        for name, X in (("U", U), ("V", V)):
            if not backend.is_real_dtype(X.dtype):
                raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
        self.n_features_in_ = U.shape[1]
        return U, V

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        X: Data,
        y: Functions | None = None,
        *,
        input_grid: Grid | None = None,
        output_grid: Grid | None = None,
        periods: Periods | None = None,
        **fit_params,
    ) -> OperatorEstimator:
        """Fit the operator on pairs of input and output functions.

        numpy input is fitted in memory; dask (and dask-backed xarray) input by one dask
        graph over its sample chunks, computed once (on the active ``distributed.Client``
        if any, else dask's local scheduler). xarray ``X`` and ``y`` are paired by their
        ``sample`` labels (reordered if needed; different label sets are an error).

        Parameters
        ----------
        X : array-like, dask array or DataArray of shape (M, n) or (M, *input_grid); or Dataset or str
            The ``M`` input functions (the paper's ``U``), float32 or float64 (other real
            dtypes are cast to float64). A Dataset, or the path of a Zarr store, with
            variables ``input`` and ``output`` gives both ``X`` and ``y``.
        y : array-like, dask array or DataArray of shape (M,), (M, m) or (M, *output_grid), default=None
            The output functions (the paper's ``V``); None only with a Dataset / store ``X``.
        input_grid, output_grid : sequence of 1-D arrays or mapping dim -> 1-D array, default=None
            The training grids of numpy / dask input (one increasing coordinate array per grid
            axis); xarray input gives them through its coordinates. They let ``predict`` read
            and write other grids of the same domain.
        periods : float, sequence of (float or None) or mapping dim -> float, default=None
            Periodic grid axes: one period for every axis of both grids, one entry per axis
            (None: not periodic), or a mapping dim -> period (for arrays the dims are the keys of
            mapping ``input_grid`` / ``output_grid``, else ``dim_0, dim_1, ...`` on both sides);
            default: the ``period`` attributes of the xarray coordinates. On a periodic axis ``predict`` accepts any
            grid (it wraps; see :mod:`rfol_dask.recovery`; not with ``recovery="rf"``, which does not wrap).
        **fit_params : dict
            ``sample_weight=None`` only: weights are not supported (a ``sample_weight`` other than
            None is a ValueError, as in ``score``; other keywords a TypeError). Not a named
            parameter, so scikit-learn's tools do not take the estimator for one that weights.

        Returns
        -------
        OperatorEstimator
            ``self``, fitted.

        Raises
        ------
        ValueError
            If the sample counts or labels of ``X`` and ``y`` differ, the data hold NaN / Inf
            (the samples are named), a grid does not match the data, the Gram does not fit
            in memory (the message gives the bytes and the fix), or ``sample_weight`` is given.
        TypeError
            For a keyword argument other than those above.

        Notes
        -----
        Memory: the in-memory fit holds the inputs and outputs, plus the model's Gram
        (see the class docstring); a dask fit never holds the data whole.

        A fit that raises, or is interrupted (KeyboardInterrupt), leaves the estimator as it was
        before: a model fitted earlier still predicts as it did, an unfitted one stays unfitted.
        """
        with all_or_nothing(self) as work, stores.checked_once():
            work._fit(
                X, y, input_grid=input_grid, output_grid=output_grid, periods=periods, **fit_params
            )
        return self

    def _fit(self, X, y=None, *, input_grid=None, output_grid=None, periods=None, **fit_params):
        self._check_fit_params(fit_params)
        self._check_params()
        U, V = io.read_pair(X, y)
        if V is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "call fit(U, V), or fit(dataset) with variables 'input' and 'output'"
            )
        u, v = io.as_operand(U, "U"), io.as_operand(V, "V")
        lazy = isinstance(u.data, da.Array) or isinstance(v.data, da.Array)
        device = self._device()
        if not lazy and (backend.is_array_api(u.data) or backend.is_array_api(v.data)):
            # follow the input: CuPy (any array API) arrays are fitted where they live
            Ud, Vd, in_shape, out_shape = self._check_arrays(u.data, v.data)
            self.__dict__.pop("feature_names_in_", None)
        elif lazy:
            ud, vd = (
                x if isinstance(x.data, da.Array) else io.as_operand(_as_dask(x.data), n)
                for x, n in ((u, "U"), (v, "V"))
            )
            Ud, Vd = self._check_lazy(ud.data, vd.data)
            self.__dict__.pop(
                "feature_names_in_", None
            )  # validated data without column names: none kept
            in_shape, out_shape = ud.grid_shape, vd.grid_shape
        else:
            (Ua, in_shape), (Va, out_shape) = _flatten(u.data, "U"), _flatten(v.data, "V")
            n_u, n_v = _num_samples(Ua), _num_samples(Va)
            if n_u is not None and n_v is not None and n_u != n_v:
                raise ValueError(f"U has {n_u} samples but V has {n_v}; they must match")
            if isinstance(Va, np.ndarray) and np.issubdtype(Va.dtype, np.floating) and Va.ndim:
                check_finite(Va, 0, "V")  # names the samples (scikit-learn's check of y does not)
            _refuse_not_real(Ua, "U")
            _refuse_not_real(Va, "V")
            Ua, Va = validate_data(
                self,
                Ua,
                Va,
                multi_output=True,
                y_numeric=True,
                dtype=[np.float64, np.float32],
                ensure_all_finite=False,
            )
            dt = self._cast_dtype(Ua)
            Ud, Vd = np.asarray(Ua, dtype=dt), np.asarray(Va, dtype=dt)
            in_shape = in_shape or (Ud.shape[1],)
            out_shape = out_shape if out_shape is not None else Vd.shape[1:]
            Vd = Vd[:, None] if Vd.ndim == 1 else Vd
            if device != "cpu":  # numpy / xarray input on an accelerator: moved there once, here
                xp = backend.device_namespace(device)
                Ud, Vd = backend.to_namespace(Ud, xp), backend.to_namespace(Vd, xp)
        self.input_shape_, self.output_shape_ = tuple(in_shape), tuple(out_shape)
        self.input_dims_, self.input_coords_ = u.dims, u.coords
        self.output_dims_, self.output_coords_ = v.dims, v.coords
        self.output_attrs_, self.output_coord_attrs_ = persistence.attrs_of(V, v.dims)
        self.input_grid_ = io.learn_grid(input_grid, u, self.input_shape_, "input")
        self.output_grid_ = io.learn_grid(output_grid, v, self.output_shape_, "output")
        in_dims = io.grid_dims(u, input_grid, self.input_grid_)
        out_dims = io.grid_dims(v, output_grid, self.output_grid_)
        # arrays with grid mappings: the keys name the dims, so a later grid mapping is read by name
        self.input_dims_ = u.dims or (in_dims if isinstance(input_grid, Mapping) else None)
        self.output_dims_ = v.dims or (out_dims if isinstance(output_grid, Mapping) else None)
        if isinstance(periods, Mapping):
            unknown = set(periods) - set(in_dims) - set(out_dims)
            if unknown:
                raise ValueError(
                    f"periods names dims {sorted(unknown)} that are not grid dims of the data "
                    f"(input {in_dims}, output {out_dims}; arrays name them by the keys of "
                    "input_grid= / output_grid= mappings, else dim_0, dim_1, ...)"
                )
        self.input_periods_ = io.learn_periods(periods, u, self.input_grid_, "input", in_dims)
        self.output_periods_ = io.learn_periods(periods, v, self.output_grid_, "output", out_dims)

        if lazy and (client := active_client()) is not None:
            worker_addresses(
                client
            )  # a cluster without workers: waited for, else NoWorkersError (no compute hangs)
        self._fit_arrays(Ud, Vd, lazy, self._work_dtype(Ud))
        self._check_fitted_finite()
        return self

    def _check_fitted_finite(self):
        """ValueError when the fit gave NaN or infinity (an input scale, ``gamma`` or length scale
        beyond the working dtype's range). With an intercept only ``intercept_`` (m,) is read:
        it is ``vbar`` less the feature means times every coefficient, so a non-finite
        coefficient shows there; without one, every fitted array. A search without refit has none."""
        if getattr(self, "intercept_", None) is None:
            return
        arrays = [self.intercept_] if self.fit_intercept else list(self._predict_kernel()[1])
        for a in arrays:
            if (
                backend.is_array_api(a)
                or isinstance(a, np.ndarray)
                and np.issubdtype(a.dtype, np.inexact)
            ):
                xp = backend.namespace(a)
                # min and max are finite only if every entry is (NaN propagates): no mask of a's size
                if a.size and not all(bool(xp.isfinite(r)) for r in (xp.min(a), xp.max(a))):
                    scale = ", ".join(
                        f"{k}={getattr(self, k):.3g}"
                        for k in ("gamma_", "length_scale_")
                        if hasattr(self, k)
                    )
                    raise ValueError(
                        f"the fit gave NaN or infinite coefficients ({scale}): "
                        "the inputs' scale or the model's scale parameter is beyond the range of the working dtype; "
                        "rescale the inputs (e.g. to unit spread) or pass another gamma / length_scale"
                    )

    # ------------------------------------------------------------------ predict
    def _knows_grid(self, which):
        """Whether the model's ``which`` grid has dims or coordinates: then DataArrays are read in
        increasing coordinate order; a model fitted on arrays without grids reads them by position,
        as it read its data."""
        return (
            getattr(self, f"{which}_dims_", None) is not None
            or getattr(self, f"{which}_grid_", None) is not None
        )

    def _check_width(self, n, shape):
        """ValueError unless ``X`` has the training width ``n`` and, when ``X`` is a grid of two or
        more axes and the model's grid has two or more axes or is known (dims or coordinates), the
        training grid shape (a transposed or reshaped grid of the same size would otherwise be read
        by position). Flattened (M, n) rows are always read by position."""
        shape = tuple(shape)
        if n != self.n_features_in_:
            raise ValueError(
                f"X has {n} features, but {type(self).__name__} is expecting {self.n_features_in_} "
                f"features as input (input grid {shape} vs the training grid {self.input_shape_})"
            )
        if (
            len(shape) > 1
            and shape != tuple(self.input_shape_)
            and (len(self.input_shape_) > 1 or self._knows_grid("input"))
        ):
            raise ValueError(
                f"X has input grid {shape} but the model was trained on the grid {tuple(self.input_shape_)}: "
                "pass the functions on the training grid (same axes, same order), flattened (M, n) "
                "rows of it, or input_grid= for another grid of the same domain"
            )

    def predict(
        self, X: Data, *, input_grid: Grid | None = None, output_grid: Grid | None = None
    ) -> np.ndarray | da.Array | xr.DataArray:
        """Predict the output functions of input functions ``X``.

        numpy in, numpy out; dask or dask-backed xarray in, lazy out (chunks follow ``X``);
        xarray predictions carry the sample coordinate and the output grid coordinates.
        xarray grid dims are matched to the training dims by name (transposed as needed).

        Parameters
        ----------
        X : array-like, dask array or DataArray of shape (M, n) or (M, *input_grid); or Dataset or str
            The input functions, on the training input grid unless ``input_grid`` (or the
            xarray coordinates) says otherwise; a Dataset or Zarr store path gives its
            ``input`` variable (an ``output`` is not needed). Arrays are read by position, in
            the model's grid order (increasing coordinates for a model fitted on xarray); a
            DataArray by its dims and coordinates (by position for a model fitted on arrays
            without grids).
        input_grid : sequence of 1-D arrays or mapping dim -> 1-D array, default=None
            The grid of numpy / dask ``X`` when it is not the training grid: ``X`` is first
            resampled to the training grid through ``R_U`` (the ``recovery`` parameter). A
            DataArray's coordinates give its grid (one that differs from them is a ValueError).
        output_grid : sequence of 1-D arrays or mapping dim -> 1-D array, default=None
            Return the prediction on this grid (through ``R_V``) instead of the training
            output grid.

        Returns
        -------
        ndarray, dask array or DataArray of shape (M, *output_grid)
            The predicted output functions in the working dtype, in the kind of ``X``
            (a Dataset or store path gives a DataArray).

        Raises
        ------
        ValueError
            If ``X`` has the wrong width, dims or grid shape, holds NaN / Inf (the samples are
            named), a DataArray's grid labels that the model reads by label (labels that are not
            numbers) differ from the training data's, or a grid has another dimension or other dim
            names than the training grid or
            lies outside the training domain (along a periodic axis any grid is valid: the
            recovery wraps), or numpy ``X`` whose predictions (with ``output_grid``, and their values
            there) would not fit this process's available memory (the message names the sizes: predict
            in parts, or pass a dask array for a lazy prediction).
        TypeError
            If ``X`` holds complex or non-numeric values.

        Notes
        -----
        Extra memory: the features (or kernel row) of one row block of about 128 MiB, and
        the resampled inputs and outputs of one block. numpy ``X`` gives its whole prediction
        (M x m, and M x m_out in float64 on an ``output_grid``) in memory, checked against this
        process's available memory first, before its inputs are resampled from an ``input_grid``
        (:func:`rfol_dask.memory.check_prediction_memory`).

        Dask input gives a lazy result. On a distributed client a model of 8 MiB or more
        (:data:`rfol_dask.placement.EMBED_BYTES`) is shipped to the cluster once and held by
        its scheduler while the result lives (one copy for all the lazy predictions of this fit
        on that client; smaller models travel inside the graph). The result
        computes after lost workers too, and after ``client.restart()``, with the client closed,
        on another client or scheduler, and pickled (``pickle``, ``joblib``): its graph then
        carries the model (at each compute); only that client's own computes send just its key.

        A refit in another thread meanwhile does not mix into the prediction: it is made from
        the model fitted when ``predict`` was called.
        """
        check_is_fitted(self)
        return _published(self)._predict(X, input_grid, output_grid)

    def _predict(self, X, input_grid, output_grid):
        """:meth:`predict` of the fitted model (a :func:`_published` view: nothing a fit changes)."""
        self._check_coordinate_order()
        U = X
        if isinstance(U, (str, bytes, os.PathLike)) or hasattr(U, "data_vars"):
            U, _ = io.read_pair(U, variables=("input",))
        else:
            stores.check_sources(
                U
            )  # a missing chunk file of a Zarr store: an error, not its fill value
        U = io.match_dims(U, getattr(self, "input_dims_", None), "X")
        U = io.match_grid_labels(
            U, getattr(self, "input_coords_", None), getattr(self, "input_grid_", None)
        )
        u = io.as_operand(
            U,
            "X",
            sort=self._knows_grid("input"),
            model_dims=getattr(self, "input_dims_", None),
            model_shape=self.input_shape_,
        )
        new_grid = self._new_output_grid(
            output_grid
        )  # once, before anything is resampled or allocated: a clear error
        if not isinstance(u.data, da.Array) and not backend.is_array_api(
            u.data
        ):  # numpy: the whole prediction here
            self._check_prediction_memory(
                u.data, new_grid
            )  # from the shapes, before the inputs are resampled
        u = self._to_training_grid(U, u, input_grid)
        if isinstance(u.data, da.Array):
            X = u.data
            if X.ndim != 2:
                raise ValueError(f"U must be at least 2-D (n_samples, ...), got shape {X.shape}")
            if not backend.is_real_dtype(X.dtype):
                raise TypeError(f"X must hold real numbers, got dtype {X.dtype}")
            self._check_width(X.shape[1], u.grid_shape)
            if (
                self._device() != "cpu" and active_client() is None
            ):  # computed here: say what is missing, first
                backend.device_namespace(self._device())
            X = X.rechunk({1: -1})
            block, args = self._predict_kernel()
            args = _on(args, np)  # dask blocks are computed on the CPU workers
            (params,) = broadcast(active_client(), args)  # shipped once, not inside every task

            run = functools.partial(_predict_chunk, block=block, device=self._device())  # picklable
            dtype = backend.to_numpy(self.intercept_).dtype
            xp = (
                backend.namespace(X._meta) if backend.is_array_api(X._meta) else None
            )  # CuPy chunks: CuPy out
            Y = da.map_blocks(
                run,
                X,
                params,
                chunks=(X.chunks[0], (self.intercept_.shape[0],)),
                dtype=dtype,
                meta=None if xp is None else xp.empty((0, 0), dtype=getattr(xp, dtype.name)),
            )
        elif backend.is_array_api(
            u.data
        ):  # follow the input: computed where X lives, returned there
            X, _ = _flatten(u.data)
            xp = backend.namespace(X)
            if X.ndim != 2:
                raise ValueError(
                    f"U must be at least 2-D (n_samples, ...), got shape {tuple(X.shape)}"
                )
            self._check_width(X.shape[1], u.data.shape[1:])
            check_finite(X, 0, "X", "predicting")
            block, args = self._predict_kernel()
            args = _on(args, xp)
            Y = block(X, *args)
        else:
            raw, grid_shape = _flatten(np.asarray(u.data) if u.kind == "xarray" else u.data)
            if grid_shape is not None:
                self._check_width(raw.shape[1], grid_shape)
            _refuse_not_real(raw, "X")
            X = validate_data(
                self, raw, reset=False, dtype=[np.float64, np.float32], ensure_all_finite=False
            )
            check_finite(np.asarray(X), 0, "X", "predicting")
            block, args = self._predict_kernel()
            xp = backend.device_namespace(self._device())
            Y = backend.to_numpy(
                block(backend.to_namespace(X, xp), *_on(args, xp))
            )  # numpy in, numpy out
        if backend.is_array_api(
            Y
        ):  # a DataArray of CuPy values gives one: its kind, not its values, is xarray
            xp, shape = backend.namespace(Y), self.output_shape_
            if (
                output_grid is not None
            ):  # the recovery maps are numpy: resampled on the host, moved back
                out = self._output_on_grid(backend.to_numpy(Y), u, output_grid, new_grid)
                if isinstance(out, xr.DataArray):
                    return out.copy(data=backend.to_namespace(out.data, xp))
                return backend.to_namespace(out, xp)
            Y = xp.reshape(Y, (Y.shape[0], *shape))
            return self._output_on_grid(Y, u, None, None) if u.kind == "xarray" else Y
        return self._output_on_grid(Y, u, output_grid, new_grid)

    def _check_prediction_memory(self, X, new_grid):
        """:func:`rfol_dask.memory.check_prediction_memory` of a numpy prediction of the samples of
        ``X`` (M, ...; as given, on any input grid: only its sample count is read) on ``new_grid``
        (None: the training output grid)."""
        M = _num_samples(X)
        if M is None and hasattr(
            X, "__array__"
        ):  # converted by numpy, as scikit-learn's validation does
            M = _num_samples(np.asarray(X))
        if M is not None:  # else the validation refuses X
            check_prediction_memory(
                M,
                self.intercept_.shape[0],
                backend.to_numpy_dtype(self.intercept_.dtype),
                None if new_grid is None else int(np.prod([len(a) for a in new_grid])),
            )

    def score(self, X: Data, y: Functions | None = None, sample_weight: None = None) -> float:
        """Return the coefficient of determination R^2 of ``predict(X)`` against ``y``.

        Parameters
        ----------
        X : array-like, dask array or DataArray of shape (M, n) or (M, *input_grid); or Dataset or str
            Test input functions; a Dataset or Zarr store path holds both ``input`` and
            ``output``.
        y : array-like, dask array or DataArray of shape (M,), (M, m) or (M, *output_grid), default=None
            True output functions; None only with a Dataset / store ``X``.
        sample_weight : None, default=None
            Not supported (anything but None raises ValueError).

        Returns
        -------
        float
            R^2 of every output grid point, averaged uniformly over the points
            (:func:`rfol_dask.metrics.r2_score`).
        """
        _refuse_sample_weight(sample_weight)
        with stores.checked_once():  # the stored arrays of X are checked here, not by predict
            U, V = io.read_pair(X, y)
            io.check_known_sizes(V.data if isinstance(V, xr.DataArray) else V, "y")
            model = _published(self)  # predictions and grids of one fit
            pred = model.predict(U)
        V = io.match_dims(V, getattr(model, "output_dims_", None), "y")
        if model._knows_grid("output"):
            V = io.ascending_grid(V)  # the order of pred
        return r2_score(V, pred)

    def _check_coordinate_order(self):
        """ValueError for a model fitted (by rfol_dask 0.1.0 before grids were sorted) on xarray
        grid coordinates that do not increase: it read its data by position, data are now read in
        increasing coordinate order (:func:`rfol_dask.io.ascending_grid`), so its predictions
        would be silently wrong."""
        for which in ("input", "output"):
            for d, c in (getattr(self, f"{which}_coords_", None) or {}).items():
                if io.unsorted_axis(c):
                    raise ValueError(
                        f"this model was fitted on {which} coordinates that do not increase along "
                        f"{d!r} (an older rfol_dask read them by position); data are now read in "
                        "increasing coordinate order: refit the model with this version"
                    )

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike, *, overwrite: bool = True) -> str | os.PathLike:
        """Save the fitted model to a Zarr store.

        The store holds the parameters, the fitted arrays with a checksum each, the training
        grids and periods, the output's attributes and the package and format versions. The
        write goes to a temporary store renamed into place: an interrupted save leaves the
        previous model readable.

        Parameters
        ----------
        path : str or os.PathLike
            Directory of the Zarr store: nothing there, an empty directory, or an rfol_dask
            model (replaced only if ``overwrite``).
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
            If ``path`` holds anything but an rfol_dask model (a file, a data set, other
            files: left untouched), or a model and ``overwrite`` is false; if it is inside a
            model, or is (or holds) the current directory.

        Notes
        -----
        Disk: the fitted arrays (e.g. ``omega_`` (n, N) and ``coef_`` (N, m) of a
        ``RandomFeatureOperator``, ``X_train_`` (M, p) and ``dual_coef_`` (M, m) of a
        ``KernelOperator``), written from memory without a further copy.
        """
        check_is_fitted(self)
        target = io.user_path(path)  # '~' expanded, as xarray and zarr read paths
        persistence.check_model_path(target, overwrite)
        arrays, attrs = persistence.estimator_state(self)
        persistence.save_model(
            target, arrays, attrs, overwrite=overwrite, model_format=self._model_format()
        )
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
            A fitted instance of ``cls`` with the saved parameters and fitted arrays
            (numpy, in memory).

        Raises
        ------
        FileNotFoundError
            If there is no model at ``path`` (nor a complete one an interrupted save left
            beside it: then the newest is loaded, with a warning).
        ValueError
            If ``path`` is not a model store written by :meth:`save`, has a newer format, or
            an array is missing or damaged (the message names it). Models saved before the
            format was versioned load with a warning (see ``rfol_dask.persistence.MODEL_FORMAT``).
        """
        arrays, attrs = persistence.load_model(io.user_path(path))
        return persistence.restore_estimator(cls, arrays, attrs, path)
