"""The reproduction's reference figures and quick-mode settings, from the package data file
``reference.toml``. Nothing heavy is imported: the command-line parser reads :data:`PARTS`."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources
from typing import Any

#: the methods of every fits table: the paper's settings (RF), the median heuristic (kernels),
#: then RandomFeatureOperatorCV and KernelOperatorCV selected on the training split (TUNED)
METHODS = ("rf_cauchy", "rf_gaussian", "rbf", "matern52", "linear", "rf_tuned", "kernel_tuned")
TUNED = ("rf_tuned", "kernel_tuned")
PARTS = ("fits", "equal_time", "curves")


@lru_cache(maxsize=1)
def reference_data() -> dict[str, Any]:
    """The parsed ``reference.toml`` (data-set lists, paper figures, full and quick settings)."""
    with resources.files(__package__).joinpath("reference.toml").open("rb") as f:
        return tomllib.load(f)


def part_applies(name: str, part: str) -> bool:
    """Whether the paper has ``part`` for data set ``name`` (fits: every set)."""
    return part == "fits" or name in reference_data()[part.rstrip("s") + "_sets"]


def sizes(quick: bool) -> dict[str, int]:
    """The run sizes of the ``[quick]`` or ``[full]`` table (``max_features = 0``: the paper's)."""
    table = reference_data()["quick" if quick else "full"]
    return {k: v for k, v in table.items() if not isinstance(v, dict)}


def quick_train(name: str) -> int:
    quick = reference_data()["quick"]  # training samples of data set ``name`` in quick mode
    return int(quick["train_by_set"].get(name, quick["train"]))


def quick_bound(name: str, method: str) -> float:
    """Upper bound on the quick-mode relative test error of ``method`` on ``name``."""
    try:
        return float(reference_data()["quick"]["bounds"][name][method])
    except KeyError:
        msg = f"reference.toml has no quick-mode bound for {name!r} / {method!r}"
        raise ValueError(msg) from None


def paper_error(name: str, method: str) -> float | None:
    """The published relative test error of ``method`` on ``name`` (None where there is none);
    a tuned row's is the better published figure of its kind (RF; RBF and Matern 5/2)."""
    if method in TUNED:
        kin = ("rf_cauchy", "rf_gaussian") if method == "rf_tuned" else ("rbf", "matern52")
        known = [e for e in (paper_error(name, k) for k in kin) if e is not None]
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
