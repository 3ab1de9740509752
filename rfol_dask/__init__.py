"""rfol_dask: random-feature operator learning on Dask."""

import logging

from ._version import __version__
from .rf_operator import RandomFeatureOperator
from .rf_operator_cv import RandomFeatureOperatorCV

__all__ = ["__version__", "RandomFeatureOperator", "RandomFeatureOperatorCV"]

# library messages go through the "rfol_dask" logger; the application decides where they appear
logging.getLogger("rfol_dask").addHandler(logging.NullHandler())
