"""The data set generators: exact where the formula is, refusing a blow-up or an omega lost to
rounding."""

import numpy as np
import pytest


@pytest.mark.parametrize("n_points, t_index", [(40, 20), (39, 13), (7, 5), (57, 19)])
def test_advection_outputs_are_exact_translations(n_points, t_index):
    """At some grid sizes x_j - t rounded to -5.6e-17, the modulo made it 1 - 1e-16, and Advection
    II's bump (not periodic) was read at the far end: 31 of 200 samples off at one point by 1.5."""
    from rfol_dask import datasets

    for name in ("advection1", "advection2"):
        ds = datasets.generate(name, 60, seed=0, n_points=n_points, t_index=t_index)
        U, V = ds["input"].values, ds["output"].values
        np.testing.assert_allclose(
            V, U[:, (np.arange(n_points) - t_index) % (n_points - 1)], atol=1e-12
        )


def test_helmholtz_top_flux_is_exact_where_its_ends_cut_a_cell():
    """3 Gauss points on a facet that the indicator's end cuts gave a total flux 4.9 % high at 30
    cells; the default mesh, whose nodes hold both ends, is unchanged."""
    from rfol_dask.datasets import helmholtz

    for n_cells, lo, hi in [
        (30, 0.35, 0.65),
        (64, 0.35, 0.65),
        (100, 0.355, 0.645),
        (100, 0.3449, 0.65),
    ]:
        b = helmholtz.get_fe(n_cells).load(flux_interval=(lo, hi))
        assert b.sum() == pytest.approx(hi - lo, rel=1e-12)
        top = np.linspace(
            0, 1, n_cells + 1
        )  # the first moment too: the load's shape, not just its total
        x = np.repeat(top, n_cells + 1)
        assert (b * x).sum() == pytest.approx((hi**2 - lo**2) / 2, rel=1e-12)


def test_helmholtz_refuses_an_omega_lost_to_rounding():
    """At omega = 1e-5 the mass term of K - k^2 M fell below rounding: the mean of v came out
    +1.5e11 where the exact -flux / k^2 is -1.2e12."""
    from rfol_dask.datasets import helmholtz

    with pytest.raises(ValueError, match=r"omega=1e-05 is too small .*take omega >= 0\.0"):
        helmholtz.make_block(0, 0, 1, n_cells=20, omega=1e-5)
    _, v = helmholtz.make_block(0, 0, 1, n_cells=20, omega=1.0, c0=20.0)
    assert np.isfinite(v).all()


def test_burgers_refuses_a_finite_blow_up():
    """Viscous Burgers cannot grow in max norm; nu=1e-4 with one step gave max|u(T)| = 8.4e14 for
    max|u0| = 1.7, finite, and was written as data."""
    from rfol_dask.datasets import burgers

    with pytest.raises(FloatingPointError, match="blew up .*n_steps=1 too small for nu=0.0001"):
        burgers.make_block(0, 0, 8, nu=1e-4, n_steps=1)
