"""rfol_dask: random-feature operator learning on Dask."""

from ._version import __version__

__all__ = ["__version__"]

from .rf_operator import RandomFeatureOperator  # noqa: E402

__all__ += ["RandomFeatureOperator"]

from .selection import RandomFeatureOperatorCV  # noqa: E402

__all__ += ["RandomFeatureOperatorCV"]
