"""The Darcy generator: scheme order, solver accuracy, reproducibility, coefficient values."""

import numpy as np
import pytest
import scipy.sparse.linalg as sla

from rfol_dask.datasets import darcy
from rfol_dask.datasets.registry import get, sample_rng

SMALL = dict(n_solve=61, stride=4)  # 16 x 16 output, fast


def _manufactured(n):
    """a = 2 + sin(2 pi x) cos(pi y), u = sin(pi x) sin(2 pi y), f = -div(a grad u), n x n nodes."""
    x = np.linspace(0.0, 1.0, n)
    X, Y = np.meshgrid(x, x, indexing="ij")
    pi = np.pi
    a = 2.0 + np.sin(2 * pi * X) * np.cos(pi * Y)
    ax = 2 * pi * np.cos(2 * pi * X) * np.cos(pi * Y)
    ay = -pi * np.sin(2 * pi * X) * np.sin(pi * Y)
    u = np.sin(pi * X) * np.sin(2 * pi * Y)
    ux = pi * np.cos(pi * X) * np.sin(2 * pi * Y)
    uy = 2 * pi * np.sin(pi * X) * np.cos(2 * pi * Y)
    f = -(ax * ux + ay * uy) + 5 * pi**2 * a * u
    return a, f, u


@pytest.mark.slow
def test_second_order_convergence():
    errors = []
    for n in (33, 65, 129):
        a, f, u = _manufactured(n)
        errors.append(np.abs(darcy.solve_darcy(a, f) - u).max())
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(np.abs(rates - 2.0) < 0.1), (errors, rates)
    assert errors[-1] < 1e-3


def test_cg_matches_direct_solve():
    a = darcy.darcy_coefficient(sample_rng(3, 0), 65)
    u = darcy.solve_darcy(a)
    h = 1.0 / 64
    direct = sla.spsolve(darcy.assemble_darcy(a).tocsc(), np.full(63 * 63, h * h))
    assert np.abs(u[1:-1, 1:-1].ravel() - direct).max() < 1e-9 * np.abs(direct).max()


@pytest.mark.slow
def test_block_split_reproducible_and_values():
    spec = get("darcy")
    a, u = spec.make_block(7, 0, 10, **SMALL)
    a1, u1 = spec.make_block(7, 0, 4, **SMALL)
    a2, u2 = spec.make_block(7, 4, 10, **SMALL)
    assert a.shape == u.shape == (10, 16, 16) and a.dtype == u.dtype == np.float64
    assert np.concatenate([a1, a2]).tobytes() == a.tobytes()
    assert np.concatenate([u1, u2]).tobytes() == u.tobytes()
    assert set(np.unique(a)) == {3.0, 12.0}
    assert 0.2 < (a == 12.0).mean() < 0.8  # the field has mean zero: both phases present
    assert np.all(u[:, [0, -1], :] == 0.0) and np.all(u[:, :, [0, -1]] == 0.0)
    assert np.all(u[:, 1:-1, 1:-1] > 0.0)  # maximum principle for f = 1
    # 1/(8 a_high) sup-bound of -Lap u = 1/a on the square: 0.0737/a
    assert u.max() < 0.0737 / 3.0 and u.max() > 0.0737 / 12.0
    assert not np.array_equal(u[0], u[1])
    _, u_other = spec.make_block(8, 0, 1, **SMALL)
    assert not np.array_equal(u_other[0], u[0])


def test_grids_and_strides():
    spec = get("darcy")
    assert spec.defaults["n_solve"] == 421 and spec.defaults["stride"] == 15
    gin, gout = spec.grids(**spec.defaults)
    assert list(gin) == ["x", "y"] and gin["x"].shape == (29,)
    np.testing.assert_allclose(gin["x"], np.linspace(0, 1, 29))
    np.testing.assert_array_equal(gin["x"], gout["x"])
    for stride, k in ((35, 13), (15, 29), (5, 85)):
        assert spec.grids(n_solve=421, stride=stride)[0]["x"].shape == (k,)
    for stride, k in ((25, 13), (12, 26), (6, 51), (3, 101)):
        assert spec.grids(n_solve=301, stride=stride)[0]["x"].shape == (k,)
    with pytest.raises(ValueError, match="stride must divide"):
        spec.make_block(0, 0, 1, n_solve=421, stride=16)
