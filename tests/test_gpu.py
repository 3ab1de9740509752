"""The estimators on a CUDA GPU through CuPy: skipped where CuPy or a GPU is missing.

Run on a GPU machine with ``python -m pytest -q tests/test_gpu.py`` (needs ``rfol-dask[gpu]``).
The fits are compared with the CPU fit of the same seed (1e-8 relative, float64); the in-place
Cholesky with ``cupy.linalg.cholesky``; the in-memory dual's peak pool memory with the issue's
``1.2 x (8 M^2 + slab + U + V)``.
"""

import functools
import warnings

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
try:
    _GPUS = cupy.cuda.runtime.getDeviceCount()
except Exception:  # noqa: BLE001 (CuPy's CUDARuntimeError: no driver)
    _GPUS = 0
if _GPUS < 1:
    pytest.skip("no CUDA GPU visible to CuPy", allow_module_level=True)

from conftest import rel, same_scores  # noqa: E402

from rfol_dask import RandomFeatureOperator, backend  # noqa: E402
from rfol_dask.baselines import KernelOperator  # noqa: E402
from rfol_dask.features import draw_frequencies  # noqa: E402
from rfol_dask.solve.in_memory import fit_numpy  # noqa: E402

RTOL = 1e-8


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


@pytest.mark.parametrize("lazy", [False, True])
def test_gpu_fit_at_a_large_offset_is_centred_as_on_cpu(data, lazy):
    """float32 inputs 1e4 away from the origin: the GPU fits (in memory; dask, streamed) measure
    them from the CPU fit's centre, with its phases, and predict as it does."""
    import dask.array as da

    U, V = data
    U, V = (U.reshape(300, -1) + 1e4).astype(np.float32), V.astype(np.float32)
    kw = dict(n_features=400, gamma=0.05, alpha=1e-4, random_state=1)
    cpu = RandomFeatureOperator(**kw).fit(U, V)
    Ug, Vg = cupy.asarray(U), cupy.asarray(V)
    if lazy:
        Ug, Vg = (
            da.from_array(Ug, chunks=(40, -1), asarray=False),
            da.from_array(Vg, chunks=(40, -1), asarray=False),
        )
    gpu = RandomFeatureOperator(**kw).fit(Ug, Vg)
    np.testing.assert_array_equal(backend.to_numpy(gpu.input_centre_), cpu.input_centre_)
    np.testing.assert_array_equal(backend.to_numpy(gpu.b_), cpu.b_)
    pred = gpu.predict(cupy.asarray(U[:50]))
    assert rel(pred, cpu.predict(U[:50])) < 1e-4


def test_pca_power_on_gpu_equals_cpu(data):
    """The input metric is found on the host from a sample of the CuPy inputs; the draw through it
    and the fit run as without it."""
    U, V = data
    kw = dict(n_features=600, alpha=1e-6, random_state=3, pca_power=1.0)
    cpu = RandomFeatureOperator(**kw).fit(U, V)
    gpu = RandomFeatureOperator(**kw).fit(cupy.asarray(U), cupy.asarray(V))
    assert gpu.gamma_ == cpu.gamma_
    assert rel(gpu.predict(cupy.asarray(U[:40])), cpu.predict(U[:40])) < RTOL


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
    gpu = RandomFeatureOperator(n_features=400, gamma=0.05, random_state=3).fit(
        cupy.asarray(U), cupy.asarray(V)
    )
    want = backend.to_numpy(gpu.predict(cupy.asarray(U[:20])))
    gpu.save(tmp_path / "m")
    loaded = RandomFeatureOperator.load(tmp_path / "m")
    assert isinstance(loaded.coef_, np.ndarray)
    assert rel(loaded.predict(U[:20]), want) < RTOL


def test_device_cuda_xarray_in_numpy_backed_xarray_out(data):
    """xarray input with device="cuda" is fitted on the GPU and predicted as a DataArray of numpy
    values with the numpy fit's coordinates and attributes (lazily too, for dask-backed input)."""
    import xarray as xr

    U, V = data
    x = np.linspace(0.0, 1.0, 8)
    U = xr.DataArray(U, dims=("sample", "x", "y"), coords={"x": x, "y": x})
    V = xr.DataArray(
        V, dims=("sample", "z"), coords={"z": np.linspace(0.0, 1.0, 30)}, attrs={"units": "K"}
    )
    kw = dict(n_features=400, gamma=0.05, alpha=1e-6, random_state=14)
    want = RandomFeatureOperator(**kw).fit(U, V).predict(U[:20])
    model = RandomFeatureOperator(device="cuda", **kw).fit(U, V)
    assert isinstance(model.coef_, cupy.ndarray)
    for X in (U[:20], U[:20].chunk({"sample": 10})):
        pred = model.predict(X).compute()
        assert isinstance(pred, xr.DataArray) and isinstance(pred.data, np.ndarray)
        assert pred.dims == want.dims and pred.attrs == want.attrs
        np.testing.assert_array_equal(pred["z"].values, want["z"].values)
        assert rel(pred.values, want.values) < RTOL


@pytest.mark.parametrize(
    "kw",
    [dict(kernel="matern52", length_scale=8.0, nugget=1e-6), dict(kernel="linear", nugget=1e-8)],
)  # the linear kernel: its primal weights
def test_kernel_operator_saved_on_gpu_loads_and_predicts_on_cpu(tmp_path, data, kw):
    """A KernelOperator fitted on the GPU (CuPy input, and numpy with device="cuda") saves numpy
    (its training inputs and dual coefficients, or the linear kernel's primal weights) and loads
    to predict numpy input as the CPU fit does."""
    U, V = data
    want = KernelOperator(**kw).fit(U, V).predict(U[:30])
    for name, model in (
        ("cupy", KernelOperator(**kw).fit(cupy.asarray(U), cupy.asarray(V))),
        ("device", KernelOperator(device="cuda", **kw).fit(U, V)),
    ):
        model.save(tmp_path / name)
        loaded = KernelOperator.load(tmp_path / name)
        fitted = loaded.dual_coef_ if loaded.coef_ is None else loaded.coef_
        assert isinstance(fitted, np.ndarray)
        pred = loaded.predict(U[:30])
        assert isinstance(pred, np.ndarray) and rel(pred, want) < RTOL


@pytest.mark.parametrize(
    "kw",
    [dict(kernel="matern52", length_scale=8.0, nugget=1e-6), dict(kernel="linear", nugget=1e-8)],
)  # the linear kernel: its primal
def test_kernel_operator_on_gpu(data, kw):
    U, V = data
    cpu = KernelOperator(**kw).fit(U, V)
    gpu = KernelOperator(**kw).fit(cupy.asarray(U), cupy.asarray(V))
    assert (
        (gpu.coef_ is None) == (cpu.coef_ is None) == (kw["kernel"] != "linear")
    )  # 64 inputs, 300 samples
    assert rel(gpu.predict(cupy.asarray(U[:30])), cpu.predict(U[:30])) < RTOL


@pytest.mark.parametrize("est", ["random_features", "kernel"])
def test_cv_search_on_gpu_equals_cpu(data, est, monkeypatch):
    """The CV search of CuPy input runs on the GPU (every ridge path scored there) and finds the
    CPU search's errors and winner."""
    from rfol_dask import RandomFeatureOperatorCV, tuning
    from rfol_dask.baselines import KernelOperatorCV

    seen, real = set(), tuning.scored_rows
    monkeypatch.setattr(
        tuning, "scored_rows", lambda Vv: seen.add(type(Vv).__module__.split(".")[0]) or real(Vv)
    )
    if est == "random_features":
        cls, kw = (
            RandomFeatureOperatorCV,
            dict(
                n_features=(150, 300),
                max_features=600,
                gammas=(0.25, 1.0, 4.0),
                alphas=(1e-5, 1e-4, 1e-3, 1e-2),
                random_state=0,
            ),
        )
    else:
        cls, kw = KernelOperatorCV, dict(kernels=("rbf", "matern52"), nuggets=(1e-4, 1e-3, 1e-2))
    U, V = data
    cpu = cls(**kw).fit(U, V)
    seen.clear()
    gpu = cls(**kw).fit(cupy.asarray(U), cupy.asarray(V))
    assert seen == {"cupy"}
    assert gpu.best_params_ == cpu.best_params_
    same_scores(gpu, cpu, RTOL)
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
    assert (
        np.linalg.norm(Gr @ X - B) / (np.linalg.norm(Gr) * np.linalg.norm(X)) < 1e-12
    )  # backward stable
    with pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular"):
        backend.cholesky(cupy.zeros((5, 5)), 0.0)  # a zero pivot: potrf fails for certain


@pytest.mark.parametrize("order", ["C", "F"])
def test_cholesky_in_place_equals_cupy_cholesky(order):
    A = np.random.default_rng(7).standard_normal((300, 500))
    G0 = A @ A.T
    G = cupy.array(G0, order=order)
    L, ridge = backend.cholesky(G, 1e-6)
    assert ridge == 1e-6
    assert L.data.ptr == G.data.ptr and L.flags.f_contiguous  # G's own buffer, as cuSOLVER wants it
    want = cupy.linalg.cholesky(cupy.asarray(G0) + 1e-6 * cupy.eye(300))
    assert rel(cupy.tril(L), want) < 1e-12
    # potrf leaves the strict upper triangle (of the Fortran view) alone: the Gram is kept there
    assert bool(cupy.all(cupy.triu(L, 1) == cupy.asarray(np.triu(G0.T if order == "C" else G0, 1))))
    B = np.random.default_rng(8).standard_normal((300, 4))
    X = backend.cho_solve(L, backend.fortran_copy(cupy.asarray(B)), overwrite=True)
    assert rel(X, np.linalg.solve(G0 + 1e-6 * np.eye(300), B)) < 1e-8


def test_in_memory_dual_in_slabs_equals_cpu():
    """Several feature slabs, the last one ragged, with and without intercept."""
    rng = np.random.default_rng(9)
    U, V = rng.standard_normal((300, 20)), rng.standard_normal((300, 6))
    om, b = draw_frequencies(20, 2000, gamma=0.1, random_state=0)
    for fit_intercept in (True, False):
        kw = dict(alpha=1e-6, fit_intercept=fit_intercept, solver="dual")
        C0, c0 = fit_numpy(U, V, om, b, **kw)
        C, c = fit_numpy(
            *(cupy.asarray(a) for a in (U, V, om, b)), slab_bytes=8 * 300 * 256, **kw
        )  # 8 slabs
        assert rel(C, C0) < 1e-6  # coefficients carry the Gram's conditioning
        assert np.abs(backend.to_numpy(c) - c0).max() < 1e-8 * max(1.0, np.abs(c0).max())
        A = np.sqrt(2.0 / 2000) * np.cos(U[:50] @ om + b)
        assert rel(A @ backend.to_numpy(C) + backend.to_numpy(c), A @ C0 + c0) < RTOL


def test_in_memory_dual_peak_gpu_memory():
    """The CuPy pool's high-water mark during fit_numpy (dual): within the issue's
    ``1.2 x (8 M^2 + slab + U + V)`` besides the model's Omega, b and the coefficients
    (N x m) it returns; A whole (``8 M N``) would not fit. Omitted: cuBLAS / cuSOLVER handles
    and cuBLAS's own workspace, which are not allocated from the pool."""
    # the stand-in CuPy (tests/fakecupy) has no pool to measure: there a quarter of each size runs
    # the same 16 slabs in a 64th of the time
    k = 4 if "fakecupy" in cupy.__file__ else 1
    M, N, n, m, width = 4000 // k, 16000 // k, 256 // k, 256 // k, 1024 // k
    slab = 8 * M * width
    rng = np.random.default_rng(10)
    om, b = (cupy.asarray(a) for a in draw_frequencies(n, N, gamma=0.05, random_state=0))
    U = cupy.asarray(rng.standard_normal((M, n)))
    V = cupy.tanh(U @ cupy.asarray(rng.standard_normal((n, m))) / 16)
    fit_numpy(
        U[:200], V[:200], om[:, :400], b[:400], alpha=1e-6, fit_intercept=True, solver="dual"
    )  # handles, kernels
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    C, _ = fit_numpy(U, V, om, b, alpha=1e-6, fit_intercept=True, solver="dual", slab_bytes=slab)
    cupy.cuda.Device().synchronize()
    peak = (
        pool.total_bytes()
    )  # blocks freed during the fit stay in the pool: its size is the high-water mark
    model = 8 * M * M + slab + U.nbytes + V.nbytes
    outside = om.nbytes + b.nbytes + C.nbytes
    assert peak <= 1.2 * model + outside, (peak - outside) / model
    assert 8 * M * N + 8 * M * M > 1.2 * model  # the old path (A whole beside the Gram) could not


def _chunked(*arrays, on_gpu=False):
    """``arrays`` as dask arrays of 100-row chunks, the dask input of these tests (CuPy chunks with
    ``on_gpu``)."""
    import dask.array as da

    chunked = tuple(da.from_array(a, chunks=100) for a in arrays)
    return tuple(a.map_blocks(cupy.asarray) for a in chunked) if on_gpu else chunked


@pytest.mark.parametrize("mode", ["auto", "slabs"])  # auto: the rows mode (the GPU has room)
def test_dask_with_cupy_chunks(data, mode, monkeypatch):
    import dask

    monkeypatch.setitem(
        dask.config.config,
        "rfol_dask",
        {**dask.config.config.get("rfol_dask", {}), "device-features": mode},
    )
    U, V = data
    U2 = U.reshape(300, -1)
    kw = dict(n_features=600, gamma=0.05, alpha=1e-6, random_state=6, solver="dual")
    cpu = RandomFeatureOperator(**kw).fit(U2, V)
    Ud, Vd = _chunked(U2, V, on_gpu=True)
    model = RandomFeatureOperator(**kw).fit(
        Ud, Vd
    )  # follows the CuPy chunks: streamed dual on the GPU
    assert rel(model.coef_, cpu.coef_) < RTOL
    pred = model.predict(Ud[:50]).compute()
    assert isinstance(pred, cupy.ndarray) and rel(pred, cpu.predict(U2[:50])) < RTOL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numpy_chunks = RandomFeatureOperator(device="cuda", **kw).fit(*_chunked(U2, V))
    assert rel(numpy_chunks.coef_, cpu.coef_) < RTOL
    from rfol_dask.solve import streamed

    assert streamed._KEPT_FREQUENCIES == {}  # the frequencies kept between the passes are released


def test_dask_cupy_chunks_with_the_median_heuristic(data):
    """The default gamma ("median") samples rows of CuPy chunks and measures them on the host."""
    da = pytest.importorskip("dask.array")
    U, V = data
    U2 = U.reshape(300, -1)
    kw = dict(n_features=400, alpha=1e-6, random_state=7, solver="dual")
    cpu = RandomFeatureOperator(**kw).fit(U2, V)
    model = RandomFeatureOperator(**kw).fit(*_chunked(U2, V, on_gpu=True))
    assert model.gamma_ == pytest.approx(cpu.gamma_, rel=1e-12)
    assert rel(model.coef_, cpu.coef_) < RTOL
    lazy = model.predict(da.from_array(U2[:50], chunks=25).map_blocks(cupy.asarray))
    assert isinstance(lazy._meta, cupy.ndarray)  # the lazy prediction says what its chunks are
    assert isinstance(lazy.compute(), cupy.ndarray)


def test_dask_inputs_with_cupy_outputs_in_memory(data):
    """One operand dask, the other an in-memory CuPy array: the CuPy one becomes a dask chunk where
    it lives (``np.asarray`` of it raises)."""
    U, V = data
    U2 = U.reshape(300, -1)
    kw = dict(n_features=400, gamma=0.05, alpha=1e-6, random_state=8, solver="dual")
    cpu = RandomFeatureOperator(**kw).fit(U2, V)
    model = RandomFeatureOperator(**kw).fit(*_chunked(U2, on_gpu=True), cupy.asarray(V))
    assert rel(model.coef_, cpu.coef_) < RTOL


def test_predict_cupy_input_on_another_grid():
    """``predict(cupy_X, input_grid=...)``: resampled to the training grid on the host, then
    predicted on the GPU, CuPy out (follow the input)."""
    x, y = np.arange(32) / 32, np.arange(64) / 64
    rng = np.random.default_rng(9)
    a = rng.standard_normal((120, 3))
    k = np.arange(1, 4)

    def fields(grid):
        return a @ np.sin(2 * np.pi * np.outer(k, grid))

    kw = dict(n_features=300, gamma=0.05, alpha=1e-8, random_state=9, recovery="cubic")
    cpu = RandomFeatureOperator(**kw).fit(fields(x), fields(x) ** 2, input_grid=x, output_grid=x)
    gpu = RandomFeatureOperator(**kw).fit(
        cupy.asarray(fields(x)), cupy.asarray(fields(x) ** 2), input_grid=x, output_grid=x
    )
    pred = gpu.predict(cupy.asarray(fields(y)[:10]), input_grid=y)
    assert isinstance(pred, cupy.ndarray)
    assert rel(pred, cpu.predict(fields(y)[:10], input_grid=y)) < RTOL


def test_predict_cupy_backed_xarray_gives_xarray(data):
    """A DataArray holding CuPy values is predicted on its GPU and comes back as a DataArray (its
    sample coordinates, the output grid and attributes, CuPy values), as numpy- and dask-backed
    ones do, also resampled to another output grid (on the host, moved back); it came back as a
    bare CuPy array."""
    import xarray as xr

    x = np.linspace(0.0, 1.0, 8)
    z = np.linspace(0.0, 1.0, 30)
    U, V = data
    U = xr.DataArray(
        U, dims=("sample", "x", "y"), coords={"sample": np.arange(300) * 2, "x": x, "y": x}
    )
    V = xr.DataArray(V, dims=("sample", "z"), coords={"z": z}, attrs={"units": "m"})
    model = RandomFeatureOperator(
        n_features=400, gamma=0.05, alpha=1e-6, random_state=13, device="cuda"
    ).fit(U, V)
    X = U[:20].copy(data=cupy.asarray(U[:20].values))
    for kw in ({}, {"output_grid": np.linspace(0.0, 1.0, 45)}):
        want = model.predict(U[:20], **kw)
        pred = model.predict(X, **kw)
        assert isinstance(pred, xr.DataArray) and isinstance(pred.data, cupy.ndarray)
        assert pred.dims == want.dims and pred.attrs == want.attrs == {"units": "m"}
        for name in ("sample", "z"):
            np.testing.assert_array_equal(pred[name].values, want[name].values)
        assert rel(pred.data, want.values) < RTOL


def test_streamed_intercept_reaches_the_client_as_numpy(data, monkeypatch):
    """The streamed dual's results leave the workers as numpy (a client without a GPU cannot
    unpickle CuPy arrays): the coefficient rows and the intercept alike."""
    from rfol_dask.solve import streamed

    seen = []
    compute_fit = streamed.compute_fit

    def spy(*args, consume, **kwargs):
        def record(i, result):
            seen.append(result)
            consume(i, result)

        return compute_fit(*args, consume=record, **kwargs)

    monkeypatch.setattr(streamed, "compute_fit", spy)
    U, V = data
    U2 = U.reshape(300, -1)
    RandomFeatureOperator(n_features=400, gamma=0.05, random_state=10, solver="dual").fit(
        *_chunked(U2, V, on_gpu=True)
    )
    *slabs, intercept = seen
    assert isinstance(intercept, np.ndarray)
    assert all(
        part is None or isinstance(part, np.ndarray) for slab in slabs for part in slab
    )  # rows, shifts


def test_in_memory_gpu_fit_checks_the_gpu_memory(data, monkeypatch):
    """A Gram larger than the GPU's share is refused before any work, naming the GPU's budget (the
    host's memory used to be checked, and cuSOLVER ran out of memory instead)."""
    U, V = data
    monkeypatch.setattr(cupy.cuda.runtime, "memGetInfo", lambda: (1_000_000, 8_000_000))
    monkeypatch.setattr(cupy.get_default_memory_pool(), "free_bytes", lambda: 0)
    Uc, Vc = cupy.asarray(U), cupy.asarray(V)
    with pytest.raises(
        ValueError,
        match=r"300 x 300 Gram matrix needs 720,000 bytes .*60% of the GPU's free memory",
    ):
        RandomFeatureOperator(n_features=600, gamma=0.05, solver="dual").fit(Uc, Vc)
    with pytest.raises(ValueError, match="60% of the GPU's free memory"):
        KernelOperator(length_scale=3.0).fit(Uc, Vc)
    # the user's word (the Gram, the frequencies, the coefficients and a slab: 2,976,000 bytes)
    RandomFeatureOperator(n_features=600, gamma=0.05, solver="dual", max_gram_bytes=3 * 10**6).fit(
        Uc, Vc
    )


def test_in_memory_gpu_dual_counts_its_slabs_not_the_whole_features(data, monkeypatch):
    """On CuPy the in-memory dual holds feature slabs, never ``A`` whole: its up-front check
    counts the Gram, Omega, the coefficients and 1.25 slabs (64 columns here), 1,368,000 bytes,
    where the numpy dual holds all 300 x 600 features."""
    import dask

    U, V = data
    kw = dict(n_features=600, gamma=0.05, solver="dual", max_gram_bytes=1_400_000)
    with dask.config.set({"rfol_dask.slab-bytes": 300 * 64 * 8}):
        RandomFeatureOperator(**kw).fit(cupy.asarray(U), cupy.asarray(V))
        with pytest.raises(
            ValueError, match=r"and 1,896,000 more bytes for .* the 300 x 600 features A"
        ):
            RandomFeatureOperator(**kw).fit(U, V)
        with pytest.raises(
            ValueError,
            match=r"648,000 more bytes for .*slabs of 300 x 64 features \(192,000 bytes\)",
        ):
            RandomFeatureOperator(**{**kw, "max_gram_bytes": 1_300_000}).fit(
                cupy.asarray(U), cupy.asarray(V)
            )


def test_auto_solver_on_dask_cupy_chunks_is_the_dual(data):
    """N < M would pick the primal, which dask input on a GPU does not have: "auto" picks the
    streamed dual there (an explicit solver="primal" still says why it cannot run, whatever the
    memory: not a memory error it could not fix)."""
    U, V = data
    U2 = U.reshape(300, -1)
    Ud, Vd = _chunked(U2, V, on_gpu=True)
    kw = dict(n_features=200, gamma=0.05, alpha=1e-6, random_state=11)
    model = RandomFeatureOperator(**kw).fit(Ud, Vd)
    assert model.solver_ == "dual"
    assert rel(model.coef_, RandomFeatureOperator(solver="dual", **kw).fit(U2, V).coef_) < RTOL
    with pytest.raises(NotImplementedError, match="streamed dual only"):
        RandomFeatureOperator(solver="primal", **kw).fit(Ud, Vd)
    with pytest.raises(NotImplementedError, match="streamed dual only, not the primal"):
        RandomFeatureOperator(solver="primal", max_gram_bytes=1000, **kw).fit(Ud, Vd)


def test_a_max_gram_bytes_beyond_the_gpu_warns(data, monkeypatch):
    U, V = data
    monkeypatch.setattr(cupy.cuda.runtime, "memGetInfo", lambda: (500_000, 1_000_000))
    with pytest.warns(
        UserWarning,
        match=r"max_gram_bytes=2,000,000 is more than the GPU's memory \(1,000,000 bytes\)",
    ):
        RandomFeatureOperator(n_features=100, gamma=0.05, solver="dual", max_gram_bytes=2e6).fit(
            cupy.asarray(U), cupy.asarray(V)
        )


def _no_search(monkeypatch):
    """Make reading the data for a search, or the search itself, fail: what is refused must be
    refused before either."""
    from rfol_dask.selection import SelectionCV

    def fail(*args, **kwargs):
        raise AssertionError("read the data to search")

    monkeypatch.setattr(SelectionCV, "_data", fail)


@pytest.mark.parametrize("case", ["blocked", "blocked_cupy_chunks", "primal", "kernel"])
def test_gpu_dask_search_refuses_a_refit_it_cannot_run_before_searching(data, case, monkeypatch):
    """A search on GPUs whose refit on dask input could not run there (the primal, a dual Gram
    that does not fit one GPU worker: the blocked dual; any kernel fit) raised
    NotImplementedError after the whole search. It is refused before the data are read, with
    the refit's message, at every n_features a winner may take; a refit that fits is not."""

    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperatorCV

    U, V = data
    U2 = U.reshape(300, -1)
    Ud, Vd = _chunked(U2, V)
    few = [(np.arange(100), np.arange(100, 150))]  # a small search, the refit on all 300 samples
    # the 300 x 300 Gram (720,000 bytes) with U, V and two 64-column slabs: 1,319,360 bytes
    rf = dict(
        n_features=(100, 200),
        max_features=400,
        distributions=("gaussian",),
        cv=few,
        device="cuda",
        max_gram_bytes=1_000_000,
    )
    search, match = {
        "blocked": (
            RandomFeatureOperatorCV(**rf),
            r"RandomFeatureOperatorCV would refit its winner on all 300 training samples after "
            r"the search, and "
            r"that refit would be refused at n_features=100, 200, 400 \(of 100, 200, 400\): on a "
            r"GPU, dask "
            r"input is fitted by the streamed dual only, not the blocked dual \(the Gram does not "
            r"fit one "
            r"worker: the 300 x 300 Gram matrix needs 720,000 bytes \(0.00 GiB\), and 599,360 "
            r"more bytes .* "
            r"but the budget \(max_gram_bytes\) is 1,000,000 bytes\): .*; or pass refit=False to "
            r"search only",
        ),
        "blocked_cupy_chunks": (
            RandomFeatureOperatorCV(**{**rf, "device": "cpu"}),
            "not the blocked dual",
        ),
        "primal": (
            RandomFeatureOperatorCV(
                **{**rf, "refit": {"solver": "primal"}, "max_gram_bytes": None}
            ),
            r"refused at n_features=100, 200, 400 .* not the primal",
        ),
        "kernel": (
            KernelOperatorCV(device="cuda", cv=few),
            r"KernelOperatorCV would refit its winner .* refused: KernelOperator fits dask input "
            r"on the CPU only",
        ),
    }[case]
    if case == "blocked_cupy_chunks":
        Ud, Vd = Ud.map_blocks(cupy.asarray), Vd.map_blocks(cupy.asarray)
    _no_search(monkeypatch)
    with pytest.raises(NotImplementedError, match=match):
        search.fit(Ud, Vd)
    search.set_params(refit=False)  # searching only: nothing to refuse
    with pytest.raises(AssertionError, match="read the data"):
        search.fit(Ud, Vd)
    if case.startswith(
        "blocked"
    ):  # a budget with room for the streamed dual's Gram, data and slabs
        search.set_params(refit=True, max_gram_bytes=1_400_000)
        with pytest.raises(AssertionError, match="read the data"):
            search.fit(Ud, Vd)


def test_cli_tune_on_gpu_refuses_a_refit_it_cannot_run_before_searching(
    tmp_path, capsys, monkeypatch
):
    """``rfol-dask fit --tune --device cuda`` with a refit the GPU cannot run (the primal of
    dask input) ends before the search with the refit's message (exit status 2)."""
    from rfol_dask import datasets
    from rfol_dask.cli import main

    store = tmp_path / "d.zarr"
    datasets.generate("advection2", 30, store=store)
    _no_search(monkeypatch)
    code = main(
        [
            "fit",
            str(store),
            "--train",
            "24",
            "--n-features",
            "20",
            "--tune",
            "--device",
            "cuda",
            "--solver",
            "primal",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "RandomFeatureOperatorCV would refit its winner on all 24 training samples" in err
    assert "dask input is fitted by the streamed dual only, not the primal" in err


def _gpu_free(monkeypatch, free):
    """This process's GPU (and the in-process workers') has ``free`` bytes free, its pool none."""
    monkeypatch.setattr(cupy.cuda.runtime, "memGetInfo", lambda: (free, 8 * free))
    monkeypatch.setattr(cupy.get_default_memory_pool(), "free_bytes", lambda: 0)


@pytest.mark.parametrize("free", [2_000_000, 3_000_000])
def test_dask_gpu_fit_is_planned_on_the_gpu_memory(data, monkeypatch, free):
    """A dask fit on a GPU plans its dual against 60 % of the GPU's free memory, as the in-memory
    GPU fit checks its Gram (the host's memory used to be counted): the Gram with U, V and two
    64-column slabs (1,319,360 bytes) does not fit 60 % of 2 MB (the blocked dual, which a GPU
    cannot run: refused before any work), fits 60 % of 3 MB."""

    U, V = data
    U2 = U.reshape(300, -1)
    kw = dict(n_features=100, gamma=0.05, alpha=1e-6, random_state=12, solver="dual", device="cuda")
    _gpu_free(monkeypatch, free)
    fit = functools.partial(RandomFeatureOperator(**kw).fit, *_chunked(U2, V))
    if free == 2_000_000:
        with pytest.raises(
            NotImplementedError,
            match=r"not the blocked dual \(the Gram does not fit one worker: the "
            r"300 x 300 Gram matrix needs 720,000 bytes .* the budget \(60% "
            r"of the GPU's free memory\) is 1,200,000 bytes\)",
        ):
            fit()
    else:
        want = RandomFeatureOperator(**{**kw, "device": "cpu"}).fit(U2, V)
        assert rel(fit().coef_, want.coef_) < RTOL


@pytest.mark.cluster
@pytest.mark.parametrize("free", [2_000_000, 3_000_000])
def test_distributed_gpu_search_checks_the_workers_gpu_memory(data, monkeypatch, free):
    """A search on GPU workers holds its Grams on their GPUs: its check before the search (and
    the refit's plan) measures 60 % of the least free GPU memory of the workers, as the fits on
    a GPU do, not the workers' host memory limits. Its least peak on the 240 training rows (the
    Gram, the cross-Gram, the solve's copy and two slabs: 1,516,800 bytes) does not fit 60 % of
    2 MB: refused before the data are read; fits 60 % of 3 MB: searched and refitted on the
    worker's GPU. (An in-process worker, so that it sees this process's GPU memory.)"""
    from distributed import Client, LocalCluster

    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.selection import SelectionCV

    U, V = data
    U2 = U.reshape(300, -1)
    kw = dict(
        n_features=100,
        distributions=("gaussian",),
        gammas=(0.5, 2.0),
        alphas=(1e-6, 1e-3),
        random_state=0,
        device="cuda",
    )
    searched, real = [], SelectionCV._search
    monkeypatch.setattr(
        SelectionCV, "_search", lambda self, *a: searched.append(1) or real(self, *a)
    )
    _gpu_free(monkeypatch, free)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        assert client.run(lambda: cupy.cuda.runtime.memGetInfo()[0]) == {
            a: free for a in client.run(lambda: 0)
        }
        fit = functools.partial(RandomFeatureOperatorCV(**kw).fit, *_chunked(U2, V))
        if free == 2_000_000:
            with pytest.raises(
                ValueError,
                match=r"the 240 x 240 Gram matrix needs 460,800 bytes .* but the budget "
                r"\(60% of the least free GPU memory of the 1 worker\(s\)\) is "
                r"1,200,000 bytes; search on fewer samples",
            ):
                fit()
            assert not searched
        else:
            model = fit()
            assert searched and model.best_estimator_.device == "cuda"
            want = RandomFeatureOperatorCV(**{**kw, "device": "cpu"}).fit(U2, V)
            assert model.best_params_ == want.best_params_


@pytest.mark.cluster
def test_a_gpu_fit_on_a_cluster_without_workers_says_so(data, monkeypatch):
    """The GPU budget of a dask fit is the least free GPU memory of the workers: on a cluster
    without workers it had none to take the least of (``min() arg is an empty sequence``); it
    waits for a first worker, as the placement of the fit does, and else says what is wrong."""
    from distributed import Client, LocalCluster

    from rfol_dask import placement
    from rfol_dask.progress import NoWorkersError

    U, V = data
    monkeypatch.setattr(placement, "WORKER_WAIT_S", 0.5)
    model = RandomFeatureOperator(n_features=100, gamma=0.5, random_state=0, device="cuda")
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        Client(cluster),
    ):
        with pytest.raises(NoWorkersError, match=r"no workers \(none arrived within 0.5 s\)"):
            model.fit(*_chunked(U.reshape(300, -1), V))
    assert not hasattr(model, "coef_")


def test_a_max_gram_bytes_beyond_the_gpu_of_a_dask_fit_without_a_cluster_warns(data, monkeypatch):
    """A dask fit on ``device="cuda"`` without a client holds its Gram on this process's GPU: a
    ``max_gram_bytes`` beyond that GPU's 16 MB is warned about (it was compared with the host's
    memory)."""
    U, V = data
    _gpu_free(monkeypatch, 2_000_000)
    with pytest.warns(
        UserWarning, match=r"max_gram_bytes=100,000,000 is more than the GPU's memory \(16,000,000 "
    ):
        RandomFeatureOperator(
            n_features=100,
            gamma=0.05,
            alpha=1e-3,
            random_state=0,
            solver="dual",
            device="cuda",
            max_gram_bytes=1e8,
        ).fit(*_chunked(U.reshape(300, -1), V))


def _two_gpu_workers():
    """An in-process LocalCluster of two workers with 4 GB host memory limits and a client on it:
    in-process, so that the workers see this process's (monkeypatched) GPU memory."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        memory_limit="4GB",
        dashboard_address=":0",
    )
    return cluster, Client(cluster)


@pytest.mark.cluster
def test_a_max_gram_bytes_beyond_the_gpu_workers_warns(data, monkeypatch):
    """A ``max_gram_bytes`` for Grams on GPU workers (``device="cuda"`` on a cluster) is compared
    with the total memory of the workers' GPUs, not with their host memory limits: 100 MB is
    within the 4 GB limits but beyond the 16 MB GPUs (it used to pass silently)."""
    U, V = data
    _gpu_free(monkeypatch, 2_000_000)  # 16,000,000 bytes in all
    cluster, client = _two_gpu_workers()
    with cluster, client:
        model = RandomFeatureOperator(
            n_features=100,
            gamma=0.05,
            alpha=1e-3,
            random_state=0,
            solver="dual",
            device="cuda",
            max_gram_bytes=1e8,
        )
        with pytest.warns(
            UserWarning,
            match=r"max_gram_bytes=100,000,000 is more than the total GPU memory of "
            r"worker \S+ \(16,000,000 bytes\)",
        ):
            model.fit(*_chunked(U.reshape(300, -1), V))
        with warnings.catch_warnings():  # within the GPUs: silent
            warnings.simplefilter("error", UserWarning)
            model.set_params(max_gram_bytes=1e7).fit(*_chunked(U.reshape(300, -1), V))


@pytest.mark.cluster
@pytest.mark.parametrize("free", [1_400_000, 1_500_000])
def test_the_gpu_worker_that_sums_the_grams_holds_two(data, monkeypatch, free):
    """With several GPU workers the first sums their Grams on its GPU (each comes over onto it):
    it holds two 300 x 300 Grams (720,000 bytes each) and U, V (300 x (4 + 2)) while it adds one,
    1,454,400 bytes, checked against the least free GPU memory of the workers in full (a brief peak
    of an in-place sum; 60 % is the steady state's share). With 1.4 MB free the steady state fits
    (812,480 bytes with two 16-column slabs, within 60 %) but the sum does not: refused before any
    work (it used to start, the GPU having no pause line to check); with 1.5 MB free it fits."""
    from rfol_dask.memory import dual_plan

    U, V = data
    U2, V2 = U.reshape(300, -1)[:, :4], V[:, :2]
    kw = dict(n_features=16, gamma=0.05, alpha=1e-3, random_state=0, solver="dual", device="cuda")
    _gpu_free(monkeypatch, free)
    cluster, client = _two_gpu_workers()
    with cluster, client:
        plan = functools.partial(
            dual_plan,
            300,
            np.float64,
            client=client,
            held_bytes=300 * 6 * 8,
            n_features=16,
            n_inputs=4,
            device="cuda",
            warn=False,
        )
        if free == 1_400_000:
            with pytest.raises(
                NotImplementedError,
                match=r"a worker that sums the 2 workers' Grams holds two: "
                r"1,454,400 bytes against the 1,400,000 bytes of GPU memory "
                r"free on the least free worker",
            ):
                RandomFeatureOperator(**kw).fit(*_chunked(U2, V2))
            assert plan().blocked
        else:
            assert not plan().blocked
            want = RandomFeatureOperator(**{**kw, "device": "cpu"}).fit(U2, V2)
            assert rel(RandomFeatureOperator(**kw).fit(*_chunked(U2, V2)).coef_, want.coef_) < RTOL


def test_cli_predict_device_moves_a_saved_model_to_the_gpu_and_back(
    tmp_path, capsys, predict_devices
):
    """``rfol-dask predict --device cuda`` predicts a model fitted on the CPU on the GPU (the
    store's blocks computed through CuPy), and ``--device cpu`` (the default without a GPU cluster)
    a model
    fitted with ``device="cuda"`` on the CPU; the predictions equal the CPU model's."""
    import xarray as xr

    from rfol_dask import datasets
    from rfol_dask.cli import main

    store = tmp_path / "d.zarr"
    ds = datasets.generate("advection2", 30, store=store, block_size=8)
    train = ds.isel(
        sample=slice(0, 20)
    ).load()  # in memory: KernelOperator fits dask input on the CPU only
    devices = predict_devices
    for fitted_on, flags, want in (
        ("cpu", ["--device", "cuda"], "cuda"),
        ("cuda", ["--device", "cpu"], "cpu"),
        ("cuda", [], "cpu"),
    ):
        for name, cls in (("rf", RandomFeatureOperator), ("kernel", KernelOperator)):
            kw = dict(n_features=40, random_state=0) if cls is RandomFeatureOperator else {}
            model = cls(device=fitted_on, **kw).fit(train)
            cpu = cls(**kw).fit(train)
            model.save(tmp_path / f"{name}.zarr")
            devices.clear()
            code = main(
                [
                    "predict",
                    str(tmp_path / f"{name}.zarr"),
                    str(store),
                    "--out",
                    str(tmp_path / "p.zarr"),
                    "-q",
                    *flags,
                ]
            )
            assert code == 0, capsys.readouterr().err
            assert devices and set(devices) == {want}, (name, fitted_on, devices)
            pred = xr.open_zarr(tmp_path / "p.zarr")["prediction"].values
            assert rel(pred, cpu.predict(ds["input"]).values) < RTOL, (name, fitted_on)
