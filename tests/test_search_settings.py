"""The searches' settings: cv as indices, masks, generators or nothing; refit=False; dtype;
empty law lists; the ridge a search reports is the one its refit uses."""

import dask.array as da
import numpy as np
import pytest
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperatorCV


def test_cv_splits_as_masks_and_bad_indices():
    U, V = smooth_operator_data(60, 8)
    kw = dict(
        n_features=40, distributions=("gaussian",), gammas=(1.0,), alphas=(1e-8,), random_state=0
    )
    rows = np.arange(60)
    by_index = RandomFeatureOperatorCV(cv=[(rows[:45], rows[45:])], **kw).fit(U, V)
    by_mask = RandomFeatureOperatorCV(cv=[(rows < 45, rows >= 45)], **kw).fit(U, V)
    assert by_mask.best_score_ == by_index.best_score_
    with pytest.raises(ValueError, match=r"validation rows hold indices outside \[0, 60\)"):
        RandomFeatureOperatorCV(cv=[(rows[:45], np.arange(45, 70))], **kw).fit(U, V)
    with pytest.raises(ValueError, match=r"training mask has shape \(50,\), expected \(60,\)"):
        RandomFeatureOperatorCV(cv=[(rows[:50] < 45, rows >= 45)], **kw).fit(U, V)


@pytest.mark.parametrize("search", ["rf", "kernel"])
def test_a_cv_without_splits_or_with_an_empty_side_is_named(search):
    """A generator cv used up by the first fit, and cv=[], failed with 'min() arg is an empty
    sequence'; a split with no validation rows was told to 'pass more samples'."""
    from sklearn.model_selection import KFold

    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(60, 8)
    make = {
        "rf": lambda cv: RandomFeatureOperatorCV(
            n_features=20, distributions=("gaussian",), gammas=(1.0,), random_state=0, cv=cv
        ),
        "kernel": lambda cv: KernelOperatorCV(kernels=("rbf",), length_scales=(1.0,), cv=cv),
    }[search]
    model = make(KFold(3).split(U)).fit(U, V)
    assert model.n_splits_ == 3
    for again in (model, make([])):
        with pytest.raises(ValueError, match="cv gave no splits"):
            again.fit(U, V)
    rows = np.arange(60)
    with pytest.raises(ValueError, match=r"split 1 has 50 / 0 of n_samples = 60"):
        make([(rows[:50], rows[50:]), (rows[:50], rows[:0])]).fit(U, V)
    with pytest.raises(ValueError, match=r"split 0 has 0 / 10 of n_samples = 60"):
        make([(np.array([], dtype=int), rows[50:])]).fit(U, V)


@pytest.mark.parametrize("search", ["rf", "kernel"])
def test_a_search_without_refit_says_so_and_keeps_no_earlier_winner(tmp_path, search):
    """refit=False: predict said 'not fitted yet. Call fit' though best_params_ was set; and a
    refit=True fit's best_estimator_ stayed on after a refit=False fit, predicting for other
    parameters than best_params_."""
    from sklearn.exceptions import NotFittedError

    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(60, 8)

    def make(**kw):
        if search == "rf":
            return RandomFeatureOperatorCV(
                n_features=20, distributions=("gaussian",), random_state=0, **kw
            )
        return KernelOperatorCV(kernels=("rbf",), **kw)

    name = type(make()).__name__
    model = make(refit=False).fit(U, V)
    for call, method in (
        (lambda: model.predict(U), "predict"),
        (lambda: model.score(U, V), "score"),
        (lambda: model.save(tmp_path / "m"), "save"),
    ):
        with pytest.raises(NotFittedError, match=rf"{name} .*refit=False.*{method}.*best_params_"):
            call()
    model = make().fit(U, V)
    model.set_params(refit=False).fit(U[:40], V[:40])
    assert (
        model.best_params_
        and not hasattr(model, "best_estimator_")
        and not hasattr(model, "refit_time_")
    )
    with pytest.raises(NotFittedError, match="initialized with refit=False"):
        model.predict(U)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        type(model)().predict(U)


@pytest.mark.slow
def test_cv_search_with_dtype_float32_is_the_same_for_numpy_and_dask():
    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(80, 8)
    Ud, Vd = da.from_array(U, chunks=20), da.from_array(V, chunks=20)
    for make in (
        lambda: RandomFeatureOperatorCV(
            n_features=60, distributions=("gaussian",), random_state=0, dtype="float32"
        ),
        lambda: KernelOperatorCV(kernels=("rbf",), dtype="float32"),
    ):
        a, b = make().fit(U, V), make().fit(Ud, Vd)
        assert a.best_params_ == b.best_params_
        np.testing.assert_allclose(
            a.cv_results_["mean_test_score"], b.cv_results_["mean_test_score"], rtol=1e-9
        )
        assert a.best_estimator_.intercept_.dtype == np.float32  # the refit works in dtype


def test_empty_law_lists_and_the_load_hint_of_a_search():
    from rfol_dask.baselines import KernelOperatorCV

    U, V = smooth_operator_data(30, 4)
    with pytest.raises(ValueError, match="distributions is empty"):
        RandomFeatureOperatorCV(distributions=[]).fit(U, V)
    with pytest.raises(ValueError, match="kernels is empty"):
        KernelOperatorCV(kernels=[]).fit(U, V)
    with pytest.raises(TypeError, match=r"KernelOperator\.load\(path\)"):
        KernelOperatorCV.load("m.zarr")


def _kernel_cv_case(name):
    from rfol_dask import datasets
    from rfol_dask.baselines import KernelOperatorCV

    ds = datasets.generate(name, 120, seed=0)
    return KernelOperatorCV(), ds.isel(sample=slice(0, 90)), ds.isel(sample=slice(90, 120))


def _rf_float32_case(name):
    from rfol_dask import datasets

    ds = datasets.generate(name, 120, seed=0).astype("float32")
    return (
        RandomFeatureOperatorCV(n_features=200, random_state=0),
        ds.isel(sample=slice(0, 90)),
        ds.isel(sample=slice(90, 120)),
    )


@pytest.mark.parametrize(
    "case", [(_kernel_cv_case, "advection1"), (_rf_float32_case, "advection1")]
)
@pytest.mark.slow
def test_a_search_refits_the_ridge_it_reports_without_warning(case):
    """KernelOperatorCV picked nugget=1e-16, which the refit's Gram could not factorise: the refit
    warned as if the user had passed it (an error under -W error) and used 1e-14, which nothing
    recorded (RandomFeatureOperatorCV on float32 data: alpha=1e-16, used 2.9e-9)."""
    import warnings

    make, name = case
    search, train, test = make(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        search.fit(train)
    best = search.best_estimator_
    by_hand = type(best)(**best.get_params()).set_params(**search.best_params_)
    assert by_hand.get_params() == best.get_params()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        by_hand.fit(train)
    np.testing.assert_array_equal(
        np.asarray(by_hand.predict(test)), np.asarray(search.predict(test))
    )
