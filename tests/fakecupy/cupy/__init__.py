"""A stand-in CuPy for running the GPU tests on a CPU (``tests/test_fake_cupy.py``).

Arrays wrap numpy and behave as CuPy 14's do where code can go wrong on a real GPU: they refuse
implicit conversion to numpy (``np.asarray`` raises; ``.get()`` / ``cupy.asnumpy`` copy), refuse
numpy operands in arithmetic, ufuncs and slice assignment, and dispatch numpy functions to
themselves (``__array_function__``). ``cupy_backends...cusolver.?potrf`` factorises through data
pointers, as rfol_dask's in-place Cholesky calls it. Not modelled: device memory (the pools
report 0 and ``memGetInfo`` the host's), streams, and distributed's CuPy serialization, so the
peak-memory figures and dask-cuda workers still need a GPU.
"""

import builtins as _b
import sys as _sys

import numpy as _np

builtins_bool = _b.bool
import itertools as _it
import weakref as _wr

__version__ = "14.2.0"
_REG = {}
_ptrs = _it.count(1 << 20, 1 << 20)
LOG = []  # (kind, detail) of suspicious events


class _Mem:
    def __init__(self, a):
        self._a = a
        self.ptr = a.__array_interface__["data"][0]
        _REG[self.ptr] = a


class _Flags:
    def __init__(self, a):
        self.c_contiguous = a.flags.c_contiguous
        self.f_contiguous = a.flags.f_contiguous
        self.owndata = a.flags.owndata

    def __getitem__(self, k):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous}[k]


def _refuse(x, where):
    raise TypeError(
        f"[fake cupy] numpy.ndarray operand in {where}: Unsupported type <class 'numpy.ndarray'>"
    )


def _is_np(x):
    return isinstance(x, _np.ndarray) and not isinstance(x, ndarray)


def _unwrap(x, where="op", allow_np=False):
    if isinstance(x, ndarray):
        return x._a
    if _is_np(x):
        if not allow_np:
            _refuse(x, where)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v, where, allow_np) for v in x)
    return x


def _wrap(r):
    if isinstance(r, _np.ndarray):
        return ndarray._new(r)
    if isinstance(r, _np.generic):  # cupy returns 0-d arrays, never scalars
        return ndarray._new(_np.asarray(r))
    if isinstance(r, tuple):
        return tuple(_wrap(v) for v in r)
    if isinstance(r, list):
        return [_wrap(v) for v in r]
    return r


class ndarray:
    __array_priority__ = 100

    def __init__(self, shape, dtype=float, order="C"):
        self._a = _np.empty(shape, dtype=dtype, order=order)

    @classmethod
    def _new(cls, a):
        o = cls.__new__(cls)
        o._a = a
        return o

    # conversions
    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly."
        )

    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is not None:
            if not isinstance(out, _np.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained from cupy.ndarray")
            if self.dtype != out.dtype:
                raise TypeError(f"dtype mismatch {out.dtype} {self.dtype}")
            if self.shape != out.shape:
                raise ValueError("shape mismatch")
            if not (out.flags.c_contiguous or out.flags.f_contiguous):
                raise RuntimeError(
                    "`out` cannot be specified when copying to non-contiguous ndarray"
                )
            out[...] = self._a
            return out
        return _np.array(self._a, order=order if order != "A" else "K", copy=True)

    def __int__(self):
        return int(self._a)

    def __float__(self):
        return float(self._a)

    def __complex__(self):
        return complex(self._a)

    def __bool__(self):
        return builtins_bool(self._a)

    def __index__(self):
        return self._a.__index__()

    def item(self):
        return self._a.item()

    def tolist(self):
        return self._a.tolist()

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for i in range(len(self._a)):
            yield ndarray._new(self._a[i])

    def __repr__(self):
        return "fakecupy." + repr(self._a)

    __str__ = __repr__

    def __format__(self, spec):
        return format(self._a, spec)

    def __reduce__(self):
        return (_rebuild, (self._a,))

    # attributes
    shape = property(lambda s: s._a.shape)
    dtype = property(lambda s: s._a.dtype)
    ndim = property(lambda s: s._a.ndim)
    size = property(lambda s: s._a.size)
    nbytes = property(lambda s: s._a.nbytes)
    itemsize = property(lambda s: s._a.itemsize)
    strides = property(lambda s: s._a.strides)
    flags = property(lambda s: _Flags(s._a))
    T = property(lambda s: ndarray._new(s._a.T))
    mT = property(lambda s: ndarray._new(_np.swapaxes(s._a, -1, -2)))
    real = property(lambda s: ndarray._new(s._a.real))
    base = property(lambda s: s._a.base)

    @property
    def device(self):
        from .cuda import Device

        return Device(0)

    @property
    def data(self):
        return _Mem(self._a)

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.data.ptr, False),
            "version": 3,
        }

    # indexing
    def __getitem__(self, k):
        return _wrap(self._a[_unwrap(k, "index", allow_np=True)])

    def __setitem__(self, k, v):
        if _is_np(v) and v.ndim > 0:
            _refuse(v, "__setitem__ value (CuPy refuses assignment from CPU arrays)")
        self._a[_unwrap(k, "index", allow_np=True)] = _unwrap(v, "setitem", allow_np=True)

    # numpy protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        for x in inputs + tuple(kw.get("out", ()) or ()):
            if _is_np(x):
                _refuse(x, f"ufunc {ufunc.__name__}")
        inputs = _unwrap(inputs)
        if "out" in kw:
            kw["out"] = tuple(_unwrap(o) for o in kw["out"])
        r = getattr(ufunc, method)(*inputs, **kw)
        if "out" in kw and r is kw["out"][0]:
            return ndarray._new(r)
        return _wrap(r)

    def __array_function__(self, func, types, args, kwargs):
        mod = _sys.modules[__name__]
        try:
            sub = mod
            for part in func.__module__.split(".")[1:]:
                sub = getattr(sub, part)
            f = getattr(sub, func.__name__)
        except AttributeError:
            return NotImplemented
        return f(*args, **kwargs)

    # methods
    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        return ndarray._new(self._a.astype(dtype, order=order, copy=copy))

    def copy(self, order="C"):
        return ndarray._new(self._a.copy(order=order))

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def view(self, *a):
        return ndarray._new(self._a.view(*a))

    def fill(self, v):
        if _is_np(v) and v.ndim > 0:
            _refuse(v, "fill")
        self._a.fill(v)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        m = getattr(self._a, name)

        def method(*a, **k):
            return _wrap(
                m(
                    *_unwrap(a, f"ndarray.{name}"),
                    **{kk: _unwrap(vv, f"ndarray.{name}") for kk, vv in k.items()},
                )
            )

        return method


def _rebuild(a):
    return ndarray._new(a)


def _binop(name):
    def f(self, other):
        if _is_np(other):
            _refuse(other, name)
        r = getattr(self._a, name)(_unwrap(other))
        if r is NotImplemented:
            return r
        if name.startswith("__i"):
            return self
        return _wrap(r)

    f.__name__ = name
    return f


for _n in [
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
]:
    for _p in ("__%s__", "__r%s__", "__i%s__"):
        _nm = _p % _n
        if hasattr(_np.ndarray, _nm):
            setattr(ndarray, _nm, _binop(_nm))
for _nm in ("__neg__", "__pos__", "__abs__", "__invert__"):
    setattr(ndarray, _nm, (lambda nm: lambda self: ndarray._new(getattr(self._a, nm)()))(_nm))
ndarray.__hash__ = None

# ---- module functions: numpy's, refusing numpy array inputs
_CONSTRUCTORS = {"asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "asnumpy"}


def _fn(name, npf):
    def f(*a, **k):
        a = _unwrap(a, f"cupy.{name}")
        k = {
            kk: (
                tuple(_unwrap(o) for o in vv)
                if kk == "out" and isinstance(vv, tuple)
                else _unwrap(vv, f"cupy.{name}")
            )
            for kk, vv in k.items()
        }
        return _wrap(npf(*a, **k))

    f.__name__ = name
    return f


def _array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, blocking=False):
    src = obj._a if isinstance(obj, ndarray) else obj
    if isinstance(obj, ndarray) and copy is None or copy is False:
        r = _np.asarray(src, dtype=dtype, order=order if order in ("C", "F") else None)
        if copy is False and r is not src and not _np.shares_memory(r, src):
            raise ValueError("copy=False")
        return ndarray._new(r)
    return ndarray._new(_np.array(src, dtype=dtype, copy=True, order=order, ndmin=ndmin))


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, blocking=False):
    return _array(obj, dtype, copy, order, subok, ndmin)


def asarray(a, dtype=None, order=None, *, blocking=False):
    if isinstance(a, ndarray):
        return _array(a, dtype, None, order or "K")
    return ndarray._new(_np.array(a, dtype=dtype, order=order or "K", copy=True))


asanyarray = asarray


def ascontiguousarray(a, dtype=None):
    if _is_np(a):
        _refuse(a, "cupy.ascontiguousarray")
    return ndarray._new(_np.ascontiguousarray(a._a, dtype=dtype))


def asfortranarray(a, dtype=None):
    if _is_np(a):
        _refuse(a, "cupy.asfortranarray")
    return ndarray._new(_np.asfortranarray(a._a, dtype=dtype))


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out)
    return _np.asarray(a, order=order)


def fill_diagonal(a, val, wrap=False):
    _np.fill_diagonal(a._a, _unwrap(val, "fill_diagonal"), wrap)


_g = globals()
_skip = {
    "ndarray",
    "array",
    "asarray",
    "asanyarray",
    "ascontiguousarray",
    "asfortranarray",
    "fill_diagonal",
    "testing",
    "linalg",
    "fft",
    "random",
    "ma",
    "lib",
    "char",
    "rec",
    "ctypeslib",
    "polynomial",
    "strings",
    "typing",
    "f2py",
    "exceptions",
    "dtypes",
    "emath",
    "matrixlib",
    "core",
    "version",
    "test",
    "show_config",
    "show_runtime",
    "info",
    "get_include",
}
__all__ = []
for _name in dir(_np):
    if _name.startswith("_") or _name in _skip:
        continue
    _obj = getattr(_np, _name)
    if isinstance(_obj, type) or not callable(_obj):
        _g[_name] = _obj
    else:
        _g[_name] = _fn(_name, _obj)
    __all__.append(_name)
__all__ += [
    "ndarray",
    "array",
    "asarray",
    "asanyarray",
    "ascontiguousarray",
    "asfortranarray",
    "fill_diagonal",
    "asnumpy",
]
bool_ = _np.bool_
dtype = _np.dtype
newaxis = None

from . import cuda, fft, linalg, random  # noqa: E402
from .cuda import get_default_memory_pool, get_default_pinned_memory_pool  # noqa: E402

__all__ = [n for n in __all__ if n in _g]
