"""Navier-Stokes (de Hoop et al. 2022): forcing ``f`` -> vorticity ``w(., T)`` on [0, 2 pi)^2,
``w_t + (c . grad) w - nu Lap w = f``, ``c = (psi_y, -psi_x)``, ``-Lap psi = w``; the initial
vorticity is one draw from ``default_rng(w0_seed)`` shared by all samples; pseudo-spectral with
2/3 dealiasing, ETDRK4 in time (docs/datasets.md)."""

from __future__ import annotations

import numpy as np
import scipy.fft

from . import grf
from .burgers import etdrk4, time_grid
from .registry import EVEN, DatasetSpec, at_least, divisor_of, filled, greater, register, sample_rng
from .resolution import check_resolved, check_time_steps

_DEFAULTS = dict(nu=0.025, T=10.0, n_grid=64, stride=1, n_steps=40, w0_seed=0, n_modes=50)
_DEFAULTS.update(tau=3.0, power=2.0)
_RANGES = {
    "nu": greater(0),
    "T": greater(0),
    "n_grid": (at_least(8), EVEN),  # 2/3 rule: modes |k| <= 2, a band the resolution check judges
    "stride": divisor_of("n_grid", proper=True),
    "n_steps": at_least(1),
    "w0_seed": at_least(0),
    "n_modes": at_least(1),
    "tau": at_least(0),
    "power": greater(0),
}


class _Spectral:
    """Truncated real Fourier layout (..., n, K + 1) of an ``n x n`` periodic grid with the 2/3
    rule (``K = (n - 1) // 3``; rows ``|k_x| > K`` zero), scipy's ``rfft2`` scaling."""

    def __init__(self, n):
        self.n, K = n, (n - 1) // 3
        self.kx = kx = scipy.fft.fftfreq(n, 1.0 / n)[:, None]
        self.ky = ky = np.arange(K + 1.0)[None, :]
        self.keep = np.broadcast_to(np.abs(kx) <= K, (n, K + 1))
        self.k2 = k2 = kx**2 + ky**2
        inv = np.divide(1.0, k2, out=np.zeros_like(k2), where=k2 > 0)
        # psi_y, -psi_x, w_x, w_y from w_hat (psi_hat = w_hat / |k|^2), shape (4, n, K + 1)
        self.grad_ops = np.stack(
            [1j * ky * inv, -1j * kx * inv, 1j * kx + 0 * ky, 1j * ky + 0 * kx]
        )

    def gradients(self, w_hat, count=4):
        """Grid values of the first ``count`` of ``psi_y, -psi_x, w_x, w_y``: (count, ..., n, n)."""
        ops = self.grad_ops[(slice(count),) + (None,) * (np.ndim(w_hat) - 2)]
        return self.inverse(ops * w_hat)

    def forward(self, u):
        """Grid values (..., n, n) -> masked coefficients (..., n, K + 1)."""
        cols = scipy.fft.rfft(u, axis=-1)[..., : self.ky.shape[1]]
        return scipy.fft.fft(cols, axis=-2) * self.keep

    def inverse(self, a):
        """Coefficients (..., n, K + 1) -> grid values (..., n, n)."""
        return scipy.fft.irfft(scipy.fft.ifft(a, axis=-2), self.n, axis=-1)

    def advection_hat(self, w_hat):
        """Coefficients of ``psi_y w_x - psi_x w_y`` (dealiased): 4 inverse + 1 forward FFT."""
        u, v, wx, wy = self.gradients(w_hat)
        return self.forward(u * wx + v * wy)


def advection(w):
    """``(c . grad) w`` (..., n, n) of ``w`` (..., n, n) on the periodic grid (dealiased)."""
    w = np.asarray(w, dtype=float)
    sp = _Spectral(w.shape[-1])
    return sp.inverse(sp.advection_hat(sp.forward(w)))


def solve(w0, f, T=10.0, nu=0.025, n_steps=40, grading=1.0):
    """Vorticity ``w(., T)`` of ``w_t + (c . grad) w - nu Lap w = f``, periodic, for the initial
    vorticity ``w0`` and forcing ``f`` (shapes broadcasting to (B, n, n), ``n`` even, axis -2
    along x); ``n_steps`` ETDRK4 steps on :func:`burgers.time_grid`. FloatingPointError if the
    stepping blew up (keep :func:`cfl_number` below about 2)."""
    w0, f = np.asarray(w0, dtype=float), np.asarray(f, dtype=float)
    shape = np.broadcast_shapes(w0.shape, f.shape)
    sp = _Spectral(shape[-1])
    f_hat = sp.forward(np.broadcast_to(f, shape))

    def nonlinear(w_hat):
        return f_hat - sp.advection_hat(w_hat)

    w_hat = sp.forward(np.broadcast_to(w0, shape))
    with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported below
        w_hat = etdrk4(w_hat, -nu * sp.k2, nonlinear, time_grid(T, n_steps, grading))
    w = sp.inverse(w_hat)
    if not np.all(np.isfinite(w)):
        raise FloatingPointError(
            f"the time stepping blew up (n_steps={n_steps} too small "
            "for these amplitudes); increase n_steps"
        )
    return w


def cfl_number(w, dt):
    """``dt * max(|u| + |v|) * k_max`` of vorticity fields ``w`` (..., n, n), ``k_max`` the
    largest retained wavenumber ``(n - 1) // 3``; the data sets run at about 0.6."""
    w = np.asarray(w, dtype=float)
    sp = _Spectral(w.shape[-1])
    u, v = sp.gradients(sp.forward(w), 2)
    return float(dt * np.max(np.abs(u) + np.abs(v), initial=0.0) * ((w.shape[-1] - 1) // 3))


_MAX_CFL = 2.0  # checked on w(., T) in make_block; the defaults give about 0.6


def _grid(n_grid):
    return 2.0 * np.pi * np.arange(int(n_grid)) / int(n_grid)


def initial_vorticity(n_grid=64, w0_seed=0, n_modes=50, tau=3.0, power=2.0):
    """The shared initial field ``w0``, shape (n_grid, n_grid): one draw of the forcing's
    distribution from ``numpy.random.default_rng(w0_seed)``."""
    x = _grid(n_grid)
    return grf.periodic_forcing_2d(
        np.random.default_rng(int(w0_seed)), x, x, n_modes=n_modes, tau=tau, power=power
    )


def make_block(seed, start, stop, **params):
    """Samples ``start .. stop-1``: inputs ``f`` and outputs ``w(., T)``, each (B, n_grid / stride,
    n_grid / stride). ValueError if the CFL number exceeds 2, the time-stepping error of sample 0
    exceeds 1e-4 or the grid does not resolve the fields (:mod:`.resolution`)."""
    p = filled(_DEFAULTS, params, "Navier-Stokes", _RANGES)
    x, shape = _grid(p.n_grid), dict(n_modes=p.n_modes, tau=p.tau, power=p.power)
    f = np.empty((stop - start, p.n_grid, p.n_grid))
    for row, i in enumerate(range(start, stop)):
        f[row] = grf.periodic_forcing_2d(sample_rng(seed, i), x, x, **shape)
    w0 = initial_vorticity(p.n_grid, p.w0_seed, p.n_modes, p.tau, p.power)
    w_T = solve(w0, f, T=p.T, nu=p.nu, n_steps=p.n_steps)
    cfl = cfl_number(w_T, p.T / p.n_steps)
    if cfl > _MAX_CFL:
        raise ValueError(f"CFL number {cfl:.2f} at t = T exceeds {_MAX_CFL}: increase n_steps")
    if start == 0 and len(f):  # the data set's first sample: once per data set
        what = f"Navier-Stokes w(., T) at nu={p.nu:g}"
        fine = lambda m: solve(w0, f[:1], T=p.T, nu=p.nu, n_steps=m)[0]  # noqa: E731
        check_time_steps(w_T[0], fine, p.n_steps, what=what)
    what = f"Navier-Stokes w(., T) on the {p.n_grid} x {p.n_grid} grid"
    fix = f"raise n_grid (and stride to keep the output grid, e.g. n_grid={2 * p.n_grid}, "
    fix += f"stride={2 * p.stride})"
    check_resolved(w_T, (p.n_grid - 1) // 3, 2, what=what, fix=fix)
    sub = (slice(None), slice(None, None, p.stride), slice(None, None, p.stride))
    return np.ascontiguousarray(f[sub]), np.ascontiguousarray(w_T[sub])


def _grids(*, n_grid=64, stride=1, **_):
    x = _grid(n_grid)[:: int(stride)]
    return {"x": x, "y": x}, {"x": x, "y": x}


def _spec(name, stride, size, paper):
    return register(
        DatasetSpec(
            name=name,
            input_attrs={"long_name": "forcing f(x, y)", "units": "1"},
            output_attrs={"long_name": "vorticity w(x, y, T)", "units": "1"},
            make_block=make_block,
            defaults={**_DEFAULTS, "stride": stride},
            units="m",
            periods={"x": 2 * np.pi, "y": 2 * np.pi},
            grids=_grids,
            ranges=_RANGES,
            description=f"Navier-Stokes vorticity, nu = 1/40: forcing f -> w(., 10) ({size})",
            paper=paper,
        )
    )


_PAPER = dict(train=10000, test=30000, n_features=10000, gamma=1e-4, alpha=1e-12)
NAVIER_STOKES_HIGH = _spec(
    "navier_stokes_high", 1, "64x64 -> 64x64", dict(_PAPER, cauchy=0.00758, gaussian=0.00497)
)
_PAPER = dict(train=2000, test=2000, n_features=10000, gamma=1e-3, alpha=1e-10)
NAVIER_STOKES_LOW = _spec(
    "navier_stokes_low", 4, "16x16 -> 16x16", dict(_PAPER, cauchy=0.0321, gaussian=0.0106)
)
