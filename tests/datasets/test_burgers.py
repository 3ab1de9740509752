"""Burgers generator: exact (Cole-Hopf) solutions, step/grid convergence, input spectrum,
reproducibility across block splits."""

import numpy as np
import pytest
import scipy.special

from rfol_dask.datasets import burgers, grf
from rfol_dask.datasets.registry import get, sample_rng


def rel(a, b):
    """Worst per-sample relative L2 difference."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    return np.max(np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1))


def cole_hopf(x, t, amp, nu, m_max=80):
    """Exact solution for ``u0 = -amp sin(2 pi x)``: ``u = -2 nu phi_x / phi`` with ``phi`` the
    heat-equation solution from ``exp(-kappa cos 2 pi x)`` (Bessel series, scaled by e^-kappa)."""
    kappa = amp / (2 * np.pi) / (2 * nu)
    m = np.arange(1, m_max + 1)
    w = 2 * (-1.0) ** m * scipy.special.ive(m, kappa) * np.exp(-nu * (2 * np.pi * m) ** 2 * t)
    arg = 2 * np.pi * np.outer(x, m)
    phi = scipy.special.ive(0, kappa) + np.cos(arg) @ w
    return -2 * nu * (np.sin(arg) @ (-2 * np.pi * m * w)) / phi


def test_etdrk4_weights_series_matches_closed_form():
    z = -np.linspace(0.6, 1.6, 41)
    series = burgers.etdrk4_coefficients(z, 1.0, z_small=np.inf, n_terms=40)
    closed = burgers.etdrk4_coefficients(z, 1.0, z_small=0.0)
    for s, c in zip(series, closed):
        assert np.max(np.abs(s - c) / np.abs(c)) < 1e-12
    # z = 0: Q = h/2, f1 = f2 = f3 = h/6 (the RK4 weights)
    E, E2, Q, f1, f2, f3 = burgers.etdrk4_coefficients(np.zeros(1), 0.5)
    np.testing.assert_allclose(
        [E[0], E2[0], Q[0], f1[0], f2[0], f3[0]],
        [1, 1, 0.25, 0.5 / 6, 0.5 / 6, 0.5 / 6],
        rtol=1e-15,
    )


@pytest.mark.parametrize("T", [0.1, 1.0])
@pytest.mark.slow
def test_cole_hopf_default_settings(T):
    x = np.arange(1024) / 1024
    u = burgers.solve(-2.0 * np.sin(2 * np.pi * x), T=T, nu=0.1, n_steps=100)
    assert rel(u, cole_hopf(x, T, 2.0, 0.1)) < 1e-7  # measured 2.8e-9 (T=0.1), 1.5e-8 (T=1)


@pytest.mark.slow
def test_cole_hopf_steep_front_fourth_order():
    """nu = 0.02: a steeper front; errors of 100 and 200 steps show ETDRK4's 4th order."""
    x = np.arange(1024) / 1024
    exact = cole_hopf(x, 0.5, 2.0, 0.02)
    e = [
        rel(burgers.solve(-2.0 * np.sin(2 * np.pi * x), T=0.5, nu=0.02, n_steps=s), exact)
        for s in (100, 200)
    ]
    assert e[1] < 2e-7  # measured 9.3e-8
    assert np.log2(e[0] / e[1]) > 3.5  # measured 3.8


@pytest.fixture(scope="module")
def u0_batch():
    return np.stack([grf.burgers_initial(sample_rng(3, i), 1024, n_modes=511) for i in range(6)])


@pytest.mark.slow
def test_half_step_and_order_on_data(u0_batch):
    ref = burgers.solve(u0_batch, n_steps=400)
    e = {s: rel(burgers.solve(u0_batch, n_steps=s), ref) for s in (50, 100, 200)}
    # default steps vs half steps: measured 1.1e-8
    assert rel(burgers.solve(u0_batch, n_steps=100), burgers.solve(u0_batch, n_steps=200)) < 1e-7
    assert e[100] < 1e-7  # measured 1.2e-8
    assert np.log2(e[50] / e[100]) > 3.5  # graded steps keep 4th order on rough data (4.0)


@pytest.mark.slow
def test_grid_doubling():
    a_in, a_out = burgers.make_block(5, 0, 4)
    b_in, b_out = burgers.make_block(5, 0, 4, n_solve=2048)
    np.testing.assert_array_equal(a_in, b_in)  # same u0 function (511 modes) on both grids
    assert rel(b_out, a_out) < 1e-10  # measured 5e-14


@pytest.mark.slow
def test_mean_conserved_energy_decays(u0_batch):
    u0 = u0_batch[:2] + 0.3
    prev = np.sum((u0 - 0.3) ** 2, axis=1)
    for T in (0.05, 0.2, 1.0):
        u = burgers.solve(u0, T=T)
        np.testing.assert_allclose(u.mean(axis=1), 0.3, rtol=0, atol=1e-13)
        energy = np.sum((u - 0.3) ** 2, axis=1)
        assert np.all(energy < prev)
        prev = energy


@pytest.mark.slow
def test_input_spectrum_matches_covariance():
    """E|rfft(u0)_k|^2 = n^2 c_k^2, c_k = 25 / ((2 pi k)^2 + 25), for the 128-point input."""
    inputs, _ = burgers.make_block(
        0, 0, 150, n_steps=10
    )  # the fewest steps its check accepts (nu = 0.1)
    n = inputs.shape[1]
    k = np.arange(1, 41)
    c = 25.0 / ((2 * np.pi * k) ** 2 + 25.0)
    ratio = np.abs(np.fft.rfft(inputs, axis=1)[:, 1:41]) ** 2 / (n * c) ** 2  # Exp(1) draws
    assert abs(ratio.mean() - 1) < 0.05  # 6000 draws: std 1.3 %
    assert abs(ratio[:, :5].mean() - 1) < 0.15 and abs(ratio[:, 20:].mean() - 1) < 0.1


@pytest.mark.slow
def test_reproducible_across_block_splits():
    whole = burgers.make_block(11, 0, 10)
    parts = [burgers.make_block(11, 0, 4), burgers.make_block(11, 4, 10)]
    for j in range(2):
        assert np.concatenate([p[j] for p in parts]).tobytes() == whole[j].tobytes()


def test_registered_spec():
    spec = get("burgers")
    assert spec.defaults["nu"] == 0.1 and spec.defaults["T"] == 1.0
    gin, gout = spec.grids(**spec.defaults)
    np.testing.assert_array_equal(gin["x"], np.arange(128) / 128)
    inputs, outputs = spec.make_block(0, 2, 5, **spec.defaults)
    assert inputs.shape == outputs.shape == (3, 128)
    assert inputs.dtype == outputs.dtype == np.float64
    full = grf.burgers_initial(sample_rng(0, 3), 1024, n_modes=511)
    np.testing.assert_array_equal(inputs[1], full[::8])
    # nu = 0.1 damps strongly: output about 1-3 % of the input in norm, never zero
    ratio = np.linalg.norm(outputs, axis=1) / np.linalg.norm(inputs, axis=1)
    assert np.all((ratio > 1e-3) & (ratio < 0.1))


@pytest.mark.slow
def test_a_blow_up_is_an_error_naming_the_fix(tmp_path, capsys):
    from rfol_dask import datasets
    from rfol_dask.cli import main

    with pytest.raises(FloatingPointError, match="n_steps=100 too small for nu=0.001.*e.g. 800"):
        datasets.generate("burgers", 2, nu=1e-3)  # in memory it returned NaN outputs silently
    assert (
        main(
            [
                "generate",
                "burgers",
                "--samples",
                "2",
                "--out",
                str(tmp_path / "b.zarr"),
                "--param",
                "nu=0.001",
            ]
        )
        == 2
    )
    assert "increase n_steps" in capsys.readouterr().err
    ds = datasets.generate("burgers", 2, nu=1e-3, n_steps=800)
    assert np.isfinite(ds["output"].values).all()
