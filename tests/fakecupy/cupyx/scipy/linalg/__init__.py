import cupy
import numpy as np
import scipy.linalg


def solve_triangular(
    a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=False
):
    if not (isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray)):
        raise TypeError("[fake cupyx] solve_triangular needs cupy arrays")
    if trans not in (0, 1, 2, "N", "T", "C"):
        raise ValueError(trans)
    dtype = a.dtype if a.dtype.char in "fd" else np.promote_types(a.dtype.char, "f")
    A = np.array(a._a, dtype=dtype, order="F", copy=None)
    B = np.array(b._a, dtype=dtype, order="F", copy=(None if overwrite_b else True))
    X = scipy.linalg.solve_triangular(
        A, B, trans=trans, lower=lower, unit_diagonal=unit_diagonal, check_finite=False
    )
    B[...] = X
    return cupy.ndarray._new(B)


def lu_factor(*a, **k):
    raise NotImplementedError
