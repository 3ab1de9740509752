import numpy as np
import pytest

from rfol_dask import datasets
from rfol_dask.datasets.advection import _profile_1, _profile_2


@pytest.mark.parametrize("name", ["advection1", "advection2"])
def test_output_is_exact_translation_of_input(name):
    ds = datasets.generate(name, 20, seed=3)
    x = ds["x"].values
    assert x.size == 40 and x[0] == 0.0 and x[-1] == 1.0
    shift = round((20 / 39) * 39)  # t = 20/39 is exactly 20 grid steps
    u0, u = ds["input"].values, ds["output"].values
    # the output is the input profile evaluated at (x - t) mod 1: on this grid t is a whole
    # number of grid steps (20/39 = 20 dx), so the shift is a roll of the periodic samples
    np.testing.assert_allclose(u[:, shift:], u0[:, : 40 - shift], atol=0)
    np.testing.assert_allclose(u[:, :shift], u0[:, 39 - shift : 39], atol=0)


def test_advection1_profile_wraps_periodically():
    x = np.linspace(0, 1, 11)
    prof = _profile_1(x, 2.0, 0.4, 0.9)  # interval [0.7, 1.1] wraps to [0, 0.1]
    np.testing.assert_array_equal(prof, [2.0, 2.0, 0, 0, 0, 0, 0, 2.0, 2.0, 2.0, 2.0])


def test_advection2_heaviside_half_at_jump():
    val = _profile_2(np.array([0.0]), c1=0.25, w=0.5, h1=1.0, c2=0.75, a=5.0, h2=1.0)
    assert val[0] == pytest.approx(0.5)


def test_parameters_in_range():
    ds = datasets.generate("advection1", 200, seed=0)
    heights = ds["input"].values.max(axis=1)
    assert heights.min() >= 1.0 and heights.max() <= 2.0
    widths = (ds["input"].values > 0).sum(axis=1) / 39
    assert widths.min() > 0.25 and widths.max() < 0.65
