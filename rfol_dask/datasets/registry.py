"""The data-set registry: one :class:`DatasetSpec` per benchmark, registered by its generator
module at import, with the :class:`Rule` s its parameters are checked against."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np

_REGISTRY: dict[str, "DatasetSpec"] = {}


@dataclass(frozen=True)
class Rule:
    """A condition ``holds(value, params)`` on one generator parameter; ``says`` (a str or
    ``says(params)``) completes "<parameter> must ...", e.g. ``"be > 0"``."""

    holds: Callable[[Any, Mapping[str, Any]], bool]
    says: str | Callable[[Mapping[str, Any]], str]

    def text(self, params: Mapping[str, Any]) -> str:
        return self.says(params) if callable(self.says) else self.says


def greater(bound) -> Rule:
    """``value > bound``."""
    return Rule(lambda v, p: v > bound, f"be > {bound}")


def at_least(bound) -> Rule:
    """``value >= bound``."""
    return Rule(lambda v, p: v >= bound, f"be at least {bound}")


def one_of(*choices) -> Rule:
    """``value`` is one of ``choices``."""
    return Rule(lambda v, p: v in choices, f"be one of {choices}")


#: an even number
EVEN = Rule(lambda v, p: v % 2 == 0, "be even")


def divisor_of(key: str, offset: int = 0, *, proper: bool = False) -> Rule:
    """``value`` divides ``params[key] + offset`` (``proper``: and is smaller, leaving >= 2 parts);
    the message lists the valid values."""

    def valid(p):
        n = p[key] + offset
        return [d for d in range(1, n if proper else n + 1) if n % d == 0]

    label = f"{key} - {-offset}" if offset else key  # offsets are negative
    parts = " into >= 2 parts" if proper else ""
    return Rule(
        lambda v, p: v in valid(p),
        lambda p: f"divide {label} = {p[key] + offset}{parts} (valid: {valid(p)})",
    )


def _invalid(name, key, says, value):
    who = f"parameter {key!r} of data set {name!r}" if name else key
    return ValueError(f"{who} must {says}, got {value!r}")


def check_params(ranges, params, name=None) -> None:
    """ValueError naming the first parameter of ``params`` that breaks its rule (or tuple of
    rules) in ``ranges``; ``name``: the data set, for the message."""
    for key, rules in ranges.items():
        if key in params:
            for rule in rules if isinstance(rules, tuple) else (rules,):
                if not rule.holds(params[key], params):
                    raise _invalid(name, key, rule.text(params), params[key])


@dataclass(frozen=True)
class DatasetSpec:
    """How one benchmark data set is made.

    ``make_block(seed, start, stop, **params) -> (inputs, outputs)`` of shapes
    ``(stop - start, *grid)``, float64; ``defaults``: every parameter with its default (written
    into the Zarr attributes); ``grids(**params) -> (input_coords, output_coords)``: dicts of
    1-D coordinates by dimension (shared names only for equal coordinates); ``units`` of the
    coordinates; ``input_attrs``, ``output_attrs``: CF attributes; ``periods``: the period of
    each periodic dimension; ``ranges``: parameter -> :class:`Rule` (s); ``paper``: the paper's
    settings and errors.
    """

    name: str
    make_block: Callable[..., tuple[np.ndarray, np.ndarray]]
    defaults: Mapping[str, Any]
    grids: Callable[..., tuple[dict, dict]]
    description: str = ""
    units: str = "1"
    input_attrs: Mapping[str, str] = field(default_factory=dict)
    output_attrs: Mapping[str, str] = field(default_factory=dict)
    paper: Mapping[str, Any] = field(default_factory=dict)
    periods: Mapping[str, float] = field(default_factory=dict)
    ranges: Mapping[str, Rule | tuple[Rule, ...]] = field(default_factory=dict)

    def coord_attrs(self, dim: str) -> dict:
        """Attributes of the grid coordinate ``dim``: ``units``, and ``period`` if periodic."""
        attrs = {"units": self.units}
        if dim in self.periods:
            attrs["period"] = float(self.periods[dim])
        return attrs


def register(spec: DatasetSpec) -> DatasetSpec:
    """Add ``spec`` to the registry (a second spec under the same name, a rule on an unknown
    parameter or a default out of its range is an error)."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"a data set named {spec.name!r} is already registered")
    if unknown := sorted(set(spec.ranges) - set(spec.defaults)):
        raise ValueError(f"{spec.name}: ranges name unknown parameter(s) {unknown}")
    check_params(spec.ranges, spec.defaults, spec.name)
    _REGISTRY[spec.name] = spec
    return spec


def names() -> list[str]:
    """Names of all registered data sets, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> DatasetSpec:
    """The spec registered under ``name`` (ValueError listing the known ones)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown data set {name!r}; known data sets: {', '.join(names())}")
    return _REGISTRY[name]


def resolve_params(spec: DatasetSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's defaults updated with ``params``, converted to the defaults' types and checked:
    ValueError for unknown keywords, values that do not convert and values outside the spec's
    ``ranges``."""
    if unknown := sorted(set(params) - set(spec.defaults)):
        raise ValueError(
            f"unknown parameter(s) {unknown} for data set {spec.name!r}; "
            f"its parameters are {sorted(spec.defaults)}"
        )
    out = dict(spec.defaults)
    for key, value in params.items():
        default, out[key] = spec.defaults[key], value
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            kind = "be an integer" if isinstance(default, int) else "be a number"
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise _invalid(spec.name, key, kind, value) from None
            bad = isinstance(value, bool) or not np.isfinite(number)
            if bad or (isinstance(default, int) and number != int(number)):
                raise _invalid(spec.name, key, kind, value)
            out[key] = int(number) if isinstance(default, int) else number
    check_params(spec.ranges, out, spec.name)
    return out


def sample_rng(seed: int, index: int) -> np.random.Generator:
    """The random generator of sample ``index`` of the data set drawn with ``seed`` (the
    ``SeedSequence(seed)`` child ``index``)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(index),)))


def filled(defaults, params, what, ranges) -> SimpleNamespace:
    """``defaults`` updated with ``params``, checked against ``ranges``, as attributes (for direct
    calls of a generator); ValueError naming an unknown or out-of-range parameter."""
    if unknown := sorted(set(params) - set(defaults)):
        raise ValueError(f"unknown {what} parameter(s) {unknown}; known: {sorted(defaults)}")
    check_params(ranges, {**defaults, **params})
    return SimpleNamespace(**{**defaults, **params})
