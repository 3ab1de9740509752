"""Model selection: RandomFeatureOperatorCV and KernelOperatorCV."""

import inspect
import warnings

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data
from sklearn.model_selection import KFold
from sklearn.utils.estimator_checks import parametrize_with_checks

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.features import draw_frequencies
from rfol_dask.metrics import relative_l2_error
from rfol_dask.selection import DEFAULT_REFINE
from rfol_dask.stages import FINE_EXTEND
from rfol_dask.tuning import frequency_scale, median_gamma

SMALL = dict(gammas=(0.25, 1.0, 4.0), alphas=(1e-6, 1e-3, 1e-1), coarse=None)
STAGE_KEYS = set(RandomFeatureOperatorCV._stage_defaults)
REFIT_KEYS = set(RandomFeatureOperatorCV._refit_keys)


def staged(**kw):
    """The keyword arguments with the stage settings among them grouped in ``stages``, and the
    refit's in ``refit`` (the tests combine them from shared dicts)."""
    stages = {**kw.pop("stages", {}), **{k: kw.pop(k) for k in list(kw) if k in STAGE_KEYS}}
    refit = {k: kw.pop(k) for k in list(kw) if k in REFIT_KEYS}
    if refit and kw.get("refit", True) is not False:
        kw["refit"] = refit
    return dict(kw, stages=stages) if stages else kw


def _nonlinear_data(M=200, seed=0):
    """A nonlinear operator whose best gamma is far from the median heuristic."""
    U, V = smooth_operator_data(M, 24, seed=seed)
    return U, np.sin(3 * V) + V


@pytest.mark.parametrize(
    "law, path",
    [
        ("cauchy", "eigh"),
        ("gaussian", "eigh"),
        ("student_t", "eigh"),
        ("rational_quadratic", "eigh"),
        ("cauchy", "cholesky"),
    ],
)
@pytest.mark.slow
def test_path_scores_equal_brute_force_fits(law, path):
    U, V = _nonlinear_data(150)
    cv = RandomFeatureOperatorCV(
        **staged(
            n_features=(128, 300),
            distributions=(law,),
            nu=3.0,
            random_state=7,
            refit=False,
            alpha_path=path,
            **SMALL,
        )
    ).fit(U, V)
    res = cv.cv_results_
    assert len(res["alpha"]) == 3 * 2 * 3 and set(res["stage"]) == {"full"}
    train, valid = np.arange(120), np.arange(120, 150)  # the default split: the last 20 %
    for k in range(len(res["alpha"])):
        model = RandomFeatureOperator(
            n_features=int(res["n_features"][k]),
            distribution=law,
            nu=3.0,
            gamma=float(res["gamma"][k]),
            alpha=float(res["alpha"][k]),
            solver="dual",
            random_state=7,
        ).fit(U[train], V[train])
        brute = relative_l2_error(V[valid], model.predict(U[valid]))
        assert res["mean_relative_l2"][k] == pytest.approx(brute, rel=1e-8)
    assert (
        cv.median_scales_[law]
        == RandomFeatureOperator(distribution=law, nu=3.0, random_state=7).fit(U, V).gamma_
    )


@pytest.mark.parametrize("seed", [3, None, np.random.default_rng(5), np.random.RandomState(5)])
@pytest.mark.slow
def test_refitted_winner_uses_the_searched_frequencies(seed):
    # the default random_state=None and Generator seeds included: the search's seed is one the
    # refitted estimator accepts (scikit-learn's [0, 2**32)), and its draw is the search's
    U, V = _nonlinear_data(150)
    cv = RandomFeatureOperatorCV(**staged(n_features=300, random_state=seed, **SMALL)).fit(U, V)
    assert 0 <= cv.random_state_ < 2**32 and cv.best_estimator_.random_state == cv.random_state_
    best = cv.best_estimator_
    assert {k: best.get_params()[k] for k in cv.best_params_} == cv.best_params_
    law, gamma = cv.best_params_["distribution"], cv.best_params_["gamma"]
    base, b = draw_frequencies(U.shape[1], 300, law, 1.0, None, cv.random_state_)
    np.testing.assert_allclose(best.omega_, frequency_scale(law, gamma) * base, rtol=1e-14)
    # the phases of the centred inputs: the drawn ones, turned by the centre's phase
    turned = b + best.input_centre_ @ (frequency_scale(law, gamma) * base)
    np.testing.assert_allclose(np.exp(1j * best.b_), np.exp(1j * turned), atol=1e-12)


@pytest.mark.slow
def test_search_picks_a_sensible_model_and_beats_the_defaults():
    U, V = _nonlinear_data(600)
    Ut, Vt = U[500:], V[500:]  # held out: never given to the search
    U, V = U[:500], V[:500]
    cv = RandomFeatureOperatorCV(**staged(n_features=400, coarse=0.5, random_state=0)).fit(U, V)
    res = cv.cv_results_
    # coarse and fine: 200 of the 400 training rows (fine=0.5), then the fine winner at full size
    assert set(res["stage"]) == {"coarse", "fine", "final"}
    assert set(res["n_train_rows"][res["stage"] == "coarse"]) == {200}
    assert set(res["n_train_rows"][res["stage"] == "fine"]) == {200}
    assert set(res["n_train_rows"][res["stage"] == "final"]) == {400}
    # ... on 256 features (coarse and fine: half of N, at least 256), the final stage on all 400
    assert set(res["n_features"][res["stage"] != "final"]) == {256}
    assert set(res["n_features"][res["stage"] == "final"]) == {400}
    err_cv = relative_l2_error(Vt, cv.predict(Ut))
    errs = {}
    for gamma in ("median", 1.0):
        default = RandomFeatureOperator(n_features=400, gamma=gamma, random_state=0).fit(U, V)
        errs[gamma] = relative_l2_error(Vt, default.predict(Ut))
    print(err_cv, errs, cv.best_params_)
    assert err_cv < 0.5 * min(errs.values())
    # the fine stage is the coarse winner's law, around its gamma; the final stage is the fine
    # stage's best gamma (and twice it where that ties on the fine rows), and the best is the
    # final stage's best
    coarse = res["stage"] == "coarse"
    top = np.argmax(res["mean_test_score"][coarse])
    assert cv.best_params_["distribution"] == res["family"][coarse][top]
    fine, final = res["stage"] == "fine", res["stage"] == "final"
    gamma = res["gamma"][fine][np.nanargmax(res["mean_test_score"][fine])]
    assert gamma in set(res["gamma"][final]) and set(res["gamma"][final]) <= {gamma, 2 * gamma}
    # (NaN: alphas the fine and final stages left unsolved, far from the best so far)
    assert cv.best_score_ == np.nanmax(res["mean_test_score"][final])
    assert res["rank_test_score"][final][np.nanargmax(res["mean_test_score"][final])] == 1
    df = res.to_dataframe()
    assert len(df) == len(res["alpha"]) and "mean_relative_l2" in df
    table = res.to_xarray()
    assert table.sizes["candidate"] == len(res["alpha"]) and set(table.data_vars) == set(res)
    np.testing.assert_array_equal(table["mean_relative_l2"].values, res["mean_relative_l2"])
    assert list(table["stage"].values) == list(res["stage"])


def test_a_fine_stage_on_all_rows_but_half_the_features_is_followed_by_the_full_model():
    U, V = _nonlinear_data(250)  # 200 training rows: the fine stage keeps them all
    cv = RandomFeatureOperatorCV(n_features=1000, distributions=("gaussian",), random_state=0)
    res = cv.fit(U, V).cv_results_.to_dataframe()
    for stage, n_features in (("coarse", 256), ("fine", 500), ("final", 1000)):
        assert set(res[res.stage == stage].n_features) == {n_features}
    assert set(res.n_train_rows) == {200}
    assert cv.best_index_ in res.index[res.stage == "final"]
    assert cv.best_estimator_.n_features == 1000


@pytest.mark.parametrize("tie", [0.0, np.inf])
@pytest.mark.slow
def test_final_stage_scores_the_narrower_gamma_only_on_a_fine_stage_tie(monkeypatch, tie):
    from rfol_dask import stages

    monkeypatch.setattr(stages, "NARROWER_TIE", tie)
    U, V = _nonlinear_data(500)
    res = (
        RandomFeatureOperatorCV(
            **staged(
                n_features=400, distributions=("gaussian",), coarse=0.5, random_state=0, refit=False
            )
        )
        .fit(U, V)
        .cv_results_.to_dataframe()
    )
    fine, final = res[res.stage == "fine"], res[res.stage == "final"]
    gamma = fine.loc[fine.mean_relative_l2.idxmin()].scale_multiple
    assert sorted(set(final.scale_multiple)) == ([gamma] if tie == 0 else [gamma, 2 * gamma])
    assert set(final.n_train_rows) == {400} and set(fine.n_train_rows) == {200}


@pytest.mark.slow
def test_search_can_pick_the_rational_quadratic_law():
    # smooth outputs of smooth inputs: the rough Cauchy kernel loses to the rational quadratic
    rng = np.random.default_rng(0)
    U = rng.uniform(-1, 1, (300, 3))
    V = np.sin(U @ rng.normal(size=(3, 4)))
    cv = RandomFeatureOperatorCV(
        **staged(
            n_features=400,
            distributions=("cauchy", "rational_quadratic"),
            alphas=(1e-12, 1e-9, 1e-6, 1e-3),
            coarse=0.5,
            random_state=0,
        )
    ).fit(U, V)
    assert cv.nu is None  # the law needs no nu: shape 1, the inverse quadratic kernel
    res = cv.cv_results_
    coarse = res["stage"] == "coarse"
    err = {
        law: -np.nanmax(res["mean_test_score"][coarse & (res["family"] == law)])
        for law in cv.distributions
    }
    assert err["rational_quadratic"] < 0.5 * err["cauchy"], err
    assert cv.best_params_["distribution"] == "rational_quadratic"
    # Cauchy is no coarse tie (2 x worse): only the rational quadratic goes to the fine stage
    assert set(res["family"][res["stage"] == "fine"]) == {"rational_quadratic"}
    # the median heuristic of the Gaussian: 1 / median squared distance
    assert cv.median_scales_["rational_quadratic"] == median_gamma(
        U, "gaussian", random_state=cv.random_state_
    )
    best = cv.best_estimator_
    assert best.distribution == "rational_quadratic" and best.gamma == cv.best_params_["gamma"]
    base, _ = draw_frequencies(3, 400, "rational_quadratic", 1.0, None, cv.random_state_)
    np.testing.assert_allclose(
        best.omega_, frequency_scale("rational_quadratic", best.gamma) * base, rtol=1e-14
    )


def test_search_sees_only_training_data():
    params = inspect.signature(RandomFeatureOperatorCV.fit).parameters
    # the training data's own (fit_params: sample_weight=None only)
    assert list(params) == ["self", "X", "y", "input_grid", "output_grid", "periods", "fit_params"]
    U, V = _nonlinear_data(150)
    seen = []

    class Recording(KFold):
        def split(self, X, y=None, groups=None):
            seen.append(len(X))
            return super().split(X, y, groups)

    cv = RandomFeatureOperatorCV(
        **staged(n_features=200, cv=Recording(3), random_state=0, **SMALL)
    ).fit(U[:100], V[:100])
    assert seen == [100]
    assert cv.n_splits_ == 3 and {"split0_test_score", "split2_test_score"} <= set(cv.cv_results_)
    s = cv.cv_results_
    np.testing.assert_allclose(
        s["mean_test_score"], np.mean([s[f"split{k}_test_score"] for k in range(3)], axis=0)
    )


@pytest.mark.slow
def test_kfold_int_and_delegation(tmp_path):
    U, V = _nonlinear_data(150)
    cv = RandomFeatureOperatorCV(**staged(n_features=200, cv=3, random_state=0, **SMALL)).fit(U, V)
    assert cv.n_splits_ == 3
    np.testing.assert_array_equal(cv.predict(U[:5]), cv.best_estimator_.predict(U[:5]))
    assert cv.score(U, V) == cv.best_estimator_.score(U, V)
    loaded = RandomFeatureOperator.load(cv.save(tmp_path / "m.zarr"))
    np.testing.assert_allclose(loaded.predict(U[:5]), cv.predict(U[:5]))
    with pytest.raises(TypeError, match="RandomFeatureOperator.load"):
        RandomFeatureOperatorCV.load(tmp_path / "m.zarr")


def test_errors_are_clear():
    U, V = _nonlinear_data(60)
    with pytest.raises(ValueError, match="nu > 0"):
        RandomFeatureOperatorCV(**staged(distributions=("student_t",))).fit(U, V)
    with pytest.raises(ValueError, match="unknown distribution 'laplace'"):
        RandomFeatureOperatorCV(**staged(distributions=("laplace",))).fit(U, V)
    with pytest.raises(
        ValueError, match="alphas must be a non-empty sequence of positive, finite numbers"
    ):
        RandomFeatureOperatorCV(**staged(alphas=(0.0, 1.0))).fit(U, V)
    for grid in (
        {"alphas": [np.inf]},
        {"gammas": [1.0, np.inf]},
    ):  # refused before the search, not at its refit
        with pytest.raises(ValueError, match="positive, finite numbers"):
            RandomFeatureOperatorCV(**staged(**grid)).fit(U, V)


@pytest.mark.slow
def test_numpy_dask_and_xarray_give_the_same_search():
    U, V = _nonlinear_data(150)
    kw = dict(n_features=300, random_state=0, **SMALL)
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
        da.from_array(U, chunks=(40, -1)), da.from_array(V, chunks=(40, -1))
    )
    assert lazy.best_params_ == ref.best_params_
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )
    Ux = xr.DataArray(U, dims=("sample", "x")).chunk({"sample": 50})
    Vx = xr.DataArray(V, dims=("sample", "y")).chunk({"sample": 50})
    on_x = RandomFeatureOperatorCV(**staged(**kw)).fit(Ux, Vx)
    assert on_x.best_params_ == ref.best_params_
    assert isinstance(on_x.predict(Ux), xr.DataArray)


@pytest.mark.slow
@pytest.mark.parametrize("n_features", [600, 96])  # the dual, the primal (fewer than 120 rows)
def test_distributed_search_equals_numpy(cluster_client, n_features):
    U, V = _nonlinear_data(150)
    kw = dict(n_features=n_features, random_state=0, **SMALL)
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    with cluster_client.as_current():
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(40, -1)), da.from_array(V, chunks=(40, -1))
        )
    assert lazy.best_params_ == ref.best_params_
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )


@parametrize_with_checks(
    [
        RandomFeatureOperatorCV(
            **staged(n_features=50, gammas=(0.5, 2.0), alphas=(1e-6, 1e-2), random_state=0)
        )
    ]
)
@pytest.mark.slow
def test_sklearn_compatible_cv(estimator, check):
    check(estimator)


# ----------------------------------------------------------------------------------------------
# kernels

from rfol_dask.baselines import KernelOperator, KernelOperatorCV  # noqa: E402


@pytest.mark.parametrize(
    "kernel, path",
    [
        ("rbf", "eigh"),
        ("matern32", "eigh"),
        ("inverse_quadratic", "eigh"),
        ("linear", "eigh"),
        ("matern52", "cholesky"),
    ],
)
@pytest.mark.slow
def test_kernel_path_equals_brute_force_fits(kernel, path):
    U, V = _nonlinear_data(150)
    # (the linear Gram has rank 24 and eigenvalues up to ~1e3: nuggets that keep it well
    # conditioned)
    nuggets = (1e-3, 1e-1, 10.0) if kernel == "linear" else (1e-6, 1e-3, 1e-1)
    cv = KernelOperatorCV(
        **staged(
            kernels=(kernel,),
            length_scales=(0.5, 2.0),
            nuggets=nuggets,
            coarse=None,
            refit=False,
            alpha_path=path,
        )
    ).fit(U, V)
    res = cv.cv_results_
    assert len(res["nugget"]) == (1 if kernel == "linear" else 2) * 3
    for k in range(len(res["nugget"])):
        ls = {} if kernel == "linear" else {"length_scale": float(res["length_scale"][k])}
        model = KernelOperator(kernel=kernel, nugget=float(res["nugget"][k]), **ls).fit(
            U[:120], V[:120]
        )
        assert res["mean_relative_l2"][k] == pytest.approx(
            relative_l2_error(V[120:], model.predict(U[120:])), rel=1e-8
        )


@pytest.mark.slow
def test_kernel_cv_search_and_dask_input():
    U, V = _nonlinear_data(500)
    Ut, Vt = U[400:], V[400:]
    U, V = U[:400], V[:400]
    cv = KernelOperatorCV(**staged(coarse=0.7, n_components=8)).fit(U, V)
    assert set(cv.cv_results_["stage"]) == {"coarse", "fine", "final"}
    assert set(
        KernelOperatorCV(**staged(coarse=0.7, fine=None, n_components=8))
        .fit(U, V)
        .cv_results_["stage"]
    ) == {"coarse", "fine"}
    assert set(cv.best_params_) == {"kernel", "length_scale", "nugget"}
    default = KernelOperator(n_components=8).fit(U, V)
    assert relative_l2_error(Vt, cv.predict(Ut)) < relative_l2_error(Vt, default.predict(Ut))
    lazy = KernelOperatorCV(**staged(coarse=0.7, n_components=8)).fit(
        da.from_array(U, chunks=(100, -1)), da.from_array(V, chunks=(100, -1))
    )

    # the same winner; best_params_ holds each refit's ridge (the tiled refit may raise 1e-16)
    def winner(s):
        return {k: s.cv_results_[k][s.best_index_] for k in ("family", "length_scale", "nugget")}

    assert winner(lazy) == winner(cv)


@pytest.mark.slow
def test_every_ridge_path_picks_a_nugget_the_refit_can_factorise():
    """Advection I is a shift: long RBF length scales win, whose centred Gram has eigenvalues far
    below the rounding of the kernel matrix it is centred from. The eigen path scored nugget 1e-14,
    where the Gram plus the nugget is not positive definite (a Cholesky fails; the eigenvalues
    below zero were set to zero), won with it, and the refit raised it to 1e-13: a model that was
    not scored, and another winner than the Cholesky path's. Every path now picks the nugget the
    refit fits, and the rounding floor of each Gram is in cv_results_."""
    from rfol_dask import datasets

    ds = datasets.generate("advection1", 300, seed=0)
    U, V = ds["input"].values, ds["output"].values
    searches = {
        path: KernelOperatorCV(
            **staged(kernels=("rbf",), length_scales=(4.0, 16.0), alpha_path=path)
        ).fit(U, V)
        for path in ("eigh", "cholesky", "auto")
    }
    for s in searches.values():
        res = s.cv_results_
        assert (
            res["nugget"][s.best_index_] == s.best_params_["nugget"] == s.best_estimator_.nugget
        )  # not raised
        assert s.best_params_ == searches["cholesky"].best_params_
        floor = res["nugget_floor"]
        assert np.all(floor > 0) and np.isnan(res["mean_test_score"][res["nugget"] < floor]).all()
        # the floor is that of the M_t x M_t kernel matrix of unit diagonal: 2 eps M_t / sqrt(M_t)
        final = res["stage"] == res["stage"][-1]
        np.testing.assert_allclose(
            floor[final], 2 * np.finfo(float).eps * np.sqrt(res["n_train_rows"][final])
        )


@pytest.mark.slow
def test_a_winner_at_the_rounding_floor_is_warned_and_a_grid_below_it_refused():
    """The kernels' Gram of unit diagonal on 192 training rows has the floor 2 eps sqrt(192) =
    6e-15: a winner at the smallest nugget above it in a grid of the user's is warned of (the
    nuggets below were not scored), a grid with no nugget above it is refused, naming the floor,
    and the default grid, which reaches below every floor on purpose, leaves them out silently."""
    U, V = smooth_operator_data()
    kw = dict(kernels=("rbf",), length_scales=(1.0,), coarse=None)
    with pytest.warns(
        UserWarning,
        match=r"best nugget, 1e-13, is the smallest searched one above the rounding floor",
    ):
        search = KernelOperatorCV(**staged(nuggets=(1e-16, 1e-15, 1e-13, 1e-6), **kw)).fit(U, V)
    res = search.cv_results_
    np.testing.assert_allclose(res["nugget_floor"], 2 * np.finfo(float).eps * np.sqrt(192))
    assert (
        np.isnan(res["mean_test_score"][:2]).all() and np.isfinite(res["mean_test_score"][2:]).all()
    )
    with pytest.raises(
        ValueError,
        match=r"every nugget searched is below the rounding floor of its Gram .* up to 6.15e-15",
    ):
        KernelOperatorCV(**staged(nuggets=(1e-16, 1e-15), **kw)).fit(U, V)
    with (
        warnings.catch_warnings()
    ):  # the default grid reaches below every floor on purpose: no warning
        warnings.simplefilter("error")
        search = KernelOperatorCV(**staged(**kw)).fit(U, V)
    res = search.cv_results_
    assert res["nugget"][search.best_index_] == min(
        res["nugget"][res["nugget"] >= res["nugget_floor"]]
    )


@pytest.mark.parametrize("path", ["eigh", "cholesky"])
@pytest.mark.parametrize("cv", [None, 3])
@pytest.mark.slow
def test_linear_kernel_candidates_are_scored_as_the_refit_fits_them(path, cv):
    """With fewer inputs (64, of rank 5) than samples the linear kernel is refitted in the primal
    (ridge on the inputs); its candidates are scored in the primal too, and their validation
    errors are those of scikit-learn's Ridge(solver="svd") on each split's rows, at small nuggets
    too, where the rank-5 dual Gram lost digits (scores 1e-3 off at nugget 1e-10)."""
    from sklearn.linear_model import Ridge

    U, V = smooth_operator_data(200, 64)
    V = V + 0.05 * np.sin(7 * U[:, ::-1])  # outputs outside the inputs' span: the ridge matters
    nuggets = (1e-10, 1e-6, 1e-2, 1.0)
    search = KernelOperatorCV(
        **staged(kernels=("linear",), nuggets=nuggets, coarse=None, cv=cv, alpha_path=path)
    ).fit(U, V)
    res = search.cv_results_
    splits = search._splits(len(U))
    for k, nugget in enumerate(res["nugget"]):
        for j, (tr, va) in enumerate(splits):
            ref = Ridge(alpha=nugget, solver="svd").fit(U[tr], V[tr]).predict(U[va])
            assert -res[f"split{j}_test_score"][k] == pytest.approx(
                relative_l2_error(V[va], ref), rel=1e-10
            )
    assert search.best_estimator_.coef_ is not None  # the refit's primal
    ridge = Ridge(alpha=search.best_params_["nugget"], solver="svd").fit(U, V)
    np.testing.assert_allclose(
        search.predict(U[:20]), ridge.predict(U[:20]), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("path", ["eigh", "cholesky"])
@pytest.mark.parametrize("cv", [None, 3])
@pytest.mark.slow
def test_linear_kernel_dual_candidates_are_scored_as_the_refit_solves_them(path, cv):
    """With more inputs (64, of rank 5) than samples the linear kernel is refitted by the eigen
    solve that leaves out the Gram's directions of rounding (linear_dual); its candidates were
    scored by the plain eigen or Cholesky path, 1e-2 relative off the refit at nugget 1e-12, which
    won the search on that rounding (the refit's and Ridge's own error there is larger than at
    nugget 1). They are now scored by the refit's solve: each split's errors are its model's and
    scikit-learn's Ridge(solver="svd")'s, and the winner is Ridge's."""
    from sklearn.linear_model import Ridge

    U, V = smooth_operator_data(60, 64)
    V = V + 0.05 * np.sin(7 * U[:, ::-1])  # outputs outside the inputs' span: the ridge matters
    nuggets = (1e-12, 1e-10, 1e-6, 1e-2, 1.0)
    search = KernelOperatorCV(
        **staged(kernels=("linear",), nuggets=nuggets, coarse=None, cv=cv, alpha_path=path)
    ).fit(U, V)
    res, splits = search.cv_results_, search._splits(len(U))
    ridge_errors = []
    for k, nugget in enumerate(res["nugget"]):
        errors = []
        for j, (tr, va) in enumerate(splits):
            refit = KernelOperator(kernel="linear", nugget=nugget).fit(U[tr], V[tr])
            assert refit.coef_ is None  # the dual
            ref = Ridge(alpha=nugget, solver="svd").fit(U[tr], V[tr]).predict(U[va])
            errors.append(relative_l2_error(V[va], ref))
            assert -res[f"split{j}_test_score"][k] == pytest.approx(
                relative_l2_error(V[va], refit.predict(U[va])), rel=1e-10
            )
            assert -res[f"split{j}_test_score"][k] == pytest.approx(errors[-1], rel=1e-10)
        ridge_errors.append(np.mean(errors))
    assert search.best_params_["nugget"] == res["nugget"][int(np.argmin(ridge_errors))]
    assert search.best_estimator_.coef_ is None  # the refit's dual
    ridge = Ridge(alpha=search.best_params_["nugget"], solver="svd").fit(U, V)
    np.testing.assert_allclose(
        search.predict(U[:20]), ridge.predict(U[:20]), rtol=1e-10, atol=1e-12
    )


@parametrize_with_checks(
    [KernelOperatorCV(**staged(length_scales=(0.5, 2.0), nuggets=(1e-6, 1e-2)))]
)
@pytest.mark.slow
def test_sklearn_compatible_kernel_cv(estimator, check):
    check(estimator)


@pytest.mark.slow
def test_fit_from_zarr_store(tmp_path):
    U, V = _nonlinear_data(150)
    ds = xr.Dataset(
        {"input": (("sample", "x"), U), "output": (("sample", "y"), V)},
        coords={"x": np.linspace(0, 1, U.shape[1]), "y": np.linspace(0, 1, V.shape[1])},
    )
    ds.chunk({"sample": 50}).to_zarr(tmp_path / "d.zarr")
    kw = dict(n_features=300, random_state=0, **SMALL)
    on_store = RandomFeatureOperatorCV(**staged(**kw)).fit(str(tmp_path / "d.zarr"))
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    assert on_store.best_params_ == ref.best_params_
    assert on_store.best_estimator_.input_grid_ is not None  # the refit saw the store's coordinates
    grid = dict(length_scales=(0.5, 2.0), nuggets=(1e-6, 1e-2))
    kernel = KernelOperatorCV(**staged(**grid)).fit(str(tmp_path / "d.zarr"))
    assert kernel.best_params_ == KernelOperatorCV(**staged(**grid)).fit(U, V).best_params_


@pytest.mark.parametrize(
    "tie, fine_laws", [(1.0, {"rational_quadratic"}), (10.0, {"cauchy", "rational_quadratic"})]
)
@pytest.mark.slow
def test_a_second_law_reaches_the_fine_stage_only_on_a_coarse_tie(monkeypatch, tie, fine_laws):
    from rfol_dask import stages

    monkeypatch.setattr(
        stages, "FINALIST_TIE", tie
    )  # Cauchy is about 2 x behind at the coarse stage
    rng = np.random.default_rng(0)
    U = rng.uniform(-1, 1, (300, 3))
    V = np.sin(U @ rng.normal(size=(3, 4)))
    kw = dict(
        n_features=400,
        distributions=("cauchy", "rational_quadratic"),
        alphas=(1e-9, 1e-6),
        coarse=0.5,
        random_state=0,
        refit=False,
    )
    res = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V).cv_results_
    assert set(res["family"][res["stage"] == "fine"]) == fine_laws
    one = (
        RandomFeatureOperatorCV(**staged(finalists=1, **kw)).fit(U, V).cv_results_
    )  # finalists caps the ties
    assert set(one["family"][one["stage"] == "fine"]) == {"rational_quadratic"}


@pytest.mark.slow
def test_coarse_grid_is_extended_past_an_edge_winner():
    # a linear operator: the smaller gamma, the better (the features' linear regime)
    U, _ = smooth_operator_data(300, 24)
    V = U @ np.random.default_rng(0).normal(size=(24, 6))
    cv = RandomFeatureOperatorCV(
        **staged(
            n_features=1024,
            distributions=("cauchy", "gaussian"),
            gammas=(1.0, 4.0, 16.0, 64.0),
            alphas=(1e-10, 1e-6),
            random_state=0,
            refit=False,
        )
    ).fit(U, V)
    res = cv.cv_results_.to_dataframe()
    coarse = res[res.stage == "coarse"]
    for law in (
        "cauchy",
        "gaussian",
    ):  # every family on the edge is extended, not only the best one
        assert coarse[coarse.family == law].scale_multiple.min() < 1.0
    assert cv.best_params_["gamma"] < cv.median_scales_[cv.best_params_["distribution"]]
    # the fine stage: its winner is inside the multiples its law scored, or FINE_EXTEND refine steps
    # (factor 2) past the coarse winner's refine grid were scored; the other finalist is not
    # extended
    fine = res[res.stage == "fine"]
    law = fine.loc[fine.mean_relative_l2.idxmin()].family
    for name, part in fine.groupby("family"):
        tried = np.sort(part.scale_multiple.unique())
        best = part.loc[part.mean_relative_l2.idxmin()].scale_multiple
        if name == law:
            assert tried[0] < best < tried[-1] or len(tried) == len(DEFAULT_REFINE) + FINE_EXTEND
        else:
            assert len(tried) == len(DEFAULT_REFINE)
        np.testing.assert_allclose(np.diff(np.log2(tried)), 1.0)  # one grid of factor 2


@pytest.mark.slow
def test_fine_stage_solves_only_the_alphas_around_the_coarse_winner_and_loses_nothing():
    U, V = _nonlinear_data(400)  # 320 training rows: one Cholesky per alpha of 5 beats an eigh
    kw = dict(n_features=600, distributions=("gaussian",), random_state=0, refit=False)
    auto = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    full = RandomFeatureOperatorCV(**staged(alpha_path="eigh", **kw)).fit(U, V)
    res = auto.cv_results_
    fine = res["stage"] == "fine"
    assert fine.any() and np.isnan(res["mean_test_score"][fine]).any()  # alphas left out
    full_res = (
        full.cv_results_
    )  # every alpha at or above the rounding floor of its Gram, and only those
    np.testing.assert_array_equal(
        np.isfinite(full_res["mean_test_score"]), full_res["alpha"] >= full_res["alpha_floor"]
    )
    # the scores that were computed agree with the full path, and the winner is the same
    both = fine & np.isfinite(res["mean_test_score"])
    np.testing.assert_allclose(
        res["mean_test_score"][both], full.cv_results_["mean_test_score"][both], rtol=1e-6
    )
    assert auto.best_params_ == full.best_params_ and auto.best_score_ == pytest.approx(
        full.best_score_, rel=1e-6
    )


@pytest.mark.slow
def test_dask_search_reads_each_chunk_once_and_the_refit_once_more():
    import dask

    U, V = _nonlinear_data(150)
    reads = {}

    def load(block, block_info=None, which=""):
        key = (which, block_info[0]["chunk-location"][0])
        reads[key] = reads.get(key, 0) + 1
        return block

    Ud = da.from_array(U, chunks=(40, -1)).map_blocks(load, dtype=U.dtype, which="U")
    Vd = da.from_array(V, chunks=(40, -1)).map_blocks(load, dtype=V.dtype, which="V")
    calls = []

    def counting(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.threaded.get(dsk, keys, **kwargs)

    kw = dict(n_features=300, random_state=0, **SMALL)
    with dask.config.set(scheduler=counting):
        search = RandomFeatureOperatorCV(**staged(refit=False, **kw)).fit(Ud, Vd)
        assert (
            len(calls) == 1 and set(reads.values()) == {1} and len(reads) == 8
        )  # the median samples the read
        search = RandomFeatureOperatorCV(**staged(**kw)).fit(Ud, Vd)
    assert set(reads.values()) == {3}  # twice per fit: the search, then the refit of the winner
    assert search.median_scales_ == RandomFeatureOperatorCV(**staged(**kw)).fit(U, V).median_scales_


def _logged_read(block, block_info=None, log=None):
    with open(log, "a") as f:
        f.write(f"{block_info[0]['chunk-location'][0]}\n")
    return block


@pytest.mark.slow
def test_distributed_search_reads_each_chunk_once(cluster_client, tmp_path):
    U, V = _nonlinear_data(150)
    log = str(tmp_path / "reads.txt")
    Ud = da.from_array(U, chunks=(40, -1)).map_blocks(_logged_read, dtype=U.dtype, log=log)
    with cluster_client.as_current():
        lazy = RandomFeatureOperatorCV(
            **staged(n_features=300, random_state=0, refit=False, **SMALL)
        ).fit(Ud, da.from_array(V, chunks=(40, -1)))
    reads = sorted(int(line) for line in open(log))
    assert reads == [
        0,
        1,
        2,
        3,
    ]  # the median heuristic samples the persisted inputs: no second read
    ref = RandomFeatureOperatorCV(**staged(n_features=300, random_state=0, **SMALL)).fit(U, V)
    assert lazy.median_scales_ == ref.median_scales_


# ----------------------------------------------------------------------------------------------
# growth of N
GROW = dict(
    n_features=256, max_features=2048, growth_tol=0.0, random_state=0, limit_gammas=None, **SMALL
)


def _growth(cv):
    res = cv.cv_results_.to_dataframe()
    return res[res.stage == "growth"]


@pytest.mark.slow
def test_growth_scores_equal_a_search_at_each_n():
    """Each growth checkpoint scores exactly what a one-stage search at that N, law and gamma
    scores (nested frequencies of one draw), and the refitted winner has the chosen N."""
    U, V = _nonlinear_data(200)
    cv = RandomFeatureOperatorCV(**staged(**GROW)).fit(U, V)
    grown = _growth(cv)
    assert sorted(set(grown.n_features)) == [256, 512, 1024, 2048]
    law = cv.best_params_["distribution"]
    fine = cv.cv_results_.to_dataframe().query("stage == 'full'")  # SMALL: one stage
    searched = fine.loc[fine.mean_relative_l2.idxmin()].scale_multiple
    mults = sorted(set(grown.scale_multiple))
    assert {0.5 * searched, searched, 2 * searched} <= set(mults)  # growth_refine
    assert set(mults) <= {
        searched * 2.0**k for k in range(-3, 4)
    }  # at most two steps beyond its edge
    for N, mult in ((512, 0.5 * searched), (2048, searched)):
        if N not in set(grown[grown.scale_multiple == mult].n_features):
            continue  # that gamma stopped growing before N (no gain, or far behind the best)
        ref = RandomFeatureOperatorCV(
            **staged(
                n_features=N,
                distributions=(law,),
                gammas=(mult,),
                alphas=SMALL["alphas"],
                coarse=None,
                random_state=0,
                refit=False,
            )
        ).fit(U, V)
        mine = (
            grown[(grown.n_features == N) & (grown.scale_multiple == mult)]
            .set_index("alpha")
            .mean_relative_l2
        )
        theirs = ref.cv_results_.to_dataframe().set_index("alpha").mean_relative_l2
        solved = mine.notna()  # the alphas of the window around the best one so far
        assert solved.sum() >= 2
        np.testing.assert_allclose(mine[solved], theirs[solved], rtol=1e-9)
    best = grown.loc[grown.mean_relative_l2.idxmin()]
    assert cv.best_params_["n_features"] == best.n_features
    assert cv.best_score_ == -best.mean_relative_l2
    assert cv.best_estimator_.n_features == best.n_features
    assert (cv.cv_results_["rank_test_score"][cv.cv_results_["stage"] == "growth"] >= 1).all()


@pytest.mark.slow
def test_growth_drops_a_gamma_far_behind_and_extends_beyond_the_edge():
    """A gamma whose validation error at a checkpoint is more than GROWTH_PRUNE above the best
    seen there stops growing; while the best sits at the edge of the multiples, more are grown
    beyond it (GROWTH_EXTEND)."""
    from rfol_dask.rf_operator_cv import GROWTH_EXTEND

    U, V = _nonlinear_data(200)
    cv = RandomFeatureOperatorCV(**staged(**dict(GROW, growth_refine=(1.0, 256.0)))).fit(U, V)
    grown, res = _growth(cv), cv.cv_results_.to_dataframe()
    searched = res.loc[res[res.stage == "full"].mean_relative_l2.idxmin()].scale_multiple
    assert sorted(set(grown[grown.scale_multiple == searched].n_features)) == [256, 512, 1024, 2048]
    best = grown.groupby("n_features").mean_relative_l2.min()
    for far in (
        256 * searched,
        searched / 256,
    ):  # the edge (searched) was best: one step below it too
        assert sorted(set(grown[grown.scale_multiple == far].n_features)) == [
            256
        ]  # far behind: dropped
        assert grown[grown.scale_multiple == far].mean_relative_l2.min() > 1.25 * best[256]
    assert sorted(set(grown.scale_multiple)) == [searched / 256, searched, 256 * searched]
    # two multiples far below the best: the growth walks up, one step of their grid at a time
    low = RandomFeatureOperatorCV(**staged(**dict(GROW, growth_refine=(1 / 64, 1 / 16)))).fit(U, V)
    grown = _growth(low)
    base = grown.scale_multiple.min() * 64
    np.testing.assert_allclose(
        sorted(set(grown.scale_multiple)),
        base * np.array([1 / 64, 1 / 16, 1 / 4, 1][: 2 + GROWTH_EXTEND]),
    )


@pytest.mark.slow
def test_growth_stops_when_a_doubling_gains_too_little_and_is_off_by_default():
    U, V = _nonlinear_data(200)
    stopped = RandomFeatureOperatorCV(**staged(**dict(GROW, growth_tol=0.99))).fit(U, V)
    assert sorted(set(_growth(stopped).n_features)) == [
        256,
        512,
    ]  # 512 cannot gain 99 %: stop there
    plain = RandomFeatureOperatorCV(**staged(**dict(GROW, max_features=None))).fit(U, V)
    assert (
        "growth" not in set(plain.cv_results_["stage"]) and plain.best_params_["n_features"] == 256
    )
    assert "growth" not in set(
        RandomFeatureOperatorCV(**staged(**dict(GROW, max_features=256)))
        .fit(U, V)
        .cv_results_["stage"]
    )
    with pytest.raises(ValueError, match="max_features"):
        RandomFeatureOperatorCV(**staged(max_features=0)).fit(U, V)
    # below the searched N (the largest of a sequence): an error, not a silent search without growth
    for n, top in ((256, 128), ((128, 512), 256)):
        with pytest.raises(
            ValueError, match=f"max_features={top} is below the searched n_features"
        ):
            RandomFeatureOperatorCV(**staged(n_features=n, max_features=top)).fit(U, V)


@pytest.mark.slow
def test_limit_stage_scores_the_law_with_many_features_per_row():
    """The limit stage scores every searched law over the gamma grid on a subsample of the rows
    with LIMIT_FEATURES_PER_ROW features per training row (capped by max_features), exactly as a
    one-stage search on those rows would; it is skipped when it would not have more features
    than the search, and with limit_gammas=None."""
    from rfol_dask.rf_operator_cv import LIMIT_FEATURES_PER_ROW

    U, V = _nonlinear_data(200)
    cv = RandomFeatureOperatorCV(
        **staged(**dict(GROW, limit_gammas="gammas", max_features=4096))
    ).fit(U, V)
    res = cv.cv_results_.to_dataframe()
    limit = res[res.stage == "limit"]
    # all 160 training rows: max(200 coarse rows, 256 // 4, 160 // 4), at most the training rows
    n_rows = 160
    assert set(limit.n_train_rows) == {n_rows} and set(limit.n_features) == {
        LIMIT_FEATURES_PER_ROW * n_rows
    }
    assert set(limit.family) == set(cv.distributions)
    law = "gaussian"
    mine = limit[limit.family == law]
    assert set(SMALL["gammas"]) <= set(mine.scale_multiple)
    ref = RandomFeatureOperatorCV(
        **staged(
            n_features=LIMIT_FEATURES_PER_ROW * n_rows,
            distributions=(law,),
            gammas=tuple(sorted(set(mine.scale_multiple))),
            alphas=SMALL["alphas"],
            coarse=None,
            random_state=0,
            refit=False,
        )
    ).fit(U, V)
    theirs = ref.cv_results_.to_dataframe().set_index(["scale_multiple", "alpha"]).mean_relative_l2
    np.testing.assert_allclose(
        mine.set_index(["scale_multiple", "alpha"]).mean_relative_l2.loc[theirs.index],
        theirs,
        rtol=1e-9,
    )
    assert "growth" == res.stage.iloc[-1]  # the growth rows come last: the winner is one of them
    few = RandomFeatureOperatorCV(
        **staged(**dict(GROW, limit_gammas="gammas", n_features=2048, max_features=4096))
    ).fit(U[:100], V[:100])
    assert "limit" not in set(
        few.cv_results_["stage"]
    )  # 80 rows x 16 = 1280 features < 2048 searched
    assert "limit" not in set(
        RandomFeatureOperatorCV(**staged(**GROW)).fit(U, V).cv_results_["stage"]
    )
    with pytest.raises(ValueError, match="limit_gammas"):
        RandomFeatureOperatorCV(**staged(**dict(GROW, limit_gammas=(1.0, -2.0)))).fit(U, V)


@pytest.mark.slow
def test_limit_stage_rows_are_at_least_a_fraction_of_the_training_rows(monkeypatch):
    """The limit stage's rows: max(coarse rows, N / 4, LIMIT_ROWS_FRACTION x training rows)."""
    import rfol_dask.rf_operator_cv as mod

    U, V = _nonlinear_data(400)  # 320 training rows; coarse rows max(200, 40) = 200, N / 4 = 64
    monkeypatch.setattr(mod, "LIMIT_ROWS_FRACTION", 0.75)
    cv = RandomFeatureOperatorCV(
        **staged(**dict(GROW, limit_gammas=(1.0,), distributions=("gaussian",), max_features=8192))
    ).fit(U, V)
    res = cv.cv_results_.to_dataframe()
    limit = res[res.stage == "limit"]
    assert set(limit.n_train_rows) == {240} and set(limit.n_features) == {16 * 240}


@pytest.mark.slow
def test_limit_gamma_outside_the_growth_multiples_grows_beside_them():
    """A limit-stage gamma outside the searched gamma times growth_refine is grown too (in its
    own law), times growth_refine; its gammas are held only to each other's errors, so they keep
    growing while far behind the searched gamma at small N (they would be dropped if held to it)."""
    U, V = _nonlinear_data(200)
    far = 64.0  # outside 0.25 ... 4 (SMALL's gammas) times 0.5 ... 2
    cv = RandomFeatureOperatorCV(**staged(**dict(GROW, limit_gammas=(far,)))).fit(U, V)
    grown, res = _growth(cv), cv.cv_results_.to_dataframe()
    limit = res[res.stage == "limit"]
    law = limit.loc[limit.mean_relative_l2.idxmin()].family
    assert {far / 2, far, 2 * far} <= set(grown[grown.family == law].scale_multiple)
    at = grown.groupby(["scale_multiple", "n_features"]).mean_relative_l2.min()
    searched = {m for m in set(grown.scale_multiple) if m < far / 4}
    best_searched = min(at[m].loc[256] for m in searched)
    best_far = min(at[m].loc[256] for m in (far / 2, far, 2 * far))
    assert best_far > 1.25 * best_searched  # far behind at the first checkpoint ...
    reached = max(max(at[m].index) for m in (far / 2, far, 2 * far))
    assert reached > 256  # ... and grown on all the same


@pytest.mark.slow
def test_growth_groups_count_every_splits_running_sums(monkeypatch):
    """The growth keeps each split's running Gram and cross-Gram per gamma from one checkpoint to
    the next: with cv=3 a pass of S gammas holds 3 S pairs. Its groups were sized for one pair per
    gamma, so all three gammas went in one pass holding 9 pairs, where half the budget holds 4."""
    from rfol_dask import rf_operator_cv

    U, V = _nonlinear_data(200)
    M_t, M_v = 133, 67  # the first of the 3 folds (KFold: 67, 67, 66 validation rows)
    per = 8 * (M_t + M_v) * M_t  # one pair of a gamma and split
    budget = 8 * per  # half of it: 4 pairs
    grown, real = [], rf_operator_cv.RandomFeatureOperatorCV._grow

    def grow(self, X, Y, splits, client, law, N0, mults, *args):
        assert (len(splits[0][0]), len(splits[0][1])) == (M_t, M_v)
        grown.append(len(mults) * len(splits))  # pairs held in this pass
        return real(self, X, Y, splits, client, law, N0, mults, *args)

    monkeypatch.setattr(rf_operator_cv.RandomFeatureOperatorCV, "_grow", grow)
    cv = RandomFeatureOperatorCV(
        **staged(**dict(GROW, cv=3, refit=False, max_gram_bytes=budget))
    ).fit(U, V)
    assert (
        "growth" in set(cv.cv_results_["stage"]) and sum(grown) >= 9
    )  # the three gammas were grown
    assert max(grown) * per <= 0.5 * budget


@pytest.mark.slow
def test_growth_on_dask_input_equals_numpy():
    U, V = _nonlinear_data(200)
    ref = RandomFeatureOperatorCV(**staged(**GROW)).fit(U, V)
    lazy = RandomFeatureOperatorCV(**staged(**GROW)).fit(
        da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
    )
    assert lazy.best_params_ == ref.best_params_
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "refine, limit", [((0.5, 1.0, 2.0), None), ((1.0, 256.0), None), ((0.5, 1.0, 2.0), (64.0,))]
)
def test_distributed_growth_equals_numpy(cluster_client, refine, limit):
    """Growth on a 2-worker cluster (the slabs of a checkpoint split over the workers, their sums
    added without touching the running accumulators; a gamma far behind dropped from them; the
    limit stage and its anchor) scores what the numpy search scores."""
    U, V = _nonlinear_data(200)
    kw = dict(GROW, max_features=4096, refit=False, growth_refine=refine, limit_gammas=limit)
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    with cluster_client.as_current():
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
    assert lazy.best_params_ == ref.best_params_
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )


@pytest.mark.cluster
@pytest.mark.slow
def test_distributed_growth_sums_into_one_new_accumulator(monkeypatch):
    """Four workers' running sums of the growth, kept for the next checkpoint, are summed pairwise
    into new arrays at the first level of the tree only; the second level adds into the first
    worker's new sum in place. A new sum at every level held the first worker's accumulator, the
    first level's sum, the second one that comes over and a third, new, one at once."""
    import functools

    from distributed import Client, LocalCluster, get_task_stream

    from rfol_dask import feature_passes, tuning

    U, V = _nonlinear_data(200)
    # slabs of 256 columns: the 1024 new columns of the last checkpoint go to all four workers
    monkeypatch.setattr(
        feature_passes,
        "slab_bounds",
        functools.partial(tuning.slab_bounds, slab_bytes=200 * 8 * 256),
    )
    kw = dict(GROW, refit=False, growth_refine=(1.0,), gammas=(1.0,), distributions=("cauchy",))
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        get_task_stream() as ts,
    ):
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
        workers = sorted(client.scheduler_info()["workers"])
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )
    from collections import Counter

    from dask.utils import key_split

    new_sums = Counter(t["worker"] for t in ts.data if key_split(t["key"]) == "sum_validation")
    # checkpoint 1024: workers 0 and 1 hold sums (one new sum); 2048: all four (two new ones, then
    # in place)
    assert new_sums == {workers[0]: 2, workers[2]: 1}


@pytest.mark.parametrize("cv", [None, 3])
@pytest.mark.cluster
@pytest.mark.slow
def test_distributed_growth_holds_its_running_sums_and_two_more_while_a_split_is_summed(
    monkeypatch, cv
):
    """The growth's first worker holds its running sum of every split (what the groups count) and,
    while a split is summed, that split's new sum and the one that comes over: the copy it fetched
    of
    its neighbour's running sum stayed there while the sum was kept (four Grams with one split), and
    every split was summed at once (twelve with three, where it now holds five)."""
    import functools

    from conftest import held_arrays
    from distributed import Client, LocalCluster

    from rfol_dask import feature_passes, tuning

    U, V = _nonlinear_data(200)
    # slabs of 256 columns: the 1024 new columns of the last checkpoint go to all four workers
    monkeypatch.setattr(
        feature_passes,
        "slab_bounds",
        functools.partial(tuning.slab_bounds, slab_bytes=200 * 8 * 256),
    )
    kw = dict(
        GROW, refit=False, growth_refine=(1.0,), gammas=(1.0,), distributions=("cauchy",), cv=cv
    )
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    splits, M_t = (
        (1, 160) if cv is None else (3, 133)
    )  # the smallest training split (KFold: 133, 133, 134 rows)
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        held_arrays(client, 8 * M_t * M_t) as peaks,
    ):
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
        first = sorted(client.scheduler_info()["workers"])[0]
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )
    assert peaks[first] == splits + 2
    assert max(peaks.values()) <= splits + 2


@pytest.mark.cluster
@pytest.mark.slow
def test_distributed_growth_groups_fit_the_budget_with_the_sums(monkeypatch):
    """With one split the growth's first worker holds three Gram pairs a gamma while it sums (its
    running sum, the new sum and the one that comes over): groups sized for the running sums
    alone in half the budget (three gammas where it holds 6.2 pairs) held nine pairs, 1.5 times
    the budget."""
    import functools

    from conftest import held_arrays
    from distributed import Client, LocalCluster

    from rfol_dask import feature_passes, tuning

    U, V = _nonlinear_data(200)
    # slabs of 256 columns: the 512 columns of the first checkpoint go to both workers
    monkeypatch.setattr(
        feature_passes,
        "slab_bounds",
        functools.partial(tuning.slab_bounds, slab_bytes=200 * 8 * 256),
    )
    per = (
        8 * (160 + 40) * 160
    )  # a Gram and cross-Gram of the holdout split (160 training, 40 validation rows)
    kw = dict(
        GROW,
        n_features=512,
        refit=False,
        gammas=(1.0,),
        distributions=("cauchy",),
        max_gram_bytes=6.2 * per,
    )
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        held_arrays(client, 8 * 160 * 160) as peaks,
    ):
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )
    assert (
        len(set(_growth(lazy).scale_multiple)) >= 3
    )  # the three gammas grown (two, then one, at a time)
    assert max(peaks.values()) * per <= 6.2 * per


@pytest.mark.parametrize("cv, budget", [(None, 3.6e6), (4, None)])
@pytest.mark.cluster
@pytest.mark.slow
def test_distributed_search_holds_one_group_of_one_split_at_a_time(monkeypatch, cv, budget):
    """A stage of the search on four workers holds one group of gammas' Grams at a time, of one
    split (each worker its chain's and, summing, one that comes over): only the first worker's
    chain of a group waited for the group before, so the other workers ran every group's chains
    at once and held every group's Grams (six training Grams on one worker in groups of one), and
    the splits of a stage, computed together, held each its own. The other workers wait for a
    token made beside a group's sum, not for the sum: waiting for it fetched a copy to each."""
    import functools

    from conftest import fetched_keys, held_arrays
    from dask.utils import key_split
    from distributed import Client, LocalCluster

    from rfol_dask import feature_passes, tuning

    U, V = _nonlinear_data(400)
    # slabs of 256 columns: the 2048 columns are spread over the four workers
    monkeypatch.setattr(
        feature_passes,
        "slab_bounds",
        functools.partial(tuning.slab_bounds, slab_bytes=400 * 8 * 256),
    )
    kw = dict(
        n_features=2048,
        random_state=0,
        refit=False,
        distributions=("cauchy",),
        alphas=(1e-6, 1e-3),
        coarse=None,
        fine=None,
        cv=cv,
        max_gram_bytes=budget,  # 3.6 MB: groups of one gamma
        gammas=(0.25, 1.0, 4.0, 16.0) if cv is None else (1.0,),
    )
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    M_t = (
        320 if cv is None else 300
    )  # training rows (the cross-Grams, of 80 or 100 rows, are smaller)
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        held_arrays(client, 8 * M_t * M_t) as peaks,
        fetched_keys(client) as fetched,
    ):
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
        first = sorted(client.scheduler_info()["workers"])[0]
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )
    assert max(peaks.values()) <= 2
    # a sum of Grams comes over to the first worker only (which sums and solves)
    assert {
        w for w, keys in fetched.items() if any(key_split(k) == "add_validation" for k in keys)
    } == {first}


# ----------------------------------------------------------------------------------------------
# sketched scores
@pytest.mark.slow
def test_scores_on_an_output_sketch_estimate_the_exact_ones_and_refit_on_all_outputs():
    """score_outputs=k scores the search on k Gaussian combinations of the outputs: close to the
    exact scores, the same winner here, a refit on every output; k >= m changes nothing."""
    U, V = _nonlinear_data(300)
    V = np.concatenate([V, np.sin(3 * V), np.cos(2 * V), V**2], axis=1)  # m = 4 x the base outputs
    kw = dict(n_features=400, random_state=0, **SMALL)
    exact = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    sketched = RandomFeatureOperatorCV(**staged(score_outputs=32, **kw)).fit(U, V)  # of m = 96
    assert V.shape[1] > 32
    assert sketched.best_params_ == exact.best_params_
    np.testing.assert_allclose(
        sketched.cv_results_["mean_relative_l2"], exact.cv_results_["mean_relative_l2"], rtol=0.15
    )  # per-sample spread sqrt(1 / 32) = 18 %, averaged over 60 samples
    assert not np.allclose(
        sketched.cv_results_["mean_relative_l2"], exact.cv_results_["mean_relative_l2"], rtol=1e-9
    )  # a sketch, not the exact scores
    assert sketched.best_estimator_.coef_.shape == exact.best_estimator_.coef_.shape
    np.testing.assert_allclose(sketched.predict(U[:5]), exact.predict(U[:5]))
    same = RandomFeatureOperatorCV(**staged(score_outputs=V.shape[1], **kw)).fit(U, V)
    np.testing.assert_array_equal(
        same.cv_results_["mean_relative_l2"], exact.cv_results_["mean_relative_l2"]
    )
    with pytest.raises(ValueError, match="score_outputs"):
        RandomFeatureOperatorCV(**staged(score_outputs=0)).fit(U, V)


@pytest.mark.slow
def test_sketched_scores_on_a_cluster_equal_numpy(cluster_client):
    U, V = _nonlinear_data(200)
    kw = dict(n_features=300, random_state=0, score_outputs=2, refit=False, **SMALL)
    ref = RandomFeatureOperatorCV(**staged(**kw)).fit(U, V)
    with cluster_client.as_current():
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
    np.testing.assert_allclose(
        lazy.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-9
    )


def test_best_index_points_at_the_winning_row():
    U, V = _nonlinear_data(60)
    search = RandomFeatureOperatorCV(
        **staged(n_features=60, distributions=("cauchy",), random_state=0, refit=False)
    ).fit(U, V)
    assert search.cv_results_["mean_test_score"][search.best_index_] == search.best_score_
    assert search.cv_results_["alpha"][search.best_index_] == search.best_params_["alpha"]


@pytest.mark.parametrize("law", ["rational_quadratic", "student_t"])
def test_best_params_refit_the_winner_of_a_law_with_a_shape(law):
    """best_params_ left out the searched law's nu: RandomFeatureOperator(**best_params_) of a
    rational quadratic winner searched at nu=0.5 was the inverse quadratic model (nu None, a = 1),
    another model without a word, and a Student-t winner's raised 'needs the degrees of freedom'."""
    U, V = _nonlinear_data(60)
    search = RandomFeatureOperatorCV(
        **staged(n_features=40, distributions=(law,), nu=0.5, random_state=0)
    ).fit(U, V)
    assert search.best_params_["nu"] == 0.5
    again = RandomFeatureOperator(**search.best_params_, random_state=search.random_state_).fit(
        U, V
    )
    np.testing.assert_array_equal(again.predict(U[:5]), search.predict(U[:5]))
    other = RandomFeatureOperatorCV(
        **staged(n_features=40, distributions=("cauchy",), nu=0.5, random_state=0)
    ).fit(U, V)
    assert "nu" not in other.best_params_  # a law that takes none


def _duplicated_rows(seed):
    """Training inputs repeated twice: a Gram singular to rounding, on which a float32 refit's
    jitter policy raises a nugget of 1e-12 (the search scores it in float64, where it is above the
    rounding floor of the Gram)."""
    U = np.random.default_rng(seed).standard_normal((40, 3))
    U = np.concatenate([U, U])
    return U, np.sin(U) @ np.ones((3, 2))


@pytest.mark.parametrize("search", ["kernel", "rf", "rf_primal"])
def test_the_refit_is_the_model_the_search_validated(search):
    """float32 input: the searches validate in float64 and refitted the winner in float32, whose
    Cholesky could not take the validated ridge (a Gram singular to rounding): the refit raised
    it (1e-12 to 1e-5 here) and best_params_ named the raised ridge, a model never validated
    (test errors 1.6-6x worse on Navier-Stokes and Helmholtz). The refit is now the validated
    model: its parameters are best_params_, and refitted on the search's training rows it
    scores the validation error reported."""
    from sklearn.base import clone

    from rfol_dask.baselines import KernelOperatorCV

    U, V = (a.astype(np.float32) for a in _duplicated_rows(0))
    cv = (
        KernelOperatorCV(kernels=("rbf",), length_scales=(1.0,), nuggets=(1e-12, 1e-6))
        if search == "kernel"
        else RandomFeatureOperatorCV(
            n_features=200 if search == "rf" else 48,  # 48 < 64 training rows: the primal
            distributions=("gaussian",),
            random_state=0,
        )
    ).fit(U, V)
    name = "nugget" if search == "kernel" else "alpha"
    row = {k: v[cv.best_index_] for k, v in cv.cv_results_.items()}
    assert cv.best_params_[name] == row[name] == cv.best_estimator_.get_params()[name]
    assert cv.best_params_.items() <= cv.best_estimator_.get_params().items()
    train, valid = np.arange(64), np.arange(64, 80)  # the default split: the last 20 %
    again = clone(cv.best_estimator_).fit(U[train], V[train])
    error = relative_l2_error(V[valid], again.predict(U[valid]))
    assert error == pytest.approx(row["mean_relative_l2"], rel=1e-6)


@pytest.mark.slow
def test_a_winner_whose_full_gram_cannot_take_its_ridge_refits_the_best_one_that_can(monkeypatch):
    """N = M = 1000 (a square Gram): the search validated alpha = 1e-16 on its 800 training rows,
    the refit on all 1000 could not factorise it and used 1e-15, and best_index_ and best_score_
    still named the 1e-16 candidate (validation error 9.3e-5; 1.7e-4 at 1e-15). The refit is
    now the best candidate validated at a ridge it could take, and the results name that one.
    Whether Cholesky takes 1e-16 there depends on the BLAS kernel's rounding (OpenBLAS's
    SkylakeX kernel failed, its Haswell one did not): the fit's factorisation is made to need
    1e-15 below it."""
    from rfol_dask import linalg
    from rfol_dask.exceptions import RidgeRaised

    factor = linalg.first_ridge

    def needs_1e15(attempt, alpha, mean_diag, dtype):
        if alpha >= 1e-15:
            return factor(attempt, alpha, mean_diag, dtype)
        linalg.warn_ridge(alpha, 1e-15, dtype)
        return factor(attempt, 1e-15, mean_diag, dtype)[0], 1e-15

    monkeypatch.setattr(linalg, "first_ridge", needs_1e15)

    rng = np.random.default_rng(0)
    x, k = np.arange(64) / 64, np.arange(1, 21)
    a = rng.standard_normal((1000, k.size)) / k
    basis = np.sin(2 * np.pi * np.outer(k, x))
    U = a @ basis
    V = (a * np.exp(-0.02 * k**2)) @ basis + 0.3 * U**2
    search = RandomFeatureOperatorCV(n_features=1000, distributions=("cauchy",), random_state=0)
    with pytest.warns(RidgeRaised, match="alpha=1e-16 .* used ridge 1e-15"):
        search.fit(U, V)
    res = search.cv_results_
    row = {key: v[search.best_index_] for key, v in res.items()}
    assert search.best_params_["alpha"] == row["alpha"] == search.best_estimator_.alpha == 1e-15
    assert search.best_params_.items() <= search.best_estimator_.get_params().items()
    assert search.best_score_ == row["mean_test_score"]
    # the best of the final stage at alpha >= 1e-15; the 1e-16 one it replaces scored better
    final = (res["stage"] == row["stage"]) & ~np.isnan(res["mean_test_score"])
    assert row["mean_test_score"] == np.max(res["mean_test_score"][final & (res["alpha"] >= 1e-15)])
    assert np.max(res["mean_test_score"][final]) > row["mean_test_score"]


@pytest.mark.slow
def test_default_searches_are_unchanged_by_the_grouped_stage_settings():
    """The stage settings moved into stages= and the refit's into refit=: a default search gives
    the best_params_ and cv_results_ it gave with the flat parameters (recorded before)."""
    from rfol_dask.baselines import KernelOperatorCV

    rng = np.random.default_rng(0)
    U = rng.standard_normal((300, 8))
    V = np.sin(U) @ rng.standard_normal((8, 5))
    before = {
        "rf": (
            {
                "distribution": "cauchy",
                "gamma": 0.014012922323760462,
                "alpha": 1e-11,
                "n_features": 200,
            },
            594,
            -0.05878985025098904,
        ),
        "grow": (
            {
                "distribution": "cauchy",
                "gamma": 0.014012922323760462,
                "alpha": 1e-08,
                "n_features": 512,
            },
            1440,
            -0.0342495889069176,
        ),
        "kernel": (
            {"kernel": "inverse_quadratic", "nugget": 1e-07, "length_scale": 15.388721150810634},
            378,
            -0.08496277101776474,
        ),
    }
    searches = {
        "rf": RandomFeatureOperatorCV(n_features=200, random_state=0, refit=False),
        "grow": RandomFeatureOperatorCV(
            n_features=128, max_features=512, random_state=0, refit=False
        ),
        "kernel": KernelOperatorCV(refit=False),
    }
    for name, cv in searches.items():
        params, n_rows, score = before[name]
        cv.fit(U, V)
        assert cv.best_params_.keys() == params.keys()
        for k, v in params.items():
            expected = v if isinstance(v, str) or v is None else pytest.approx(v, rel=1e-9)
            assert cv.best_params_[k] == expected, k
        assert len(cv.cv_results_["stage"]) == n_rows
        assert cv.best_score_ == pytest.approx(score, rel=1e-6)


def test_a_float32_refit_is_searched_above_the_rounding_of_float32():
    """dtype="float32": the refit cannot take a nugget below the rounding floor of float32 (a
    float32 Cholesky raised 1e-12 to 5e-6 here), so none is scored: a grid all below it is
    refused, and the winner above it is the model refitted."""
    from rfol_dask.baselines import KernelOperatorCV

    kw = dict(kernels=("rbf",), length_scales=(1.0,), stages={"coarse": None}, dtype="float32")
    with pytest.raises(ValueError, match="below the rounding floor"):
        KernelOperatorCV(nuggets=(1e-12,), **kw).fit(*_duplicated_rows(0))
    search = KernelOperatorCV(nuggets=(1e-12, 1e-4), **kw).fit(*_duplicated_rows(0))
    assert search.best_params_["nugget"] == search.best_estimator_.nugget == 1e-4


@pytest.mark.parametrize("make", ["rf", "kernel"])
@pytest.mark.slow
def test_folds_whose_validation_outputs_are_all_zero_are_left_out_with_a_warning(make):
    """K folds of sorted data (iris's labels: 0 0 ... 1 1 ... 2 2 ...) refused to fit: "every
    validation output is identically zero". A fold where the relative error is undefined is now
    left out, named in a warning; the search scores the others (on dask input too); with no fold
    left, a ValueError says what to do."""
    import warnings

    from sklearn.datasets import load_iris

    from rfol_dask.baselines import KernelOperatorCV

    U, y = load_iris(return_X_y=True)
    make_search = {
        "rf": lambda **kw: RandomFeatureOperatorCV(
            **staged(n_features=100, random_state=0, **SMALL, **kw)
        ),
        "kernel": lambda **kw: KernelOperatorCV(
            **staged(length_scales=(0.5, 2.0), nuggets=(1e-6, 1e-2), **kw)
        ),
    }[make]
    with pytest.warns(
        UserWarning,
        match=r"cv split\(s\) 0 of 5 have only identically zero validation outputs.*"
        r"left out of the search.*KFold\(5, shuffle=True",
    ) as caught:
        search = make_search(cv=5).fit(U, y.astype(float))
    assert {w.filename for w in caught if "cv split" in str(w.message)} == {
        __file__
    }  # the user's line
    assert search.n_splits_ == 4 and "split3_test_score" in search.cv_results_
    assert "split4_test_score" not in search.cv_results_
    assert np.isfinite(search.best_score_)
    with pytest.warns(UserWarning, match=r"cv split\(s\) 0 of 5"):
        lazy = make_search(cv=5).fit(
            da.from_array(U, chunks=50), da.from_array(y.astype(float), chunks=50)
        )
    assert lazy.best_params_ == search.best_params_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (
            make_search(cv=KFold(5, shuffle=True, random_state=0)).fit(U, y.astype(float)).n_splits_
            == 5
        )
    with pytest.raises(
        ValueError,
        match=r"every validation output of the 1 split\(s\) is identically zero.*"
        r"pass a cv whose validation rows",
    ):
        make_search().fit(
            U[::-1], y[::-1].astype(float)
        )  # the default split: the last 20 %, all zero


@pytest.mark.cluster
@pytest.mark.slow
def test_folds_with_all_zero_outputs_are_left_out_of_a_search_on_the_workers(cluster_client):
    """As above, with the outputs persisted on a distributed cluster."""
    from sklearn.datasets import load_iris

    U, y = load_iris(return_X_y=True)
    kw = dict(n_features=100, random_state=0, cv=5, **SMALL)
    with cluster_client.as_current(), pytest.warns(UserWarning, match=r"cv split\(s\) 0 of 5"):
        lazy = RandomFeatureOperatorCV(**staged(**kw)).fit(
            da.from_array(U, chunks=50), da.from_array(y.astype(float), chunks=50)
        )
    assert lazy.n_splits_ == 4
    with pytest.warns(UserWarning, match=r"cv split\(s\) 0 of 5"):
        assert (
            lazy.best_params_
            == RandomFeatureOperatorCV(**staged(**kw)).fit(U, y.astype(float)).best_params_
        )
