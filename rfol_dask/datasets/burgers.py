"""Burgers (Lu et al. 2022, from the FNO collection): ``u_t + (u^2/2)_x = nu u_xx`` on [0, 1)
periodic, ``u0 -> u(., T)``; Fourier pseudo-spectral ETDRK4 (Kassam & Trefethen 2005) with 2/3
dealiasing on steps graded ``t_j = T (j / n_steps)^grading`` (docs/datasets.md)."""

from __future__ import annotations

import numpy as np
import scipy.fft

from . import grf
from .registry import EVEN, DatasetSpec, Rule, at_least, filled, greater, register, sample_rng
from .resolution import check_resolved, check_time_steps

_DEFAULTS = dict(nu=0.1, T=1.0, n_solve=1024, n_out=128, n_steps=100, grading=2.0, n_modes=511)
_DEFAULTS.update(sigma=25.0, tau=5.0)
_RANGES = {
    "nu": greater(0),
    "T": greater(0),
    "n_out": at_least(2),
    "n_solve": (
        at_least(6),
        EVEN,
        Rule(lambda v, p: v % p["n_out"] == 0, lambda p: f"be a multiple of n_out = {p['n_out']}"),
    ),
    "n_steps": at_least(1),
    "grading": greater(0),
    "n_modes": Rule(
        lambda v, p: 1 <= v < p["n_solve"] // 2,
        lambda p: f"be in [1, {p['n_solve'] // 2 - 1}] (below n_solve / 2 = {p['n_solve'] // 2})",
    ),
    "sigma": greater(0),
    "tau": at_least(0),
}


def etdrk4_coefficients(lin, h, z_small=1.0, n_terms=30):
    """ETDRK4 weights ``E, E2, Q, f1, f2, f3`` (Kassam & Trefethen 2005, eq. 2.5; shape of
    ``lin``) of the real diagonal linear part ``lin`` for one step ``h``: closed forms, or where
    ``|h lin| < z_small`` (cancellation) ``n_terms`` of their Taylor series; error below 1e-14."""
    z = h * np.asarray(lin, dtype=float)
    small = np.abs(z) < z_small
    zb = np.where(small, -1.0, z)  # placeholder where the series is used instead
    ez = np.exp(zb)
    out = [
        (np.exp(zb / 2.0) - 1.0) / zb,
        (-4.0 - zb + ez * (4.0 - 3.0 * zb + zb**2)) / zb**3,
        (2.0 + zb + ez * (zb - 2.0)) / zb**3,
        (-4.0 - 3.0 * zb - zb**2 + ez * (4.0 - zb)) / zb**3,
    ]
    if small.any():
        zs = z[small]
        j = np.arange(n_terms)
        inv = 1.0 / np.cumprod(np.concatenate([[1.0], np.arange(1.0, n_terms + 4)]))  # 1/m!
        phi = {m: inv[j + m] for m in (1, 2, 3)}  # Taylor coefficients of phi_m
        series = [
            0.5 ** (j + 1) * phi[1],
            phi[1] - 3 * phi[2] + 4 * phi[3],
            phi[2] - 2 * phi[3],
            4 * phi[3] - phi[2],
        ]
        powers = zs[:, None] ** j
        for w, c in zip(out, series, strict=True):
            w[small] = powers @ c
    return (np.exp(z), np.exp(z / 2.0), *(h * w for w in out))


def time_grid(T, n_steps, grading=2.0):
    """Step times ``t_j = T (j / n_steps)^grading`` (n_steps + 1,): small steps first."""
    return float(T) * (np.arange(int(n_steps) + 1) / int(n_steps)) ** float(grading)


def etdrk4(v, lin, nonlinear, times):
    """The Fourier state ``v`` integrated by ETDRK4 (Cox & Matthews) along ``v' = lin * v +
    nonlinear(v)`` over ``times``: the state at ``times[-1]``."""
    cache = {}
    for h in np.diff(times):
        if h not in cache:
            cache = {h: etdrk4_coefficients(lin, h)}
        E, E2, Q, f1, f2, f3 = cache[h]
        nv = nonlinear(v)
        a = E2 * v + Q * nv
        na = nonlinear(a)
        b = E2 * v + Q * na
        nb = nonlinear(b)
        c = E2 * a + Q * (2.0 * nb - nv)
        nc = nonlinear(c)
        v = E * v + f1 * nv + 2.0 * f2 * (na + nb) + f3 * nc
    return v


#: largest accepted ``max |u(., T)| / max |u0|`` of a sample: the exact solution's is at most 1
#: (0.02-0.75 at nu = 0.1-0.0003); a stepping gone unstable can grow a finite 1e14 x
MAX_GROWTH = 1.05


def solve(u0, T=1.0, nu=0.1, n_steps=100, grading=2.0):
    """``u(., T)`` of periodic viscous Burgers on [0, 1) from ``u0`` (B, n) or (n,) at ``j / n``
    (modes above ``n / 3`` dropped), ``n_steps`` ETDRK4 steps on :func:`time_grid`.
    FloatingPointError if the stepping blew up (a value not finite, or a max norm grown above
    :data:`MAX_GROWTH` x its start)."""
    u0 = np.asarray(u0, dtype=float)
    n = u0.shape[-1]
    m = np.arange(n // 2 + 1)
    k = 2.0 * np.pi * m
    keep = m <= n // 3
    g = np.where(keep, -0.5j * k, 0.0)  # -d/dx of u^2/2 with the 2/3 mask

    def nonlinear(v):
        u = scipy.fft.irfft(v, n, axis=-1)
        return g * scipy.fft.rfft(u * u, axis=-1)

    v = scipy.fft.rfft(u0, axis=-1) * keep
    start = np.abs(scipy.fft.irfft(v, n, axis=-1)).max(axis=-1, initial=0.0)  # of the kept modes
    with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported below
        v = etdrk4(v, -nu * k**2, nonlinear, time_grid(T, n_steps, grading))
    u = scipy.fft.irfft(v, n, axis=-1)
    # viscous Burgers cannot grow in max norm: growth is the stepping's (it may stay finite)
    with np.errstate(invalid="ignore"):
        grown = not np.all(np.abs(u).max(axis=-1, initial=0.0) <= MAX_GROWTH * start)
    if not np.all(np.isfinite(u)) or grown:
        raise FloatingPointError(
            f"the time stepping blew up (n_steps={n_steps} too small for nu={nu:g}; the "
            "nonlinear term is explicit): increase n_steps, e.g. 800 for nu=0.001"
        )
    return u


def make_block(seed, start, stop, **params):
    """Samples ``start .. stop-1``: inputs ``u0`` and outputs ``u(., T)``, each (B, n_out),
    solved as one batch. ValueError if the solver grid does not resolve ``u(., T)`` or the
    time-stepping error of sample 0 exceeds 1e-4 (:mod:`.resolution`)."""
    p = filled(_DEFAULTS, params, "Burgers", _RANGES)
    shape = dict(n_modes=p.n_modes, sigma=p.sigma, tau=p.tau)
    u0 = [grf.burgers_initial(sample_rng(seed, i), p.n_solve, **shape) for i in range(start, stop)]
    u0 = np.reshape(u0, (stop - start, p.n_solve))
    step = dict(T=p.T, nu=p.nu, grading=p.grading)
    u_T = solve(u0, n_steps=p.n_steps, **step)
    if start == 0 and len(u0):  # the data set's first sample: once per data set
        what = f"Burgers u(., T) at nu={p.nu:g}"
        check_time_steps(
            u_T[0], lambda m: solve(u0[:1], n_steps=m, **step)[0], p.n_steps, what=what
        )
    fix = f"raise n_solve (a multiple of n_out = {p.n_out}; e.g. {4 * p.n_solve})"
    check_resolved(u_T, p.n_solve // 3, 1, what=f"Burgers u(., T) on {p.n_solve} points", fix=fix)
    stride = p.n_solve // p.n_out
    return np.ascontiguousarray(u0[:, ::stride]), np.ascontiguousarray(u_T[:, ::stride])


def _grids(*, n_out=128, **_):
    x = np.arange(int(n_out)) / int(n_out)
    return {"x": x}, {"x": x}


_PAPER = dict(train=1848, test=200, n_features=100000, gamma=0.01, alpha=1e-12)
_PAPER.update(cauchy=0.0382, gaussian=0.0270)
BURGERS = register(
    DatasetSpec(
        name="burgers",
        input_attrs={"long_name": "initial velocity u(x, 0)", "units": "1"},
        output_attrs={"long_name": "velocity u(x, T)", "units": "1"},
        make_block=make_block,
        defaults=dict(_DEFAULTS),
        units="m",
        periods={"x": 1.0},
        grids=_grids,
        ranges=_RANGES,
        description="Burgers, nu = 0.1, u0 -> u(., 1) on [0, 1) periodic (128 -> 128)",
        paper=_PAPER,
    )
)
