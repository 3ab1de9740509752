"""Tests of the Helmholtz generator: Q1 convergence, assembly, flux balance, reproducibility."""

import numpy as np
import pytest
import skfem
from skfem.helpers import dot, grad

from rfol_dask.datasets import helmholtz
from rfol_dask.datasets.registry import get, sample_rng

OMEGA = 60.0  # k = omega / c about 3 for the manufactured problem


def _c(x, y):
    return 20.0 + np.tanh(np.sin(2 * np.pi * x) * np.cos(np.pi * y))


def _v(x, y):
    return np.sin(2 * x + 1) * np.cos(3 * y)


def _source(x, y):  # -Lap v - (omega / c)^2 v
    return (13.0 - (OMEGA / _c(x, y)) ** 2) * _v(x, y)


def _flux(x, y, nx, ny):  # dv/dn
    return 2 * np.cos(2 * x + 1) * np.cos(3 * y) * nx - 3 * np.sin(2 * x + 1) * np.sin(3 * y) * ny


def _l2_error(n):
    x = np.linspace(0.0, 1.0, n + 1)
    X, Y = np.meshgrid(x, x, indexing="ij")
    vh = helmholtz.solve_helmholtz(_c(X, Y), OMEGA, source=_source, flux=_flux)
    fe = helmholtz.get_fe(n)
    xq, yq = np.asarray(fe.basis.global_coordinates())
    diff = (fe.interp @ vh.ravel()).reshape(xq.shape) - _v(xq, yq)
    return np.sqrt(np.sum(fe.basis.dx * diff**2))


@pytest.mark.slow
def test_q1_l2_convergence_order_two():
    errors = np.array([_l2_error(n) for n in (16, 32, 64)])
    rates = np.log2(errors[:-1] / errors[1:])
    assert np.all(np.abs(rates - 2.0) < 0.1), (errors, rates)
    assert errors[-1] < 2.5e-3  # ||v||_L2 is about 0.5


def test_mass_map_matches_skfem_assembly():
    fe = helmholtz.get_fe(12)
    c = 20.0 + np.tanh(np.random.default_rng(0).standard_normal(fe.n_dofs))
    k2 = (1000.0 / np.asarray(fe.basis.interpolate(c))) ** 2

    @skfem.BilinearForm
    def form(u, v, w):
        return dot(grad(u), grad(v)) - w.k2 * u * v

    ref = form.assemble(fe.basis, k2=k2)
    diff = abs(fe.matrix(k2.ravel()) - ref).max()
    assert diff < 1e-12 * abs(ref).max()


def test_top_flux_balance():
    """Testing with the constant function: -int k^2 v = int_top 1{0.35 <= x <= 0.65} = 0.3."""
    c, v = get("helmholtz_high").make_block(11, 0, 2, n_cells=40)
    fe = helmholtz.get_fe(40)
    for cs, vs in zip(c, v):
        k2 = (1000.0 / (fe.interp @ cs.ravel())) ** 2
        total = np.sum(fe.basis.dx.ravel() * k2 * (fe.interp @ vs.ravel()))
        assert abs(total + 0.3) < 1e-8


@pytest.mark.slow
def test_block_split_reproducible_and_variants():
    high, low = get("helmholtz_high"), get("helmholtz_low")
    params = dict(n_cells=40)
    c, v = high.make_block(5, 0, 10, **params)
    c1, v1 = high.make_block(5, 0, 4, **params)
    c2, v2 = high.make_block(5, 4, 10, **params)
    assert c.shape == v.shape == (10, 41, 41) and v.dtype == np.float64
    assert np.concatenate([c1, c2]).tobytes() == c.tobytes()
    assert np.concatenate([v1, v2]).tobytes() == v.tobytes()
    assert np.all((c > 19.0) & (c < 21.0)) and c.std() > 0.05
    assert not np.array_equal(v[0], v[1])
    cl, vl = low.make_block(5, 2, 5, **params)
    assert cl.shape == (3, 11, 11)
    assert cl.tobytes() == np.ascontiguousarray(c[2:5, ::4, ::4]).tobytes()
    assert vl.tobytes() == np.ascontiguousarray(v[2:5, ::4, ::4]).tobytes()
    # the input field follows grf.neumann_eigen_2d for sample i
    x = np.linspace(0, 1, 41)
    np.testing.assert_array_equal(c[3], helmholtz.wave_speed(sample_rng(5, 3), x))


def test_defaults_and_grids():
    high, low = get("helmholtz_high"), get("helmholtz_low")
    assert high.defaults["omega"] == 1000.0 and high.defaults["n_cells"] == 100
    assert high.defaults["stride"] == 1 and low.defaults["stride"] == 4
    gi, go = high.grids(**high.defaults)
    np.testing.assert_array_equal(gi["x"], np.linspace(0, 1, 101))
    assert list(go) == ["x", "y"]
    gi, _ = low.grids(**low.defaults)
    assert gi["x"].shape == (26,) and gi["y"][1] == pytest.approx(0.04)
    assert helmholtz.get_fe(100).basis.X.shape[1] == 9  # 3 x 3 Gauss points
    with pytest.raises(ValueError):
        high.make_block(0, 0, 1, n_cells=100, stride=3)
