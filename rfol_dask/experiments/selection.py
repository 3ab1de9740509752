"""Hyperparameters of the kernel baselines: the library's median heuristic (re-exported) and a
nugget chosen on validation data."""

from __future__ import annotations

import time

import numpy as np

from ..baselines import KernelOperator
from ..metrics import relative_l2_error
from ..tuning import median_length_scale
from .reference import reference_data

__all__ = ["median_length_scale", "select_nugget"]


def select_nugget(kernel: str, length_scale: float, U: np.ndarray, V: np.ndarray, grid=None):
    """The nugget of the smallest validation error for a :class:`KernelOperator`, fitted on the
    first ``min(1000, 0.8 M)`` rows of ``U`` (M, n) / ``V`` (M, m), validated on the next
    ``min(500, M - that)``; ``grid`` (default: ``nuggets`` of ``reference.toml``) is relative to
    the mean diagonal of the centred Gram. Returns ``(nugget, seconds, {"<nugget>": error})``."""
    grid = reference_data()["nuggets"] if grid is None else grid
    t0, n_fit = time.perf_counter(), min(1000, int(0.8 * len(U)))
    n_val = min(500, len(U) - n_fit)
    if n_fit < 1 or n_val < 1:
        raise ValueError(f"select_nugget needs at least 2 training samples, got {len(U)}")
    Uf, Vf, Uv, Vv = U[:n_fit], V[:n_fit], U[n_fit : n_fit + n_val], V[n_fit : n_fit + n_val]
    scale = float(((Uf - Uf.mean(axis=0)) ** 2).sum(axis=1).mean()) if kernel == "linear" else 1.0
    errors = {}
    for rel in grid:
        model = KernelOperator(kernel=kernel, length_scale=length_scale, nugget=rel * scale)
        errors[rel * scale] = relative_l2_error(Vv, model.fit(Uf, Vf).predict(Uv))
    best = min(errors, key=errors.get)
    return best, time.perf_counter() - t0, {f"{k:.3g}": v for k, v in errors.items()}
