"""Figures of test samples (truth, prediction, pointwise error) and of error curves (matplotlib).
Fields: numpy, DataArrays or CuPy arrays, on their grid coordinates (labelled by ``long_name`` and
``units``). ``*_figure`` return the Figure; ``plot_*`` save it (PNG unless the suffix names a
format matplotlib writes) and return the path written."""

from __future__ import annotations

import numpy as np

from .backend import is_array_api, to_numpy
from .io import align_by_label

_FIELD_CMAP, _ERROR_CMAP = "viridis", "RdBu_r"


def _host(x):
    """``x`` (an array, or a DataArray holding one) with its values on the host."""
    if is_array_api(x):
        return to_numpy(x)
    if is_array_api(getattr(x, "data", None)) and hasattr(x, "copy"):
        return x.copy(data=to_numpy(x.data))
    return x


def _label(obj, default):
    """``long_name [units]`` of an xarray object's attrs, else its name, else ``default``."""
    a = getattr(obj, "attrs", None) or {}
    name, units = a.get("long_name") or getattr(obj, "name", None) or default, a.get("units")
    return None if name is None else f"{name} [{units}]" if units not in (None, "") else str(name)


def _grid_of(values, grid):
    """``grid`` as a tuple of axes; without one, a DataArray's own coordinates, else None."""
    if grid is not None and not isinstance(grid, (tuple, list)) and np.ndim(values) == 1:
        return (grid,)
    if grid is None and hasattr(values, "dims") and all(d in values.coords for d in values.dims):
        return tuple(values[d] for d in values.dims)
    return grid


def _axes(values, grid, name="grid"):
    """Per dimension of ``values``: (coordinates, axis label); ValueError naming ``name`` when
    ``grid`` (None, or one 1-D axis per dimension, of its length) does not fit."""
    ndim, shape = np.ndim(values), np.shape(values)
    grid = _grid_of(values, grid)
    names = getattr(values, "dims", None) or ("x", "y", "z")[:ndim]
    if grid is None:
        return [(np.arange(n), f"{dim} (index)") for n, dim in zip(shape, names, strict=False)]
    if len(grid) != ndim:
        raise ValueError(f"{name} has {len(grid)} axes but the field has {ndim} dimensions {shape}")
    for i, (g, n) in enumerate(zip(grid, shape, strict=True)):
        if np.shape(g) != (n,):
            raise ValueError(f"{name}[{i}] has shape {np.shape(g)}; expected ({n},) for a field of "
                             f"shape {shape}")  # fmt: skip
    return [(_positions(g), _label(g, dim)) for g, dim in zip(grid, names, strict=False)]


def _positions(axis):
    """Where the points of a grid axis are drawn: their coordinates, else (names) their indices."""
    a = np.asarray(getattr(axis, "values", axis))
    return a.astype(float) if a.dtype.kind in "biufmM" else np.arange(a.size, dtype=float)


def _name_ticks(ax, values, grid, which="xy"):
    """Label the ticks of ``ax`` with the labels of the grid axes that are not numbers."""
    grid = _grid_of(values, grid)
    for axis, side in zip(grid or (), which, strict=False):
        labels = np.asarray(getattr(axis, "values", axis))
        if labels.dtype.kind not in "biufmM":
            step, turn = max(1, -(-labels.size // 20)), 90 if side == "x" else 0  # <= ~20 names
            ticks = np.arange(0, labels.size, step), [str(v) for v in labels[::step]]
            getattr(ax, f"set_{side}ticks")(*ticks, rotation=turn, fontsize=8)


def _check_fields(fields, grid, grid_name):
    """ValueError unless ``fields`` (name -> array) are 1-D or 2-D fields of the first one's
    shape, and ``grid`` fits it."""
    (ref_name, ref), *others = fields.items()
    if len(shape := np.shape(ref)) not in (1, 2):
        raise ValueError(f"{ref_name} must be one sample's field, 1-D (k,) or 2-D (kx, ky), got "
                         f"shape {shape}")  # fmt: skip
    for name, values in others:
        if np.shape(values) != shape:
            raise ValueError(f"{name} has shape {np.shape(values)}; expected {shape}, the shape of "
                             f"{ref_name}")  # fmt: skip
    _axes(ref, grid, grid_name)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path, dpi=100):
    """Write ``fig`` to ``path`` (``.png`` appended to a suffix matplotlib does not write, as
    ``alpha_1e-8_N2.5k``) and close it; returns the path written."""
    import os

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    if os.path.splitext(path)[1][1:].lower() not in fig.canvas.get_supported_filetypes():
        path = type(path)(f"{os.fspath(path)}.png")  # a str or a Path
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return path


def _field_norm(*fields):
    """One colour scale (Normalize) covering every field."""
    from matplotlib.colors import Normalize

    finite = np.concatenate([f[np.isfinite(f)] for f in (np.asarray(f, float) for f in fields)])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    return Normalize(lo, hi if hi > lo else lo + 1.0)


def _error_norm(*errors):
    """A symmetric colour scale [-m, m] covering every error."""
    from matplotlib.colors import Normalize

    m = max((float(np.nanmax(np.abs(np.asarray(e, float)))) for e in errors), default=0.0)
    m = m if np.isfinite(m) and m > 0 else 1.0
    return Normalize(-m, m)


def _image(ax, values, grid, norm, cmap, title):
    """A 2-D field on its physical axes; returns the QuadMesh."""
    (x, xlabel), (y, ylabel) = _axes(values, grid)
    mesh = ax.pcolormesh(x, y, np.asarray(values, float).T, shading="auto", norm=norm, cmap=cmap)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    _name_ticks(ax, values, grid)
    ax.set_title(title, fontsize=10)
    return mesh


def _line(ax, values, grid, title, style="k-", ylabel=None):
    """A 1-D field on its physical axis."""
    ((x, xlabel),) = _axes(values, grid)
    ax.plot(x, np.asarray(values, float), style, lw=1.5)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    _name_ticks(ax, values, grid, "x")
    ax.set_title(title, fontsize=10)


def _field_panel(fig, ax, values, grid, title):
    """One panel with its own scale: a line (1-D) or an image with colour bar (2-D)."""
    if np.ndim(values) == 1:
        _line(ax, values, grid, title, ylabel=_label(values, None))
    else:
        mesh = _image(ax, values, grid, _field_norm(values), _FIELD_CMAP, title)
        fig.colorbar(mesh, ax=ax, shrink=0.8, label=_label(values, ""))


def _compare_2d(fig, axes, truth, predictions, grid, truth_title="truth"):
    """Truth, predictions (one shared colour scale) and errors (one symmetric scale)."""
    grid, t = _grid_of(truth, grid), np.asarray(truth, float)
    errors = {label: np.asarray(p, float) - t for label, p in predictions.items()}
    norm, enorm = _field_norm(truth, *predictions.values()), _error_norm(*errors.values())
    value_label = _label(truth, "")
    mesh = _image(axes[0], truth, grid, norm, _FIELD_CMAP, truth_title)
    for i, (label, pred) in enumerate(predictions.items()):
        _image(axes[1 + 2 * i], pred, grid, norm, _FIELD_CMAP, label)
        emesh = _image(axes[2 + 2 * i], errors[label], grid, enorm, _ERROR_CMAP, f"{label} - truth")
    fig.colorbar(mesh, ax=[axes[0], *axes[1::2]], shrink=0.8, label=value_label)
    fig.colorbar(emesh, ax=list(axes[2::2]), shrink=0.8, label=f"error {value_label}".strip())


def prediction_figure(truth, predictions, grid=None, title=None):
    """Figure comparing one test sample's ``truth`` (k,) or (kx, ky) with ``predictions`` (label
    -> array of its shape; DataArrays matched by dims and coordinates) on ``grid`` (one axis per
    dimension): lines and log errors in 1-D; in 2-D images of truth and predictions on one
    colour scale and of the errors on one symmetric scale. ValueError for other dimensions,
    other shapes, a grid that does not fit or no prediction."""
    plt = _pyplot()
    truth = _host(truth)
    predictions = {k: align_by_label(truth, _host(p), ("truth", k)) for k, p in predictions.items()}
    if not predictions:
        raise ValueError("predictions is empty: pass at least one label -> array")
    named = {f"predictions[{label!r}]": p for label, p in predictions.items()}
    _check_fields({"truth": truth, **named}, grid, "grid")
    if np.ndim(truth) == 1:
        ((x, xlabel),) = _axes(truth, grid)
        t = np.asarray(truth, float)
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
        ax0.plot(x, t, "k-", lw=2, label="truth")
        floor = np.finfo(float).eps * max(np.abs(t).max(), np.finfo(float).tiny)  # exact zeros
        for label, pred in predictions.items():
            ax0.plot(x, np.asarray(pred, float), "--", label=label)
            ax1.semilogy(x, np.maximum(np.abs(np.asarray(pred, float) - t), floor), label=label)
        ax0.set(xlabel=xlabel, ylabel=_label(truth, "output"), title="test output")
        ax1.set(xlabel=xlabel, ylabel="|prediction - truth|", title="pointwise |error|")
        for ax in (ax0, ax1):
            _name_ticks(ax, truth, grid, "x")
            ax.legend()
    else:
        n = 1 + 2 * len(predictions)
        fig, axes = plt.subplots(1, n, figsize=(3.4 * n, 3.4), layout="constrained", squeeze=False)
        _compare_2d(fig, axes[0], truth, predictions, grid)
    if title:
        fig.suptitle(title)
    return fig


def plot_prediction(path, truth, predictions, grid=None, title=None):
    """Save :func:`prediction_figure` at ``path``; returns the path written."""
    return _save(prediction_figure(truth, predictions, grid, title), path, dpi=110)


def example_figure(train_input, train_output, test_truth, test_prediction, input_grid=None,
                   output_grid=None, title=None, label="prediction"):  # fmt: skip
    """Figure laid out like the paper's data-set figures: a training input and its output
    (fields (k,) or (kx, ky) on ``input_grid`` / ``output_grid``), then the test truth and
    prediction overlaid with the pointwise error (1-D) or as images on one colour scale with
    the error on a symmetric one (2-D). ValueError for other dimensions, a prediction of
    another shape or a grid that does not fit."""
    plt = _pyplot()
    fields = map(_host, (train_input, train_output, test_truth, test_prediction))
    train_input, train_output, test_truth, test_prediction = fields
    test_prediction = align_by_label(test_truth, test_prediction, ("test_truth", "test_prediction"))
    _check_fields({"train_input": train_input}, input_grid, "input_grid")
    _check_fields({"train_output": train_output}, output_grid, "output_grid")
    test = {"test_truth": test_truth, "test_prediction": test_prediction}
    _check_fields(test, output_grid, "output_grid")
    n_panels = 4 if np.ndim(test_truth) == 1 else 5
    fig, axes = plt.subplots(1, n_panels, figsize=(3.4 * n_panels, 3.2), layout="constrained")
    _field_panel(fig, axes[0], train_input, input_grid, "training input")
    _field_panel(fig, axes[1], train_output, output_grid, "training output")
    error = np.asarray(test_prediction, float) - np.asarray(test_truth, float)
    if np.ndim(test_truth) == 1:
        ((x, xlabel),) = _axes(test_truth, output_grid)
        axes[2].plot(x, np.asarray(test_truth, float), "k-", lw=2, label="truth")
        axes[2].plot(x, np.asarray(test_prediction, float), "r--", lw=1.5, label=label)
        axes[2].set(xlabel=xlabel, ylabel=_label(test_truth, None))
        axes[2].set_title("true and predicted test", fontsize=10)
        _name_ticks(axes[2], test_truth, output_grid, "x")
        axes[2].legend(fontsize=8)
        grid = _grid_of(test_truth, output_grid)
        _line(axes[3], error, grid, "pointwise error", "r-", ylabel=f"{label} - truth")
        lim = _error_norm(error).vmax
        axes[3].set_ylim(-1.05 * lim, 1.05 * lim)
    else:
        predicted = {f"predicted test ({label})": test_prediction}
        _compare_2d(fig, axes[2:], test_truth, predicted, output_grid, truth_title="true test")
    if title:
        fig.suptitle(title)
    return fig


def plot_example(path, *args, **kwargs):
    """Save :func:`example_figure` of ``args`` and ``kwargs`` at ``path``; returns the path."""
    return _save(example_figure(*args, **kwargs), path, dpi=100)


def _curve_slope(c):
    """The fitted error slope of a curve (dict or curve dataset, old or new), or None."""
    fit = c.get("slope") if hasattr(c, "get") else None
    if isinstance(fit, dict):
        return fit.get("slope")  # None: no slope (JSON null for NaN)
    if "slope_slope" in getattr(c, "data_vars", {}):
        return float(c["slope_slope"])  # 0-d: _curve_values refused a combined study first
    return (getattr(c, "attrs", None) or {}).get("slope_slope")


def _curve_metric(c):
    """The error metric named in one curve's settings, or None."""
    settings = c.get("settings") if isinstance(c, dict) else getattr(c, "attrs", None)
    return (settings or {}).get("error")


def _curve_values(label, c, key):
    """``c[key]`` as a float array (n_seeds, k); ValueError for a combined study's extra dims."""
    values = c[key]
    extra = [d for d in getattr(values, "dims", ()) if d not in ("seed", "n_features")]
    if extra or np.ndim(values) > 2:
        dims = getattr(values, "dims", None) or np.shape(values)
        sel = extra[0] if extra else "n_train"
        raise ValueError(f"curve {label!r}: {key} has dims {dims}, not (seed, n_features): pass "
                         f"one curve per label, e.g. study.sel({sel}=M) for each M")  # fmt: skip
    if "n_features" in getattr(values, "dims", ()):
        values = values.transpose(..., "n_features")
    return np.atleast_2d(np.asarray(values, float))


def curves_figure(curves, title=None):
    """Figure of error vs N (log-log, with an ``N^(-1/2)`` guide) and fit time vs N: ``curves``
    maps a label to an :func:`rfol_dask.curves.error_curves` result or its ``curve_dataset``,
    drawn as the geometric mean over seeds with the min-max band."""
    plt = _pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, c in curves.items():
        N = np.asarray(c["n_features"], float)
        for ax, key in ((ax0, "error"), (ax1, "fit_time")):
            vals = _curve_values(label, c, key)
            mid, text, slope = np.exp(np.log(vals).mean(axis=0)), label, _curve_slope(c)
            if key == "error" and slope is not None and np.isfinite(slope):
                text = f"{label} (slope {slope:.2f})"
            (line,) = ax.loglog(N, mid, "o-", label=text)
            ax.fill_between(N, vals.min(0), vals.max(0), color=line.get_color(), alpha=0.2)
            if key == "error":
                ax.loglog(N, mid[0] * (N / N[0]) ** -0.5, ":", color=line.get_color(), lw=1)
    metrics = sorted({_curve_metric(c) or "relative_l2_error" for c in curves.values()})
    ylabel = f"test error ({', '.join(metrics)})"
    ylabel = "relative test error" if metrics in ([], ["relative_l2_error"]) else ylabel
    ax0.set(xlabel="N (random features)", ylabel=ylabel, title="error vs N (dotted: N^-1/2)")
    ax1.set(xlabel="N (random features)", ylabel="fit time [s]", title="fit time vs N")
    for ax in (ax0, ax1):
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def plot_curves(path, curves, title=None):
    """Save :func:`curves_figure` at ``path``; returns the path written."""
    return _save(curves_figure(curves, title), path, dpi=100)
