"""Burgers (Lu et al. 2022, from the FNO collection): ``u_t + (u^2/2)_x = nu u_xx`` on [0, 1).

Periodic, ``nu = 0.1``, ``T = 1``; ``u0 ~ N(0, 625 (-Lap + 25 I)^-2)`` from
:func:`grf.burgers_initial` with a fixed number of modes (511, so a sample does not change
with the solver grid). Solved by a Fourier pseudo-spectral ETDRK4 method (Kassam & Trefethen
2005) on ``n_solve`` points with 2/3 dealiasing, all samples of a block in one
``(B, n_solve)`` FFT stack. Input ``u0`` and output ``u(., T)`` at the ``n_out`` points
``x = j / n_out`` (every ``n_solve / n_out``-th solver point).

Time steps are graded (``t_j = T (j / n_steps)^2``) so that the fast initial decay of the
rough data's high modes does not cut ETDRK4 to low order. Accuracy at the defaults (1024
points, 100 steps): halving the steps changes the output by about 1e-8 relative, doubling
the grid by about 1e-13, and the Cole-Hopf solution is matched to 1.5e-8
(``tests/datasets/test_burgers.py``). With ``nu = 1e-3`` 100 steps blow up: 400 are stable and
800 give outputs within 3e-7 of a 3200-step, 8192-point solution (1024 points suffice).

Ranges: ``nu``, ``T``, ``grading``, ``sigma > 0``; ``tau >= 0``; ``n_out >= 2``; ``n_solve`` even,
at least 6 (2/3 rule: modes up to 2, a band the resolution check can judge) and a multiple of ``n_out``; ``1 <= n_modes < n_solve / 2``.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

from . import grf
from .registry import EVEN, DatasetSpec, Rule, at_least, check_params, greater, register, sample_rng
from .resolution import check_resolved, check_time_steps


_DEFAULTS = {
    "nu": 0.1,
    "T": 1.0,
    "n_solve": 1024,
    "n_out": 128,
    "n_steps": 100,
    "grading": 2.0,
    "n_modes": 511,
    "sigma": 25.0,
    "tau": 5.0,
}
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
    """ETDRK4 weights of a real diagonal linear part ``lin`` for one step ``h``.

    Parameters
    ----------
    lin : ndarray of float, any shape
        The diagonal of the linear operator (e.g. ``-nu k^2``), real.
    h : float
        Time step.
    z_small, n_terms : float, int
        Where ``|h lin| < z_small`` the weights are summed from their Taylor series
        (``n_terms`` terms), since the closed forms lose digits by cancellation near 0;
        elsewhere the closed forms are used. Relative error below 1e-14 for all real ``h lin``.

    Returns
    -------
    E, E2, Q, f1, f2, f3 : ndarray of float, shape of ``lin``
        ``exp(h L)``, ``exp(h L / 2)`` and the weights of Kassam & Trefethen (2005, eq. 2.5),
        ``Q = h phi1(hL/2) / 2``, ``f1 = h (phi1 - 3 phi2 + 4 phi3)``, ``f2 = h (phi2 - 2 phi3)``,
        ``f3 = h (4 phi3 - phi2)`` at ``hL``. Cost O(lin.size * n_terms).
    """
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
        for w, c in zip(out, series):
            w[small] = powers @ c
    return (np.exp(z), np.exp(z / 2.0), *(h * w for w in out))


def time_grid(T, n_steps, grading=2.0):
    """Step times ``t_j = T (j / n_steps)^grading``, shape (n_steps + 1,).

    Grading (small steps first) resolves the fast initial decay of the high modes of a
    rough initial field, which otherwise cuts ETDRK4 to about second order.
    """
    return float(T) * (np.arange(int(n_steps) + 1) / int(n_steps)) ** float(grading)


def etdrk4(v, lin, nonlinear, times):
    """Integrate ``v' = lin * v + nonlinear(v)`` over ``times`` by ETDRK4 (Cox & Matthews).

    ``v`` is the Fourier state (any shape broadcasting with ``lin``); one call of
    ``nonlinear`` per stage, four per step; weights recomputed per distinct step.
    Returns the state at ``times[-1]``.
    """
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
    """Periodic viscous Burgers on [0, 1) to time ``T`` by pseudo-spectral ETDRK4.

    Parameters
    ----------
    u0 : ndarray, shape (B, n) or (n,)
        Initial values at ``x = j / n``, ``n`` even. Fourier modes above ``n / 3`` are
        dropped (2/3 rule; the state lives in ``|m| <= n / 3`` throughout).
    T, nu : float
        Final time and viscosity.
    n_steps, grading : int, float
        ETDRK4 steps on the graded time grid :func:`time_grid`.

    Returns
    -------
    ndarray, shape of ``u0``
        ``u(., T)`` at the same points. Cost: ``8 n_steps`` real FFTs of the (B, n) stack,
        O(n_steps B n log n); memory O(B n).

    Raises
    ------
    FloatingPointError
        If the stepping blew up (too few steps for ``nu``; the message says what to raise): a
        value not finite, or a sample whose max norm grew above :data:`MAX_GROWTH` x its start.
    """
    u0 = np.asarray(u0, dtype=float)
    n = u0.shape[-1]
    if n % 2:
        raise ValueError(f"n must be even, got {n}")
    m = np.arange(n // 2 + 1)
    k = 2.0 * np.pi * m
    keep = m <= n // 3
    g = np.where(keep, -0.5j * k, 0.0)  # -d/dx of u^2/2 with the 2/3 mask

    def nonlinear(v):
        u = scipy.fft.irfft(v, n, axis=-1)
        return g * scipy.fft.rfft(u * u, axis=-1)

    v = scipy.fft.rfft(u0, axis=-1) * keep
    start = np.abs(scipy.fft.irfft(v, n, axis=-1)).max(
        axis=-1, initial=0.0
    )  # max |u0| of the kept modes
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


def make_block(
    seed,
    start,
    stop,
    *,
    nu=0.1,
    T=1.0,
    n_solve=1024,
    n_out=128,
    n_steps=100,
    grading=2.0,
    n_modes=511,
    sigma=25.0,
    tau=5.0,
):
    """Samples ``start .. stop-1``: inputs ``u0`` and outputs ``u(., T)``, each (B, n_out).

    Sample ``i`` draws its ``2 n_modes`` normals from ``sample_rng(seed, i)``; the solves of
    the block run as one batched :func:`solve` on ``n_solve`` points. A ValueError if the solver
    grid does not resolve ``u(., T)`` (:func:`resolution.check_resolved`) or ``n_steps`` leaves a
    time-stepping error above 1e-4 (:func:`resolution.check_time_steps`, on the data set's first
    sample, in the block of sample 0: one more solve of it at twice the steps).
    """
    check_params(_RANGES, {"n_out": n_out, "n_solve": n_solve, "n_modes": n_modes})
    u0 = (
        np.stack(
            [
                grf.burgers_initial(
                    sample_rng(seed, i), n_solve, n_modes=n_modes, sigma=sigma, tau=tau
                )
                for i in range(start, stop)
            ]
        )
        if stop > start
        else np.zeros((0, n_solve))
    )
    stride = n_solve // n_out
    u_T = solve(u0, T=T, nu=nu, n_steps=n_steps, grading=grading)
    if start == 0 and len(u0):  # the data set's first sample: once per data set
        check_time_steps(
            u_T[0],
            lambda m: solve(u0[:1], T=T, nu=nu, n_steps=m, grading=grading)[0],
            n_steps,
            what=f"Burgers u(., T) at nu={nu:g}",
        )
    check_resolved(
        u_T,
        n_solve // 3,
        1,
        what=f"Burgers u(., T) on {n_solve} points",
        fix=f"raise n_solve (a multiple of n_out = {n_out}; e.g. {4 * n_solve})",
    )
    return np.ascontiguousarray(u0[:, ::stride]), np.ascontiguousarray(u_T[:, ::stride])


def _grids(*, n_out=128, **_):
    x = np.arange(int(n_out)) / int(n_out)
    return {"x": x}, {"x": x}


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
        paper=dict(
            train=1848,
            test=200,
            n_features=100000,
            gamma=0.01,
            alpha=1e-12,
            cauchy=0.0382,
            gaussian=0.0270,
        ),
    )
)
