"""Helmholtz with a random wave speed (de Hoop et al. 2022): ``-Lap v - (omega / c)^2 v = 0`` on
``(0, 1)^2`` with Neumann data, ``c = c0 + tanh(a)``, ``a`` from :func:`grf.neumann_eigen_2d`; Q1
elements (scikit-fem), one sparse LU per sample; nodal ``c -> v`` (docs/datasets.md)."""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import skfem
from skfem.helpers import dot, grad

from . import grf
from .registry import DatasetSpec, Rule, at_least, divisor_of, filled, greater, register, sample_rng

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
        self.n_cells = n = int(n_cells)
        nodes = np.linspace(0.0, 1.0, n + 1)
        mesh = skfem.MeshQuad.init_tensor(nodes, nodes)
        self.basis = skfem.Basis(mesh, skfem.ElementQuad1(), intorder=_INTORDER)
        ix, iy = np.rint(mesh.p * n).astype(int)
        if not np.array_equal(ix * (n + 1) + iy, np.arange((n + 1) ** 2)):
            raise RuntimeError("unexpected node order of MeshQuad.init_tensor")
        self.n_dofs = N = self.basis.N
        dofs = self.basis.element_dofs  # (4, n_elems)
        n_loc, n_elems = dofs.shape
        n_q = self.basis.X.shape[1]
        phi = np.stack([np.asarray(self.basis.basis[i][0]) for i in range(n_loc)])  # (4, ne, nq)

        # the CSR pattern: entry (dofs[i, e], dofs[j, e]) for every element and local pair;
        # np.unique sorts by (row, col), so the slot numbers are the CSR data positions
        keys = dofs[:, None, :].astype(np.int64) * N + dofs[None, :, :]
        uniq, slot = np.unique(keys.ravel(), return_inverse=True)
        rows, cols = uniq // N, uniq % N
        pattern = sp.csr_matrix((np.ones(len(uniq)), (rows, cols)), shape=(N, N))
        pattern.sort_indices()
        self.indptr, self.indices = pattern.indptr, pattern.indices

        # mass_map[slot(i, j, e), e * nq + q] = phi_i phi_j dx at (e, q); duplicates are summed.
        vals = phi[:, None] * phi[None, :] * self.basis.dx  # (4, 4, ne, nq)
        cols_q = np.broadcast_to(np.arange(n_elems * n_q).reshape(n_elems, n_q), vals.shape)
        slots_q = np.broadcast_to(slot.reshape(n_loc, n_loc, n_elems, 1), vals.shape)
        self.mass_map = sp.csr_matrix(
            (vals.ravel(), (slots_q.ravel(), cols_q.ravel())), shape=(len(uniq), n_elems * n_q)
        )
        rows_q = np.repeat(np.arange(n_elems * n_q), n_loc)
        cols_d = np.broadcast_to(dofs.T[:, None, :], (n_elems, n_q, n_loc)).ravel()
        values = np.moveaxis(phi, 0, -1).ravel()  # (ne, nq, 4)
        self.interp = sp.csr_matrix((values, (rows_q, cols_d)), shape=(n_elems * n_q, N))
        stiff = _stiffness.assemble(self.basis).tocsr()
        self.stiffness = np.asarray(stiff[rows, cols]).ravel()
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


def make_block(seed, start, stop, **params):
    """Samples ``start .. stop-1``: nodal ``c`` (input) and ``v`` (output), both of shape
    ``(stop - start, k, k)`` with ``k = n_cells // stride + 1``. One sparse LU per sample."""
    p = filled(_DEFAULTS, params, "Helmholtz", _RANGES)
    _check_omega(p.omega, p.c0, p.n_cells)
    if stop <= start:
        k = p.n_cells // p.stride + 1
        return np.empty((0, k, k)), np.empty((0, k, k))
    x = np.linspace(0.0, 1.0, p.n_cells + 1)
    shape = dict(c0=p.c0, n_modes=p.n_modes, tau=p.tau, power=p.power)
    c = np.stack([wave_speed(sample_rng(seed, i), x, **shape) for i in range(start, stop)])
    fe = get_fe(p.n_cells)
    v = fe.solve(c, p.omega, fe.load(flux_interval=(p.flux_lo, p.flux_hi)))
    return tuple(np.ascontiguousarray(a[:, :: p.stride, :: p.stride]) for a in (c, v))


def _grids(*, n_cells=100, stride=1, **_):
    p = filled(_DEFAULTS, dict(n_cells=n_cells, stride=stride), "Helmholtz", _RANGES)
    x = np.linspace(0.0, 1.0, p.n_cells + 1)[:: p.stride]
    return {"x": x, "y": x.copy()}, {"x": x, "y": x.copy()}


_DEFAULTS = dict(n_cells=100, stride=1, omega=1000.0, c0=20.0, n_modes=100, tau=3.0, power=1.0)
_DEFAULTS.update(flux_lo=0.35, flux_hi=0.65)
_RANGES = {
    "n_cells": at_least(1),
    "stride": divisor_of("n_cells"),
    "omega": greater(0),
    "c0": greater(1),
    "n_modes": at_least(1),
    "tau": at_least(0),
    "power": greater(0),
    "flux_lo": Rule(lambda v, p: 0 <= v < 1, "be in [0, 1)"),
    "flux_hi": Rule(
        lambda v, p: p["flux_lo"] < v <= 1, lambda p: f"be in (flux_lo = {p['flux_lo']}, 1]"
    ),
}


def _spec(name, stride, description, paper):
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


_HIGH = dict(train=10000, test=30000, n_features=5000, gamma=1e-4, alpha=1e-12)
_LOW = dict(train=1000, test=1000, n_features=5000, gamma=1e-5, alpha=1e-13)
_DESC = "Helmholtz: wave speed c -> Q1 solution v, omega = 1000 (101x101 -> 101x101)"
HELMHOLTZ_HIGH = _spec("helmholtz_high", 1, _DESC, dict(_HIGH, cauchy=0.0273, gaussian=0.0287))
_DESC = "Helmholtz, every 4th node of the 101x101 solution (26x26 -> 26x26)"
HELMHOLTZ_LOW = _spec("helmholtz_low", 4, _DESC, dict(_LOW, cauchy=0.0666, gaussian=0.0363))
