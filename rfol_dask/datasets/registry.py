"""The data-set registry: one :class:`DatasetSpec` per benchmark, looked up by name.

A generator module builds a ``DatasetSpec`` and calls :func:`register` at import time.
The spec's ``make_block(seed, start, stop, **params)`` returns ``(inputs, outputs)`` for
samples ``start .. stop-1``; sample ``i`` must depend only on ``(seed, i)`` (draw its
randomness from :func:`sample_rng`), so that any block size and any number of workers
give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["DatasetSpec", "register", "get", "names", "sample_rng", "resolve_params"]

_REGISTRY: dict[str, "DatasetSpec"] = {}


@dataclass(frozen=True)
class DatasetSpec:
    """How one benchmark data set is made.

    Attributes
    ----------
    name : str
        Registry key, e.g. ``"advection1"`` or ``"navier_stokes_low"``.
    make_block : callable
        ``make_block(seed, start, stop, **params) -> (inputs, outputs)`` with
        ``inputs.shape == (stop - start, *input grid)`` and
        ``outputs.shape == (stop - start, *output grid)``, float64.
    defaults : mapping
        Every physical / numerical parameter with the spec's default value; all of
        them are keywords of ``make_block`` and are written into the Zarr attributes.
    grids : callable
        ``grids(**params) -> (input_coords, output_coords)``: two dicts mapping a
        dimension name to its 1-D coordinate array, in the order of the array axes.
        Input and output may share dimension names only when the coordinates are equal.
    description : str
        One line for ``rfol-dask datasets``.
    units : str
        Units of the grid coordinates (``"m"`` for positions; ``"1"`` only for truly
        dimensionless ones).
    periods : mapping
        Grid dimension -> period, for every periodic axis; written as the coordinate
        attribute ``period``, which ``fit`` reads (recovery then wraps around that axis).
    paper : mapping
        The paper's settings and figures (``train``, ``test``, ``n_features``,
        ``gamma``, ``alpha``, ``cauchy``, ``gaussian``) for sanity tables.
    """

    name: str
    make_block: Callable[..., tuple[np.ndarray, np.ndarray]]
    defaults: Mapping[str, Any]
    grids: Callable[..., tuple[dict, dict]]
    description: str = ""
    units: str = "1"
    paper: Mapping[str, Any] = field(default_factory=dict)
    periods: Mapping[str, float] = field(default_factory=dict)

    def coord_attrs(self, dim: str) -> dict:
        """Attributes of the grid coordinate ``dim``: ``units``, and ``period`` if it is periodic."""
        attrs = {"units": self.units}
        if dim in self.periods:
            attrs["period"] = float(self.periods[dim])
        return attrs


def register(spec: DatasetSpec) -> DatasetSpec:
    """Add ``spec`` to the registry (a second spec under the same name is an error)."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"a data set named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def names() -> list[str]:
    """Names of all registered data sets, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> DatasetSpec:
    """The spec registered under ``name``; unknown names raise a ValueError listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown data set {name!r}; known data sets: {', '.join(names())}"
        ) from None


def resolve_params(spec: DatasetSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's defaults updated with ``params``; unknown keywords raise a ValueError."""
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for data set {spec.name!r}; "
            f"its parameters are {sorted(spec.defaults)}"
        )
    out = dict(spec.defaults)
    for key, value in params.items():
        default = spec.defaults[key]
        if isinstance(default, bool) or default is None:
            out[key] = value
        elif isinstance(default, int) and not isinstance(value, bool):
            if float(value) != int(float(value)):
                raise ValueError(f"parameter {key!r} must be an integer, got {value!r}")
            out[key] = int(float(value))
        elif isinstance(default, float):
            out[key] = float(value)
        else:
            out[key] = value
    return out


def sample_rng(seed: int, index: int) -> np.random.Generator:
    """The random generator of sample ``index`` of the data set drawn with ``seed``.

    It depends on ``(seed, index)`` only (``SeedSequence(seed).spawn`` child ``index``),
    never on block sizes or workers.
    """
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(index),)))
