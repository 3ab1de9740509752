"""Benchmark data sets of the paper, generated on the cluster into Zarr.

``names()`` lists them, ``generate(name, n_samples, store=None, seed=0, **params)`` makes one
(into a Zarr store when ``store`` is given), ``open_dataset(path)`` reads one back lazily
(``datasets.open(path)`` is the same function). Each generator lives in its own module and
registers a :class:`DatasetSpec`. How each data set is made: docs/datasets.md.
"""

from . import advection, advection3, burgers, darcy, helmholtz, navier_stokes, structural_mechanics  # noqa: F401  (each module registers its data sets)
from .registry import DatasetSpec, get, names, register, resolve_params, sample_rng
from .store import generate, open_dataset, request_mismatch, reuse_or_generate

__all__ = [
    "DatasetSpec",
    "get",
    "names",
    "register",
    "resolve_params",
    "sample_rng",
    "generate",
    "open_dataset",
    "reuse_or_generate",
    "request_mismatch",
]


def __getattr__(name):
    # ``datasets.open(path)``: an attribute of the package, never a global name in it (which
    # would hide the builtin ``open`` here); left out of ``__all__`` so that ``import *`` cannot
    # shadow the builtin either
    if name == "open":
        return open_dataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
