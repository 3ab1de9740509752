"""The reproduction's reference figures and quick-mode settings, read from ``reference.toml``.

The file ships inside the package (package data), so an installed package needs no source tree.
This module imports nothing heavy at import time: the command-line parser reads :data:`PARTS`.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = [
    "METHODS",
    "TUNED",
    "PARTS",
    "reference_data",
    "part_applies",
    "sizes",
    "quick_train",
    "quick_bound",
    "paper_error",
    "paper_equal_time",
]

#: the methods of every fits table, in order: the paper's settings (RF), the median heuristic
#: (kernels), then the models selected on the training split (``rf_tuned``: RandomFeatureOperatorCV,
#: ``kernel_tuned``: KernelOperatorCV)
METHODS = ("rf_cauchy", "rf_gaussian", "rbf", "matern52", "linear", "rf_tuned", "kernel_tuned")
#: the selected (tuned) methods of :data:`METHODS`
TUNED = ("rf_tuned", "kernel_tuned")
#: the parts of a reproduction run
PARTS = ("fits", "equal_time", "curves")


@lru_cache(maxsize=1)
def reference_data() -> dict[str, Any]:
    """The parsed ``reference.toml`` (data-set lists, paper figures, full and quick settings)."""
    with resources.files(__package__).joinpath("reference.toml").open("rb") as f:
        return tomllib.load(f)


def part_applies(name: str, part: str) -> bool:
    """Whether the paper has ``part`` for data set ``name``: fits for every set, the equal-time
    comparison and the error curves for the sets of ``equal_time_sets`` and ``curve_sets``."""
    return (
        part == "fits"
        or name in reference_data()[{"equal_time": "equal_time_sets", "curves": "curve_sets"}[part]]
    )


def sizes(quick: bool) -> dict[str, int]:
    """The run sizes of the ``[quick]`` or ``[full]`` table (``max_features = 0``: the paper's)."""
    table = reference_data()["quick" if quick else "full"]
    return {k: v for k, v in table.items() if not isinstance(v, dict)}


def quick_train(name: str) -> int:
    """Training samples of data set ``name`` in quick mode."""
    quick = reference_data()["quick"]
    return int(quick["train_by_set"].get(name, quick["train"]))


def quick_bound(name: str, method: str) -> float:
    """Upper bound on the quick-mode relative test error of ``method`` on ``name``."""
    try:
        return float(reference_data()["quick"]["bounds"][name][method])
    except KeyError:
        raise ValueError(
            f"reference.toml has no quick-mode bound for {name!r} / {method!r}"
        ) from None


def paper_error(name: str, method: str) -> float | None:
    """The published relative test error of ``method`` on ``name`` (None where there is none).

    RF figures come from the data set's spec (``datasets.get(name).paper``), the kernel and linear
    ones from ``reference.toml``. The tuned rows compare with the better published figure of their
    kind: ``rf_tuned`` with the better of the paper's two RF errors, ``kernel_tuned`` with the
    better of its RBF and Matern 5/2 errors.
    """
    if method == "rf_tuned":
        return min(paper_error(name, "rf_cauchy"), paper_error(name, "rf_gaussian"))
    if method == "kernel_tuned":
        known = [
            e for e in (paper_error(name, "rbf"), paper_error(name, "matern52")) if e is not None
        ]
        return min(known) if known else None
    if method.startswith("rf_"):
        from .. import datasets

        return datasets.get(name).paper[method[3:]]
    paper = reference_data()["paper"]
    if method == "linear":
        return paper["linear"].get(name)
    return paper["kernels"].get(name, {}).get(method)


def paper_equal_time(name: str, method: str) -> tuple[float, float] | None:
    """The paper's table 2 entry ``(relative error, training seconds)``, or None."""
    entry = reference_data()["paper"]["equal_time"].get(name, {}).get(method)
    return None if entry is None else (float(entry[0]), float(entry[1]))
