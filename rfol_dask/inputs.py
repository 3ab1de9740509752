"""What the estimators accept as data: numpy-like operands flattened, dtypes that are not real
numbers refused, NaN / Inf named by sample label, and small dask data loaded into memory."""

from __future__ import annotations

import contextlib
import logging
from urllib.parse import urlparse

import dask
import dask.array as da
import numpy as np
import psutil
import xarray as xr
from dask.array.utils import meta_from_array
from sklearn.utils.validation import validate_data

from . import backend, io, memory
from .exceptions import ComplexDataError
from .gram import check_finite
from .progress import active_client

logger = logging.getLogger("rfol_dask")


def flatten(X, name="X"):
    """``(M, *grid) -> (M, prod(grid))`` for numpy-like ``X``: ``(X2, grid or None)``; nested lists
    of more than two dims read as the array they make."""
    if isinstance(X, (list, tuple)):
        depth, inner = 0, X
        while isinstance(inner, (list, tuple)) and len(inner):
            depth, inner = depth + 1, inner[0]
        if depth + len(getattr(inner, "shape", ())) > 2:
            try:
                X = np.asarray(X)
            except ValueError as exc:
                msg = f"{name} is a nested list that is not a regular array of shape (n_samples, "
                msg += f"*grid): every sample must have the same grid shape ({exc})"
                raise ValueError(msg) from exc
            except TypeError:  # arrays numpy does not take implicitly (CuPy's)
                pass
    if hasattr(X, "toarray") or not hasattr(X, "shape") or len(X.shape) <= 2:
        return X, None
    xp, X = (backend.namespace(X), X) if backend.is_array_api(X) else (np, np.asarray(X))
    return xp.reshape(X, (X.shape[0], -1)), tuple(X.shape[1:])


def num_samples(X):
    shape = getattr(X, "shape", None)
    if shape is not None:
        return shape[0] if len(shape) else None
    with contextlib.suppress(TypeError):
        return len(X)


def refuse_not_real(X, name):
    """:class:`ComplexDataError` for complex values; TypeError for datetimes, timedeltas, booleans
    and (dask, array API) any dtype not a real number."""
    dtype, foreign = getattr(X, "dtype", None), backend.is_array_api(X)
    dtype = backend.to_numpy_dtype(dtype) if foreign else dtype
    if not isinstance(dtype, np.dtype):
        return
    if np.issubdtype(dtype, np.complexfloating):
        raise ComplexDataError(
            f"Complex data not supported: {name} must hold real numbers, got dtype {dtype}"
        )
    strict = foreign or isinstance(X, da.Array)
    if dtype.kind in "mMb" or strict and not backend.is_real_dtype(dtype):
        fix = f" (as 0 and 1: {name}.astype(float))" if dtype.kind == "b" else ""
        raise TypeError(f"{name} must hold real numbers, got dtype {dtype}{fix}")


def bad_samples(X, labels, name, sample_dim="sample", action="fitting", part=False):
    """ValueError naming the samples of the 2-D ``X`` that hold NaN or Inf by their ``labels``
    (None: positions); None when all are finite."""
    if isinstance(X, da.Array):
        ok = np.asarray(da.isfinite(X).all(axis=1).compute())
    else:
        X = np.asarray(backend.to_numpy(X) if backend.is_array_api(X) else X)
        ok = np.isfinite(X.reshape(len(X), -1)).all(axis=1)
    rows = np.flatnonzero(~ok)
    if not len(rows):
        return None
    shown = (rows if labels is None else np.asarray(labels)[rows])[:5]
    listed = ", ".join(map(str, shown)) + (", ..." if len(rows) > 5 else "")
    where = f"{sample_dim} {listed}" if labels is not None else f"rows {listed}"
    fix = f", e.g. ds.dropna({sample_dim!r}, how='any')" if labels is not None else ""
    return ValueError(
        f"{name} holds NaN or infinity in {len(rows)} sample{'s' * (len(rows) > 1)}"
        f"{' of this chunk' if part else ''} ({where}): drop them before {action}{fix}"
    )


def as_dask(x):
    """The in-memory side of a fit with one dask operand, as one dask chunk."""
    cupy = backend.is_array_api(x) and backend.is_cupy(backend.namespace(x))
    return da.asarray(x if cupy else np.asarray(backend.to_numpy(x)))


def own_name(X, default):
    """A DataArray's own name (``u0``), else ``default``: what messages call it."""
    return X.name if isinstance(X, xr.DataArray) and isinstance(X.name, str) else default


def sample_labels(op):
    """The sample labels of an operand (its ``sample`` coordinate), else None."""
    return None if not op.sample or "sample" not in op.sample else op.sample["sample"].values


def in_memory(*arrays):
    """Whether dask ``arrays`` are small enough to fit in memory: under config
    ``rfol_dask.in-memory-fraction`` (0.1) of the available memory, on numpy chunks, with no workers
    on other machines."""
    fraction = float(dask.config.get("rfol_dask.in-memory-fraction", 0.1))
    small = sum(a.nbytes for a in arrays) < fraction * psutil.virtual_memory().available
    if not small or any(backend.is_array_api(meta_from_array(a)) for a in arrays):
        return False
    if (client := active_client()) is None:
        return True
    here = {"localhost", "127.0.0.1", "::1", None}
    here |= {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    return all(urlparse(w).hostname in here for w in client.scheduler_info()["workers"])


def check_shapes(est, U, V):
    """``(U (M, n), V (M, m))`` of 2-D dask or array API operands, checked from their metadata."""
    V = V[:, None] if V.ndim == 1 else V
    if U.ndim != 2:
        msg = "U must be 2-D (n_samples, n_points) or more; reshape a single input function with"
        raise ValueError(msg + " U.reshape(1, -1)")
    if U.shape[0] != V.shape[0]:
        raise ValueError(f"U has {U.shape[0]} samples but V has {V.shape[0]}; they must match")
    if U.shape[0] < 1 or U.shape[1] < 1:
        raise ValueError(f"U has shape {U.shape}: need at least one sample and one point")
    if V.shape[1] < 1:
        raise ValueError(f"V has shape {V.shape}: the output functions have no values")
    for name, X in (("U", U), ("V", V)):
        refuse_not_real(X, name)
    est.n_features_in_ = U.shape[1]
    est.__dict__.pop("feature_names_in_", None)  # no column names kept
    return U, V


def check_arrays(est, U, V):
    """Validate and flatten array API operands (CuPy: on their device): ``(U, V, input grid shape,
    output grid shape)``."""
    xp = backend.namespace(U if backend.is_array_api(U) else V)
    U, V = (
        backend.to_namespace(X if backend.is_array_api(X) else np.asarray(X), xp) for X in (U, V)
    )
    (U2, in_shape), (V2, out_shape) = flatten(U, "U"), flatten(V, "V")
    U2, V2 = check_shapes(est, U2, V2)
    dt = getattr(xp, est._work_dtype(U2).name)
    U2, V2 = (xp.astype(X, dt, copy=False) for X in (U2, V2))  # copy=False: no third copy
    check_finite(V2, 0, "V")
    return U2, V2, in_shape or (U2.shape[1],), out_shape or tuple(V.shape[1:])


def check_numpy(est, U, V):
    """``(U, V, input grid shape, output grid shape)`` of numpy-like operands, validated by
    scikit-learn and cast (moved to ``device``)."""
    (Ua, in_shape), (Va, out_shape) = flatten(U, "U"), flatten(V, "V")
    n_u, n_v = num_samples(Ua), num_samples(Va)
    if n_u is not None and n_v is not None and n_u != n_v:
        raise ValueError(f"U has {n_u} samples but V has {n_v}; they must match")
    if isinstance(Va, np.ndarray) and np.issubdtype(Va.dtype, np.floating) and Va.ndim:
        check_finite(Va, 0, "V")  # scikit-learn's check of y names no sample
    refuse_not_real(Ua, "U")
    refuse_not_real(Va, "V")
    kw = dict(dtype=[np.float64, np.float32], ensure_all_finite=False)
    Ua, Va = validate_data(est, Ua, Va, multi_output=True, y_numeric=True, **kw)
    dt = est._cast_dtype(Ua)
    Ud, Vd = np.asarray(Ua, dtype=dt), np.asarray(Va, dtype=dt)
    out_shape, Vd = out_shape or Vd.shape[1:], Vd[:, None] if Vd.ndim == 1 else Vd
    if est._device() != "cpu":  # numpy / xarray input on an accelerator: moved there once
        xp = backend.device_namespace(est._device())
        Ud, Vd = backend.to_namespace(Ud, xp), backend.to_namespace(Vd, xp)
    return Ud, Vd, in_shape or (Ud.shape[1],), out_shape


def fit_data(est, u, v):
    """``(U (M, n), V (M, m), input grid shape, output grid shape, lazy)``, validated."""
    lazy = [x for x in (u.data, v.data) if isinstance(x, da.Array)]
    if lazy and in_memory(*lazy):
        nbytes = sum(x.nbytes for x in lazy)
        logger.info("loading the %.1f MiB of training data into memory to fit", nbytes / 2**20)
        loaded = dask.compute(u.data, v.data)
        u, v = (
            io.Operand(np.reshape(d, (len(d), *x.grid_shape)) if x.grid_shape else d, None, "numpy")
            for d, x in zip(loaded, (u, v), strict=True)
        )
        lazy = []
    if lazy:
        ud, vd = (
            x if isinstance(x.data, da.Array) else io.as_operand(as_dask(x.data), n)
            for x, n in ((u, "U"), (v, "V"))
        )
        Ud, Vd = check_shapes(est, ud.data, vd.data)
        return Ud, Vd, ud.grid_shape, vd.grid_shape, True
    if backend.is_array_api(u.data) or backend.is_array_api(v.data):
        return (*check_arrays(est, u.data, v.data), False)  # fitted where they live
    return (*check_numpy(est, u.data, v.data), False)


def check_fitted_finite(est):
    """ValueError when the fit gave NaN or infinity (a scale beyond the working dtype's range)."""
    if getattr(est, "intercept_", None) is None:
        return
    for a in [est.intercept_] if est.fit_intercept else est._predict_kernel()[1]:
        inexact = isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.inexact)
        if not (backend.is_array_api(a) or inexact) or not a.size:
            continue
        xp = backend.namespace(a)  # min and max are finite only if every entry is (NaN propagates)
        if not all(bool(xp.isfinite(r)) for r in (xp.min(a), xp.max(a))):
            names = [k for k in ("gamma_", "length_scale_") if hasattr(est, k)]
            scale = ", ".join(f"{k}={getattr(est, k):.3g}" for k in names)
            raise ValueError(
                f"the fit gave NaN or infinite coefficients ({scale}): the scale is beyond the "
                "dtype's range; rescale the inputs or pass another gamma or length_scale"
            )


def check_width(est, n, shape):
    """ValueError unless ``X`` has the training width ``n`` and, where the model knows its grid, the
    training grid shape."""
    shape = tuple(shape)
    if n != est.n_features_in_:
        raise ValueError(
            f"X has {n} features, but {type(est).__name__} is expecting {est.n_features_in_} "
            f"features as input (input grid {shape} vs the training grid {est.input_shape_})"
        )
    grid_known = len(est.input_shape_) > 1 or est._knows_grid("input")
    if len(shape) > 1 and shape != tuple(est.input_shape_) and grid_known:
        raise ValueError(
            f"X has input grid {shape} but the model was trained on the grid "
            f"{tuple(est.input_shape_)}: pass the functions on the training grid (same axes, "
            "same order), flattened (M, n) rows of it, or input_grid= for another grid"
        )


def check_coordinate_order(est):
    """ValueError for a model fitted (by rfol_dask 0.1.0) on coordinates that do not increase."""
    for which in ("input", "output"):
        for d, c in (getattr(est, f"{which}_coords_", None) or {}).items():
            if io.unsorted_axis(c):
                raise ValueError(
                    f"this model was fitted on {which} coordinates that do not increase along "
                    f"{d!r} (an older rfol_dask read them by position); data are now read in "
                    "increasing coordinate order: refit the model with this version"
                )


def check_prediction_memory(est, X, new_grid):
    """:func:`rfol_dask.memory.check_prediction_memory` of a numpy prediction of ``X``."""
    if isinstance(X, da.Array) or backend.is_array_api(X):
        return
    M = num_samples(X)
    M = num_samples(np.asarray(X)) if M is None and hasattr(X, "__array__") else M
    if M is not None:  # else the validation refuses X
        n_new = None if new_grid is None else int(np.prod([len(a) for a in new_grid]))
        dtype = backend.to_numpy_dtype(est.intercept_.dtype)
        memory.check_prediction_memory(M, est.intercept_.shape[0], dtype, n_new)


def predict_rows(est, u, labels, name, sample_dim):
    """The validated rows (M, n) of the in-memory operand ``u``; NaN / Inf named by label."""
    if backend.is_array_api(u.data):
        X, _ = flatten(u.data)
        if X.ndim != 2:
            raise ValueError(f"X must be at least 2-D (n_samples, ...), got {tuple(X.shape)}")
        check_width(est, X.shape[1], u.data.shape[1:])
    else:
        raw, grid_shape = flatten(np.asarray(u.data) if u.kind == "xarray" else u.data)
        if grid_shape is not None:
            check_width(est, raw.shape[1], grid_shape)
        refuse_not_real(raw, name)
        X = validate_data(
            est, raw, reset=False, dtype=[np.float64, np.float32], ensure_all_finite=False
        )
    if (err := bad_samples(X, labels, name, sample_dim, "predicting")) is not None:
        raise err
    return X
