import numpy as np
from cupy import _REG
from scipy.linalg import lapack


def _check(handle, uplo, n, A, lda):
    assert (
        isinstance(handle, int)
        and isinstance(uplo, int)
        and isinstance(n, int)
        and isinstance(lda, int)
    ), (handle, uplo, n, lda)
    a = _REG[A]
    assert a.shape == (n, n) and a.flags.f_contiguous and lda == n, (
        "potrf on a non-Fortran or wrong-shape array",
        a.shape,
        a.strides,
        lda,
    )
    return a


def _buf(kind):
    def f(handle, uplo, n, A, lda):
        _check(handle, uplo, n, A, lda)
        return max(1, n)

    return f


def _potrf(kind):
    def f(handle, uplo, n, A, lda, work, lwork, devInfo):
        a = _check(handle, uplo, n, A, lda)
        assert a.dtype == {"s": np.float32, "d": np.float64}[kind], a.dtype
        assert _REG[work].dtype == a.dtype and _REG[work].size >= lwork
        info = _REG[devInfo]
        assert info.dtype == np.int32
        c, inf = getattr(lapack, kind + "potrf")(a, lower=(uplo == 0), clean=0, overwrite_a=1)
        if not np.shares_memory(c, a):
            a[...] = c
        info[0] = inf

    return f


spotrf_bufferSize, dpotrf_bufferSize = _buf("s"), _buf("d")
spotrf, dpotrf = _potrf("s"), _potrf("d")
