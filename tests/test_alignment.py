"""xarray operands are matched by label: samples by their sample coordinate, grid dims by name."""

import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator


def _model():
    return RandomFeatureOperator(n_features=80, distribution="gaussian", gamma=0.05, random_state=0)


@pytest.fixture
def pair():
    U, V = smooth_operator_data(60, 16)
    labels = np.arange(100, 160)
    X = xr.DataArray(U, dims=("sample", "x"), coords={"sample": labels, "x": np.arange(16) / 16})
    Y = xr.DataArray(V, dims=("sample", "x"), coords={"sample": labels, "x": np.arange(16) / 16})
    return X, Y


@pytest.mark.parametrize("lazy", [False, True])
def test_reordered_samples_are_paired_by_label(pair, lazy):
    X, Y = pair
    perm = np.random.default_rng(1).permutation(len(Y))
    Yp = Y.isel(sample=perm)
    if lazy:
        X, Y, Yp = X.chunk({"sample": 25}), Y.chunk({"sample": 25}), Yp.chunk({"sample": 25})
    ref = _model().fit(X, Y)
    model = _model().fit(X, Yp)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
    assert model.score(X, Yp) == pytest.approx(ref.score(X, Y), rel=1e-12)
    # pairing by position (the old behaviour) would have given another model
    positional = _model().fit(X, Yp.values if not lazy else Yp.data)
    assert np.abs(positional.coef_ - ref.coef_).max() > 1e-3


def test_disjoint_or_partial_sample_labels_are_refused(pair):
    X, Y = pair
    with pytest.raises(
        ValueError, match=r"different 'sample' labels: 60 only in X .* 60 only in y.*xarray\.align"
    ):
        _model().fit(X, Y.assign_coords(sample=Y["sample"].values + 1000))
    with pytest.raises(
        ValueError,
        match=r"10 only in X \(e\.g\. \[150, 151, 152\]\), "
        r"10 only in y \(e\.g\. \[90, 91, 92\]\)",
    ):
        _model().fit(X, Y.assign_coords(sample=Y["sample"].values - 10))
    model = _model().fit(X, Y)
    with pytest.raises(ValueError, match="different 'sample' labels"):
        model.score(X, Y.assign_coords(sample=Y["sample"].values + 1000))
    dup = Y.assign_coords(sample=np.r_[Y["sample"].values[:-1], 100])
    with pytest.raises(ValueError, match="duplicated 'sample' labels"):
        _model().fit(X, dup)
    # the remedy the message gives works: the common samples, paired by label
    Xa, Ya = xr.align(X, Y.assign_coords(sample=Y["sample"].values - 10), join="inner")
    assert _model().fit(Xa, Ya).n_features_in_ == 16 and len(Xa) == 50


@pytest.fixture
def grid2d():
    rng = np.random.default_rng(0)
    x, y = np.linspace(0, 1, 6), np.linspace(0, 2, 5)
    U = rng.standard_normal((80, 6, 5))
    V = np.cumsum(U, axis=1) + 0.2 * U**2
    coords = {"x": x, "y": y}
    return (
        xr.DataArray(U, dims=("sample", "x", "y"), coords=coords),
        xr.DataArray(V, dims=("sample", "x", "y"), coords=coords),
    )


@pytest.mark.parametrize("lazy", [False, True])
def test_grid_dims_are_matched_by_name(grid2d, lazy):
    X, Y = grid2d
    model = RandomFeatureOperator(
        n_features=200, distribution="gaussian", gamma=0.02, random_state=0
    ).fit(X, Y)
    Xt = X[:20].transpose("sample", "y", "x")
    if lazy:
        Xt = Xt.chunk({"sample": 7})
    ref = model.predict(X[:20])
    pred = model.predict(Xt)
    assert pred.dims == ("sample", "x", "y")
    np.testing.assert_allclose(np.asarray(pred), ref.values, rtol=1e-12, atol=1e-12)
    # sample need not come first either, and score matches y by name too
    np.testing.assert_allclose(
        model.predict(X[:20].transpose("y", "sample", "x")).values, ref.values, atol=1e-12
    )
    assert model.score(Xt, Y[:20].transpose("sample", "y", "x")) == pytest.approx(
        model.score(X[:20], Y[:20])
    )


def test_unknown_grid_dims_are_refused(grid2d):
    X, Y = grid2d
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(X, Y)
    with pytest.raises(
        ValueError,
        match=r"dims \('sample', 'x', 'z'\) but the model reads \('sample', 'x', 'y'\): "
        r"X.rename\(\) its dims \['z'\] to \['y'\]",
    ):
        model.predict(X.rename(y="z"))
    # numpy keeps its positional meaning
    np.testing.assert_allclose(model.predict(X.values[:3]), model.predict(X[:3]).values)


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("order", ["reversed", "shuffled"])
@pytest.mark.slow
def test_grid_dims_in_another_order_are_matched_by_coordinate(pair, lazy, order):
    # a descending axis (latitude 90 -> -90) or a shuffled one is read in increasing coordinate
    # order, at fit, predict and score: the same model and predictions as the sorted data
    X, Y = pair
    idx = np.arange(16)[::-1] if order == "reversed" else np.random.default_rng(2).permutation(16)
    Xo, Yo = X.isel(x=idx), Y.isel(x=idx)
    if lazy:
        X, Y, Xo, Yo = (a.chunk({"sample": 25}) for a in (X, Y, Xo, Yo))
    ref = _model().fit(X, Y)
    pred = ref.predict(X)
    np.testing.assert_allclose(
        ref.predict(Xo), pred, rtol=1e-8, atol=1e-12
    )  # was: positional, wrong
    model = _model().fit(Xo, Yo)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-8, atol=1e-12)
    out = model.predict(Xo)
    assert np.all(np.diff(out["x"].values) > 0)  # labelled, in increasing order
    np.testing.assert_allclose(out, pred, rtol=1e-8, atol=1e-12)
    assert model.score(Xo, Yo) == pytest.approx(ref.score(X, Y), rel=1e-9)
    assert ref.score(Xo, Yo) == pytest.approx(ref.score(X, Y), rel=1e-9)


@pytest.mark.parametrize("which", ["input", "output"])
def test_a_model_fitted_by_position_on_descending_coordinates_refuses_to_predict(pair, which):
    # an older version kept descending coordinates and read the data by position: such a
    # model (its coordinates as saved then) would now predict on reordered data, silently wrong
    X, Y = pair
    model = _model().fit(X, Y)
    coords = getattr(model, f"{which}_coords_")
    coords["x"] = coords["x"][::-1]
    with pytest.raises(
        ValueError, match=f"fitted on {which} coordinates that do not increase along 'x'"
    ):
        model.predict(X)


@pytest.mark.parametrize("where", ["first", "last"])
def test_metrics_pair_samples_by_label_when_grid_dims_are_named_differently(pair, where):
    # a model fitted on arrays predicts with grid dim 'dim_0'; the truth has 'x': the grids pair
    # by position, the samples still by label (they were paired by position: a shuffled truth
    # gave a relative error of 1.5 instead of 0.4, silently)
    from rfol_dask.metrics import r2_score, relative_l2_error

    X, Y = pair
    model = _model().fit(X.values[:40], Y.values[:40])
    pred = model.predict(X[40:])
    assert pred.dims == ("sample", "dim_0")
    if where == "last":
        pred = pred.transpose("dim_0", "sample")
    shuffled = Y[40:].isel(sample=np.random.default_rng(2).permutation(20))
    ref = relative_l2_error(Y.values[40:], pred.transpose("sample", "dim_0").values)
    assert relative_l2_error(shuffled, pred) == pytest.approx(ref, rel=1e-12)
    assert r2_score(shuffled, pred) == pytest.approx(
        r2_score(Y.values[40:], model.predict(X.values[40:])), rel=1e-12
    )
    with pytest.raises(ValueError, match="different 'sample' labels"):
        relative_l2_error(shuffled.assign_coords(sample=shuffled["sample"].values + 1000), pred)


def test_labels_on_one_side_only_out_of_order_are_warned_about(pair):
    # a plain-array X with a shuffled labelled y was paired by position without a word
    X, Y = pair
    Yp = Y.isel(sample=np.random.default_rng(3).permutation(len(Y)))
    with pytest.warns(
        UserWarning,
        match=r"y's sample labels are not in increasing order but X has none, so they are "
        r"paired by position",
    ):
        _model().fit(X.values, Yp)
    with pytest.warns(
        UserWarning, match=r"X's sample labels are not in increasing order but y has none"
    ):
        _model().fit(X.isel(sample=np.arange(59, -1, -1)), Y.values)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _model().fit(X.values, Y)  # in order: nothing to say
