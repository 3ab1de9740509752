"""Empirical spectra of the shared random fields against their formulas."""

import numpy as np
import pytest
import scipy.fft

from rfol_dask.datasets import grf


def test_neumann_dct_field_coefficients_have_unit_variance():
    s, alpha, tau, n = 33, 2.0, 3.0, 400
    k = np.arange(s)
    k1, k2 = np.meshgrid(k, k, indexing="ij")
    coef = s * tau ** (alpha - 1) * (np.pi**2 * (k1**2 + k2**2) + tau**2) ** (-alpha / 2)
    rng = np.random.default_rng(0)
    z = np.stack(
        [
            scipy.fft.dctn(grf.neumann_dct_2d(rng, s, alpha, tau), type=2, norm="ortho")
            for _ in range(n)
        ]
    )
    assert np.abs(z[:, 0, 0]).max() < 1e-12  # the constant mode is removed
    normalised = z / coef
    var = (normalised**2).mean(axis=0)
    var[0, 0] = 1.0
    assert abs(var.mean() - 1) < 0.02  # average over all modes
    assert np.abs(var[:4, :4] - 1).max() < 0.35  # each low mode: chi2 with 400 dof, sd 0.07


@pytest.mark.slow
def test_neumann_eigen_field_projections_match_formula():
    n_nodes, n = 129, 300
    x = np.linspace(0, 1, n_nodes)
    w = np.full(n_nodes, 1.0 / (n_nodes - 1))
    w[[0, -1]] /= 2  # trapezoid weights
    rng = np.random.default_rng(1)
    fields = np.stack(
        [grf.neumann_eigen_2d(rng, x, x, n_modes=20, tau=3.0, power=1.0) for _ in range(n)]
    )
    lv = grf._sorted_lattice(20, lambda a, b: (a >= 0) & (b >= 0) & ((a > 0) | (b > 0)))
    for l1, l2 in lv[:6]:
        phi = np.outer(
            (1 if l1 == 0 else np.sqrt(2)) * np.cos(np.pi * l1 * x),
            (1 if l2 == 0 else np.sqrt(2)) * np.cos(np.pi * l2 * x),
        )
        proj = np.einsum("sij,ij,i,j->s", fields, phi, w, w)
        expected_sd = (np.pi**2 * (l1**2 + l2**2) + 9.0) ** -1.0
        assert abs(proj.std() / expected_sd - 1) < 0.15, (l1, l2)
    # the mean (0, 0) mode is absent
    assert abs(np.einsum("sij,i,j->s", fields, w, w)).max() < 1e-3 * fields.std()


@pytest.mark.slow
def test_navier_stokes_forcing_modes_and_amplitudes():
    n_grid, n = 32, 300
    x = 2 * np.pi * np.arange(n_grid) / n_grid
    k = grf.half_plane_wavevectors(50)
    assert (
        len({tuple(v) for v in k}) == 50
        and ((k[:, 0] + k[:, 1] > 0) | ((k.sum(1) == 0) & (k[:, 0] > 0))).all()
    )
    norms = (k**2).sum(1)
    assert (np.diff(norms) >= 0).all()
    rng = np.random.default_rng(2)
    F = np.stack([np.fft.fft2(grf.periodic_forcing_2d(rng, x, x)) for _ in range(n)]) / n_grid**2
    scale = 1.0 / (np.sqrt(2) * np.pi * (9.0 + norms) ** 2)
    a = 2 * F[:, k[:, 0] % n_grid, k[:, 1] % n_grid].real / scale
    b = -2 * F[:, k[:, 0] % n_grid, k[:, 1] % n_grid].imag / scale
    assert abs(a.var() - 1) < 0.05 and abs(b.var() - 1) < 0.05
    power = (np.abs(F) ** 2).sum(0)
    mask = np.zeros((n_grid, n_grid), bool)
    mask[k[:, 0] % n_grid, k[:, 1] % n_grid] = True
    mask[-k[:, 0] % n_grid, -k[:, 1] % n_grid] = True
    assert power[~mask].max() < 1e-20 * power[mask].max() + 1e-30  # no energy outside the 50 modes
