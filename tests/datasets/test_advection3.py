"""Advection III: exact half-period translation, block-split reproducibility, spectrum."""

import numpy as np
import pytest
import scipy.fft

from rfol_dask.datasets import advection3 as adv3
from rfol_dask.datasets.registry import get, sample_rng


def _series_direct(theta, x, n_modes=50, tau=3.0):
    """The docs/datasets.md series evaluated directly (theta_{2l-1}, theta_{2l} in draw order)."""
    out = np.zeros_like(x)
    for ell in range(1, n_modes + 1):
        c = 1.0 / (4 * np.pi**2 * ell**2 + tau**2)
        out += (
            c
            * np.sqrt(2.0)
            * (
                theta[2 * ell - 2] * np.cos(2 * np.pi * ell * x)
                + theta[2 * ell - 1] * np.sin(2 * np.pi * ell * x)
            )
        )
    return out


def test_registered_and_shapes():
    spec = get("advection3")
    assert spec.defaults == {"n_points": 200, "n_modes": 50, "tau": 3.0, "alpha": 2.0, "shift": 0.5}
    gin, gout = spec.grids(**spec.defaults)
    np.testing.assert_array_equal(gin["x"], np.linspace(0, 1, 200))
    u0, u1 = spec.make_block(3, 0, 5, **spec.defaults)
    assert u0.shape == u1.shape == (5, 200) and u0.dtype == np.float64
    assert set(np.unique(np.r_[u0.ravel(), u1.ravel()])) <= {-1.0, 1.0}


def test_matches_formula_and_shifted_series():
    seed, n = 11, 20
    x = np.linspace(0, 1, 200)
    u0, u1 = adv3.make_block(seed, 0, n)
    for i in range(n):
        theta = sample_rng(seed, i).standard_normal(100)
        a_in = _series_direct(theta, x)
        a_out = _series_direct(theta, x - 0.5)  # unwrapped: the series is 1-periodic
        np.testing.assert_array_equal(u0[i], np.where(a_in > 0, 1.0, -1.0))
        np.testing.assert_array_equal(u1[i], np.where(a_out > 0, 1.0, -1.0))


def test_output_is_exact_roll_when_grid_allows():
    # with 201 points the spacing is 1/200 and half a period is exactly 100 cells
    u0, u1 = adv3.make_block(5, 0, 50, n_points=201)
    np.testing.assert_array_equal(u1[:, :200], np.roll(u0[:, :200], 100, axis=1))
    np.testing.assert_array_equal(u1[:, 200], u1[:, 0])
    # the translation is not the identity (the test could fail)
    assert np.mean(u1 != u0) > 0.2


def test_reproducible_across_block_splits():
    a = adv3.make_block(7, 0, 10)
    b0, b1 = adv3.make_block(7, 0, 4), adv3.make_block(7, 4, 10)
    for k in range(2):
        assert np.concatenate([b0[k], b1[k]]).tobytes() == a[k].tobytes()
    c = adv3.make_block(8, 0, 10)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.slow
def test_field_spectrum_matches_formula():
    n, m = 200, 3000
    x = np.arange(n) / n
    a = np.stack([adv3.field(sample_rng(1, i), x) for i in range(m)])
    A = scipy.fft.rfft(a, axis=1)
    power = np.mean(np.abs(A) ** 2, axis=0)
    ell = np.arange(1, 51)
    expected = n**2 * (4 * np.pi**2 * ell**2 + 9.0) ** -2.0  # E|A_l|^2 = n^2 c_l^2
    ratio = power[1:51] / expected
    assert np.all(np.abs(ratio - 1) < 0.12), ratio  # each mode: exponential mean, sd 1.8 %
    assert abs(ratio.mean() - 1) < 0.02
    assert np.all(power[51:] < 1e-20 * power[1]) and power[0] < 1e-20 * power[1]
    # real and imaginary parts (cos and sin coefficients) carry equal variance
    re, im = np.mean(A[:, 1:51].real ** 2, 0), np.mean(A[:, 1:51].imag ** 2, 0)
    assert abs(np.mean(re / im) - 1) < 0.03
