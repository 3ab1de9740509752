import numpy as _np

from . import _fn

__all__ = []
for _name in (
    "cholesky",
    "eigh",
    "eigvalsh",
    "solve",
    "inv",
    "qr",
    "svd",
    "norm",
    "det",
    "slogdet",
    "lstsq",
    "pinv",
    "matrix_rank",
    "matrix_power",
    "tensorsolve",
    "tensorinv",
):
    globals()[_name] = _fn(_name, getattr(_np.linalg, _name))
    __all__.append(_name)
LinAlgError = _np.linalg.LinAlgError
