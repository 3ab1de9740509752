"""Error-vs-N curves grown feature block by feature block (rfol_dask.curves)."""

import numpy as np
import pytest
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator
from rfol_dask.curves import doubling, error_curve, error_curves, fit_slope, saturation_index
from rfol_dask.features import draw_frequencies, feature_map
from rfol_dask.metrics import relative_l2_error
from rfol_dask.solve import fit_numpy


@pytest.fixture(scope="module")
def data():
    U, V = smooth_operator_data(150, 24, seed=0)
    Ut, Vt = smooth_operator_data(60, 24, seed=1)
    return U, V, Ut, Vt


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize(
    "distribution,fit_intercept", [("cauchy", True), ("gaussian", True), ("cauchy", False)]
)
@pytest.mark.slow
def test_grown_curve_equals_separate_fits(data, distribution, fit_intercept):
    U, V, Ut, Vt = data
    omega, b = draw_frequencies(U.shape[1], 640, distribution, 0.3, random_state=7)
    checkpoints = [
        100,
        150,
        320,
        640,
    ]  # below, at and above M = 150; blocks of 70 cross the checkpoints
    res = error_curve(
        U,
        V,
        Ut,
        Vt,
        checkpoints,
        frequencies=(omega, b),
        alpha=1e-4,
        block_size=70,
        fit_intercept=fit_intercept,
        return_predictions=True,
    )
    assert res["n_features"].tolist() == checkpoints
    assert np.all(res["fit_time"] > 0) and np.all(res["predict_time"] > 0)
    for k, N in enumerate(checkpoints):
        coef, intercept = fit_numpy(
            U, V, omega[:, :N], b[:N], alpha=1e-4, fit_intercept=fit_intercept, solver="dual"
        )
        expected = feature_map(Ut, omega[:, :N], b[:N]) @ coef + intercept
        assert _rel(res["predictions"][k], expected) < 1e-8
        assert res["error"][k] == pytest.approx(relative_l2_error(Vt, expected), rel=1e-8)


def test_every_checkpoint_is_the_operator_with_the_same_seed(data):
    U, V, Ut, Vt = data
    res = error_curve(
        U,
        V,
        Ut,
        Vt,
        [200, 400],
        distribution="cauchy",
        gamma=0.5,
        alpha=1e-6,
        random_state=3,
        return_predictions=True,
    )
    for k, N in enumerate([200, 400]):  # the frequency draw is nested in N
        model = RandomFeatureOperator(
            n_features=N, gamma=0.5, alpha=1e-6, random_state=3, solver="dual"
        ).fit(U, V)
        assert _rel(res["predictions"][k], model.predict(Ut)) < 1e-8


@pytest.mark.slow
def test_error_curves_over_seeds_are_the_single_seed_curves(data):
    U, V, Ut, Vt = data
    res = error_curves(U, V, Ut, Vt, doubling(100, 800), seeds=(0, 1), gamma=0.3, alpha=1e-6)
    assert res["error"].shape == res["fit_time"].shape == res["predict_time"].shape == (2, 4)
    assert res["n_features"].tolist() == [100, 200, 400, 800] and res["seeds"].tolist() == [0, 1]
    for row, seed in enumerate((0, 1)):  # row s is the curve of random_state s
        single = error_curve(
            U, V, Ut, Vt, doubling(100, 800), gamma=0.3, alpha=1e-6, random_state=seed
        )
        np.testing.assert_allclose(res["error"][row], single["error"], rtol=1e-10)
    assert not np.allclose(res["error"][0], res["error"][1])  # the seeds draw different features
    # a generator of seeds is read once; no seed at all is a clear error
    assert error_curves(U, V, Ut, Vt, [100], seeds=iter((0, 1)), gamma=0.3)["seeds"].tolist() == [
        0,
        1,
    ]
    with pytest.raises(ValueError, match="at least one seed"):
        error_curves(U, V, Ut, Vt, [100], seeds=[], gamma=0.3)


def test_given_frequencies_take_one_seed_the_label_of_their_curve(data):
    """With frequencies the seeds change nothing: error_curves returned identical curves labelled
    with the seeds 0..4, as if five draws had been averaged. Several seeds are refused; one labels
    the curve of those frequencies."""
    U, V, Ut, Vt = data
    freq = draw_frequencies(U.shape[1], 200, "cauchy", 0.3, random_state=7)
    for seeds in ((0, 1), range(5)):
        with pytest.raises(
            ValueError,
            match=r"frequencies fix the draw whatever the seed: seeds \[0, 1.*\] would give "
            rf"{len(seeds)} identical curves labelled as different draws; pass one "
            r"seed",
        ):
            error_curves(U, V, Ut, Vt, [100, 200], seeds=seeds, frequencies=freq)
    res = error_curves(U, V, Ut, Vt, [100, 200], seeds=(7,), frequencies=freq, alpha=1e-6)
    assert res["seeds"].tolist() == [7] and res["error"].shape == (1, 2)
    single = error_curve(U, V, Ut, Vt, [100, 200], frequencies=freq, alpha=1e-6)
    np.testing.assert_allclose(res["error"][0], single["error"], rtol=1e-10)


@pytest.mark.slow
def test_error_falls_with_n_on_an_easy_problem():
    # a smooth 5-mode operator, narrow Gaussian features, N <= M: every doubling of N lowers the
    # test error by at least a quarter on every seed (measured: 29-60 %), down to about 0.1 %
    U, V = smooth_operator_data(400, 24, seed=0)
    Ut, Vt = smooth_operator_data(100, 24, seed=1)
    res = error_curves(
        U,
        V,
        Ut,
        Vt,
        doubling(25, 400),
        seeds=(0, 1, 2),
        distribution="gaussian",
        gamma=0.03,
        alpha=1e-8,
    )
    assert np.all(np.diff(np.log(res["error"]), axis=1) < np.log(0.75))
    assert res["error"][:, -1].max() < 0.005
    assert res["slope"]["n_points"] == 5 and res["slope"]["saturated_at"] is None
    assert res["slope"]["slope"] < -1.0
    # the slope is that of the geometric mean over the seeds
    assert res["slope"] == fit_slope(res["n_features"], np.exp(np.log(res["error"]).mean(axis=0)))


def test_fit_time_counts_the_blocks_up_to_n_and_one_solve(data, monkeypatch):
    """A clock that ticks once per reading: each block and each checkpoint solve then costs a fixed
    number of ticks, so the fit time at N must grow exactly with the number of blocks up to N
    (the earlier checkpoints' solves are not charged to later ones)."""
    import rfol_dask.curves as curves_module

    U, V, Ut, Vt = data
    ticks = iter(range(10**6))
    monkeypatch.setattr(curves_module.time, "perf_counter", lambda: float(next(ticks)))
    checkpoints = [50, 100, 300, 350]
    res = error_curve(
        U, V, Ut, Vt, checkpoints, gamma=0.3, alpha=1e-6, random_state=0, block_size=50
    )
    blocks = np.array(checkpoints) // 50  # blocks of 50 features up to each checkpoint
    per_block = np.diff(res["fit_time"]) / np.diff(blocks)
    assert np.all(per_block > 0) and np.all(per_block == per_block[0])
    per_block_pred = np.diff(res["predict_time"]) / np.diff(blocks)
    assert np.all(per_block_pred > 0) and np.all(per_block_pred == per_block_pred[0])


def test_bad_checkpoints(data):
    U, V, Ut, Vt = data
    with pytest.raises(ValueError, match="increasing"):
        error_curve(U, V, Ut, Vt, [200, 100])
    with pytest.raises(ValueError, match="frequencies"):
        error_curve(U, V, Ut, Vt, [100], frequencies=draw_frequencies(3, 100, random_state=0))


def test_doubling_refuses_a_start_below_one_and_a_stop_below_start():
    assert doubling(250, 1000).tolist() == [250, 500, 1000] and doubling(250, 250).tolist() == [250]
    assert doubling(250.0, 6.4e4)[-1] == 64000  # integral floats are integers
    for start in (0, -1):  # 0 and negatives doubled stay <= stop: the loop never ended
        with pytest.raises(ValueError, match=f"start must be >= 1, got {start}"):
            doubling(start, 1000)
    with pytest.raises(ValueError, match=r"stop must be >= start, got doubling\(250, 100\)"):
        doubling(250, 100)  # was [250], above stop
    with pytest.raises(ValueError, match="start must be an integer, got 2.5"):
        doubling(2.5, 100)


def test_curve_arguments_must_be_integers_not_truncated(data):
    U, V, Ut, Vt = data
    with pytest.raises(
        ValueError, match="block_size must be >= 1, got 0"
    ):  # was numpy's "Maximum allowed size"
        error_curve(U, V, Ut, Vt, [10, 20], block_size=0, gamma=0.3)
    with pytest.raises(
        ValueError, match=r"n_features must be integers, got \[10.9, 20.5\]"
    ):  # was [10, 20]
        error_curve(U, V, Ut, Vt, [10.9, 20.5], gamma=0.3)
    with pytest.raises(TypeError, match="n_features must be integers"):
        error_curve(U, V, Ut, Vt, ["10", "20"], gamma=0.3)
    with pytest.raises(
        ValueError, match=r"seeds must be integers, got \[0.5, 1.7\]"
    ):  # was seeds 0 and 1
        error_curves(U, V, Ut, Vt, [10, 20], seeds=[0.5, 1.7], gamma=0.3)
    res = error_curves(
        U, V, Ut, Vt, np.array([10.0, 20.0]), seeds=np.arange(2), gamma=0.3, block_size=np.int64(7)
    )
    assert res["n_features"].tolist() == [10, 20] and res["seeds"].tolist() == [0, 1]


def test_slope_of_a_known_power_law_with_saturation():
    N = doubling(250, 64000)
    err = np.maximum(
        3.0 * N**-0.5, 0.01
    )  # N^-1/2 until it saturates at 0.01 (N = 90000 > 64000: none)
    fit = fit_slope(N, err)
    assert fit["slope"] == pytest.approx(-0.5, abs=1e-12)
    assert fit["intercept"] == pytest.approx(np.log(3.0), abs=1e-12)
    assert fit["n_points"] == len(N) and fit["saturated_at"] is None

    err = np.maximum(
        3.0 * N**-0.5, 0.05
    )  # saturates between N = 2000 (0.067) and 4000 (0.047 -> 0.05)
    assert saturation_index(N, err) == 5  # N = 8000: the first point that is not at least 7 % lower
    fit = fit_slope(N, err)
    assert fit["saturated_at"] == 8000 and fit["n_points"] == 5
    assert -0.5 < fit["slope"] < -0.45  # the last point before saturation is clipped a little

    rng = np.random.default_rng(0)
    noisy = 2.0 * N**-0.4 * np.exp(0.03 * rng.standard_normal(len(N)))
    assert fit_slope(N, noisy)["slope"] == pytest.approx(-0.4, abs=0.05)

    times = 1e-3 * N**0.8
    assert fit_slope(N, times, min_decay=None)["slope"] == pytest.approx(0.8, abs=1e-12)
    assert np.isnan(fit_slope(N, np.full(len(N), 0.1))["slope"])  # flat from the start: no slope


def test_excess_decay_towards_a_floor():
    from rfol_dask.curves import fit_excess

    N = np.array([250, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000], float)
    err = 0.03 + 2.0 * N**-0.5
    fit = fit_excess(N, err, start_at=1000)
    assert fit["n_points"] == 7 and fit["from_n"] == 1000
    np.testing.assert_allclose([fit["floor"], fit["c"], fit["p"]], [0.03, 2.0, 0.5], rtol=1e-4)
    assert np.isnan(fit_excess(N, err, start_at=20000)["p"])  # three points: too few


def test_the_default_curve_is_the_default_model_and_saves_as_a_dataset(tmp_path):
    import xarray as xr

    from rfol_dask.curves import curve_dataset

    U, V = smooth_operator_data(160, 12)
    (U, Ut), (V, Vt) = (U[:120], U[120:]), (V[:120], V[120:])
    curve = error_curve(U, V, Ut, Vt, [50, 200], random_state=0)  # gamma="median", as the model
    model = RandomFeatureOperator(n_features=200, random_state=0, solver="dual").fit(U, V)
    assert curve["gamma"] == model.gamma_
    assert curve["error"][-1] == pytest.approx(relative_l2_error(Vt, model.predict(Ut)), rel=1e-8)
    res = error_curves(U, V, Ut, Vt, [50, 200], seeds=(0, 1))
    curve_dataset(res).to_netcdf(tmp_path / "curves.nc")
    back = xr.open_dataset(tmp_path / "curves.nc")
    np.testing.assert_array_equal(back["error"].values, res["error"])
    assert (
        back["error"].dims == ("seed", "n_features")
        and float(back["slope_slope"]) == res["slope"]["slope"]
    )
    assert int(back["n_train"]) == 120 and back["slope_slope"].dims == ()
    assert (
        curve_dataset(curve)["error"].dims == ("n_features",)
        and int(curve_dataset(curve)["n_train"]) == 120
    )


def test_nan_in_the_test_outputs_is_an_error_not_a_nan_curve():
    from rfol_dask.curves import error_curves

    rng = np.random.default_rng(0)
    U, Ut = rng.standard_normal((40, 5)), rng.standard_normal((10, 5))
    V, Vt = np.sin(U), np.sin(Ut)
    Vt[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"V_test contains NaN or infinity .*first bad sample: 3"):
        error_curves(U, V, Ut, Vt, [10, 20], seeds=[0, 1], gamma=0.5)


# ------------------------------------------------------------------ a study over training sizes

_SIZES = (60, 120)


@pytest.fixture(scope="module")
def study_curves():
    """Curves of two training sizes whose fits differ: a combined study keeps the fits of both."""
    from rfol_dask.curves import curve_dataset

    U, V = smooth_operator_data(200, 8)
    results = [
        error_curves(
            U[:M], V[:M], U[150:], V[150:], [8, 16, 32, 64], seeds=(0, 1), gamma=0.05, alpha=1e-3
        )
        for M in _SIZES
    ]
    assert results[0]["slope"]["slope"] != results[1]["slope"]["slope"]
    return results, [curve_dataset(r) for r in results]


def _check_study(study, results):
    """Every fit of ``study`` (curves combined along ``n_train``) is its own curve's."""
    np.testing.assert_array_equal(study["n_train"].values, _SIZES)
    assert study["error"].dims == ("n_train", "seed", "n_features")
    for fit in ("slope", "time_slope", "excess"):
        for key in results[0][fit]:
            want = [np.nan if r[fit][key] is None else r[fit][key] for r in results]
            assert study[f"{fit}_{key}"].dims == ("n_train",)
            np.testing.assert_array_equal(
                study[f"{fit}_{key}"].values, want, err_msg=f"{fit}_{key}"
            )
    for M, r in zip(_SIZES, results):
        np.testing.assert_array_equal(study["error"].sel(n_train=M).values, r["error"])


def test_curves_of_several_training_sizes_concatenate_with_their_own_fits(study_curves):
    """The slope fits were Dataset attributes: ``xr.concat`` kept the first curve's, which then
    described every training size of the study."""
    import xarray as xr

    results, curves = study_curves
    _check_study(xr.concat(curves, dim="n_train"), results)


def test_saved_curves_open_together_with_their_own_fits(study_curves, tmp_path):
    """``open_mfdataset`` of saved curves kept the first file's attributes."""
    import xarray as xr

    results, curves = study_curves
    paths = [tmp_path / f"curve_{M}.nc" for M in _SIZES]
    for c, path in zip(curves, paths):
        c.to_netcdf(path)
    with xr.open_mfdataset(paths, combine="nested", concat_dim="n_train") as study:
        _check_study(study.load(), results)


def test_curves_appended_to_a_zarr_store_keep_their_own_fits(study_curves, tmp_path):
    """``to_zarr(append_dim=...)`` left the last curve's attributes on the whole store."""
    import xarray as xr

    results, curves = study_curves
    store = tmp_path / "study.zarr"
    curves[0].expand_dims("n_train").to_zarr(store, mode="w")
    curves[1].expand_dims("n_train").to_zarr(store, append_dim="n_train")
    with xr.open_zarr(store) as study:
        _check_study(study.load(), results)


@pytest.mark.slow
def test_append_curve_grows_a_study_and_refuses_curves_it_would_relabel(study_curves, tmp_path):
    """``to_zarr(append_dim="n_train")`` of a curve with other checkpoints or seeds kept the store's
    ``n_features`` / ``seed`` coordinates and wrote the new values under them (and an earlier
    checkpoint ladder's labels were replaced by the new one's): the study was mislabelled without
    an error. ``append_curve`` checks them first and leaves the store as it was."""
    import xarray as xr

    from rfol_dask.curves import append_curve, curve_dataset

    results, curves = study_curves
    store = tmp_path / "study.zarr"
    append_curve(store, results[0])  # a result dict, or its curve_dataset
    _check_study(append_curve(store, curves[1]).load(), results)
    U, V = smooth_operator_data(200, 8)
    for what, checkpoints, seeds in (
        ("n_features", [10, 20, 40, 80], (0, 1)),
        ("seed", [8, 16, 32, 64], (2, 3)),
    ):
        curve = error_curves(
            U[:90], V[:90], U[150:], V[150:], checkpoints, seeds=seeds, gamma=0.05, alpha=1e-3
        )
        with pytest.raises(ValueError, match=f"the curve's {what} .* differ from the study's"):
            append_curve(store, curve)
    with pytest.raises(ValueError, match="already holds a curve of n_train = 120"):
        append_curve(store, curves[1])
    one = error_curve(U[:90], V[:90], U[150:], V[150:], [8, 16, 32, 64], gamma=0.05, alpha=1e-3)
    with pytest.raises(ValueError, match="curves of one kind"):
        append_curve(store, one)
    with pytest.raises(ValueError, match="no training size"):
        append_curve(store, curve_dataset(results[0]).drop_vars("n_train"))
    with xr.open_zarr(store) as study:  # nothing refused was written
        _check_study(study.load(), results)
    xr.Dataset({"input": ("sample", np.ones(3))}).to_zarr(tmp_path / "data.zarr")
    (tmp_path / "folder").mkdir()
    for path in ("data.zarr", "folder"):
        with pytest.raises(ValueError, match="no curves along n_train|not a Zarr store of curves"):
            append_curve(tmp_path / path, results[0])
    assert not any((tmp_path / "folder").iterdir())


def test_error_curve_refuses_a_missing_chunk_of_a_zarr_store(tmp_path):
    """error_curve read a DataArray of xr.open_zarr whose chunk file was deleted as its fill
    value (NaN here, 0 in zarr's own stores), not as a damaged store."""
    import xarray as xr
    import zarr

    U, V = smooth_operator_data(40, 8)
    path = tmp_path / "d.zarr"
    xr.Dataset({"input": (("sample", "x"), U), "output": (("sample", "y"), V)}).chunk(
        {"sample": 10}
    ).to_zarr(path, consolidated=False)
    (
        path / "output" / zarr.open_array(str(path / "output")).metadata.encode_chunk_key((3, 0))
    ).unlink()
    ds = xr.open_zarr(path, consolidated=False)
    with pytest.raises(
        ValueError,
        match=r"1 chunk\(s\) of variable 'output' are missing from the store \(first: "
        r"chunk \(3, 0\), samples 30-39",
    ):
        error_curve(
            ds["input"][:30],
            ds["output"][:30],
            ds["input"][30:],
            ds["output"][30:],
            [20],
            gamma=0.5,
        )


def test_a_saved_curve_records_the_settings_that_made_it(tmp_path):
    """A curve dataset held the errors, gamma and seeds but not the law, nu, alpha, intercept,
    input metric or error metric, nor the seed of a single curve drawn with random_state=None:
    a saved curve could not be made again, and curves of other settings were not told apart."""
    import xarray as xr

    from rfol_dask.curves import curve_dataset

    U, V = smooth_operator_data(90, 8)
    kw = dict(distribution="student_t", nu=3.0, alpha=1e-4, pca_power=1.0, fit_intercept=False)
    one = error_curve(
        U[:60], V[:60], U[60:], V[60:], [16, 32], **kw
    )  # random_state=None: a fresh seed
    curve_dataset(one).to_netcdf(tmp_path / "one.nc")
    back = xr.open_dataset(tmp_path / "one.nc")
    assert back.attrs == {
        "distribution": "student_t",
        "nu": 3.0,
        "alpha": 1e-4,
        "fit_intercept": 0,
        "pca_power": 1.0,
        "gamma_rule": "median",
        "error": "relative_l2_error",
        "n_test": 30,
    }
    again = error_curve(
        U[:60], V[:60], U[60:], V[60:], [16, 32], random_state=int(back["seed"]), **kw
    )
    np.testing.assert_array_equal(again["error"], back["error"].values)
    many = curve_dataset(
        error_curves(U[:60], V[:60], U[60:], V[60:], [16, 32], seeds=(0, 1), gamma=0.5)
    )
    assert (
        many.attrs["gamma_rule"] == "given"
        and many.attrs["distribution"] == "cauchy"
        and "nu" not in many.attrs
    )


@pytest.mark.slow
def test_append_curve_refuses_a_curve_of_other_settings(study_curves, tmp_path):
    """A Gaussian curve at one alpha was appended beside Cauchy curves at another without an error:
    the study's curves of different training sizes were of different models."""
    import xarray as xr

    from rfol_dask.curves import append_curve

    results, _ = study_curves
    store = tmp_path / "study.zarr"
    append_curve(store, results[0])
    U, V = smooth_operator_data(200, 8)
    other = error_curves(
        U[:90],
        V[:90],
        U[150:],
        V[150:],
        [8, 16, 32, 64],
        seeds=(0, 1),
        gamma=0.05,
        alpha=1e-3,
        distribution="gaussian",
    )
    with pytest.raises(
        ValueError, match=r"other settings .*'distribution': \('gaussian', 'cauchy'\)"
    ):
        append_curve(store, other)
    with xr.open_zarr(store) as study:
        assert study.sizes["n_train"] == 1 and study.attrs["distribution"] == "cauchy"
    _check_study(append_curve(store, results[1]).load(), results)  # same settings: appended


def test_xarray_plots_of_a_saved_curve_name_their_quantities_and_units(tmp_path):
    """``ds.fit_time.plot.line(x="n_features")`` (curve_dataset's own suggestion) labelled its axes
    with the bare variable names "fit_time" and "n_features", without the unit of the times."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import xarray as xr

    from rfol_dask.curves import curve_dataset

    U, V = smooth_operator_data(60, 6)
    curve_dataset(
        error_curves(U[:40], V[:40], U[40:], V[40:], [8, 16], seeds=(0, 1), gamma=0.5)
    ).to_netcdf(tmp_path / "c.nc")
    with xr.open_dataset(tmp_path / "c.nc") as ds:
        for name, want in (("fit_time", "fit time [s]"), ("error", "relative test error")):
            fig = plt.figure()
            ds[name].plot.line(x="n_features", xscale="log")
            assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == (
                "random features N",
                want,
            )
            plt.close(fig)


def test_a_study_of_single_curves_keeps_each_curves_seed(tmp_path):
    """Single curves drawn with other seeds (random_state=None draws a fresh one) go into one study,
    each with its own seed."""
    from rfol_dask.curves import append_curve

    U, V = smooth_operator_data(150, 8)
    results = [
        error_curve(U[:M], V[:M], U[100:], V[100:], [8, 16], gamma=0.05, random_state=seed)
        for M, seed in ((40, 1), (60, None))
    ]
    study = None
    for r in results:
        study = append_curve(tmp_path / "study.zarr", r)
    np.testing.assert_array_equal(study["seed"].values, [r["seed"] for r in results])
    assert study["seed"].dims == ("n_train",)
