"""The PCA input metric (``pca_power``): its matrix, the draw through it, the models that use it."""

import dask.array as da
import numpy as np
import pytest
from conftest import rel

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.features import draw_frequencies
from rfol_dask.tuning import input_scales, median_gammas, pca_metric


@pytest.fixture
def smooth():
    """Inputs in a 6-dimensional subspace of a 40-point grid, component scales 1 .. 1/32."""
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((40, 6)))[0]
    U = (rng.standard_normal((300, 6)) * 2.0 ** -np.arange(6)) @ basis.T + 0.3
    V = np.tanh(U[:, ::2] + U[:, 1::2] ** 2)
    return U, V, basis


def test_pca_metric_weights_the_principal_directions(smooth):
    U, _, basis = smooth
    T = pca_metric(U, 0.5)
    assert T.shape == (40, 6)  # the null directions of the sample are left out
    _, s, Vt = np.linalg.svd(U - U.mean(0), full_matrices=False)
    np.testing.assert_allclose(np.linalg.norm(T, axis=0), (s[:6] / s[0]) ** 0.5, rtol=1e-10)
    np.testing.assert_allclose(np.abs(T.T @ Vt[:6].T), np.diag((s[:6] / s[0]) ** 0.5), atol=1e-10)
    # power 0: Euclidean distances of the inputs (they lie in the span)
    T0 = pca_metric(U, 0.0)
    d = U[1:20] - U[0]
    np.testing.assert_allclose(
        np.linalg.norm(d @ T0, axis=1), np.linalg.norm(d, axis=1), rtol=1e-10
    )
    # a strongly whitening power drops the directions whose share is negligible
    assert pca_metric(U, 3.0, rtol=1e-3).shape[1] < 6
    np.testing.assert_array_equal(pca_metric(np.ones((5, 3)), 1.0), np.eye(3))


@pytest.mark.slow
def test_the_metric_has_one_sign_so_a_seed_gives_one_model():
    """The principal directions' signs are arbitrary: on these inputs those of the inputs rounded to
    float32 came out flipped, and the model of one seed drawn through them (``Omega = T Omega_r``)
    predicted 11 % differently. Each direction now has one sign, whatever LAPACK returns."""
    from conftest import smooth_operator_data

    U, V = smooth_operator_data(150, 16)
    Ut, _ = smooth_operator_data(40, 16, seed=1)
    rounded = U.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(pca_metric(-U, 1.0), pca_metric(U, 1.0), atol=1e-12)
    np.testing.assert_allclose(pca_metric(rounded, 1.0), pca_metric(U, 1.0), atol=1e-6)
    model = RandomFeatureOperator(n_features=200, alpha=1e-4, pca_power=1.0, random_state=0)
    want = model.fit(U, V).predict(Ut)
    assert rel(model.fit(rounded, V).predict(Ut), want) < 1e-4
    assert (
        rel(
            model.fit(U.astype(np.float32), V.astype(np.float32)).predict(Ut.astype(np.float32)),
            want,
        )
        < 1e-3
    )


def test_draw_through_a_metric_is_the_metric_times_the_draw_in_its_dimensions(smooth):
    T = pca_metric(smooth[0], 0.75)
    for law, nu in (
        ("cauchy", None),
        ("gaussian", None),
        ("student_t", 3.0),
        ("rational_quadratic", None),
    ):
        om_r, b_r = draw_frequencies(T.shape[1], 700, law, 0.3, nu, 5)
        om, b = draw_frequencies(40, 700, law, 0.3, nu, 5, metric=T)
        np.testing.assert_allclose(om, T @ om_r, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(b, b_r)
        slab, _ = draw_frequencies(40, 700, law, 0.3, nu, 5, metric=T, columns=(256, 600))
        np.testing.assert_allclose(slab, om[:, 256:600], rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="metric has 40 rows, expected n_inputs=39"):
        draw_frequencies(39, 10, metric=T)


def test_input_scales_without_power_are_the_median_gammas(smooth):
    U = smooth[0]
    T, g = input_scales(U, ["gaussian", "cauchy"], random_state=3)
    assert T is None and g == median_gammas(U, ["gaussian", "cauchy"], random_state=3)
    T, g = input_scales(U, ["gaussian"], 1.0, random_state=3)
    assert (
        T.shape[1] == 6
        and g["gaussian"] > median_gammas(U, ["gaussian"], random_state=3)["gaussian"]
    )
    with pytest.raises(ValueError, match="unknown distribution"):
        input_scales(da.from_array(U), ["laplace"], 1.0)


@pytest.mark.slow
def test_model_with_a_metric_is_the_model_of_the_mapped_inputs(smooth):
    """cos(u @ T omega_r + b) = cos((u @ T) @ omega_r + b): the same model as on the inputs mapped
    by ``T``, with the same seed and gamma; numpy and dask input agree; save / load keeps it."""
    U, V, _ = smooth
    kw = dict(n_features=400, gamma=0.2, alpha=1e-5, random_state=1)
    model = RandomFeatureOperator(pca_power=0.5, **kw).fit(U[:250], V[:250])
    T = model.input_metric_
    mapped = RandomFeatureOperator(**kw).fit(U[:250] @ T, V[:250])
    np.testing.assert_allclose(
        model.predict(U[250:]), mapped.predict(U[250:] @ T), rtol=1e-9, atol=1e-12
    )
    lazy = RandomFeatureOperator(pca_power=0.5, **kw).fit(
        da.from_array(U[:250], chunks=100), da.from_array(V[:250], chunks=100)
    )
    np.testing.assert_allclose(lazy.predict(U[250:]), model.predict(U[250:]), rtol=1e-9, atol=1e-12)
    median = RandomFeatureOperator(n_features=50, pca_power=0.5, random_state=1).fit(U, V)
    _, g = input_scales(U, ["cauchy"], 0.5, random_state=1)
    assert median.gamma_ == g["cauchy"]


@pytest.mark.slow
def test_cv_searches_in_the_metric_and_refits_with_it(smooth, tmp_path):
    U, V, _ = smooth
    cv = RandomFeatureOperatorCV(
        n_features=300,
        distributions=("gaussian",),
        gammas=(0.5, 2.0),
        alphas=(1e-8, 1e-4),
        pca_power=0.5,
        random_state=0,
    ).fit(U, V)
    assert cv.best_estimator_.pca_power == 0.5
    np.testing.assert_allclose(cv.best_estimator_.input_metric_, cv.input_metric_)
    plain = RandomFeatureOperatorCV(
        n_features=300,
        distributions=("gaussian",),
        gammas=(0.5, 2.0),
        alphas=(1e-8, 1e-4),
        random_state=0,
    ).fit(U, V)
    assert plain.input_metric_ is None and plain.best_score_ != cv.best_score_
    cv.save(tmp_path / "m")
    loaded = RandomFeatureOperator.load(tmp_path / "m")
    assert loaded.pca_power == 0.5
    np.testing.assert_allclose(loaded.predict(U[:5]), cv.predict(U[:5]), rtol=1e-12)


@pytest.mark.slow
def test_cv_searches_a_list_of_powers_as_separate_searches_on_one_read(smooth):
    """``pca_power=(None, 1.0)``: the better of the two searches made alone wins, with its
    parameters, score and metric; every row names its power; the refit uses the winner's."""
    U, V, _ = smooth
    kw = dict(
        n_features=300,
        distributions=("gaussian",),
        gammas=(0.5, 2.0),
        alphas=(1e-8, 1e-4),
        random_state=0,
    )
    alone = {q: RandomFeatureOperatorCV(pca_power=q, **kw).fit(U, V) for q in (None, 1.0)}
    both = RandomFeatureOperatorCV(pca_power=(None, 1.0), **kw).fit(U, V)
    winner = max(alone, key=lambda q: alone[q].best_score_)
    assert both.best_score_ == alone[winner].best_score_
    assert both.best_params_ == {**alone[winner].best_params_, "pca_power": winner}
    assert set(both.cv_results_["pca_power"]) == {None, 1.0}
    assert len(both.cv_results_["alpha"]) == sum(
        len(a.cv_results_["alpha"]) for a in alone.values()
    )
    assert both.best_estimator_.pca_power == winner
    np.testing.assert_allclose(both.predict(U[:5]), alone[winner].predict(U[:5]), rtol=1e-12)
    if winner is not None:
        np.testing.assert_allclose(both.input_metric_, alone[winner].input_metric_)
    with pytest.raises(
        ValueError, match="pca_power must be None, a number or a non-empty sequence"
    ):
        RandomFeatureOperatorCV(pca_power=[], **kw).fit(U, V)


@pytest.mark.slow
def test_kernel_operator_takes_the_same_metric(smooth):
    """KernelOperator(pca_power=q): its principal directions, weighted as the RF metric's (the
    same directions, up to sign, on the same rows), are the inputs of its kernel; the CV passes
    the power to every candidate and the refit."""
    from rfol_dask.baselines import KernelOperator, KernelOperatorCV

    U, V, _ = smooth
    model = KernelOperator(kernel="matern52", length_scale=1.0, nugget=1e-6, pca_power=1.0).fit(
        U[:250], V[:250]
    )
    T = pca_metric(U[:250], 1.0)
    assert model.pca_components_.shape == T.shape
    np.testing.assert_allclose(
        np.abs(model.pca_components_.T @ T), np.diag(np.sum(T * T, axis=0)), atol=1e-9
    )
    X = (U - model.pca_mean_) @ model.pca_components_
    mapped = KernelOperator(kernel="matern52", length_scale=1.0, nugget=1e-6).fit(X[:250], V[:250])
    np.testing.assert_allclose(
        model.predict(U[250:]), mapped.predict(X[250:]), rtol=1e-9, atol=1e-12
    )
    cv = KernelOperatorCV(
        kernels=("rbf",), length_scales=(0.5, 2.0), nuggets=(1e-6, 1e-3), pca_power=1.0
    ).fit(U, V)
    assert cv.best_estimator_.pca_power == 1.0 and cv.best_estimator_.pca_components_.shape[1] == 6


@pytest.mark.slow
def test_kernel_cv_searches_a_list_of_powers_as_the_rf_search_does(smooth):
    """KernelOperatorCV(pca_power=(None, 1.0)) was refused (one value only): it now runs a whole
    search per power, the better wins with its parameters, and the refit uses its power."""
    from rfol_dask.baselines import KernelOperatorCV

    U, V, _ = smooth
    kw = dict(kernels=("rbf",), length_scales=(0.5, 2.0), nuggets=(1e-6, 1e-3))
    alone = {q: KernelOperatorCV(pca_power=q, **kw).fit(U, V) for q in (None, 1.0)}
    both = KernelOperatorCV(pca_power=(None, 1.0), **kw).fit(U, V)
    winner = max(alone, key=lambda q: alone[q].best_score_)
    assert both.best_score_ == alone[winner].best_score_
    assert both.best_params_ == {**alone[winner].best_params_, "pca_power": winner}
    assert set(both.cv_results_["pca_power"]) == {None, 1.0}
    assert both.best_estimator_.pca_power == winner
    np.testing.assert_allclose(both.predict(U[:5]), alone[winner].predict(U[:5]), rtol=1e-10)
