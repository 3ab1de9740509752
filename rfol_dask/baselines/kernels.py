"""Scalar kernels on flattened input functions, evaluated as Gram tiles.

``d = ||x - y||_2`` between rows; ``l`` = ``length_scale``:

- ``"rbf"``: ``exp(-d^2 / (2 l^2))``
- ``"matern12"``: ``exp(-d / l)``
- ``"matern32"``: ``(1 + sqrt(3) d / l) exp(-sqrt(3) d / l)``
- ``"matern52"``: ``(1 + sqrt(5) d / l + 5 d^2 / (3 l^2)) exp(-sqrt(5) d / l)``
- ``"inverse_quadratic"``: ``(1 + d^2 / (2 l^2))^-1``
- ``"linear"``: ``x . y`` (kernel ridge on the raw inputs: the linear baseline)

These are scikit-learn's ``RBF``, ``Matern(nu=0.5, 1.5, 2.5)`` and ``RationalQuadratic(alpha=1)``.
Squared distances come from one matrix product (``|x|^2 + |y|^2 - 2 x.y``, clipped at 0), so a
(k_i, k_j) tile costs ``2 k_i k_j n`` flops and ``k_i k_j`` memory. numpy tiles are computed in
place; tiles of another array namespace (CuPy on a GPU) with its own operations.
"""

from __future__ import annotations

import numpy as np

from ..backend import centre_gram, fill_diagonal, is_fast, namespace

__all__ = ["KERNELS", "kernel_tile", "kernel_values", "sq_distances"]

KERNELS = ("rbf", "matern12", "matern32", "matern52", "inverse_quadratic", "linear")


def sq_distances(X, Y):
    """Squared Euclidean distances between the rows of ``X`` (k, n) and ``Y`` (l, n): (k, l).

    Both are first shifted by the mean row of ``Y`` (a non-empty one), so a large common offset
    does not cancel in ``|x|^2 + |y|^2 - 2 x.y``. Memory: the result and (k + l) n."""
    xp = namespace(X, Y)
    centre = xp.mean(Y, axis=0) if Y.shape[0] else 0.0
    Xc = X - centre
    Yc = Xc if Y is X else Y - centre
    D = Xc @ Yc.T
    D *= -2.0
    fast = is_fast(xp)
    nx = np.einsum("ij,ij->i", Xc, Xc) if fast else xp.sum(Xc * Xc, axis=1)
    if Y is X:  # |x_i|^2 + |x_j|^2 as one sum: D stays exactly symmetric (numpy's X X^T is)
        centre_gram(D, -nx, 0.0)
    else:
        D += nx[:, None]
        D += (np.einsum("ij,ij->i", Yc, Yc) if fast else xp.sum(Yc * Yc, axis=1))[None, :]
    if not fast:
        return xp.clip(D, min=0.0)
    np.maximum(D, 0, out=D)
    return D


def _elementwise(name, x):
    """``np.<name>(x, out=x)`` for numpy, the namespace's own function (a new array) otherwise."""
    xp = namespace(x)
    if is_fast(xp):
        return getattr(np, name)(x, out=x)
    return 1.0 / x if name == "reciprocal" else getattr(xp, name)(x)


def kernel_values(D2, kernel, length_scale):
    """Kernel values from squared distances, in place on ``D2``."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {KERNELS}")
    length_scale = float(length_scale)  # a Python scalar: the array API takes no numpy scalars
    if kernel == "rbf":
        D2 *= -0.5 / length_scale**2
        return _elementwise("exp", D2)
    if kernel == "inverse_quadratic":
        D2 *= 0.5 / length_scale**2
        D2 += 1.0
        return _elementwise("reciprocal", D2)
    r = _elementwise("sqrt", D2)
    if kernel == "matern12":
        r *= -1.0 / length_scale
        return _elementwise("exp", r)
    c = float(np.sqrt(3.0) if kernel == "matern32" else np.sqrt(5.0))
    r *= c / length_scale
    e = namespace(r).exp(-r)
    r += 1.0 if kernel == "matern32" else 1.0 + r * r / 3.0
    r *= e
    return r


def kernel_tile(X, Y, diagonal=False, *, kernel="rbf", length_scale=1.0):
    """The Gram tile ``k(X_i, Y_j)`` (k, l); with ``diagonal`` the rows are the same points
    (``X is Y``) and the exact zero distance is put on the diagonal."""
    if kernel == "linear":
        return X @ Y.T
    D2 = sq_distances(X, Y)
    if diagonal:
        D2 = fill_diagonal(D2, 0.0)
    return kernel_values(D2, kernel, length_scale)
