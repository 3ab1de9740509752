"""Helmholtz equation with a random wave speed (de Hoop et al. 2022).

``-Lap v - (omega / c)^2 v = 0`` on ``(0, 1)^2``, ``omega = 1000``; ``dv/dn = 0`` on the left,
right and bottom edges and ``dv/dn = 1{0.35 <= x <= 0.65}`` on the top edge (integrated exactly).
``c = 20 + tanh(a)``, ``a`` from :func:`grf.neumann_eigen_2d` (100 modes, ``tau = 3``,
``power = 1``) at the nodes. Q1 elements on ``n_cells x n_cells`` squares (scikit-fem), 3 x 3
Gauss points, ``c`` interpolated from its nodal values, one sparse LU per sample (about 30 ms at
101 x 101). Input ``c`` and output ``v`` are nodal, ``(n_cells + 1)^2`` (``helmholtz_high``) or
every 4th node (``helmholtz_low``, 26 x 26), axis 0 along x.

Ranges: ``n_cells >= 1``; ``stride`` divides ``n_cells``; ``omega > 0``; ``c0 > 1``;
``n_modes >= 1``; ``tau >= 0``; ``power > 0``; ``0 <= flux_lo < flux_hi <= 1``.
"""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import skfem
from skfem.helpers import dot, grad

from . import grf
from .registry import (
    DatasetSpec,
    Rule,
    at_least,
    between,
    check_params,
    divisor_of,
    greater,
    register,
    sample_rng,
)

_INTORDER = 5  # tensor Gauss-Legendre with 3 x 3 points on each square


@skfem.BilinearForm
def _stiffness(u, v, w):
    return dot(grad(u), grad(v))


class HelmholtzQ1:
    """Q1 discretisation of ``-Lap v - k^2(x) v`` with Neumann data on ``n_cells^2`` cells.

    ``basis``: dof ``ix * (n_cells + 1) + iy`` is node ``(x_ix, y_iy)``; ``indptr``, ``indices``:
    the CSR (and CSC) pattern of the stiffness and mass matrices; ``stiffness`` (nnz,) its
    entries; ``interp`` (n_elems * 9, n_dofs): nodal values -> quadrature points; ``mass_map``
    (nnz, n_elems * 9): quadrature weights ``k^2`` -> entries of ``int k^2 phi_i phi_j``."""

    def __init__(self, n_cells=100):
        self.n_cells = int(n_cells)
        nodes = np.linspace(0.0, 1.0, self.n_cells + 1)
        mesh = skfem.MeshQuad.init_tensor(nodes, nodes)
        self.basis = skfem.Basis(mesh, skfem.ElementQuad1(), intorder=_INTORDER)
        n1 = self.n_cells + 1
        ix = np.rint(mesh.p[0] * self.n_cells).astype(int)
        iy = np.rint(mesh.p[1] * self.n_cells).astype(int)
        if not np.array_equal(ix * n1 + iy, np.arange(n1 * n1)):
            raise RuntimeError("unexpected node order of MeshQuad.init_tensor")
        if self.basis.X.shape[1] != 9:
            raise RuntimeError("expected 3 x 3 Gauss points per cell")
        self.n_dofs = self.basis.N

        dofs = self.basis.element_dofs  # (4, n_elems)
        n_loc, n_elems = dofs.shape
        n_q = self.basis.X.shape[1]
        phi = np.stack([np.asarray(self.basis.basis[i][0]) for i in range(n_loc)])  # (4, ne, nq)
        dx = self.basis.dx  # (ne, nq): weights times |det J|

        # the CSR pattern: entry (dofs[i, e], dofs[j, e]) for every element and local pair;
        # np.unique sorts by (row, col), so the slot numbers are the CSR data positions
        rows = np.broadcast_to(dofs[:, None, :], (n_loc, n_loc, n_elems))
        cols = np.broadcast_to(dofs[None, :, :], (n_loc, n_loc, n_elems))
        keys = rows.astype(np.int64) * self.n_dofs + cols
        uniq, slot = np.unique(keys.ravel(), return_inverse=True)
        pattern = sp.csr_matrix(
            (np.ones(len(uniq)), (uniq // self.n_dofs, uniq % self.n_dofs)),
            shape=(self.n_dofs, self.n_dofs),
        )
        pattern.sort_indices()
        self.indptr, self.indices = pattern.indptr, pattern.indices

        # mass_map[slot(i, j, e), e * nq + q] = phi_i phi_j dx at (e, q); duplicates are summed.
        vals = phi[:, None] * phi[None, :] * dx  # (4, 4, ne, nq)
        cols_q = np.broadcast_to(np.arange(n_elems * n_q).reshape(n_elems, n_q), vals.shape)
        slots_q = np.broadcast_to(slot.reshape(n_loc, n_loc, n_elems, 1), vals.shape)
        self.mass_map = sp.csr_matrix(
            (vals.ravel(), (slots_q.ravel(), cols_q.ravel())), shape=(len(uniq), n_elems * n_q)
        )
        rows_q = np.repeat(np.arange(n_elems * n_q), n_loc)
        cols_d = np.broadcast_to(dofs.T[:, None, :], (n_elems, n_q, n_loc)).ravel()
        values = np.moveaxis(phi, 0, -1).ravel()  # (ne, nq, 4)
        self.interp = sp.csr_matrix((values, (rows_q, cols_d)), shape=(n_elems * n_q, self.n_dofs))
        stiff = _stiffness.assemble(self.basis).tocsr()
        self.stiffness = np.asarray(stiff[uniq // self.n_dofs, uniq % self.n_dofs]).ravel()
        if not np.isclose(np.abs(stiff).sum(), np.abs(self.stiffness).sum()):
            raise RuntimeError("stiffness matrix has entries outside the element pattern")
        self._default_loads = {}

    def matrix(self, k2_quad):
        """``K - M(k^2)`` as CSC (symmetric); ``k2_quad`` shape (n_elems * 9,)."""
        data = self.stiffness - self.mass_map @ k2_quad
        return sp.csc_matrix((data, self.indices, self.indptr), shape=(self.n_dofs,) * 2)

    def load(self, source=None, flux=None, flux_interval=(0.35, 0.65)):
        """Load vector (n_dofs,) ``int f phi + int_boundary g phi`` of ``source(x, y)`` (None: 0)
        and ``flux(x, y, nx, ny) = dv/dn`` (None: the top-edge indicator of ``flux_interval``)."""
        if flux is None:
            key = tuple(float(t) for t in flux_interval)
            if key not in self._default_loads:
                lo, hi = key
                top = self.basis.mesh.facets_satisfying(lambda x: np.isclose(x[1], 1.0))
                mesh = self.basis.mesh
                fb = skfem.FacetBasis(mesh, self.basis.elem, facets=top, intorder=_INTORDER)

                @skfem.LinearForm
                def top_flux(v, w):
                    return ((w.x[0] >= lo) & (w.x[0] <= hi)) * v

                b = top_flux.assemble(fb)
                # on a facet that lo or hi cuts Gauss points miss the jump: integrated exactly
                xa, xb = np.sort(mesh.p[0, mesh.facets[:, top]], axis=0)
                tol = 1e-9 * (xb - xa)  # an end at a node but for rounding does not cut
                cut = top[((xa + tol < lo) & (lo < xb - tol)) | ((xa + tol < hi) & (hi < xb - tol))]
                if cut.size:
                    b -= top_flux.assemble(
                        skfem.FacetBasis(mesh, self.basis.elem, facets=cut, intorder=_INTORDER)
                    )
                    b += self._exact_indicator_load(cut, lo, hi)
                self._default_loads[key] = b
            b = self._default_loads[key].copy()
        else:
            fb = skfem.FacetBasis(self.basis.mesh, self.basis.elem, intorder=_INTORDER)

            @skfem.LinearForm
            def boundary_flux(v, w):
                return flux(w.x[0], w.x[1], w.n[0], w.n[1]) * v

            b = boundary_flux.assemble(fb)
        if source is not None:

            @skfem.LinearForm
            def body(v, w):
                return source(w.x[0], w.x[1]) * v

            b = b + body.assemble(self.basis)
        return b

    def _exact_indicator_load(self, facets, lo, hi):
        """``int phi_k 1{lo <= x <= hi}`` (n_dofs,) over the horizontal ``facets``, exactly."""
        mesh, b = self.basis.mesh, np.zeros(self.n_dofs)
        for f in facets:
            nodes = mesh.facets[:, f]
            (a, e), order = np.sort(mesh.p[0, nodes]), np.argsort(mesh.p[0, nodes])
            p, q = max(lo, a), min(hi, e)
            if q > p:
                h = e - a  # the hats falling from a and rising to e
                b[nodes[order[0]]] += ((e - p) ** 2 - (e - q) ** 2) / (2 * h)
                b[nodes[order[1]]] += ((q - a) ** 2 - (p - a) ** 2) / (2 * h)
        return b

    def solve(self, c_nodal, omega, load):
        """Nodal solutions (B, n+1, n+1) for the nodal wave speeds ``c_nodal`` (B, n+1, n+1) and
        the load vector ``load`` (n_dofs,); one ``splu`` per sample."""
        c_nodal = np.asarray(c_nodal, dtype=float)
        batch = c_nodal.shape[0]
        c_quad = self.interp @ c_nodal.reshape(batch, -1).T  # (ne * nq, B)
        k2 = (omega / c_quad) ** 2
        mass = self.mass_map @ k2  # (nnz, B)
        out = np.empty((batch, self.n_dofs))
        for s in range(batch):
            a = sp.csc_matrix(
                (self.stiffness - mass[:, s], self.indices, self.indptr), shape=(self.n_dofs,) * 2
            )
            out[s] = sla.splu(a, permc_spec="MMD_AT_PLUS_A").solve(load)
        return out.reshape(c_nodal.shape)


@lru_cache(maxsize=4)
def get_fe(n_cells=100):
    """The cached :class:`HelmholtzQ1` of ``n_cells`` (setup ~0.2 s at 100 x 100)."""
    return HelmholtzQ1(n_cells)


def solve_helmholtz(c_nodal, omega=1000.0, *, source=None, flux=None, flux_interval=(0.35, 0.65)):
    """Nodal Q1 solution ``v`` of ``-Lap v - (omega / c)^2 v = source``, ``dv/dn = flux``
    (:meth:`HelmholtzQ1.load`), for the nodal wave speed ``c_nodal`` (n+1, n+1) or (B, n+1, n+1)
    on ``linspace(0, 1, n+1)^2``; the shape of ``c_nodal``."""
    c_nodal = np.asarray(c_nodal, dtype=float)
    single = c_nodal.ndim == 2
    batch = c_nodal[None] if single else c_nodal
    fe = get_fe(batch.shape[-1] - 1)
    v = fe.solve(batch, omega, fe.load(source, flux, flux_interval))
    return v[0] if single else v


def wave_speed(rng, x, *, c0=20.0, n_modes=100, tau=3.0, power=1.0):
    """``c = c0 + tanh(a)`` at nodes ``x`` x ``x``, ``a`` from :func:`grf.neumann_eigen_2d`;
    draws ``n_modes`` normals. Shape (len(x), len(x))."""
    return c0 + np.tanh(grf.neumann_eigen_2d(rng, x, x, n_modes=n_modes, tau=tau, power=power))


#: largest accepted rounding error ``eps / (k h)^2`` of ``K - k^2 M``: with Neumann data only the
#: mass term makes the system regular, and rounding takes it below about ``k h = 1e-5``
MAX_ROUNDING = 1e-6


def _check_omega(omega, c0, n_cells):
    """ValueError when ``omega`` is so small that the system is singular to rounding."""
    kh = omega / (c0 + 1.0) / n_cells  # the smallest wave number (c <= c0 + 1) times the cell size
    if np.finfo(float).eps / kh**2 > MAX_ROUNDING:
        least = (c0 + 1.0) * n_cells * np.sqrt(np.finfo(float).eps / MAX_ROUNDING)
        raise ValueError(
            f"omega={omega:g} is too small for the Neumann problem on {n_cells} cells: "
            f"(omega h / c)^2 = {kh**2:.1e} is lost to rounding against the stiffness (error about "
            f"{np.finfo(float).eps / kh**2:.0e}); take omega >= {least:.3g}"
        )


def make_block(
    seed,
    start,
    stop,
    *,
    n_cells=100,
    stride=1,
    omega=1000.0,
    c0=20.0,
    n_modes=100,
    tau=3.0,
    power=1.0,
    flux_lo=0.35,
    flux_hi=0.65,
):
    """Samples ``start .. stop-1``: nodal ``c`` (input) and ``v`` (output), both of shape
    ``(stop - start, k, k)`` with ``k = n_cells // stride + 1``. One sparse LU per sample."""
    check_params(_RANGES, {"n_cells": n_cells, "stride": stride})
    _check_omega(omega, c0, n_cells)
    x = np.linspace(0.0, 1.0, n_cells + 1)
    if stop <= start:
        k = n_cells // stride + 1
        return np.empty((0, k, k)), np.empty((0, k, k))
    shape = dict(c0=c0, n_modes=n_modes, tau=tau, power=power)
    c = np.stack([wave_speed(sample_rng(seed, i), x, **shape) for i in range(start, stop)])
    fe = get_fe(n_cells)
    v = fe.solve(c, omega, fe.load(flux_interval=(flux_lo, flux_hi)))
    return tuple(np.ascontiguousarray(a[:, ::stride, ::stride]) for a in (c, v))


def _grids(*, n_cells=100, stride=1, **_):
    check_params(_RANGES, {"n_cells": n_cells, "stride": stride})
    x = np.linspace(0.0, 1.0, n_cells + 1)[::stride]
    return {"x": x, "y": x.copy()}, {"x": x, "y": x.copy()}


_DEFAULTS = {
    "n_cells": 100,
    "stride": 1,
    "omega": 1000.0,
    "c0": 20.0,
    "n_modes": 100,
    "tau": 3.0,
    "power": 1.0,
    "flux_lo": 0.35,
    "flux_hi": 0.65,
}
_RANGES = {
    "n_cells": at_least(1),
    "stride": divisor_of("n_cells"),
    "omega": greater(0),
    "c0": greater(1),
    "n_modes": at_least(1),
    "tau": at_least(0),
    "power": greater(0),
    "flux_lo": between(0, 1, open_high=True),
    "flux_hi": Rule(
        lambda v, p: p["flux_lo"] < v <= 1, lambda p: f"be in (flux_lo = {p['flux_lo']}, 1]"
    ),
}


def _spec(name, stride, description, **paper):
    return register(
        DatasetSpec(
            name=name,
            input_attrs={"long_name": "wave speed c(x, y)", "units": "1"},
            output_attrs={"long_name": "wave field v(x, y)", "units": "1"},
            make_block=partial(make_block, stride=stride),
            defaults=dict(_DEFAULTS, stride=stride),
            units="m",
            grids=_grids,
            ranges=_RANGES,
            description=description,
            paper=paper,
        )
    )


_PAPER = dict(n_features=5000, cauchy=0.0273, gaussian=0.0287)
HELMHOLTZ_HIGH = _spec(
    "helmholtz_high",
    1,
    "Helmholtz: wave speed c -> Q1 solution v, omega = 1000 (101x101 -> 101x101)",
    train=10000,
    test=30000,
    gamma=1e-4,
    alpha=1e-12,
    **_PAPER,
)
HELMHOLTZ_LOW = _spec(
    "helmholtz_low",
    4,
    "Helmholtz, every 4th node of the 101x101 solution (26x26 -> 26x26)",
    train=1000,
    test=1000,
    n_features=5000,
    gamma=1e-5,
    alpha=1e-13,
    cauchy=0.0666,
    gaussian=0.0363,
)
