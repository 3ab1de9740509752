"""Figures a user looks at: truth, prediction and pointwise error of test samples (matplotlib)."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_prediction", "plot_example", "plot_curves"]


def plot_prediction(path, truth, predictions, grid=None, title=None):
    """Save a PNG comparing one test sample's ``truth`` with ``predictions`` (label -> array).

    1-D outputs give line plots (truth and predictions, then pointwise errors on a log
    scale); 2-D outputs give images (truth, each prediction, each error).
    """
    plt = _pyplot()
    truth = np.asarray(truth)
    if truth.ndim == 1:
        x = np.arange(truth.size) if grid is None else np.asarray(grid)
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.8))
        ax0.plot(x, truth, "k-", lw=2, label="truth")
        floor = np.finfo(float).eps * max(np.abs(truth).max(), np.finfo(float).tiny)  # exact zeros on a log axis
        for label, pred in predictions.items():
            ax0.plot(x, np.asarray(pred), "--", label=label)
            ax1.semilogy(x, np.maximum(np.abs(np.asarray(pred) - truth), floor), label=label)
        ax0.set(xlabel="x", title="test output")
        ax1.set(xlabel="x", title="pointwise |error|")
        ax0.legend()
        ax1.legend()
    else:
        cols = 1 + 2 * len(predictions)
        fig, axes = plt.subplots(1, cols, figsize=(3.2 * cols, 3.2))
        panels = [("truth", truth)]
        for label, pred in predictions.items():
            panels += [(label, np.asarray(pred)), (f"{label} error", np.asarray(pred) - truth)]
        for ax, (label, img) in zip(axes, panels):
            im = ax.imshow(img.T, origin="lower", cmap="RdBu_r" if "error" in label else "viridis")
            ax.set_title(label)
            fig.colorbar(im, ax=ax, shrink=0.8)
    return _save(fig, path, title, dpi=110)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path, title=None, dpi=100):
    """Title, lay out, write ``fig`` to ``path`` as PNG and close it; returns ``path``."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return path


def _panel(fig, ax, values, grid, title, error=False):
    """One panel: a line for 1-D values, an image (with colour bar) for 2-D values."""
    values = np.asarray(values)
    if values.ndim == 1:
        x = np.arange(values.size) if grid is None else np.asarray(grid[0])
        ax.plot(x, values, "r-" if error else "k-", lw=1.5)
    else:
        extent = None
        if grid is not None:
            extent = [grid[0][0], grid[0][-1], grid[1][0], grid[1][-1]]
        vmax = float(np.abs(values).max()) if error else None  # errors: a colour scale centred at 0
        im = ax.imshow(values.T, origin="lower", extent=extent, aspect="auto", cmap="RdBu_r" if error else "viridis",
                       vmin=-vmax if error else None, vmax=vmax)
        fig.colorbar(im, ax=ax, shrink=0.8)
    ax.set_title(title, fontsize=10)


def plot_example(path, train_input, train_output, test_truth, test_prediction, input_grid=None,
                 output_grid=None, title=None, label="prediction"):
    """Save a PNG laid out like the paper's data-set figures.

    Panels: (a) a training input, (b) its output, then for one test sample either (c) truth
    and prediction overlaid and (d) the pointwise error (1-D outputs), or (c) the truth,
    (d) the prediction and (e) the pointwise error ``prediction - truth`` (2-D outputs).
    Inputs and outputs may differ in dimension (e.g. a 1-D load and a 2-D stress field).

    Parameters
    ----------
    train_input, test_truth, ... : ndarray, shape of one function's grid (k,) or (kx, ky)
    input_grid, output_grid : tuple of 1-D coordinate arrays, optional
        Grid axes (default: indices).
    """
    plt = _pyplot()
    truth, pred = np.asarray(test_truth), np.asarray(test_prediction)
    n_panels = 4 if truth.ndim == 1 else 5
    fig, axes = plt.subplots(1, n_panels, figsize=(3.2 * n_panels, 3.0))
    _panel(fig, axes[0], train_input, input_grid, "training input")
    _panel(fig, axes[1], train_output, output_grid, "training output")
    if truth.ndim == 1:
        x = np.arange(truth.size) if output_grid is None else np.asarray(output_grid[0])
        axes[2].plot(x, truth, "k-", lw=2, label="truth")
        axes[2].plot(x, pred, "r--", lw=1.5, label=label)
        axes[2].set_title("true and predicted test", fontsize=10)
        axes[2].legend(fontsize=8)
        _panel(fig, axes[3], pred - truth, output_grid, "pointwise error", error=True)
    else:
        _panel(fig, axes[2], truth, output_grid, "true test")
        _panel(fig, axes[3], pred, output_grid, f"predicted test ({label})")
        _panel(fig, axes[4], pred - truth, output_grid, "pointwise error", error=True)
    return _save(fig, path, title, dpi=100)


def plot_curves(path, curves, title=None):
    """Save a PNG of error-vs-N (log-log, with an ``N^(-1/2)`` guide) and fit-time-vs-N.

    ``curves`` maps a label to a dict with ``n_features`` (k,), ``error`` and ``fit_time``
    (n_seeds, k) and optionally ``slope`` (a :func:`rfol_dask.curves.fit_slope` dict): each
    label is drawn as its geometric mean over seeds with the min-max band.
    """
    plt = _pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, c in curves.items():
        N = np.asarray(c["n_features"], float)
        for ax, key in ((ax0, "error"), (ax1, "fit_time")):
            vals = np.atleast_2d(np.asarray(c[key], float))
            mid = np.exp(np.log(vals).mean(axis=0))
            text = label
            if key == "error" and c.get("slope") is not None and np.isfinite(c["slope"]["slope"]):
                text = f"{label} (slope {c['slope']['slope']:.2f})"
            line, = ax.loglog(N, mid, "o-", label=text)
            ax.fill_between(N, vals.min(axis=0), vals.max(axis=0), color=line.get_color(), alpha=0.2)
            if key == "error":
                ax.loglog(N, mid[0] * (N / N[0]) ** -0.5, ":", color=line.get_color(), lw=1)
    ax0.set(xlabel="N (random features)", ylabel="relative test error",
            title="error vs N (dotted: N^-1/2)")
    ax1.set(xlabel="N (random features)", ylabel="fit time [s]", title="fit time vs N")
    ax0.legend(fontsize=8)
    ax1.legend(fontsize=8)
    return _save(fig, path, title, dpi=100)
