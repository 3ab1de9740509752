"""Structural mechanics: mesh, patch test, equilibrium, linearity, load/input, reproducibility.

Small meshes (mesh_n 8-16) keep the whole module to a few seconds.
"""

import numpy as np
import pytest

from rfol_dask.datasets import structural_mechanics as sm
from rfol_dask.datasets.registry import get, sample_rng

MU, NU = 0.39e6, 0.45
E_M = 2 * MU * (1 + NU)
SMALL = dict(mesh_n=12)


def _quad_load(m, theta, **kw):
    x = m.top_basis.global_coordinates().get(0)[0]
    return sm.load(theta, x.ravel(), **kw).reshape(x.shape)


@pytest.mark.slow
def test_registered_defaults_and_grids():
    lo, hi = get("structural_mechanics_low"), get("structural_mechanics_high")
    for spec, n in ((lo, 21), (hi, 41)):
        d = spec.defaults
        assert (d["radius"], d["E_fibre"], d["nu_fibre"], d["mu_matrix"], d["nu_matrix"]) == (
            0.3,
            4e6,
            0.35,
            0.39e6,
            0.45,
        )
        assert (d["load_mean"], d["load_scale"], d["n_modes"], d["tau"]) == (100.0, 400.0, 100, 3.0)
        assert d["n_input"] == 41 and d["n_output"] == n and d["input_interp"] == "cubic21"
        gin, gout = spec.grids(**d)
        assert list(gin) == ["x_load"] and list(gout) == ["x", "y"]
        assert len(gin["x_load"]) == 41 and len(gout["x"]) == len(gout["y"]) == n
    x, y = hi.make_block(0, 0, 3, **{**hi.defaults, **SMALL})
    assert x.shape == (3, 41) and y.shape == (3, 41, 41) and y.dtype == np.float64
    assert np.all(np.isfinite(y)) and y.min() >= 0


@pytest.mark.parametrize("mesh_n", [8, 16])
def test_mesh_conforms_to_circle(mesh_n):
    mesh, fibre = sm.build_mesh(mesh_n, 0.3)
    p, t = mesh.p, mesh.t
    e1, e2 = p[:, t[1]] - p[:, t[0]], p[:, t[2]] - p[:, t[0]]
    area = 0.5 * np.abs(e1[0] * e2[1] - e1[1] * e2[0])
    assert area.min() > 0 and abs(area.sum() - 1) < 1e-12
    # inscribed polygon with 4 mesh_n sides: area pi r^2 sinc-like deficit, O(mesh_n^-2)
    k = 4 * mesh_n
    assert abs(area[fibre].sum() - 0.5 * k * 0.09 * np.sin(2 * np.pi / k)) < 1e-12
    r = np.hypot(p[0] - 0.5, p[1] - 0.5)[t]
    assert np.all(r[:, fibre] <= 0.3 + 1e-12) and np.all(r[:, ~fibre] >= 0.3 - 1e-12)
    assert np.all((p >= 0) & (p <= 1))
    bnd = mesh.p[:, mesh.boundary_nodes()]
    assert np.all(np.min(np.minimum(bnd, 1 - bnd), axis=0) == 0)  # boundary nodes on the square
    assert len(mesh.boundary_facets()) == 4 * mesh_n


@pytest.mark.slow
def test_uniform_traction_on_homogeneous_plate_gives_uniform_stress():
    # fibre = matrix, bottom on rollers (u_y = 0, one x-pin): exact solution is uniaxial
    # sigma_yy = f, which P2 reproduces; von Mises = |f| everywhere on the output grid
    params = dict(
        SMALL, E_fibre=E_M, nu_fibre=NU, bottom_bc="roller", load_scale=0.0, load_mean=250.0
    )
    x, y = sm.make_block(0, 0, 3, n_output=21, **params)
    np.testing.assert_allclose(x, 250.0, rtol=1e-13)
    np.testing.assert_allclose(y, 250.0, rtol=1e-9)
    m = sm.model(**params)
    c = np.zeros((101, 1))
    c[0] = 250.0
    sxx, syy, sxy = m.stresses_quad(m.U @ c)
    assert np.abs(sxx).max() < 1e-8 * 250 and np.abs(sxy).max() < 1e-8 * 250
    np.testing.assert_allclose(syy, 250.0, rtol=1e-10)
    # the same plate clamped at the bottom is not uniform (the test above can fail)
    y2 = sm.make_block(0, 0, 1, n_output=21, **{**params, "bottom_bc": "clamped"})[1]
    assert np.abs(y2 - 250).max() > 10


def test_von_mises_formula():
    assert sm.von_mises(-3.0, 0.0, 0.0) == 3.0  # uniaxial
    np.testing.assert_allclose(sm.von_mises(0.0, 0.0, 2.0), 2 * np.sqrt(3))  # pure shear
    np.testing.assert_allclose(sm.von_mises(5.0, 5.0, 0.0), 5.0)  # equibiaxial


def test_equilibrium_reactions_balance_random_load():
    # clamped, heterogeneous: bottom reactions balance the resultant of f (int_0^1 f = load_mean)
    m = sm.model(**SMALL)
    for i in range(3):
        theta = sm.draw_load(sample_rng(4, i))
        F = m.load_vector(_quad_load(m, theta))
        assert abs(F[m.ubasis.nodal_dofs[1]].sum() + F[m.ubasis.facet_dofs[1]].sum() - 100.0) < 1e-9
        U = m.solve(F)
        R = m.K @ U - F
        fixed = np.setdiff1d(np.arange(m.ubasis.N), m.free)
        assert np.abs(R[m.free]).max() < 1e-8 * np.abs(F).max()
        ry = R[np.intersect1d(fixed, np.r_[m.ubasis.nodal_dofs[1], m.ubasis.facet_dofs[1]])].sum()
        rx = R[np.intersect1d(fixed, np.r_[m.ubasis.nodal_dofs[0], m.ubasis.facet_dofs[0]])].sum()
        assert abs(ry + 100.0) < 1e-7 and abs(rx) < 1e-7


def test_linearity_and_basis_solution_equals_direct_solve():
    m = sm.model(**SMALL)
    t1, t2 = sm.draw_load(sample_rng(9, 0)), sm.draw_load(sample_rng(9, 1))
    F1, F2 = m.load_vector(_quad_load(m, t1)), m.load_vector(_quad_load(m, t2))
    U = m.solve(np.stack([F1, F2, F1 + F2, 2.5 * F1], axis=1))
    s = np.stack(m.stresses_quad(U))  # (3, n_quad, 4)
    scale = np.abs(s).max()
    assert np.abs(s[..., 2] - s[..., 0] - s[..., 1]).max() < 1e-9 * scale
    assert np.abs(s[..., 3] - 2.5 * s[..., 0]).max() < 1e-9 * scale
    # the generator's combination of precomputed profile solutions is the direct solve
    coef = sm.load_coefficients(np.stack([t1, t2]))
    np.testing.assert_allclose(m.U @ coef.T, U[:, :2], rtol=0, atol=1e-9 * np.abs(U).max())
    # and make_block's output is von Mises of that direct solve
    y = sm.make_block(9, 0, 2, n_output=21, **SMALL)[1]
    np.testing.assert_allclose(y, m.output(U[:, :2], 21), rtol=1e-9, atol=1e-9 * y.max())
    # von Mises is 1-homogeneous
    np.testing.assert_allclose(m.output(3 * U[:, :1], 21), 3 * m.output(U[:, :1], 21), rtol=1e-12)


def test_input_is_cubic_interpolation_of_21_samples_or_exact():
    theta = sm.draw_load(sample_rng(2, 5))
    x41 = np.linspace(0, 1, 41)
    ell = np.arange(1, 101)
    exact = (
        100
        + 400
        * (np.cos(np.pi * np.outer(x41, ell)) * np.sqrt(2) / np.sqrt(np.pi**2 * ell**2 + 9))
        @ theta
    )
    xe = sm.make_block(2, 5, 6, n_output=21, input_interp="exact", **SMALL)[0][0]
    np.testing.assert_allclose(xe, exact, rtol=1e-12, atol=1e-10)
    xc = sm.make_block(2, 5, 6, n_output=21, **SMALL)[0][0]
    np.testing.assert_allclose(
        xc[::2], exact[::2], rtol=1e-12, atol=1e-10
    )  # nodes of the 21-point spline
    assert (
        np.abs(xc[1::2] - exact[1::2]).max() > 1.0
    )  # the high modes are not resolved by 21 points
    from scipy.interpolate import CubicSpline

    np.testing.assert_allclose(xc, CubicSpline(x41[::2], exact[::2])(x41), rtol=1e-12, atol=1e-10)
    # outputs do not depend on how the input is represented
    np.testing.assert_array_equal(
        sm.make_block(2, 5, 6, n_output=21, input_interp="exact", **SMALL)[1],
        sm.make_block(2, 5, 6, n_output=21, **SMALL)[1],
    )


@pytest.mark.slow
def test_reproducible_across_block_splits():
    spec = get("structural_mechanics_high")
    p = {**spec.defaults, **SMALL}
    for a, b, c in ((0, 4, 10), (45, 50, 57)):  # the second split straddles an internal batch edge
        whole = spec.make_block(3, a, c, **p)
        parts = [spec.make_block(3, a, b, **p), spec.make_block(3, b, c, **p)]
        for k in range(2):
            assert np.concatenate([parts[0][k], parts[1][k]]).tobytes() == whole[k].tobytes()
    other = spec.make_block(4, 0, 4, **p)
    assert not np.allclose(other[1], spec.make_block(3, 0, 4, **p)[1])


def test_output_varies_with_load_and_fibre_matters():
    y = sm.make_block(1, 0, 20, n_output=21, **SMALL)[1]
    rel_sd = y.std(0).mean() / y.mean()
    assert 0.05 < rel_sd < 2.0
    yh = sm.make_block(1, 0, 20, n_output=21, E_fibre=E_M, nu_fibre=NU, **SMALL)[1]
    assert np.linalg.norm(y - yh) > 0.05 * np.linalg.norm(y)


@pytest.mark.slow
def test_bottom_condition_is_a_data_set_parameter():
    from rfol_dask import datasets

    ds = datasets.generate("structural_mechanics_low", 2, mesh_n=12, bottom_bc="roller")
    assert ds.attrs["param_bottom_bc"] == "roller"
    clamped = datasets.generate("structural_mechanics_low", 2, mesh_n=12)
    assert not np.allclose(ds["output"].values, clamped["output"].values)
    with pytest.raises(ValueError, match="bottom_bc must be one of"):
        sm.make_block(0, 0, 1, n_output=21, bottom_bc="free", **SMALL)
    with pytest.raises(ValueError, match="unknown structural mechanics parameter"):
        sm.make_block(0, 0, 1, n_output=21, young=1.0, **SMALL)
