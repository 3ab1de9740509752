"""rfol_dask: random-feature operator learning on Dask."""

import logging
from importlib import import_module

from ._version import __version__

__all__ = ["__version__", "RandomFeatureOperator", "RandomFeatureOperatorCV"]

_MODULE_OF = {"RandomFeatureOperator": "rf_operator", "RandomFeatureOperatorCV": "rf_operator_cv"}

# library messages go through the "rfol_dask" logger; the application decides where they appear
logging.getLogger("rfol_dask").addHandler(logging.NullHandler())


def __getattr__(name):
    """The estimators, imported on first use (``rfol-dask --version``, ``--help``: no numpy)."""
    if name in _MODULE_OF:
        return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
