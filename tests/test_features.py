import threading

import numpy as np
import pytest
from conftest import smooth_operator_data
from scipy import integrate, stats
from threadpoolctl import threadpool_limits

from rfol_dask import RandomFeatureOperator
from rfol_dask.features import check_random_state, draw_frequencies, feature_map


def _kernel_estimate(x, y, distribution, gamma, nu=None, n_features=400_000, seed=0):
    omega, b = draw_frequencies(x.size, n_features, distribution, gamma, nu, seed)
    px = feature_map(x[None, :], omega, b)[0]
    py = feature_map(y[None, :], omega, b)[0]
    return float(px @ py)


@pytest.mark.parametrize("gamma", [0.3, 1.5])
@pytest.mark.slow
def test_cauchy_features_approximate_laplace_l1_kernel(gamma):
    rng = np.random.default_rng(1)
    for _ in range(3):
        x, y = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4)
        exact = np.exp(-gamma * np.abs(x - y).sum())
        est = _kernel_estimate(x, y, "cauchy", gamma)
        # Monte-Carlo error of a mean of N terms bounded by 2/N * 1: sd <= sqrt(2/N)
        assert abs(est - exact) < 5 * np.sqrt(2 / 400_000), (est, exact)


@pytest.mark.parametrize("gamma", [0.2, 2.0])
@pytest.mark.slow
def test_gaussian_features_approximate_rbf_kernel(gamma):
    rng = np.random.default_rng(2)
    for _ in range(3):
        x, y = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
        exact = np.exp(-gamma * ((x - y) ** 2).sum())
        est = _kernel_estimate(x, y, "gaussian", gamma)
        assert abs(est - exact) < 5 * np.sqrt(2 / 400_000), (est, exact)


def test_student_t_features_approximate_their_scale_mixture_kernel():
    # omega = gamma * sqrt(nu / w) z, w ~ chi2_nu: E cos(omega.d) = E_w exp(-gamma^2 |d|^2 nu / (2
    # w))
    nu, gamma = 3.0, 0.8
    x, y = np.array([0.1, -0.4]), np.array([0.7, 0.2])
    r2 = ((x - y) ** 2).sum()
    exact, _ = integrate.quad(
        lambda w: np.exp(-(gamma**2) * r2 * nu / (2 * w)) * stats.chi2.pdf(w, nu), 0, np.inf
    )
    est = _kernel_estimate(x, y, "student_t", gamma, nu=nu)
    assert abs(est - exact) < 5 * np.sqrt(2 / 400_000), (est, exact)


@pytest.mark.parametrize("nu, a", [(None, 1.0), (2.0, 2.0)])
@pytest.mark.slow
def test_rational_quadratic_features_approximate_their_kernel(nu, a):
    # omega = sqrt(2 gamma t / a) g, t ~ Gamma(a, 1): E cos(omega.d) = E_t exp(-gamma t |d|^2 / a)
    # = (1 + gamma |d|^2 / a)^-a. The feature inner product is the mean of
    # cos(omega.d) + cos(omega.(x + y) + 2 b) over N features: the second term has mean 0 and
    # variance 1/2 and is uncorrelated with the first, whose variance is (1 + k(2d)) / 2 - k(d)^2.
    N, gamma = 200_000, 0.6
    rng = np.random.default_rng(4)
    kernel = lambda r2: (1 + gamma * r2 / a) ** -a  # noqa: E731
    omega, b = draw_frequencies(4, N, "rational_quadratic", gamma, nu, 5)
    for _ in range(3):
        x, y = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4)
        r2 = ((x - y) ** 2).sum()
        exact = kernel(r2)
        sd = np.sqrt(((1 + kernel(4 * r2)) / 2 - exact**2 + 0.5) / N)
        est = float(feature_map(x[None, :], omega, b)[0] @ feature_map(y[None, :], omega, b)[0])
        assert abs(est - exact) < 4 * sd, (est, exact, sd)  # 4 sd: about 7e-3
        # Bochner's mean alone (no phase term): a tighter check of the law
        cf, sd_cf = (
            np.cos((x - y) @ omega).mean(),
            np.sqrt(((1 + kernel(4 * r2)) / 2 - exact**2) / N),
        )
        assert abs(cf - exact) < 4 * sd_cf, (cf, exact, sd_cf)
        # the check tells the law from its neighbours: the Gaussian of the same gamma, and the
        # mixture without the 1 / a (kernel (1 + gamma |d|^2)^-a)
        assert abs(np.exp(-gamma * r2) - exact) > 8 * sd
        if a != 1:
            assert abs((1 + gamma * r2) ** -a - exact) > 8 * sd


def test_frequencies_depend_only_on_seed_and_share_draw_across_dtypes():
    o1, b1 = draw_frequencies(5, 7, "cauchy", 2.0, None, 3)
    o2, b2 = draw_frequencies(5, 7, "cauchy", 2.0, None, 3, dtype=np.float32)
    np.testing.assert_array_equal(o1.astype(np.float32), o2)
    assert o2.dtype == np.float32 and b2.dtype == np.float32
    o3, _ = draw_frequencies(5, 7, "cauchy", 2.0, None, 4)
    assert not np.allclose(o1, o3)


def test_bad_distribution_and_random_state():
    with pytest.raises(ValueError, match="unknown distribution 'laplace'"):
        draw_frequencies(2, 3, "laplace")
    with pytest.raises(ValueError, match="nu > 0"):
        draw_frequencies(2, 3, "student_t", nu=None)
    with pytest.raises(ValueError, match="shape nu > 0"):
        draw_frequencies(2, 3, "rational_quadratic", nu=-1.0)
    with pytest.raises(TypeError, match="random_state"):
        check_random_state("seed")


@pytest.mark.parametrize(
    "distribution,nu",
    [
        ("cauchy", None),
        ("gaussian", None),
        ("student_t", 3.0),
        ("rational_quadratic", None),
        ("rational_quadratic", 2.5),
    ],
)
def test_frequency_slabs_and_prefixes_are_the_same_draw(distribution, nu):
    omega, b = draw_frequencies(6, 700, distribution, 0.5, nu, 11)
    slab = draw_frequencies(
        6, 700, distribution, 0.5, nu, 11, columns=(250, 530)
    )  # across block edges
    np.testing.assert_array_equal(slab[0], omega[:, 250:530])
    np.testing.assert_array_equal(slab[1], b[250:530])
    small = draw_frequencies(6, 300, distribution, 0.5, nu, 11)  # nested: the first 300 of 700
    np.testing.assert_array_equal(small[0], omega[:, :300])
    np.testing.assert_array_equal(small[1], b[:300])


@pytest.mark.parametrize("distribution,nu", [("cauchy", None), ("student_t", 3.0)])
@pytest.mark.slow
def test_frequencies_do_not_depend_on_threads_or_namespace(distribution, nu):
    """Large draws are spread over threads (one stream per block) and can be placed in another
    namespace block by block (CuPy: the GPU); the values are those of the serial numpy draw."""
    xs = pytest.importorskip("array_api_strict")
    from threadpoolctl import threadpool_limits

    from rfol_dask import features

    with threadpool_limits(limits=1, user_api="blas"):
        serial = draw_frequencies(2048, 1100, distribution, 0.5, nu, 3, columns=(100, 1100))
    assert 2048 * 1000 >= 2**20  # large enough for the threaded draw
    with threadpool_limits(limits=3, user_api="blas"):
        assert features.blas_threads() == 3
        threaded = draw_frequencies(2048, 1100, distribution, 0.5, nu, 3, columns=(100, 1100))
        placed = draw_frequencies(
            2048, 1100, distribution, 0.5, nu, 3, dtype=np.float32, columns=(100, 1100), xp=xs
        )
    for s, t, p in zip(serial, threaded, placed, strict=False):
        np.testing.assert_array_equal(t, s)
        assert p.dtype == xs.float32
        np.testing.assert_array_equal(np.asarray(p), s.astype(np.float32))


@pytest.mark.parametrize(
    "seed",
    [lambda: 5, lambda: np.random.RandomState(5), lambda: np.random.default_rng(5)],
    ids=["int", "RandomState", "Generator"],
)
def test_every_kind_of_seed_gives_a_reproducible_model(seed):
    U, V = smooth_operator_data(50, 8)
    first = RandomFeatureOperator(n_features=60, random_state=seed()).fit(U, V)
    again = RandomFeatureOperator(n_features=60, random_state=seed()).fit(U, V)
    np.testing.assert_array_equal(first.omega_, again.omega_)
    np.testing.assert_array_equal(first.coef_, again.coef_)
    other = RandomFeatureOperator(n_features=60, random_state=6).fit(U, V)
    assert not np.allclose(first.omega_, other.omega_)


def test_draw_frequencies_takes_a_random_state():
    a = draw_frequencies(3, 10, random_state=np.random.RandomState(1))
    b = draw_frequencies(3, 10, random_state=np.random.RandomState(1))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.slow
def test_feature_map_on_several_threads_matches_one_thread():
    """A block of over 2^20 entries: the elementwise passes run on as many threads as the BLAS
    may use, slab by slab, and give exactly the one-thread result."""
    U = np.random.default_rng(0).standard_normal((1200, 6))
    omega, b = draw_frequencies(6, 1000, random_state=0)
    shift = np.linspace(-0.01, 0.01, 1000)
    with threadpool_limits(limits=1, user_api="blas"):
        one = feature_map(U, omega, b, shift=shift)
    with threadpool_limits(limits=4, user_api="blas"):
        many = feature_map(U, omega, b, shift=shift)
    assert any(t.name.startswith("rfol-features") for t in threading.enumerate())
    np.testing.assert_array_equal(many, one)
    np.testing.assert_allclose(
        one, np.sqrt(2 / 1000) * np.cos(U @ omega + b) - shift, rtol=1e-12, atol=1e-12
    )
