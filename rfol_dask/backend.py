"""Array namespaces: numpy takes the in-place LAPACK path of :mod:`rfol_dask.linalg`, CuPy
(``device="cuda"``, imported on first use) cuBLAS and cuSOLVER, other array API namespaces the
standard's operations; and the operations the standard lacks."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import sys

import array_api_compat
import numpy as np

from . import linalg
from .exceptions import NoDeviceError

DEVICES = ("cpu", "cuda")

_GENERIC = contextvars.ContextVar("rfol_dask_generic_numpy", default=False)


def sized_by_arrays(cls):
    """Class decorator: dask's ``sizeof`` of an instance counts the arrays it holds."""
    from dask.sizeof import sizeof

    fields = dataclasses.is_dataclass(cls)
    names = tuple(f.name for f in dataclasses.fields(cls)) if fields else cls.__slots__

    @sizeof.register(cls)
    def _size(obj):
        return sys.getsizeof(obj) + sum(sizeof(getattr(obj, name, None)) for name in names)

    return cls


@contextlib.contextmanager
def generic_numpy():
    """Within this block numpy arrays take the generic array API path (for tests)."""
    token = _GENERIC.set(True)
    try:
        yield
    finally:
        _GENERIC.reset(token)


def is_array_api(x):
    """True for an array of a namespace other than numpy (CuPy, array_api_strict, ...)."""
    if x is None or isinstance(x, (np.ndarray, np.generic, list, tuple, int, float)):
        return False
    if type(x).__module__.split(".")[0] in ("dask", "xarray", "numpy", "pandas", "scipy"):
        return False
    # CuPy arrays are recognised by array_api_compat (from sys.modules, without importing CuPy)
    return hasattr(x, "__array_namespace__") or array_api_compat.is_array_api_obj(x)


def namespace(*arrays):
    """The namespace of ``arrays``: numpy (outside :func:`generic_numpy`), else array_api_compat."""
    arrays = [a for a in arrays if a is not None and not isinstance(a, (int, float, bool))]
    if all(isinstance(a, (np.ndarray, np.generic)) for a in arrays):
        return array_api_compat.array_namespace(*arrays or [np.empty(0)]) if _GENERIC.get() else np
    return array_api_compat.array_namespace(*arrays)


def is_fast(xp):
    return xp is np


def is_cupy(xp):
    """True when ``xp`` is CuPy's namespace (checked without importing CuPy)."""
    return "cupy" in getattr(xp, "__name__", "")


def _load_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(
            "device='cuda' needs CuPy and a CUDA GPU, but CuPy is not installed: pip install "
            "'rfol-dask[gpu]' (CuPy for CUDA 12 and dask-cuda; for CUDA 13 install cupy-cuda13x "
            "instead of cupy-cuda12x); or pass device='cpu'"
        ) from exc
    try:
        count, why = cupy.cuda.runtime.getDeviceCount(), ""
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError without a driver
        count, why = 0, f" ({exc})"
    if count < 1:
        raise NoDeviceError(
            f"device='cuda' needs a CUDA GPU, but CuPy finds none{why}; check the driver and "
            "CUDA_VISIBLE_DEVICES, or pass device='cpu'"
        )
    return array_api_compat.array_namespace(cupy.empty(0))


#: loaders of the namespace of each accelerator device (imported on first use)
_DEVICE_NAMESPACES = {"cuda": _load_cupy}


def check_device(device):
    """Validate a ``device`` parameter ("cpu" or "cuda"); ValueError naming the choices."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    return device


def device_namespace(device):
    """The namespace computing on ``device``: numpy for "cpu", CuPy's for "cuda"."""
    check_device(device)
    return namespace(np.empty(0)) if device == "cpu" else _DEVICE_NAMESPACES[device]()


def compute_namespace(device, *arrays):
    """The namespace of the array API ``arrays`` (follow the input), else of ``device``."""
    foreign = [a for a in arrays if is_array_api(a)]
    return namespace(*foreign) if foreign else device_namespace(device)


def to_namespace(x, xp):
    """``x`` as an array of ``xp`` (a copy only when it moves)."""
    if x is None or is_fast(xp) or getattr(xp, "__name__", "") == "array_api_compat.numpy":
        return to_numpy(x)
    if not isinstance(x, np.ndarray) and namespace(x) is xp:
        return x
    return xp.asarray(to_numpy(x))


def to_numpy(x):
    """``x`` as a numpy array (CuPy: copied to the host; others through DLPack)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get") and type(x).__module__.startswith("cupy"):
        return x.get()
    try:
        return np.from_dlpack(x)
    except (TypeError, RuntimeError, BufferError, AttributeError):
        return np.asarray(x)


def itemsize(dtype):
    return to_numpy_dtype(dtype).itemsize


def to_numpy_dtype(dtype):
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(str(dtype).rsplit(".", 1)[-1])


def is_real_dtype(dtype):
    """True for real floating or integer dtypes of any namespace (not timedelta64)."""
    dt = to_numpy_dtype(dtype)
    return bool(np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.integer) and dt.kind != "m")


def as_fortran(A):
    """``A`` in Fortran order for LAPACK (numpy; other namespaces choose their own layout)."""
    return np.asfortranarray(A) if isinstance(A, np.ndarray) and is_fast(namespace(A)) else A


def fortran_copy(X):
    """A copy of ``X`` a solve may overwrite (Fortran order for numpy and CuPy)."""
    if isinstance(X, np.ndarray) or is_cupy(xp := namespace(X)):
        lib = np if isinstance(X, np.ndarray) else importlib.import_module("cupy")
        return lib.array(X, order="F")
    return xp.asarray(X, copy=True)


def copy(X):
    return X.copy(order="K") if isinstance(X, np.ndarray) else namespace(X).asarray(X, copy=True)


def take_rows(X, rows):
    """The rows ``rows`` (integer indices) of ``X``, where ``X`` lives: a new array."""
    if isinstance(X, np.ndarray):
        return X[rows]
    xp = namespace(X)
    return xp.take(X, xp.asarray(np.asarray(rows, dtype=np.int64)), axis=0)


def diagonal(X):
    """The diagonal of ``X`` (n, n) (numpy < 2 has no ``linalg.diagonal``)."""
    xp = namespace(X)
    return np.diagonal(X) if xp is np else xp.linalg.diagonal(X)


def fill_diagonal(X, value):
    """``X`` (n, n) with ``value`` on its diagonal: in place on numpy and CuPy, else a new one."""
    xp = namespace(X)
    if is_fast(xp) or is_cupy(xp):
        (np if is_fast(xp) else importlib.import_module("cupy")).fill_diagonal(X, value)
        return X
    eye = xp.eye(X.shape[0], X.shape[1], dtype=xp.bool)
    return xp.where(eye, xp.asarray(value, dtype=X.dtype), X)


def syrk(A, trans, C=None):
    """``A A^T`` (``trans=False``) or ``A^T A``, plus ``C`` if given (numpy: lower triangle)."""
    xp = namespace(A, C)
    if is_fast(xp):
        return linalg.syrk(A, trans, C)
    B = A.T if trans else A  # the product is B B^T, B (n, k)
    if C is None:
        return B @ B.T
    n, step = B.shape[0], max(64, B.shape[1] // 4)
    for s in range(0, n, step):
        e = min(s + step, n)  # in bounds: the standard leaves slices past the end unspecified
        C[s:e, :] += B[s:e, :] @ B.T
    return C


def symmetrize(C, source="lower", block=512):
    """Fill one triangle of the square ``C`` from the other (``source``) in place, by row slabs."""
    xp = namespace(C)
    if is_fast(xp):
        return linalg.symmetrize(C, source)
    n = C.shape[0]
    for j in range(0, n, block):
        e = min(j + block, n)
        D = C[j:e, j:e]
        if source == "lower":
            C[j:e, e:] = C[e:, j:e].T
            C[j:e, j:e] = xp.tril(D) + xp.tril(D, k=-1).T
        else:
            C[e:, j:e] = C[j:e, e:].T
            C[j:e, j:e] = xp.triu(D) + xp.triu(D, k=1).T
    return C


def centre_gram(K, a, c, block_bytes=None):
    """``K[i, j] -= (a[i] + a[j]) - c`` in place for ``K`` (M, M), exactly symmetric."""
    xp = namespace(K)
    M = K.shape[0]
    if block_bytes is None:
        block_bytes = 2**20 if is_fast(xp) else 2**26
    width = max(1, min(M, int(block_bytes // max(1, M * itemsize(K.dtype)))))
    if is_fast(xp):
        a = np.asarray(a, dtype=K.dtype)
        scratch = np.empty((M, width), dtype=K.dtype, order="F")
        for s in range(0, M, width):
            e = min(s + width, M)
            T = scratch[:, : e - s]
            np.add(a[:, None], a[None, s:e], out=T)
            T -= K.dtype.type(c)
            np.subtract(K[:, s:e], T, out=K[:, s:e])
        return K
    for s in range(0, M, width):
        e = min(s + width, M)
        K[:, s:e] -= (a[:, None] + a[None, s:e]) - float(c)
    return K


def cholesky(G, alpha):
    """Lower Cholesky factor of ``G + alpha I`` with the jitter policy: ``(L, ridge)``."""
    xp = namespace(G)
    if is_fast(xp):
        return linalg.cholesky(G, alpha)
    factor, _ = ridge_factor(G)

    def attempt(ridge, again):
        L = factor(ridge, again)
        return L if L is not None and bool(xp.all(xp.isfinite(diagonal(L)))) else None

    scale = float(xp.mean(xp.abs(diagonal(G)))) if G.shape[0] else 0.0
    return linalg.first_ridge(attempt, alpha, scale, to_numpy_dtype(G.dtype))


def ridge_factor(G):
    """``(factor, restore)``: ``factor(ridge, again)`` the lower factor of ``G + ridge I`` or None
    where not positive definite; ``restore()`` gives ``G`` back (numpy and CuPy work in place)."""
    xp = namespace(G)
    if is_fast(xp):
        diag = np.diagonal(G).copy()

        def factor(ridge, again):
            L, info = linalg.potrf_ridge(G, diag, ridge, mirror=again)
            return L if info == 0 and not (ridge == 0 and _singular(np.diagonal(L), diag)) else None

        def restore():
            linalg.symmetrize(G, "upper")
            np.fill_diagonal(G, diag)

        return factor, restore
    if is_cupy(xp):
        return _cupy_factor_in_place(G)
    return _factor_copy(G, xp), lambda: None


def _singular(pivots, gram_diag):  # a zero ridge whose pivots stand on rounding
    return linalg.stands_on_rounding(to_numpy(pivots), to_numpy(gram_diag))


def _factor_copy(G, xp):
    """``factor(ridge, again)`` by the standard's ``xp.linalg.cholesky`` (``G`` untouched)."""
    eye = xp.eye(G.shape[0], dtype=G.dtype, device=getattr(G, "device", None))

    def factor(ridge, again):
        try:
            L = xp.linalg.cholesky(G + ridge * eye)
        except Exception as exc:  # the numpy-backed namespaces raise LinAlgError
            if type(exc).__name__ != "LinAlgError":
                raise
            return None
        return None if ridge == 0 and _singular(diagonal(L), diagonal(G)) else L

    return factor


def host_threads_per_gpu():
    """Host cores per GPU of this node (at least 1)."""
    try:
        gpus = int(importlib.import_module("cupy").cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no CuPy, no driver: count one
        gpus = 1
    return max(1, linalg.host_cores() // max(1, gpus))


def _cupy_factor_in_place(G):
    """:func:`ridge_factor` of the CuPy array ``G``, in place by cuSOLVER."""
    import cupy

    # a C-ordered symmetric G is its own transpose: G.T is the Fortran-ordered view to factorise
    copied = not (G.flags.f_contiguous or G.flags.c_contiguous)  # a strided view: in a copy
    F = G if G.flags.f_contiguous else G.T if G.flags.c_contiguous else cupy.asfortranarray(G)
    idx = cupy.arange(G.shape[0])
    diag = F[idx, idx].copy()

    def factor(ridge, again):
        symmetrize(F, "upper")
        F[idx, idx] = diag + ridge
        ok = _cupy_potrf(F) == 0 and not (ridge == 0 and _singular(F[idx, idx], diag))
        return F if ok else None

    def restore():
        if not copied:
            symmetrize(F, "upper")
            F[idx, idx] = diag

    return factor, restore


def _cupy_potrf(F):
    """cuSOLVER ``potrf`` (lower) in place on the Fortran-ordered CuPy ``F``: ``devInfo``."""
    import cupy
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas, cusolver

    kind = {"float32": "s", "float64": "d"}[F.dtype.name]
    potrf, size = (getattr(cusolver, kind + name) for name in ("potrf", "potrf_bufferSize"))
    handle, n, lower = device.get_cusolver_handle(), F.shape[0], cublas.CUBLAS_FILL_MODE_LOWER
    lwork = size(handle, lower, n, F.data.ptr, n)
    work, info = cupy.empty(lwork, dtype=F.dtype), cupy.zeros(1, dtype=np.int32)
    potrf(handle, lower, n, F.data.ptr, n, work.data.ptr, lwork, info.data.ptr)
    status = int(info[0])  # synchronises
    if status < 0:  # pragma: no cover - argument error
        raise RuntimeError(f"cuSOLVER potrf argument {-status} invalid")
    return status


def cho_solve(L, B, overwrite=False):
    """Solve ``L L^T X = B`` for the lower ``L`` of :func:`cholesky` (numpy: ``overwrite`` B)."""
    xp = namespace(L, B)
    if is_fast(xp):
        return linalg.cho_solve(L, B, overwrite)
    if is_cupy(xp):
        from cupyx.scipy.linalg import solve_triangular as tri

        Y = tri(L, B, lower=True, overwrite_b=overwrite, check_finite=False)
        return tri(L, Y, lower=True, trans="T", overwrite_b=True, check_finite=False)
    T = xp.tril(L)
    return xp.linalg.solve(T.T, xp.linalg.solve(T, B))
