"""Figures a user looks at: truth, prediction and pointwise error of test samples (matplotlib)."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_prediction"]


def plot_prediction(path, truth, predictions, grid=None, title=None):
    """Save a PNG comparing one test sample's ``truth`` with ``predictions`` (label -> array).

    1-D outputs give line plots (truth and predictions, then pointwise errors on a log
    scale); 2-D outputs give images (truth, each prediction, each error).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    truth = np.asarray(truth)
    if truth.ndim == 1:
        x = np.arange(truth.size) if grid is None else np.asarray(grid)
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.8))
        ax0.plot(x, truth, "k-", lw=2, label="truth")
        for label, pred in predictions.items():
            ax0.plot(x, np.asarray(pred), "--", label=label)
            ax1.semilogy(x, np.abs(np.asarray(pred) - truth) + 1e-300, label=label)
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
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
