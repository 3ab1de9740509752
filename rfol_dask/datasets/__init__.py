"""Benchmark data sets of the paper, generated on the cluster into Zarr.

``names()`` lists them, ``generate(name, n_samples, store=None, seed=0, **params)`` makes one
(into a Zarr store when ``store`` is given), ``open(path)`` reads one back lazily.
Each generator lives in its own module and registers a :class:`DatasetSpec`.
"""

from .registry import DatasetSpec, get, names, register, resolve_params, sample_rng
from .store import generate, open_dataset
from . import (  # noqa: F401  (each module registers its data sets)
    advection,
    advection3,
    burgers,
    darcy,
    helmholtz,
    navier_stokes,
    structural_mechanics,
)

open = open_dataset  # noqa: A001  (the documented name: ``datasets.open(path)``)

__all__ = ["DatasetSpec", "get", "names", "register", "resolve_params", "sample_rng",
           "generate", "open", "open_dataset"]
