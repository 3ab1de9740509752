"""The paper's experiments: data access, baseline hyperparameters, runners and reports.

``reproduce(names, quick=..., out=...)`` runs the reproduction (``rfol-dask reproduce`` and
``benchmarks/reproduce.py`` call it). The reference figures and quick-mode bounds are the package
data file ``reference.toml``. This subpackage uses the core, the data sets and the baselines; the
core never imports it. Names are imported from their modules on first use (so the command line's
parser does not import the data sets):

- :mod:`.data`: ``SharedCluster``, ``load_split``, ``load_subset``, ``arrays``, ``grid``
- :mod:`.selection`: ``median_length_scale``, ``select_nugget``
- :mod:`.measure`: ``PeakMemory``, ``run_method``
- :mod:`.runners`: ``make_models``, ``run_fits``, ``run_equal_time``, ``run_curves``, ``run``
- :mod:`.report`: ``render``
- :mod:`.reference`: ``METHODS``, ``TUNED``, ``PARTS``, ``reference_data``, ``sizes``, ``quick_train``, ``quick_bound``,
  ``paper_error``
- :mod:`.reproduce`: ``reproduce``, ``main``
"""

from importlib import import_module

_WHERE = {
    "data": ("SharedCluster", "load_split", "load_subset", "arrays", "grid"),
    "selection": ("median_length_scale", "select_nugget"),
    "measure": ("PeakMemory", "run_method"),
    "runners": ("make_models", "run_fits", "run_equal_time", "run_curves", "run"),
    "report": ("render",),
    "reference": (
        "METHODS",
        "TUNED",
        "PARTS",
        "reference_data",
        "sizes",
        "quick_train",
        "quick_bound",
        "paper_error",
    ),
    "reproduce": ("reproduce", "main"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name in _MODULE_OF:
        value = getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
