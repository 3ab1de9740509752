import dask.array as da
import numpy as np
import pytest
from conftest import smooth_operator_data
from sklearn.decomposition import PCA
from sklearn.gaussian_process.kernels import RBF, Matern, RationalQuadratic
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from rfol_dask.baselines import KernelOperator

SKLEARN = {"rbf": RBF(1.3), "matern12": Matern(1.3, nu=0.5), "matern32": Matern(1.3, nu=1.5),
           "matern52": Matern(1.3, nu=2.5), "inverse_quadratic": RationalQuadratic(1.3, alpha=1.0)}


@pytest.mark.parametrize("kernel", sorted(SKLEARN))
def test_matches_sklearn_kernel_ridge(kernel):
    U, V = smooth_operator_data(150, 12)
    Ut, _ = smooth_operator_data(40, 12, seed=1)
    model = KernelOperator(kernel=kernel, length_scale=1.3, nugget=1e-4, fit_intercept=False).fit(U, V)
    ref = KernelRidge(alpha=1e-4, kernel=SKLEARN[kernel]).fit(U, V)
    np.testing.assert_allclose(model.predict(Ut), ref.predict(Ut), rtol=1e-8, atol=1e-10)


def test_intercept_is_feature_space_centring():
    U, V = smooth_operator_data(120, 10)
    Ut, _ = smooth_operator_data(30, 10, seed=2)
    model = KernelOperator(kernel="rbf", length_scale=0.9, nugget=1e-3).fit(U, V)
    K, Kt = RBF(0.9)(U), RBF(0.9)(Ut, U)
    H = np.eye(len(U)) - 1.0 / len(U)
    Beta = np.linalg.solve(H @ K @ H + 1e-3 * np.eye(len(U)), V - V.mean(0))
    Beta -= Beta.mean(0)
    ref = Kt @ Beta - K.mean(0) @ Beta + V.mean(0)
    np.testing.assert_allclose(model.predict(Ut), ref, rtol=1e-9, atol=1e-10)


def test_linear_kernel_is_ridge_on_raw_inputs():
    U, V = smooth_operator_data(100, 16)
    model = KernelOperator(kernel="linear", nugget=0.1).fit(U, V)
    np.testing.assert_allclose(model.predict(U), Ridge(alpha=0.1).fit(U, V).predict(U), rtol=1e-9, atol=1e-10)


def test_input_pca():
    U, V = smooth_operator_data(150, 24)
    model = KernelOperator(kernel="rbf", length_scale=1.0, nugget=1e-4, n_components=5, fit_intercept=False).fit(U, V)
    scores = PCA(5).fit(U)
    ref = KernelRidge(alpha=1e-4, kernel=RBF(1.0)).fit(scores.transform(U), V)
    np.testing.assert_allclose(model.predict(U[:20]), ref.predict(scores.transform(U[:20])), rtol=1e-7, atol=1e-9)
    assert model.pca_components_.shape == (24, 5) and model.X_train_.shape == (150, 5)


@pytest.mark.parametrize("n_components", [None, 4])
def test_dask_input_same_model_in_memory_and_blocked(n_components):
    U, V = smooth_operator_data(180, 12)
    ref = KernelOperator(kernel="matern52", length_scale=1.1, nugget=1e-4, n_components=n_components).fit(U, V)
    Ud, Vd = da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
    model = KernelOperator(kernel="matern52", length_scale=1.1, nugget=1e-4, n_components=n_components).fit(Ud, Vd)
    np.testing.assert_allclose(model.predict(U), ref.predict(U), rtol=1e-9, atol=1e-10)
    with pytest.warns(RuntimeWarning, match="blocked"):
        blocked = KernelOperator(kernel="matern52", length_scale=1.1, nugget=1e-4, n_components=n_components,
                                 max_gram_bytes=1000).fit(Ud, Vd)
    np.testing.assert_allclose(blocked.predict(Ud).compute(), ref.predict(U), rtol=1e-8, atol=1e-9)


def test_blocked_linear_kernel_raises_the_ridge_as_in_memory():
    # a singular linear Gram with a large diagonal: the raised ridges follow its mean diagonal
    rng = np.random.default_rng(0)
    U = 100 * rng.standard_normal((80, 6))
    V = U @ rng.standard_normal((6, 3))

    def ridge_used(X, Y, **kw):
        with pytest.warns(RuntimeWarning, match="used ridge") as record:
            KernelOperator(kernel="linear", nugget=1e-20, **kw).fit(X, Y)
        return [str(w.message) for w in record if "used ridge" in str(w.message)]

    in_memory = ridge_used(U, V)
    blocked = ridge_used(da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1)), max_gram_bytes=1000)
    # the factorisation in a task of dask's threaded scheduler names the nugget too
    streamed = ridge_used(da.from_array(U, chunks=(20, -1)), da.from_array(V, chunks=(20, -1)))
    assert blocked == in_memory == streamed
    assert len(in_memory) == 1 and "plus nugget=1e-20" in in_memory[0] and "a larger nugget" in in_memory[0]


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
def test_float32_distances_survive_a_large_common_offset(kernel):
    # |x|^2 + |y|^2 - 2 x.y in float32 lost every digit at an offset 1000 x the spread
    U, V = smooth_operator_data(150, 16)
    U = U / U.std() + 1000.0
    f64 = KernelOperator(kernel=kernel, length_scale=2.0, nugget=1e-4).fit(U[:100], V[:100])
    f32 = KernelOperator(kernel=kernel, length_scale=2.0, nugget=1e-4).fit(U[:100].astype(np.float32),
                                                                          V[:100].astype(np.float32))
    expected = f64.predict(U[100:])
    assert np.linalg.norm(f32.predict(U[100:].astype(np.float32)) - expected) < 1e-3 * np.linalg.norm(expected)


def test_save_load_and_errors(tmp_path):
    U, V = smooth_operator_data(60, 8)
    model = KernelOperator(kernel="inverse_quadratic", length_scale=1.0, nugget=1e-5, n_components=3).fit(U, V)
    model.save(tmp_path / "k.zarr")
    again = KernelOperator.load(tmp_path / "k.zarr")
    np.testing.assert_allclose(again.predict(U), model.predict(U), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="'kernel' parameter of KernelOperator must be a str among"):
        KernelOperator(kernel="laplace").fit(U, V)
    with pytest.raises(ValueError, match="U contains NaN or infinity"):
        KernelOperator().fit(np.where(U > 0.5, np.nan, U), V)


@parametrize_with_checks([KernelOperator(length_scale=3.0, nugget=1e-6)])
def test_sklearn_compatible(estimator, check):
    check(estimator)
