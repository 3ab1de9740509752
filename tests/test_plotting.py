"""Figures read as a user reads them: physical axes with units, comparable colour scales."""

import re

import numpy as np
import pytest
import xarray as xr

from rfol_dask.plotting import example_figure, plot_example, plot_prediction, prediction_figure


def _field(shift=0.0, scale=1.0):
    x = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    y = np.linspace(0.0, 0.5, 12)
    values = scale * np.outer(np.sin(x), 1 + y) + shift
    return xr.DataArray(
        values,
        dims=("x", "y"),
        name="output",
        coords={
            "x": ("x", x, {"long_name": "position", "units": "m"}),
            "y": ("y", y, {"units": "s"}),
        },
        attrs={"long_name": "temperature", "units": "K"},
    )


def _panels(fig):
    """Title -> axes of the image panels (colour bars excluded)."""
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title()}


def test_2d_prediction_figure_shares_scales_and_labels_axes():
    truth = _field()
    fig = prediction_figure(truth, {"rf": _field(shift=0.3), "small": _field(scale=0.5)})
    panels = _panels(fig)
    meshes = {t: ax.collections[0] for t, ax in panels.items()}
    # one colour scale for truth and predictions, covering all of them
    clims = {meshes[t].get_clim() for t in ("truth", "rf", "small")}
    assert len(clims) == 1
    lo, hi = clims.pop()
    assert lo == pytest.approx(float(truth.min())) and hi == pytest.approx(float(truth.max()) + 0.3)
    # one symmetric scale for the errors, with a diverging colour map
    err = [meshes[t] for t in ("rf - truth", "small - truth")]
    assert err[0].get_clim() == err[1].get_clim()
    e_lo, e_hi = err[0].get_clim()
    assert e_lo == -e_hi and e_hi == pytest.approx(0.5 * float(np.abs(truth).max()))
    assert err[0].get_cmap().name == "RdBu_r" and meshes["truth"].get_cmap().name != "RdBu_r"
    # physical axes: the coordinates, their long names and units
    for ax in panels.values():
        assert ax.get_xlabel() == "position [m]" and ax.get_ylabel() == "y [s]"
        assert ax.get_xlim()[1] > 6  # x runs over [0, 2 pi), not over 32 indices
        assert ax.get_ylim()[1] < 1
    cbar_labels = {ax.get_ylabel() for ax in fig.axes if not ax.get_title()}
    assert cbar_labels == {"temperature [K]", "error temperature [K]"}


@pytest.mark.slow
def test_example_figure_with_plain_arrays_and_grids():
    truth = _field().values
    x, y = _field().x.values, _field().y.values
    fig = example_figure(
        np.cos(x), truth, truth, truth + 0.01, input_grid=(x,), output_grid=(x, y), label="RF"
    )
    panels = _panels(fig)
    assert (
        panels["true test"].collections[0].norm is panels["predicted test (RF)"].collections[0].norm
    )
    lo, hi = panels["predicted test (RF) - truth"].collections[0].get_clim()
    assert lo == pytest.approx(-0.01) and hi == pytest.approx(0.01)
    assert panels["true test"].get_xlim()[1] > 6 and panels["training input"].get_xlabel() == "x"
    # 1-D: the error axis is symmetric about 0 and the x axis is physical
    fig = example_figure(
        np.cos(x), np.sin(x), np.sin(x), np.sin(x) + 1e-3, input_grid=(x,), output_grid=(x,)
    )
    lo, hi = _panels(fig)["pointwise error"].get_ylim()
    assert lo == pytest.approx(-hi)
    assert _panels(fig)["pointwise error"].get_xlim()[1] > 6


@pytest.mark.slow
def test_1d_prediction_figure_uses_coordinate_units(tmp_path):
    truth = _field().isel(y=0)
    fig = prediction_figure(truth, {"rf": truth + 1e-3})
    assert {ax.get_xlabel() for ax in fig.axes} == {"position [m]"}
    assert fig.axes[0].get_ylabel() == "temperature [K]"
    with pytest.raises(ValueError, match="grid has 1 axes but the field has 2"):
        prediction_figure(_field().values, {"rf": _field().values}, grid=(np.arange(32),))
    assert (
        plot_prediction(tmp_path / "p.png", _field(), {"rf": _field(shift=0.1)}).stat().st_size
        > 5_000
    )
    assert (
        plot_example(tmp_path / "e.png", truth, _field(), _field(), _field(shift=0.1))
        .stat()
        .st_size
        > 5_000
    )


@pytest.mark.slow
def test_a_dot_in_the_file_name_is_no_format(tmp_path):
    x = np.linspace(0, 1, 30)
    t = np.sin(x)
    written = plot_prediction(
        tmp_path / "alpha_1e-8_N2.5k", t, {"a": t + 0.01}
    )  # was "Format '5k' is not supported"
    assert written == tmp_path / "alpha_1e-8_N2.5k.png" and written.read_bytes()[:4] == b"\x89PNG"
    assert plot_prediction(str(tmp_path / "run.v2"), t, {"a": t}) == str(tmp_path / "run.v2.png")
    for name in ("f.svg", "f.PDF"):  # suffixes matplotlib writes name the format
        assert plot_prediction(tmp_path / name, t, {"a": t}) == tmp_path / name
    assert (tmp_path / "f.PDF").read_bytes()[:4] == b"%PDF"


def test_shapes_are_checked_not_broadcast():
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    truth, x = rng.normal(size=(12, 10)), np.arange(12.0)
    open_figures = plt.get_fignums()
    # a (1, 10) prediction was broadcast: a blank panel and one row minus every truth row as "error"
    with pytest.raises(
        ValueError, match=r"predictions\['model'\] has shape \(1, 10\); expected \(12, 10\)"
    ):
        prediction_figure(truth, {"model": truth[:1]})
    with pytest.raises(
        ValueError, match=r"test_prediction has shape \(1, 10\); expected \(12, 10\)"
    ):
        example_figure(truth, truth, truth, truth[:1])
    with pytest.raises(ValueError, match=r"predictions\['m'\] has shape \(11,\); expected \(12,\)"):
        prediction_figure(
            x, {"m": x[1:]}
        )  # was matplotlib's "x and y must have same first dimension"
    with pytest.raises(ValueError, match=r"grid\[0\] has shape \(10,\); expected \(12,\)"):
        prediction_figure(
            truth, {"m": truth}, grid=(np.arange(10), x)
        )  # swapped axes: a pcolormesh TypeError
    with pytest.raises(ValueError, match=r"output_grid\[1\] has shape \(12,\); expected \(10,\)"):
        example_figure(x, truth, truth, truth, output_grid=(x, x))
    with pytest.raises(ValueError, match=r"input_grid\[0\] has shape \(10,\); expected \(12,\)"):
        example_figure(x, truth, truth, truth, input_grid=(np.arange(10),))
    for bad in (np.zeros((2, 12, 10)), np.float64(1.0)):  # "too many values to unpack"
        shape = re.escape(str(bad.shape))
        with pytest.raises(
            ValueError, match=rf"truth must be one sample's field.*got shape {shape}"
        ):
            prediction_figure(bad, {"m": bad})
        with pytest.raises(ValueError, match="train_input must be one sample's field"):
            example_figure(bad, truth, truth, truth)
    with pytest.raises(ValueError, match="predictions is empty"):
        prediction_figure(truth, {})
    assert plt.get_fignums() == open_figures  # refused before a figure was opened


def test_a_transposed_curve_dataset_is_drawn_by_its_dims():
    """A curve Dataset whose error has dims (n_features, seed) (transposed, or built so) was read by
    position: its geometric mean was taken over the checkpoints instead of the seeds, and with as
    many seeds as checkpoints the wrong curve was drawn without an error."""
    from rfol_dask.curves import curve_dataset
    from rfol_dask.plotting import curves_figure

    N = np.array([100, 200, 400])
    error = np.array([[0.4, 0.2, 0.1], [0.1, 0.05, 0.025], [0.2, 0.1, 0.05]])  # (seed, n_features)
    result = {
        "n_features": N,
        "seeds": np.arange(3),
        "error": error,
        "fit_time": error[::-1] + 1,
        "predict_time": error,
        "gamma": np.ones(3),
        "n_train": 50,
    }
    curve = curve_dataset(result)
    fig = curves_figure({"as made": curve, "transposed": curve.transpose("n_features", "seed")})
    want = np.exp(np.log(error).mean(axis=0))  # geometric mean over the seeds: 0.2, 0.1, 0.05
    drawn = [
        line.get_ydata() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")
    ]
    assert len(drawn) == 2
    for y in drawn:
        np.testing.assert_allclose(y, want)


@pytest.mark.slow
def test_curves_of_another_error_metric_are_not_labelled_relative_error():
    """``error_curve(..., error=f)`` curves were drawn on an axis labelled "relative test error"."""
    import matplotlib.pyplot as plt
    from conftest import smooth_operator_data

    from rfol_dask.curves import curve_dataset, error_curve
    from rfol_dask.plotting import curves_figure

    def max_abs_error(true, pred):
        return float(np.abs(true - pred).max())

    U, V = smooth_operator_data(60, 6)
    relative = error_curve(U[:40], V[:40], U[40:], V[40:], [8, 16], gamma=0.5, random_state=0)
    other = error_curve(
        U[:40], V[:40], U[40:], V[40:], [8, 16], gamma=0.5, random_state=0, error=max_abs_error
    )
    for curves, want in (
        ({"a": relative}, "relative test error"),
        ({"a": curve_dataset(other)}, "test error (max_abs_error)"),
        ({"a": relative, "b": other}, "test error (max_abs_error, relative_l2_error)"),
    ):
        fig = curves_figure(curves)
        assert fig.axes[0].get_ylabel() == want
        plt.close(fig)
