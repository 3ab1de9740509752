"""Random input fields of the benchmark generators (docs/datasets.md): each function draws one
float64 field on the requested grid from the per-sample generator ``rng``."""

from __future__ import annotations

import numpy as np
import scipy.fft


def periodic_series_1d(theta_cos, theta_sin, coeffs, x):
    """``sum_l coeffs_l sqrt(2) (theta_cos_l cos 2 pi l x + theta_sin_l sin 2 pi l x)`` (n,) for
    ``theta_*``, ``coeffs`` (L,) and ``x`` (n,)."""
    ell = np.arange(1, len(coeffs) + 1)
    arg = 2.0 * np.pi * np.outer(x, ell)
    return np.sqrt(2.0) * (np.cos(arg) @ (coeffs * theta_cos) + np.sin(arg) @ (coeffs * theta_sin))


def burgers_initial(rng, n, n_modes=None, sigma=25.0, tau=5.0):
    """Burgers' initial condition ``u0 ~ N(0, sigma^2 (-Lap + tau^2 I)^-2)`` (n,) on ``j / n``:
    ``sum_{k <= n_modes} sqrt(2) sigma ((2 pi k)^2 + tau^2)^-1 (xi_k cos 2 pi k x + eta_k sin 2 pi
    k x)`` (default ``n_modes = n // 2 - 1``), by one inverse real FFT."""
    n_modes = n // 2 - 1 if n_modes is None else int(n_modes)
    xi, eta = rng.standard_normal(n_modes), rng.standard_normal(n_modes)
    k = np.arange(1, n_modes + 1)
    c = np.sqrt(2.0) * sigma / ((2.0 * np.pi * k) ** 2 + tau**2)
    spec = np.zeros(n // 2 + 1, dtype=complex)
    # cos(2 pi k x) <-> n/2 at +-k;  sin(2 pi k x) <-> -i n/2 at +k.
    spec[1 : n_modes + 1] = 0.5 * n * c * (xi - 1j * eta)
    return scipy.fft.irfft(spec, n)


def cosine_series_1d(theta, coeffs, x):
    """``sum_l coeffs_l theta_l sqrt(2) cos(pi l x)`` (n,) for (L,), (L,), (n,)."""
    ell = np.arange(1, len(coeffs) + 1)
    return np.sqrt(2.0) * (np.cos(np.pi * np.outer(x, ell)) @ (coeffs * theta))


def neumann_dct_2d(rng, s, alpha=2.0, tau=3.0):
    """The FNO-collection Gaussian field (s, s) on a cell-centred grid of (0, 1)^2: coefficients
    ``s tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2) xi_k`` (no (0, 0) mode) by an orthonormal
    inverse DCT-II (MATLAB ``idct2``)."""
    xi = rng.standard_normal((s, s))
    k1, k2 = np.meshgrid(np.arange(s), np.arange(s), indexing="ij")
    coef = tau ** (alpha - 1.0) * (np.pi**2 * (k1**2 + k2**2) + tau**2) ** (-alpha / 2.0)
    spec = s * coef * xi
    spec[0, 0] = 0.0
    return scipy.fft.idctn(spec, type=2, norm="ortho")


def _sorted_lattice(n_modes, allowed):
    """The first ``n_modes`` integer vectors accepted by ``allowed``, by ``|l|^2`` (stable)."""
    r = int(np.ceil(np.sqrt(n_modes))) + 2
    while True:
        g = np.arange(-r, r + 1)
        l1, l2 = np.meshgrid(g, g, indexing="ij")
        l1, l2 = l1.ravel(), l2.ravel()
        keep = allowed(l1, l2)
        l1, l2 = l1[keep], l2[keep]
        norm2 = l1**2 + l2**2
        order = np.lexsort((l2, l1, norm2))
        if len(order) >= n_modes and norm2[order[n_modes - 1]] < r**2:
            order = order[:n_modes]
            return np.stack([l1[order], l2[order]], axis=1)
        r *= 2


def neumann_eigen_2d(rng, x, y, n_modes=100, tau=3.0, power=1.0):
    """``sum_l theta_l (pi^2 |l|^2 + tau^2)^(-power) phi_l`` (len(x), len(y)) over the first
    ``n_modes`` ``l`` of ``N^2 minus {0}`` by ``|l|^2``, ``phi_l`` the normalised Neumann cosine
    eigenfunctions at the nodes ``x``, ``y``."""
    lv = _sorted_lattice(n_modes, lambda a, b: (a >= 0) & (b >= 0) & ((a > 0) | (b > 0)))
    theta = rng.standard_normal(n_modes)
    amp = theta * (np.pi**2 * (lv**2).sum(1) + tau**2) ** (-power)
    cx = np.where(lv[:, 0] == 0, 1.0, np.sqrt(2.0)) * np.cos(np.pi * np.outer(x, lv[:, 0]))
    cy = np.where(lv[:, 1] == 0, 1.0, np.sqrt(2.0)) * np.cos(np.pi * np.outer(y, lv[:, 1]))
    return (cx * amp) @ cy.T


def half_plane_wavevectors(n_modes):
    """The first ``n_modes`` wave vectors of the half plane (``kx + ky > 0``, or ``kx + ky = 0``
    with ``kx > 0``) sorted by ``|k|^2``; shape (n_modes, 2)."""
    return _sorted_lattice(n_modes, lambda a, b: (a + b > 0) | ((a + b == 0) & (a > 0)))


def periodic_forcing_2d(rng, x, y, n_modes=50, tau=3.0, power=2.0):
    """``sum_i (a_i cos(k_i . x) + b_i sin(k_i . x)) / (sqrt(2) pi (tau^2 + |k_i|^2)^power)``
    (len(x), len(y)) on ``[0, 2 pi)^2``, ``k_i`` from :func:`half_plane_wavevectors`."""
    k = half_plane_wavevectors(n_modes)
    a, b = rng.standard_normal(n_modes), rng.standard_normal(n_modes)
    scale = 1.0 / (np.sqrt(2.0) * np.pi * (tau**2 + (k**2).sum(1)) ** power)
    phase = np.multiply.outer(x, k[:, 0])[:, None, :] + np.multiply.outer(y, k[:, 1])[None, :, :]
    return np.cos(phase) @ (a * scale) + np.sin(phase) @ (b * scale)
