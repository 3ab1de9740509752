"""Error measures for operator learning on numpy, dask, xarray and array API (CuPy) arrays.

Samples run along axis 0; DataArrays are matched by label, arrays by position. Sums are taken in
float64; NaN gives NaN."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import xarray as xr
from sklearn.metrics import make_scorer

from .backend import is_array_api, namespace, to_numpy
from .exceptions import UndefinedMetricWarning
from .io import align_by_label, check_known_sizes
from .stacklevel import user_stacklevel

__all__ = ["relative_l2_error", "relative_l2_errors", "r2_score", "relative_l2_scorer"]

#: float64 bytes of one row block of a numpy input
BLOCK_BYTES = 16 * 2**20


def _pair(true, pred):
    if isinstance(true, xr.DataArray) and "sample" in true.dims:
        true = true.transpose("sample", ...)  # the samples first, wherever they are
    pred = align_by_label(true, pred)  # DataArrays: by dims, samples and grid coordinates
    true, pred = (x.data if isinstance(x, xr.DataArray) else x for x in (true, pred))
    if is_array_api(true) or is_array_api(pred):  # computed where they live
        xp = namespace(true if is_array_api(true) else pred)
        true, pred = (x if is_array_api(x) else xp.asarray(np.asarray(x)) for x in (true, pred))
    else:
        true, pred = (x if isinstance(x, da.Array) else np.asarray(x) for x in (true, pred))
    for x, name in ((true, "true"), (pred, "pred")):
        check_known_sizes(x, name)  # else "true has shape (nan, m) but pred has shape (nan, m)"
    one_column = {true.shape, pred.shape} == {true.shape[:1], (*true.shape[:1], 1)}
    if true.shape != pred.shape and not one_column:
        raise ValueError(f"true has shape {true.shape} but pred has shape {pred.shape}")
    if true.ndim == 0 or true.shape[0] == 0:
        raise ValueError("need at least one sample along axis 0")
    if 0 in true.shape[1:]:
        raise ValueError(f"need at least one value per sample, got shape {true.shape}")
    if is_array_api(true):
        xp = namespace(true, pred)
        flat = (xp.reshape(x, (x.shape[0], -1)) for x in (true, pred))
        return tuple(xp.astype(x, xp.float64, copy=False) for x in flat)
    if isinstance(true, np.ndarray) and isinstance(pred, np.ndarray):  # cast block by block
        return tuple(x.reshape(x.shape[0], -1) for x in (true, pred))
    return tuple(x.reshape(x.shape[0], -1).astype(np.float64, copy=False) for x in (true, pred))


def _blocks(*arrays):
    """Row blocks ``(rows, a[rows], ...)`` of numpy (M, m) arrays as float64 copies."""
    M, m = arrays[0].shape
    step = max(1, BLOCK_BYTES // (8 * m))
    for start in range(0, M, step):
        rows = slice(start, start + step)
        yield (rows, *(a[rows].astype(np.float64) for a in arrays))


def relative_l2_errors(true, pred):
    """Per-sample ``||pred_i - true_i|| / ||true_i||``, shape (M,); lazy for dask inputs, in
    the inputs' namespace for array API inputs (CuPy)."""
    t, p = _pair(true, pred)
    if isinstance(t, np.ndarray) and isinstance(p, np.ndarray):
        num, den = np.empty(t.shape[0]), np.empty(t.shape[0])
        for rows, tb, pb in _blocks(t, p):
            pb -= tb
            num[rows] = np.square(pb, out=pb).sum(1)
            den[rows] = np.square(tb, out=tb).sum(1)
            del tb, pb  # before the next block is made
        return np.sqrt(num) / np.sqrt(den)
    xp = namespace(t, p) if is_array_api(t) else da
    return xp.sum((p - t) ** 2, axis=1) ** 0.5 / xp.sum(t**2, axis=1) ** 0.5


def relative_l2_error(true, pred):
    """The paper's metric: the mean over samples of ``||pred_i - true_i||_2 / ||true_i||_2``.

    A true function identically zero makes it infinite (NaN when predicted zero too)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        (errors,) = dask.compute(relative_l2_errors(true, pred))
        return float(np.mean(to_numpy(errors)))


def r2_score(true, pred):
    """Coefficient of determination averaged uniformly over output components.

    As ``sklearn.metrics.r2_score(multioutput="uniform_average")``: a constant component (all
    its true values equal, even where their mean rounds) scores 1 if predicted exactly, else 0;
    fewer than two samples give NaN and an ``UndefinedMetricWarning``.
    """
    t, p = _pair(true, pred)
    if t.shape[0] < 2:
        msg = "R^2 score is not well-defined with less than two samples."
        warnings.warn(msg, UndefinedMetricWarning, stacklevel=user_stacklevel())
        return float("nan")
    if isinstance(t, np.ndarray) and isinstance(p, np.ndarray):
        ss_res, total = np.zeros(t.shape[1]), np.zeros(t.shape[1])
        constant = np.ones(t.shape[1], dtype=bool)
        for _, tb, pb in _blocks(t, p):
            total += tb.sum(0)
            constant &= (tb == tb[:1]).all(0) & (tb[0] == t[0])
            pb -= tb
            ss_res += np.square(pb, out=pb).sum(0)
            del tb, pb  # before the next block is made
        ss_tot, mean = np.zeros(t.shape[1]), total / t.shape[0]
        for _, tb in _blocks(t):
            tb -= mean
            ss_tot += np.square(tb, out=tb).sum(0)
            del tb  # before the next block is made
    else:
        xp = namespace(t, p) if is_array_api(t) else da
        ss_res = xp.sum((t - p) ** 2, axis=0)
        ss_tot = xp.sum((t - xp.mean(t, axis=0)) ** 2, axis=0)
        constant = xp.all(t == t[:1, ...], axis=0)
    ss_res, ss_tot, constant = dask.compute(ss_res, ss_tot, constant)
    ss_res, ss_tot = (np.asarray(to_numpy(x), dtype=float) for x in (ss_res, ss_tot))
    ss_tot[np.asarray(to_numpy(constant), dtype=bool)] = 0.0  # not the rounding of its mean
    score = np.ones_like(ss_res)
    ok = ss_tot != 0
    score[ok] = 1.0 - ss_res[ok] / ss_tot[ok]
    score[~ok & (ss_res != 0)] = 0.0
    return float(np.mean(score))


#: scikit-learn scorer of the paper's metric, ``-relative_l2_error(y, estimator.predict(X))``
relative_l2_scorer = make_scorer(relative_l2_error, greater_is_better=False)
