"""Darcy flow (Lu et al. 2022, FNO collection): ``-div(a grad u) = 1`` on ``(0, 1)^2``, ``u = 0``
on the boundary, ``a`` in ``{a_low, a_high}`` thresholded from :func:`grf.neumann_dct_2d`; 5-point
finite volumes solved by CG preconditioned with the constant-coefficient Laplacian (two DST-I),
about 25 iterations whatever the grid; ``a``, ``u`` subsampled by ``stride`` (docs/datasets.md)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import scipy.fft
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from . import grf
from .registry import DatasetSpec, Rule, at_least, divisor_of, filled, greater, register, sample_rng

_DEFAULTS = dict(n_solve=421, stride=15, a_high=12.0, a_low=3.0, alpha=2.0, tau=3.0, rtol=1e-10)
_RANGES = {
    "n_solve": at_least(4),
    "stride": divisor_of("n_solve", -1),
    "a_low": greater(0),
    "a_high": Rule(lambda v, p: v >= p["a_low"], lambda p: f"be at least a_low = {p['a_low']}"),
    "alpha": greater(0),
    "tau": greater(0),
    "rtol": Rule(lambda v, p: 0 < v < 1, "be in (0, 1)"),
}


def assemble_darcy(a):
    """The 5-point finite-volume matrix ((n-2)^2, (n-2)^2) of ``-div(a grad u)`` times ``h^2``
    on the interior nodes, for the nodal coefficient ``a`` (n, n) on ``i / (n - 1)``: symmetric
    positive definite, interior node ``(i, j)`` the unknown ``(i - 1) (n - 2) + j - 1``."""
    a = np.asarray(a, dtype=float)
    n = a.shape[0]
    m = n - 2
    ax = 0.5 * (a[:-1, :] + a[1:, :])  # face between (i, j) and (i + 1, j)
    ay = 0.5 * (a[:, :-1] + a[:, 1:])  # face between (i, j) and (i, j + 1)
    east, west = ax[1:, 1:-1], ax[:-1, 1:-1]
    north, south = ay[1:-1, 1:], ay[1:-1, :-1]
    diag = (east + west + north + south).ravel()
    off_x = -east[:-1, :].ravel()
    off_y = -north.copy()
    off_y[:, -1] = 0.0  # no coupling across the end of a row
    off_y = off_y.ravel()[:-1]
    return sp.diags(
        [diag, off_y, off_y, off_x, off_x], [0, 1, -1, m, -m], shape=(m * m, m * m), format="csr"
    )


@lru_cache(maxsize=8)
def _laplacian_preconditioner(m):
    """The inverse of the unit-coefficient 5-point Dirichlet Laplacian (times h^2) by DST-I."""
    s = 4.0 * np.sin(np.pi * np.arange(1, m + 1) / (2.0 * (m + 1))) ** 2
    lam = s[:, None] + s[None, :]

    def apply(r):
        r = r.reshape(m, m)
        z = scipy.fft.dstn(r, type=1, norm="ortho") / lam
        return scipy.fft.dstn(z, type=1, norm="ortho").ravel()

    return sla.LinearOperator((m * m, m * m), matvec=apply, dtype=float)


def solve_darcy(a, f=1.0, *, rtol=1e-10):
    """Nodal solution (n, n) of ``-div(a grad u) = f`` on ``(0, 1)^2``, ``u = 0`` on the boundary,
    for the positive nodal coefficient ``a`` (n, n) and right-hand side ``f`` (a number or
    (n, n)); preconditioned CG to the relative residual ``rtol``."""
    n, m = len(a), len(a) - 2
    rhs = (
        np.broadcast_to(np.asarray(f, dtype=float), (n, n))[1:-1, 1:-1].ravel()
        * (1.0 / (n - 1)) ** 2
    )
    kw = dict(rtol=rtol, atol=0.0, maxiter=2000, M=_laplacian_preconditioner(m))
    u_int, info = sla.cg(assemble_darcy(a), rhs, **kw)
    if info != 0:
        raise RuntimeError(f"CG did not reach rtol={rtol} (info={info})")
    u = np.zeros((n, n))
    u[1:-1, 1:-1] = u_int.reshape(m, m)
    return u


def darcy_coefficient(rng, n_solve=421, *, a_high=12.0, a_low=3.0, alpha=2.0, tau=3.0):
    """The thresholded coefficient of one sample on the ``n_solve x n_solve`` grid, values in
    ``{a_low, a_high}``; draws ``n_solve^2`` normals from ``rng``. Shape (n_solve, n_solve)."""
    field = grf.neumann_dct_2d(rng, n_solve, alpha=alpha, tau=tau)
    return np.where(field >= 0.0, a_high, a_low)


def make_block(seed, start, stop, **params):
    """Samples ``start .. stop-1``: inputs ``a`` and outputs ``u``, both shape
    ``(stop - start, k, k)`` with ``k = 1 + (n_solve - 1) // stride``. One CG solve per sample."""
    p = filled(_DEFAULTS, params, "Darcy", _RANGES)
    shape = dict(a_high=p.a_high, a_low=p.a_low, alpha=p.alpha, tau=p.tau)
    k = 1 + (p.n_solve - 1) // p.stride
    inputs, outputs = np.empty((stop - start, k, k)), np.empty((stop - start, k, k))
    for row, i in enumerate(range(start, stop)):
        a = darcy_coefficient(sample_rng(seed, i), p.n_solve, **shape)
        inputs[row] = a[:: p.stride, :: p.stride]
        outputs[row] = solve_darcy(a, 1.0, rtol=p.rtol)[:: p.stride, :: p.stride]
    return inputs, outputs


def grids(*, n_solve=421, stride=15, **_):
    """Node coordinates ``linspace(0, 1, n_solve)[::stride]`` for x and y (input = output)."""
    p = filled(_DEFAULTS, dict(n_solve=n_solve, stride=stride), "Darcy", _RANGES)
    x = np.linspace(0.0, 1.0, p.n_solve)[:: p.stride]
    return {"x": x, "y": x.copy()}, {"x": x, "y": x.copy()}


_PAPER = dict(train=1000, test=200, n_features=100000, gamma=2e-4, alpha=1e-12)
_PAPER.update(cauchy=0.0308, gaussian=0.0374)
DARCY = register(
    DatasetSpec(
        name="darcy",
        input_attrs={"long_name": "permeability a(x, y)", "units": "1"},
        output_attrs={"long_name": "solution u(x, y)", "units": "1"},
        make_block=make_block,
        defaults=dict(_DEFAULTS),
        units="m",
        grids=grids,
        ranges=_RANGES,
        description="Darcy: -div(a grad u) = 1, a in {3, 12}, 421^2 solve (29x29 -> 29x29)",
        paper=_PAPER,
    )
)
