"""The spectral tail and the generators' refusal of under-resolved settings."""

import numpy as np
import pytest

from rfol_dask.datasets import burgers, generate, grf, navier_stokes
from rfol_dask.datasets.resolution import MAX_TAIL, check_resolved, spectral_tail


def test_tail_of_known_1d_spectra():
    n = 96  # kept band |k| <= 32, upper half 16 < |k| <= 32
    x = np.arange(n) / n
    low, high = np.sin(2 * np.pi * 3 * x), np.cos(2 * np.pi * 20 * x)
    fields = np.stack(
        [low + 5.0, high, low + 0.1 * high, np.full(n, 7.0), low + np.cos(2 * np.pi * 40 * x)]
    )
    tails = [spectral_tail(f[None], 32) for f in fields]
    # the mean is left out, a constant is 0, and a mode beyond the kept band does not count
    np.testing.assert_allclose(tails, [0.0, 1.0, 0.1 / np.sqrt(1.01), 0.0, 0.0], atol=1e-14)
    assert spectral_tail(fields, 32) == pytest.approx(1.0)  # the largest over the stack


def test_tail_of_known_2d_spectra_uses_the_max_norm():
    n = 48  # kept |k|_inf <= 15, upper half 7.5 < |k|_inf <= 15
    x = 2 * np.pi * np.arange(n) / n
    X, Y = np.meshgrid(x, x, indexing="ij")
    low = np.cos(3 * X + 4 * Y)  # |k|_inf = 4
    diagonal = np.cos(6 * X + 6 * Y)  # |k|_2 = 8.5 but |k|_inf = 6: lower half
    high_x = np.sin(10 * X + Y)  # |k|_inf = 10, through the complex axis
    high_y = np.sin(X - 12 * Y)  # |k|_inf = 12, through the real axis
    for field, expected in [
        (low, 0.0),
        (diagonal, 0.0),
        (high_x, 1.0),
        (high_y, 1.0),
        (low + 0.5 * high_x, 0.5 / np.sqrt(1.25)),
    ]:
        assert spectral_tail(field[None], 15, 2) == pytest.approx(expected, abs=1e-14)


def test_check_resolved_names_the_tail_and_the_fix():
    n = 96
    x = np.arange(n) / n
    check_resolved(np.sin(2 * np.pi * x)[None], 32, 1, what="u", fix="raise n")
    with pytest.raises(
        ValueError, match=r"u is under-resolved: .* holds 2\.0% .*at most 1%.*; raise n"
    ):
        check_resolved(
            (np.sin(2 * np.pi * x) + 0.02 * np.cos(2 * np.pi * 20 * x))[None],
            32,
            1,
            what="u",
            fix="raise n",
        )


@pytest.mark.slow
def test_burgers_refuses_a_grid_too_coarse_for_its_viscosity():
    params = dict(n_out=64, n_modes=63, nu=1e-3, n_steps=200)
    with pytest.raises(
        ValueError, match=r"Burgers u\(\., T\) on 128 points is under-resolved.*raise n_solve"
    ):
        burgers.make_block(0, 0, 2, n_solve=128, **params)
    inputs, outputs = burgers.make_block(
        0, 0, 2, n_solve=1024, **params
    )  # the same samples, resolved
    assert np.isfinite(outputs).all()


@pytest.mark.slow
def test_navier_stokes_refuses_a_coarse_grid_and_says_how_to_keep_the_output():
    with pytest.raises(ValueError, match=r"16 x 16 grid is under-resolved.*n_grid=32, stride=2"):
        generate("navier_stokes_high", 2, n_grid=16)
    ds = generate("navier_stokes_high", 2, n_grid=32, stride=2)  # resolved, output still 16 x 16
    assert ds["output"].shape == (2, 16, 16)


@pytest.mark.slow
def test_the_defaults_are_resolved_by_orders_of_magnitude():
    u0 = np.stack(
        [grf.burgers_initial(np.random.default_rng(i), 1024, n_modes=511) for i in range(2)]
    )
    assert spectral_tail(burgers.solve(u0), 1024 // 3, 1) < 1e-4 * MAX_TAIL
    x = 2 * np.pi * np.arange(64) / 64
    f = np.stack([grf.periodic_forcing_2d(np.random.default_rng(i), x, x) for i in range(2)])
    assert (
        spectral_tail(navier_stokes.solve(navier_stokes.initial_vorticity(), f), 21, 2)
        < 1e-4 * MAX_TAIL
    )


def test_an_empty_block_is_resolved():
    assert spectral_tail(np.zeros((0, 96)), 32) == 0.0
    assert burgers.make_block(0, 3, 3)[1].shape == (0, 128)
    assert navier_stokes.make_block(0, 3, 3)[1].shape == (0, 64, 64)


def test_step_error_is_exact_for_a_pure_fourth_order_error():
    from rfol_dask.datasets.resolution import step_error

    exact = np.sin(np.linspace(0, 3, 50))
    bump = np.cos(np.linspace(0, 7, 50))
    for h in (0.1, 0.01):  # coarse = exact + c h^4, fine = exact + c (h / 2)^4
        coarse, fine = exact + 3 * h**4 * bump, exact + 3 * (h / 2) ** 4 * bump
        true = np.linalg.norm(coarse - exact) / np.linalg.norm(fine)
        assert step_error(coarse, fine) == pytest.approx(true, rel=1e-12)
    assert step_error(np.zeros(3), np.zeros(3)) == 0.0
    assert step_error(np.array([np.inf, 0.0]), np.zeros(2)) == np.inf


@pytest.mark.slow
def test_burgers_refuses_too_few_time_steps_and_names_a_count_that_passes():
    """Coarse but stable steps stay finite and can be far off (nu = 0.01: 5 steps are 39 % off,
    3 steps 1e10 times; benchmarks/time_steps.py): the step-doubling check refuses them."""
    from rfol_dask.datasets.resolution import MAX_STEP_ERROR

    with pytest.raises(
        ValueError, match="nu=0.01 with n_steps=5 has a time-stepping error of about"
    ):
        burgers.make_block(0, 0, 2, nu=0.01, n_steps=5)
    with pytest.raises(FloatingPointError, match="blew up"):  # grew 1e136 x, finite: a blow-up
        burgers.make_block(0, 0, 2, nu=0.01, n_steps=3)
    with pytest.raises(
        ValueError, match=r"error of about 3\.\de-04 .*at most 1e-04 .*e\.g\. n_steps=(\d+)"
    ) as info:
        burgers.make_block(0, 0, 2, nu=0.01, n_steps=20)
    more = int(str(info.value).rsplit("=", 1)[1])
    _, out = burgers.make_block(0, 0, 2, nu=0.01, n_steps=more)  # the count it names passes
    _, ref = burgers.make_block(0, 0, 2, nu=0.01, n_steps=8 * more)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < MAX_STEP_ERROR
    burgers.make_block(
        3, 4, 6, nu=0.01, n_steps=20
    )  # a block without sample 0 is not checked again


@pytest.mark.slow
def test_navier_stokes_checks_its_time_steps(monkeypatch):
    from rfol_dask.datasets import resolution

    navier_stokes.make_block(0, 0, 1, n_steps=12)  # the fewest the CFL check lets through: 1.4e-7
    monkeypatch.setattr(resolution, "MAX_STEP_ERROR", 1e-8)
    with pytest.raises(
        ValueError,
        match=r"Navier-Stokes w\(\., T\) at nu=0\.025 with n_steps=12 has a "
        r"time-stepping error of about 1\.\de-07",
    ):
        navier_stokes.make_block(0, 0, 1, n_steps=12)
