"""Structural mechanics (de Hoop et al. 2022): von Mises stress of a loaded plate with a fibre.

The unit square with a centred circular fibre, linear elasticity in plane stress; the top edge
carries the normal traction ``f(x) = load_mean + load_scale sum_{l <= n_modes} theta_l (pi^2 l^2
+ tau^2)^(-1/2) sqrt(2) cos(pi l x)``, ``theta_l ~ N(0, 1)``; the bottom is ``"clamped"`` or on a
``"roller"`` (``u_y = 0``, ``u_x = 0`` at (0, 0) only: the patch test). Input: ``f`` at ``n_input``
points of the top edge (``"exact"``, or ``"cubicN"``: a not-a-knot cubic spline through N
samples); output: von Mises on ``linspace(0, 1, n_output)^2`` (axis 0 along x). P2 triangles
(scikit-fem) on an O-grid mesh conforming to the circle; the stiffness is factorised once per
parameter set and process and the ``n_modes + 1`` load profiles solved at once (docs/datasets.md).
"""

from __future__ import annotations

import re
import threading

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import skfem
from scipy.interpolate import CubicSpline
from skfem.helpers import ddot, eye, sym_grad, trace

from . import registry
from .grf import cosine_series_1d
from .registry import EVEN, DatasetSpec, Rule, at_least, filled, greater, one_of

#: every parameter of the generator but ``n_output`` (21 low, 41 high), with its default; the one
#: place the defaults are written (:func:`model` and :func:`make_block` fill from it)
DEFAULTS = {
    "radius": 0.3,  # fibre radius
    "E_fibre": 4.0e6,  # fibre Young's modulus
    "nu_fibre": 0.35,  # fibre Poisson ratio
    "mu_matrix": 0.39e6,  # matrix shear modulus
    "nu_matrix": 0.45,  # matrix Poisson ratio
    "load_mean": 100.0,  # mean of the top-edge traction
    "load_scale": 400.0,  # scale of its random part
    "n_modes": 100,  # cosine modes of the load
    "tau": 3.0,  # decay (pi^2 l^2 + tau^2)^(-1/2) of the modes
    "mesh_n": 48,  # elements along each side of the square
    "n_input": 41,  # load samples on the top edge
    "input_interp": "cubic21",
    "bottom_bc": "clamped",  # or "roller"
}
#: the parameters that define the finite-element model (the key of its per-process cache)
_MODEL_KEYS = tuple("radius E_fibre nu_fibre mu_matrix nu_matrix n_modes mesh_n bottom_bc".split())


def _cubic_points(input_interp):
    """N of ``"cubicN"``, else None."""
    match = re.fullmatch(r"cubic(\d+)", str(input_interp))
    return int(match.group(1)) if match else None


_POISSON = Rule(lambda v, p: -1 < v <= 0.5, "be in (-1, 0.5]")
_RANGES = {
    "radius": Rule(lambda v, p: 0 < v < 0.5, "be in (0, 0.5)"),
    "E_fibre": greater(0),
    "nu_fibre": _POISSON,
    "mu_matrix": greater(0),
    "nu_matrix": _POISSON,
    "load_scale": at_least(0),
    "n_modes": at_least(1),
    "tau": at_least(0),
    "mesh_n": (at_least(4), EVEN),
    "n_input": at_least(2),
    "input_interp": Rule(
        lambda v, p: v == "exact" or (_cubic_points(v) or 0) >= 4,
        "be 'exact' or 'cubicN' with N >= 4",
    ),
    "bottom_bc": one_of("clamped", "roller"),
    "n_output": at_least(2),
}


#: samples go in batches aligned on absolute sample indices (padded with zero loads), so each
#: goes through the same BLAS calls whatever the block split: identical bytes
_BATCH = 50


def _rings(m, radius, n_in, n_out):
    """Points of the O-grid loops, loop after loop, ``4 m`` points each, centred at the origin:
    ``n_in + 1`` loops from the inner square (half-width ``radius / 2``) to the circle, then
    ``n_out`` loops out to the square of half-width 1/2. Shape (n_loops * 4 m, 2)."""
    # one loop of 4m points: side s (0 right, 1 top, 2 left, 3 bottom), u in [-1, 1)
    u = -1.0 + 2.0 * np.arange(m) / m
    rot = [
        np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        for a in np.pi / 2 * np.arange(4)
    ]
    square = np.concatenate([(R @ np.stack([np.ones(m), u])).T for R in rot])  # on [-1, 1]^2
    angle = np.concatenate([s * np.pi / 2 + np.pi / 4 * u for s in range(4)])
    circle = radius * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    half_in = 0.5 * radius
    loops = [(1 - t) * half_in * square + t * circle for t in np.arange(n_in + 1) / n_in]
    loops += [(1 - t) * circle + t * 0.5 * square for t in np.arange(1, n_out + 1) / n_out]
    return np.concatenate(loops)


def _inner_grid(m, half_in, n_ring):
    """The ``(m + 1)^2`` grid filling the inner square: its node indices (m + 1, m + 1), whose
    boundary is loop 0 of the rings and whose interior is numbered from ``n_ring``, and the
    interior points (centred at the origin)."""
    g = -1.0 + 2.0 * np.arange(m + 1) / m
    idx = -np.ones((m + 1, m + 1), dtype=np.int64)
    j = np.arange(m)
    idx[m, j] = j  # right, u = y
    idx[m - j, m] = m + j  # top, x = -u
    idx[0, m - j] = 2 * m + j  # left, y = -u
    idx[j, 0] = 3 * m + j  # bottom, x = u
    inner = idx < 0
    idx[inner] = n_ring + np.arange(inner.sum())
    gi, gj = np.meshgrid(g, g, indexing="ij")
    return idx, half_in * np.stack([gi[inner], gj[inner]], axis=1)


def _triangles(p, q):
    """Quads ``q`` (k, 4) split along their shorter diagonal: triangles (2k, 3), anticlockwise."""
    d02 = np.linalg.norm(p[q[:, 0]] - p[q[:, 2]], axis=1)
    d13 = np.linalg.norm(p[q[:, 1]] - p[q[:, 3]], axis=1)
    t = np.where(
        (d02 <= d13)[:, None, None],
        np.stack([q[:, [0, 1, 2]], q[:, [0, 2, 3]]], 1),
        np.stack([q[:, [0, 1, 3]], q[:, [1, 2, 3]]], 1),
    ).reshape(-1, 3)
    e1, e2 = p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]]
    neg = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0] < 0
    t[neg] = t[neg][:, [0, 2, 1]]
    return t


def build_mesh(mesh_n=DEFAULTS["mesh_n"], radius=DEFAULTS["radius"]):
    """Triangle mesh of the unit square conforming to the circle of ``radius`` about (0.5, 0.5),
    and the elements' fibre mask. O-grid: ``4 mesh_n`` nodes on each loop, ``max(2, round(0.2
    mesh_n))`` layers inside the circle, ``max(2, round(0.4 mesh_n))`` outside, a ``mesh_n``
    square grid in the inner square; quads split along their shorter diagonal."""
    m = int(mesh_n)
    c = np.array([0.5, 0.5])
    ring = _rings(m, radius, max(2, round(0.2 * m)), max(2, round(0.4 * m)))
    k4 = 4 * m
    n_loops = len(ring) // k4
    idx, interior = _inner_grid(m, 0.5 * radius, len(ring))
    p = np.concatenate([ring, interior]) + c

    A, B = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    L, K = np.meshgrid(np.arange(n_loops - 1), np.arange(k4), indexing="ij")
    K1 = (K + 1) % k4
    grid = np.stack([idx[A, B], idx[A + 1, B], idx[A + 1, B + 1], idx[A, B + 1]], -1)
    loops = np.stack([L * k4 + K, (L + 1) * k4 + K, (L + 1) * k4 + K1, L * k4 + K1], -1)
    t = _triangles(p, np.concatenate([grid.reshape(-1, 4), loops.reshape(-1, 4)]))
    # snap the square boundary exactly onto the unit square
    p = np.where(np.abs(p) < 1e-12, 0.0, p)
    p = np.where(np.abs(p - 1.0) < 1e-12, 1.0, p)
    mesh = skfem.MeshTri(p.T.copy(), t.T.copy())
    fibre = np.linalg.norm(mesh.p[:, mesh.t].mean(axis=1) - c[:, None], axis=0) < radius
    return mesh, fibre


def von_mises(sxx, syy, sxy):
    """Plane-stress von Mises stress ``sqrt(sxx^2 - sxx syy + syy^2 + 3 sxy^2)`` (elementwise)."""
    return np.sqrt(np.maximum(sxx**2 - sxx * syy + syy**2 + 3.0 * sxy**2, 0.0))


@skfem.BilinearForm
def _elasticity(u, v, w):
    eps = sym_grad(u)
    return ddot(2.0 * w.mu * eps + w.lam * eye(trace(eps), 2), sym_grad(v))


class _Model:
    """What does not depend on the sample (:func:`model`): ``mesh``, ``fibre``, ``ubasis``
    (vector P2), ``sbasis`` (P1), ``K`` (stiffness), ``free`` dofs, ``U`` (N_u, L + 1) the
    displacements of the load profiles ``[1, sqrt(2) cos(pi l x)]``."""

    def __init__(self, radius, E_fibre, nu_fibre, mu_matrix, nu_matrix, n_modes, mesh_n, bottom_bc):
        self.mesh, self.fibre = mesh, fibre = build_mesh(mesh_n, radius)
        self.ubasis = ub = skfem.Basis(mesh, skfem.ElementVector(skfem.ElementTriP2()), intorder=4)
        self.sbasis = ub.with_element(skfem.ElementTriP1())
        E = np.where(fibre, E_fibre, 2.0 * mu_matrix * (1.0 + nu_matrix))
        nu = np.where(fibre, nu_fibre, nu_matrix)
        nqp = ub.X.shape[-1]
        self.lam = np.repeat((E * nu / (1.0 - nu**2))[:, None], nqp, axis=1)  # plane stress
        self.mu = np.repeat((E / (2.0 * (1.0 + nu)))[:, None], nqp, axis=1)
        self.K = skfem.asm(_elasticity, ub, lam=self.lam, mu=self.mu).tocsc()
        bottom = ub.get_dofs(lambda x: x[1] < 1e-10)
        if bottom_bc == "clamped":
            D = bottom.all()
        else:  # "roller": u_y = 0 on the bottom, u_x = 0 at (0, 0) only (no rigid motion left)
            corner = np.nonzero((mesh.p[0] < 1e-10) & (mesh.p[1] < 1e-10))[0]
            D = np.union1d(bottom.all(["u^2"]), ub.get_dofs(nodes=corner).all(["u^1"]))
        self.free = np.setdiff1d(np.arange(ub.N), D)
        self._lu = None
        # the L + 1 load profiles [1, sqrt(2) cos(pi l x)] as right-hand sides (high-order rule)
        top = mesh.facets_satisfying(lambda x: x[1] > 1.0 - 1e-10)
        order = max(8, 4 + int(np.ceil(6 * n_modes / mesh_n)))
        self.top_basis = skfem.FacetBasis(mesh, ub.elem, facets=top, intorder=order)
        xq = self.top_basis.global_coordinates().get(0)[0]  # (n_top_facets, nqp)
        profiles = [np.ones_like(xq)] + [
            np.sqrt(2.0) * np.cos(np.pi * k * xq) for k in range(1, int(n_modes) + 1)
        ]
        self.U = self.solve(np.stack([self.load_vector(f) for f in profiles], axis=1))
        self._lu = None  # free the factor (hundreds of MB); solve() refactorises on demand
        self.stress_ops = self._stress_operators()  # (n_quad, N_u) each
        sb = self.sbasis  # the P1 projection's right-hand side int(. phi_i), (N_p1, n_quad)
        nel, nqp = sb.mesh.t.shape[1], sb.X.shape[-1]
        r = np.concatenate([np.repeat(sb.element_dofs[k], nqp) for k in range(sb.Nbfun)])
        c = np.tile(np.arange(nel * nqp), sb.Nbfun)
        v = np.concatenate([(sb.basis[k][0].get(0) * sb.dx).ravel() for k in range(sb.Nbfun)])
        self.proj_rhs = sp.csr_matrix((v, (r, c)), shape=(sb.N, nel * nqp))
        self.lumped = np.asarray(self.proj_rhs.sum(axis=1)).ravel()  # int(phi_i)
        self._out = {}

    def load_vector(self, f_quad):
        """Right-hand side (N_u,) of the normal traction ``f_quad`` (n_top_facets, nqp) at the
        top-facet quadrature points."""
        return skfem.asm(skfem.LinearForm(lambda v, w: w.f * v[1]), self.top_basis, f=f_quad)

    def solve(self, F):
        """Displacements for right-hand sides ``F`` (N_u,) or (N_u, k) (SuperLU, factorised on
        first use)."""
        if self._lu is None:
            self._lu = spla.splu(self.K[self.free][:, self.free].tocsc())
        U = np.zeros(F.shape)
        U[self.free] = self._lu.solve(np.ascontiguousarray(F[self.free]))
        return U

    def _stress_operators(self):
        ub = self.ubasis
        nel, nqp = ub.mesh.t.shape[1], ub.X.shape[-1]
        rows = np.tile(np.arange(nel * nqp), ub.Nbfun)
        cols, vals = [], {"xx": [], "yy": [], "xy": []}
        for k in range(ub.Nbfun):
            G = ub.basis[k][0].grad  # (component, derivative, nel, nqp)
            tr = G[0, 0] + G[1, 1]
            vals["xx"].append((2 * self.mu * G[0, 0] + self.lam * tr).ravel())
            vals["yy"].append((2 * self.mu * G[1, 1] + self.lam * tr).ravel())
            vals["xy"].append((self.mu * (G[0, 1] + G[1, 0])).ravel())
            cols.append(np.repeat(ub.element_dofs[k], nqp))
        cols = np.concatenate(cols)
        return {
            key: sp.csr_matrix((np.concatenate(v), (rows, cols)), shape=(nel * nqp, ub.N))
            for key, v in vals.items()
        }

    def projector(self, n_output):
        """Sparse ``Q`` (n_output^2, n_quad): quadrature values -> lumped-mass L2 projection onto
        P1 (nodal averages) -> values on ``linspace(0, 1, n)^2`` (x-major; points nudged 1e-9
        inside the square so each lies in a triangle)."""
        xo = np.linspace(0.0, 1.0, int(n_output))
        X, Y = np.meshgrid(xo, xo, indexing="ij")
        pts = np.clip(np.stack([X.ravel(), Y.ravel()]), 1e-9, 1.0 - 1e-9)
        parts = [self.sbasis.probes(pts[:, i : i + 64]) for i in range(0, pts.shape[1], 64)]
        probe = sp.vstack([sp.csr_matrix(part) for part in parts]).tocsr()
        return (probe @ sp.diags(1.0 / self.lumped) @ self.proj_rhs).tocsr()

    def stresses_quad(self, U):
        """Plane-stress components ``(sxx, syy, sxy)`` at the quadrature points of ``ubasis``,
        each of shape (n_elements * nqp, k), for displacements ``U`` (N_u, k)."""
        return tuple(self.stress_ops[key] @ U for key in ("xx", "yy", "xy"))

    def output(self, U, n_output):
        """Von Mises (at quadrature points, then projected onto P1) on the output grid for
        displacements ``U`` (N_u, k); returns shape (k, n_output, n_output)."""
        vm = von_mises(*self.stresses_quad(U))
        return (self.projector(n_output) @ vm).T.reshape(-1, int(n_output), int(n_output))

    def output_from_coefficients(self, coef, n_output):
        """:meth:`output` for the loads with profile weights ``coef`` (k, L + 1), through only the
        quadrature points and dofs that reach the output grid (cached per ``n_output``)."""
        n = int(n_output)
        if n not in self._out:
            Q = self.projector(n)
            quad = np.unique(Q.indices)
            ops = {k: v[quad] for k, v in self.stress_ops.items()}
            dofs = np.unique(np.concatenate([op.indices for op in ops.values()]))
            ops = {k: v[:, dofs].tocsr() for k, v in ops.items()}
            self._out[n] = (Q[:, quad].tocsr(), ops, np.ascontiguousarray(self.U[dofs]))
        Q, ops, U = self._out[n]
        Uk = U @ coef.T
        vm = von_mises(*(ops[key] @ Uk for key in ("xx", "yy", "xy")))
        return (Q @ vm).T.reshape(-1, n, n)


_CACHE: dict = {}
_LOCK = threading.Lock()


def model(**params):
    """The :class:`_Model` of the parameters ``params`` (any of :data:`DEFAULTS`), built once
    per process (about 10 s and 0.7 GB at the defaults)."""
    p = vars(filled(DEFAULTS, params, "structural mechanics", _RANGES))
    key = tuple(type(DEFAULTS[k])(p[k]) for k in _MODEL_KEYS)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = _Model(*key)
        return _CACHE[key]


def _amplitudes(n_modes, tau):
    return (np.pi**2 * np.arange(1, int(n_modes) + 1) ** 2 + tau**2) ** -0.5


def draw_load(rng, n_modes=DEFAULTS["n_modes"]):
    """The ``n_modes`` N(0, 1) coefficients ``theta_l`` of one sample; shape (n_modes,)."""
    return rng.standard_normal(int(n_modes))


def load_coefficients(theta, *, load_mean=100.0, load_scale=400.0, tau=3.0):
    """Weights (k, L + 1) of the profiles ``[1, sqrt(2) cos(pi l x)]`` for ``theta`` (k, L)."""
    theta = np.atleast_2d(theta)
    amp = load_scale * _amplitudes(theta.shape[1], tau) * theta
    return np.concatenate([np.full((len(theta), 1), load_mean), amp], axis=1)


def load(theta, x, *, load_mean=100.0, load_scale=400.0, tau=3.0):
    """The load ``f(x)`` (n,) of the module docstring at ``x`` (n,) for ``theta`` (L,)."""
    return load_mean + load_scale * cosine_series_1d(theta, _amplitudes(len(theta), tau), x)


def make_block(seed, start, stop, *, n_output, **params):
    """Samples ``start .. stop-1``: loads (k, n_input) and von Mises stresses (k, n_output,
    n_output); ``params``: any of :data:`DEFAULTS`. Samples go in batches aligned on absolute
    sample indices (padded with zero loads), so each goes through the same BLAS calls whatever
    the block split: identical bytes."""
    p = filled({**DEFAULTS, "n_output": n_output}, params, "structural mechanics", _RANGES)
    m = model(**{k: getattr(p, k) for k in _MODEL_KEYS})
    # the load is sampled at x_s and the input is S @ f(x_s): S is the identity for "exact", the
    # not-a-knot cubic spline for "cubicN"
    x_s = x_in = np.linspace(0.0, 1.0, int(p.n_input))
    S = np.eye(len(x_in))
    if p.input_interp != "exact":
        x_s = np.linspace(0.0, 1.0, _cubic_points(p.input_interp))
        S = CubicSpline(x_s, np.eye(len(x_s)), axis=0)(x_in)
    shape = dict(load_mean=p.load_mean, load_scale=p.load_scale, tau=p.tau)
    k, n, n_modes = stop - start, int(n_output), int(p.n_modes)
    inputs, outputs = np.empty((k, int(p.n_input))), np.empty((k, n, n))
    for b in range(start // _BATCH, -(-stop // _BATCH)):
        lo = b * _BATCH
        rows = range(max(lo, start), min(lo + _BATCH, stop))
        theta = np.zeros((_BATCH, n_modes))
        for i in rows:
            theta[i - lo] = draw_load(registry.sample_rng(seed, i), n_modes)
            inputs[i - start] = S @ load(theta[i - lo], x_s, **shape)
        coef = load_coefficients(theta, **shape)
        coef[[j for j in range(_BATCH) if lo + j not in rows]] = 0.0
        out = m.output_from_coefficients(coef, n)
        outputs[rows.start - start : rows.stop - start] = out[rows.start - lo : rows.stop - lo]
    return inputs, outputs


def _spec(name, n_output, paper, what):
    defaults = {**DEFAULTS, "n_output": n_output}

    def grids(*, n_input=DEFAULTS["n_input"], n_output=n_output, **_):
        xo = np.linspace(0.0, 1.0, int(n_output))
        return {"x_load": np.linspace(0.0, 1.0, int(n_input))}, {"x": xo, "y": xo.copy()}

    return registry.register(
        DatasetSpec(
            name=name,
            input_attrs={"long_name": "top-edge normal traction f(x)", "units": "1"},
            output_attrs={"long_name": "von Mises stress", "units": "1"},
            make_block=lambda seed, start, stop, **params: make_block(
                seed, start, stop, **{**defaults, **params}
            ),
            defaults=defaults,
            units="m",
            grids=grids,
            ranges=_RANGES,
            description=f"Structural mechanics {what}: top-edge load (41) -> von Mises stress "
            f"({n_output}x{n_output}), plane-stress plate with a fibre",
            paper=paper,
        )
    )


_PAPER = dict(gamma=1e-4, alpha=1e-6)
STRUCTURAL_MECHANICS_LOW = _spec(
    "structural_mechanics_low",
    21,
    dict(train=1000, test=1000, n_features=50000, **_PAPER, cauchy=0.0767, gaussian=0.0871),
    "low",
)
STRUCTURAL_MECHANICS_HIGH = _spec(
    "structural_mechanics_high",
    41,
    dict(train=20000, test=20000, n_features=4000, **_PAPER, cauchy=0.0700, gaussian=0.0625),
    "high",
)
