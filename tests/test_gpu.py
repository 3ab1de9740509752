"""The estimators on a CUDA GPU through CuPy: skipped where CuPy or a GPU is missing.

Run on a GPU machine with ``python -m pytest -q tests/test_gpu.py`` (needs ``rfol-dask[gpu]``).
Every test compares with the CPU fit of the same seed (1e-8 relative, float64).
"""

import warnings

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
try:
    _GPUS = cupy.cuda.runtime.getDeviceCount()
except Exception:  # CUDARuntimeError: no driver
    _GPUS = 0
if _GPUS < 1:
    pytest.skip("no CUDA GPU visible to CuPy", allow_module_level=True)

from rfol_dask import RandomFeatureOperator, backend  # noqa: E402
from rfol_dask.baselines import KernelOperator  # noqa: E402

RTOL = 1e-8


def rel(a, b):
    a, b = backend.to_numpy(a), backend.to_numpy(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    U = rng.standard_normal((300, 8, 8))
    V = np.tanh(U.reshape(300, -1)[:, :20] @ rng.standard_normal((20, 30)) / 5)
    return U, V


@pytest.mark.parametrize("solver, N", [("dual", 600), ("primal", 150)])
def test_cupy_in_cupy_out_equals_cpu(data, solver, N):
    U, V = data
    kw = dict(n_features=N, gamma=0.05, alpha=1e-6, random_state=1, solver=solver)
    cpu = RandomFeatureOperator(**kw).fit(U, V)
    gpu = RandomFeatureOperator(**kw).fit(cupy.asarray(U), cupy.asarray(V))
    assert isinstance(gpu.coef_, cupy.ndarray) and isinstance(gpu.omega_, cupy.ndarray)
    pred = gpu.predict(cupy.asarray(U[:50]))
    assert isinstance(pred, cupy.ndarray) and pred.shape == (50, 30)
    assert rel(pred, cpu.predict(U[:50])) < RTOL
    assert rel(gpu.coef_, cpu.coef_) < 1e-6  # coefficients carry the Gram's conditioning


def test_device_cuda_numpy_in_numpy_out(data):
    U, V = data
    kw = dict(n_features=600, gamma=0.05, alpha=1e-6, random_state=2)
    cpu = RandomFeatureOperator(**kw).fit(U, V)
    gpu = RandomFeatureOperator(device="cuda", **kw).fit(U, V)
    assert isinstance(gpu.coef_, cupy.ndarray)
    pred = gpu.predict(U[:40])
    assert isinstance(pred, np.ndarray) and rel(pred, cpu.predict(U[:40])) < RTOL


def test_save_on_gpu_load_on_cpu(tmp_path, data):
    U, V = data
    gpu = RandomFeatureOperator(n_features=400, gamma=0.05, random_state=3).fit(cupy.asarray(U), cupy.asarray(V))
    want = backend.to_numpy(gpu.predict(cupy.asarray(U[:20])))
    gpu.save(tmp_path / "m")
    loaded = RandomFeatureOperator.load(tmp_path / "m")
    assert isinstance(loaded.coef_, np.ndarray)
    assert rel(loaded.predict(U[:20]), want) < RTOL


def test_kernel_operator_on_gpu(data):
    U, V = data
    kw = dict(kernel="matern52", length_scale=8.0, nugget=1e-6)
    cpu = KernelOperator(**kw).fit(U, V)
    gpu = KernelOperator(**kw).fit(cupy.asarray(U), cupy.asarray(V))
    assert rel(gpu.predict(cupy.asarray(U[:30])), cpu.predict(U[:30])) < RTOL


def test_jitter_policy_on_gpu():
    A = np.random.default_rng(4).standard_normal((60, 20))
    G = A @ A.T
    with pytest.warns(RuntimeWarning, match="used ridge"):
        _, r_cpu = backend.cholesky(np.asfortranarray(G.copy()), 1e-300)
    with pytest.warns(RuntimeWarning, match="used ridge"):
        L, r_gpu = backend.cholesky(cupy.asarray(G), 1e-300)
    # the same ladder of ridges (the GPU's reduction order may move the borderline by one step)
    assert 0.099 * r_cpu <= r_gpu <= 10.01 * r_cpu
    B = np.random.default_rng(5).standard_normal((60, 3))
    X = backend.to_numpy(backend.cho_solve(L, cupy.asarray(B)))
    Gr = G + r_gpu * np.eye(60)
    assert np.linalg.norm(Gr @ X - B) / (np.linalg.norm(Gr) * np.linalg.norm(X)) < 1e-12  # backward stable
    with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular"):
        backend.cholesky(cupy.zeros((5, 5)), 0.0)  # a zero pivot: potrf fails for certain


def test_dask_with_cupy_chunks(data):
    da = pytest.importorskip("dask.array")
    U, V = data
    U2 = U.reshape(300, -1)
    kw = dict(n_features=600, gamma=0.05, alpha=1e-6, random_state=6, solver="dual")
    cpu = RandomFeatureOperator(**kw).fit(U2, V)
    Ud = da.from_array(U2, chunks=100).map_blocks(cupy.asarray)
    Vd = da.from_array(V, chunks=100).map_blocks(cupy.asarray)
    model = RandomFeatureOperator(**kw).fit(Ud, Vd)  # follows the CuPy chunks: streamed dual on the GPU
    assert rel(model.coef_, cpu.coef_) < RTOL
    pred = model.predict(Ud[:50]).compute()
    assert isinstance(pred, cupy.ndarray) and rel(pred, cpu.predict(U2[:50])) < RTOL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numpy_chunks = RandomFeatureOperator(device="cuda", **kw).fit(da.from_array(U2, chunks=100),
                                                                       da.from_array(V, chunks=100))
    assert rel(numpy_chunks.coef_, cpu.coef_) < RTOL
