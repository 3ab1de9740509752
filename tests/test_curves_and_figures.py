"""Error curves and figures: the PCA power of a search, each seed's predictions, saved curve
datasets plotted with their slope, figures of labelled and named grid points."""

import os

import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data, stations

from rfol_dask import RandomFeatureOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


def test_error_curve_takes_the_pca_power_of_a_search_and_checks_its_inputs():
    from rfol_dask import curves
    from rfol_dask.metrics import relative_l2_error

    U, V = smooth_operator_data(120, 16)
    Ut, Vt = smooth_operator_data(30, 16, seed=1)
    kw = dict(distribution="gaussian", gamma=0.05, alpha=1e-8)
    model = RandomFeatureOperator(
        n_features=150, pca_power=1.0, solver="dual", random_state=3, **kw
    ).fit(U, V)
    curve = curves.error_curve(U, V, Ut, Vt, [150], pca_power=1.0, random_state=3, **kw)
    assert curve["error"][0] == pytest.approx(relative_l2_error(Vt, model.predict(Ut)), rel=1e-8)
    plain = curves.error_curve(U, V, Ut, Vt, [150], random_state=3, **kw)
    assert abs(plain["error"][0] - curve["error"][0]) > 1e-6  # the metric changes the model
    for bad, match in (
        ((U, V[:10], Ut, Vt), "samples differ"),
        ((U, V, Ut[:, :5], Vt), "widths differ"),
        ((U.reshape(120, 4, 4), V, Ut, Vt), "U must be 2-D"),
    ):
        with pytest.raises(ValueError, match=match):
            curves.error_curve(*bad, [10], **kw)
    with pytest.raises(ValueError, match="gamma must be a number > 0"):
        curves.error_curve(U, V, Ut, Vt, [10], distribution="gaussian", gamma=-1.0)
    with pytest.raises(ValueError, match="alpha must be a number >= 0, got None"):
        curves.error_curve(U, V, Ut, Vt, [10], distribution="gaussian", gamma=1.0, alpha=None)
    assert curves.error_curve(U, V, Ut, Vt, [10], distribution="gaussian", gamma=np.int64(1))[
        "error"
    ].shape == (1,)


def test_error_curves_keep_each_seeds_predictions_when_asked():
    """error_curves(..., return_predictions=True) passed the option on to each seed's curve and
    dropped the predictions."""
    from rfol_dask.curves import curve_dataset, error_curve, error_curves

    U, V = smooth_operator_data(80, 8)
    args, kw = (U[:60], V[:60], U[60:], V[60:], [20, 40]), dict(gamma=0.3, alpha=1e-6)
    res = error_curves(*args, seeds=(0, 1), return_predictions=True, **kw)
    assert len(res["predictions"]) == 2
    for seed, preds in zip((0, 1), res["predictions"], strict=True):
        single = error_curve(*args, random_state=seed, return_predictions=True, **kw)["predictions"]
        assert len(preds) == 2 and all(p.shape == (20, 8) for p in preds)
        for p, q in zip(preds, single, strict=True):
            np.testing.assert_array_equal(p, q)
    assert curve_dataset(res)["error"].dims == (
        "seed",
        "n_features",
    )  # predictions left out, as for one seed
    assert "predictions" not in error_curves(*args, seeds=(0,), **kw)


@pytest.mark.slow
def test_saved_curve_datasets_of_either_form_plot_with_their_slope(tmp_path):
    """The README saves curves with ``curve_dataset(c).to_netcdf``; the file read back lost its
    fitted slope from the legend. Fits are 0-d variables now (attributes were lost when curves of
    several training sizes were combined); files of the earlier form (fits as attributes) still
    plot, and a combined study is told how to pick one training size."""
    from rfol_dask import plotting
    from rfol_dask.curves import curve_dataset, error_curves

    U, V = smooth_operator_data(150, 8)
    c = error_curves(
        U[:100], V[:100], U[100:], V[100:], [8, 16, 32, 64], seeds=(0, 1), gamma=0.05, alpha=1e-3
    )
    assert np.isfinite(c["slope"]["slope"])
    new = curve_dataset(c)
    fits = [k for k in new.data_vars if k.split("_")[0] in ("slope", "time", "excess")]
    assert new["slope_slope"].dims == () and not set(fits) & set(new.attrs)
    old = new.drop_vars([*fits, "n_train"]).assign_attrs({k: new[k].item() for k in fits})
    old.to_netcdf(tmp_path / "old.nc")
    new.to_netcdf(tmp_path / "new.nc")
    with xr.open_dataset(tmp_path / "old.nc") as o, xr.open_dataset(tmp_path / "new.nc") as n:
        fig = plotting.curves_figure({"dict": c, "old": o, "new": n})
        assert plotting.plot_curves(tmp_path / "f.png", {"new": n}) == tmp_path / "f.png"
        study = xr.concat([n, n.assign_coords(n_train=200)], dim="n_train")
        with pytest.raises(ValueError, match=r"study\.sel\(n_train=M\)"):
            plotting.curves_figure({"study": study})
        plotting.curves_figure({"M = 100": study.sel(n_train=100)})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    want = f"(slope {c['slope']['slope']:.2f})"
    assert labels == [f"dict {want}", f"old {want}", f"new {want}"], labels
    assert (tmp_path / "f.png").stat().st_size > 0


def test_metrics_and_figures_match_dataarrays_by_label(tmp_path):
    from rfol_dask.metrics import r2_score, relative_l2_error
    from rfol_dask.plotting import prediction_figure

    rng = np.random.default_rng(0)
    y = np.linspace(0, 1, 9)
    truth = xr.DataArray(
        rng.standard_normal((20, 9)), dims=("sample", "y"), coords={"sample": np.arange(20), "y": y}
    )
    pred = truth + 0.1 * rng.standard_normal((20, 9))
    want = relative_l2_error(truth.values, pred.values)
    shuffled = pred.isel(sample=rng.permutation(20))
    flipped = truth.isel(y=slice(None, None, -1))  # a descending axis, as data often come
    assert relative_l2_error(truth, shuffled) == pytest.approx(want, rel=1e-12)
    assert relative_l2_error(flipped, pred) == pytest.approx(want, rel=1e-12)
    assert r2_score(flipped, shuffled) == pytest.approx(
        r2_score(truth.values, pred.values), rel=1e-12
    )
    with pytest.raises(
        ValueError, match="true and pred have different 'sample' labels: 20 only in true"
    ):
        relative_l2_error(truth, pred.assign_coords(sample=np.arange(100, 120)))
    unnamed = xr.DataArray(pred.values, dims=("sample", "dim_0"))  # other dim names: by position
    assert relative_l2_error(truth, unnamed) == pytest.approx(want, rel=1e-12)
    fig = prediction_figure(flipped[0], {"model": pred[0]})
    drawn = fig.axes[0].lines[1].get_ydata()  # the prediction, on the truth's (descending) axis
    np.testing.assert_array_equal(drawn, pred[0].values[::-1])


@pytest.mark.slow
def test_a_figure_path_without_suffix_returns_the_file_written(tmp_path):
    from rfol_dask.plotting import plot_prediction

    for path in (tmp_path / "fig", str(tmp_path / "fig2")):
        written = plot_prediction(path, np.arange(5.0), {"model": np.arange(5.0)})
        assert os.path.exists(written) and str(written).endswith(".png")
    assert (
        plot_prediction(tmp_path / "f.pdf", np.arange(5.0), {"m": np.arange(5.0)})
        == tmp_path / "f.pdf"
    )


@pytest.mark.slow
def test_figures_of_functions_on_named_grid_points(tmp_path):
    """Plotting the predictions of a model on named stations failed with 'could not convert string
    to float'; the stations are now drawn at their positions, named on the ticks."""
    from rfol_dask.plotting import example_figure, plot_prediction, prediction_figure

    U, V = stations()
    model = _rf().fit(U, V)
    pred = model.predict(U)
    fig = prediction_figure(U[0], {"scaled": U[0] * 1.1})
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "BER",
        "PAR",
        "ROM",
        "MAD",
        "OSL",
    ]
    assert plot_prediction(tmp_path / "p.png", V[0], {"rf": pred[0]}) == tmp_path / "p.png"
    two = xr.DataArray(
        np.arange(15.0).reshape(5, 3),
        dims=("station", "level"),
        coords={"station": U.station.values, "level": ["low", "mid", "top"]},
    )
    fig = example_figure(U[0], V[0], two, two * 1.1)
    assert [t.get_text() for t in fig.axes[2].get_yticklabels()] == ["low", "mid", "top"]
