import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data
from dask.utils import key_split
from sklearn.base import clone
from sklearn.linear_model import Ridge

from rfol_dask import RandomFeatureOperator
from rfol_dask.metrics import relative_l2_error


def plain_numpy_fit_predict(U, V, Ut, omega, b, alpha, fit_intercept, solver, centre=None):
    """The textbook formulas, with the same Omega and b, the inputs measured from ``centre``."""
    N = omega.shape[1]
    centre = np.zeros(U.shape[1]) if centre is None else centre
    A = np.sqrt(2.0 / N) * np.cos((U - centre) @ omega + b)
    At = np.sqrt(2.0 / N) * np.cos((Ut - centre) @ omega + b)
    mu = A.mean(0) if fit_intercept else np.zeros(N)
    vbar = V.mean(0) if fit_intercept else np.zeros(V.shape[1])
    Ac, Vc = A - mu, V - vbar
    if solver == "dual":
        C = Ac.T @ np.linalg.solve(Ac @ Ac.T + alpha * np.eye(len(A)), Vc)
    else:
        C = np.linalg.solve(Ac.T @ Ac + alpha * np.eye(N), Ac.T @ Vc)
    return (At - mu) @ C + vbar


@pytest.mark.parametrize("solver,n_features", [("dual", 300), ("primal", 120)])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("distribution", ["cauchy", "gaussian"])
@pytest.mark.slow
def test_matches_plain_numpy(solver, n_features, fit_intercept, distribution):
    U, V = smooth_operator_data(200, 24)
    Ut, Vt = smooth_operator_data(50, 24, seed=1)
    model = RandomFeatureOperator(
        n_features=n_features,
        distribution=distribution,
        gamma=0.5,
        alpha=1e-4,
        fit_intercept=fit_intercept,
        solver=solver,
        random_state=0,
    )
    pred = model.fit(U, V).predict(Ut)
    ref = plain_numpy_fit_predict(
        U, V, Ut, model.omega_, model.b_, 1e-4, fit_intercept, solver, model.input_centre_
    )
    assert model.solver_ == solver
    np.testing.assert_allclose(pred, ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())
    # the dask path gives the same predictions
    Ud, Vd = da.from_array(U, chunks=(70, -1)), da.from_array(V, chunks=(70, -1))
    pred_d = clone(model).fit(Ud, Vd).predict(Ut)
    np.testing.assert_allclose(pred_d, ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_matches_sklearn_ridge_on_same_features(fit_intercept):
    U, V = smooth_operator_data(150, 16)
    model = RandomFeatureOperator(
        n_features=400, gamma=1.0, alpha=1e-3, fit_intercept=fit_intercept, random_state=3
    ).fit(U, V)
    A = np.sqrt(2.0 / 400) * np.cos((U - model.input_centre_) @ model.omega_ + model.b_)
    ridge = Ridge(alpha=1e-3, fit_intercept=fit_intercept).fit(A, V)
    np.testing.assert_allclose(model.coef_, ridge.coef_.T, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        model.intercept_, ridge.intercept_ if fit_intercept else 0, atol=1e-9
    )
    np.testing.assert_allclose(model.predict(U), ridge.predict(A), atol=1e-9)


def test_auto_solver_picks_smaller_gram():
    U, V = smooth_operator_data(100, 8)
    assert RandomFeatureOperator(n_features=150, random_state=0).fit(U, V).solver_ == "dual"
    assert RandomFeatureOperator(n_features=50, random_state=0).fit(U, V).solver_ == "primal"


@pytest.mark.parametrize("solver,n_features", [("dual", 400), ("primal", 150)])
@pytest.mark.slow
def test_same_model_for_any_chunking(solver, n_features):
    U, V = smooth_operator_data(210, 20)
    ref = RandomFeatureOperator(
        n_features=n_features, gamma=0.5, alpha=1e-5, solver=solver, random_state=7
    ).fit(U, V)
    for n_chunks in (1, 3, 7):
        Ud = da.from_array(U, chunks=(-(-210 // n_chunks), -1))
        Vd = da.from_array(V, chunks=(-(-210 // n_chunks), -1))
        assert Ud.numblocks[0] == n_chunks
        model = clone(ref).fit(Ud, Vd)
        np.testing.assert_allclose(
            model.coef_, ref.coef_, rtol=1e-10, atol=1e-10 * np.abs(ref.coef_).max()
        )
        np.testing.assert_allclose(model.intercept_, ref.intercept_, rtol=1e-10, atol=1e-12)


class CountingScheduler:
    """A dask scheduler that counts compute calls (as xarray's raise_if_dask_computes)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, dsk, keys, **kwargs):
        self.calls += 1
        return dask.get(dsk, keys, **kwargs)


@pytest.mark.parametrize("solver,n_features", [("dual", 300), ("primal", 60)])
def test_fit_reads_data_once_in_one_compute(solver, n_features):
    U, V = smooth_operator_data(180, 12)
    reads = []

    def load(block, block_info=None):
        reads.append(block_info[0]["chunk-location"])
        return block

    Ud = da.from_array(U, chunks=(45, -1)).map_blocks(load, dtype=U.dtype)
    Vd = da.from_array(V, chunks=(45, -1)).map_blocks(load, dtype=V.dtype)
    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        model = RandomFeatureOperator(
            n_features=n_features, solver=solver, gamma=1.0, alpha=1e-6, random_state=0
        ).fit(Ud, Vd)  # gamma="median" reads a sample first
    assert counter.calls == 1
    assert sorted(reads) == sorted([(i, 0) for i in range(4)] * 2)  # each block of U and V once
    assert model.coef_.shape == (n_features, 12)


@pytest.mark.slow  # each compute spawns a pool of processes that import the package
def test_dask_processes_scheduler_gives_the_in_memory_fit():
    """dask's local processes scheduler runs the tasks elsewhere: the coefficient rows come back
    (the threaded scheduler writes them into the caller's array in place instead)."""
    U, V = smooth_operator_data(120, 10)
    kw = dict(n_features=300, solver="dual", gamma=1.0, alpha=1e-6, random_state=0)
    want = RandomFeatureOperator(**kw).fit(U, V)
    Ud, Vd = da.from_array(U, chunks=(40, -1)), da.from_array(V, chunks=(40, -1))
    for scheduler in ("processes", "threads"):
        with dask.config.set(scheduler=scheduler, num_workers=2):
            model = RandomFeatureOperator(**kw).fit(Ud, Vd)
        np.testing.assert_allclose(
            model.coef_, want.coef_, rtol=1e-9, atol=1e-10 * np.abs(want.coef_).max()
        )
        np.testing.assert_allclose(model.intercept_, want.intercept_, rtol=1e-9, atol=1e-12)


# a strip per block, or per two blocks taken together; the processes scheduler (a pool of new
# processes per compute) on two of the four
@pytest.mark.parametrize(
    "step, fit_intercept, schedulers",
    [
        (1, True, ["threads"]),
        (50, False, ["threads"]),
        pytest.param(1, False, ["threads", "processes"], marks=pytest.mark.slow),
        pytest.param(50, True, ["threads", "processes"], marks=pytest.mark.slow),
    ],
    ids=["1-True", "50-False", "1-False-processes", "50-True-processes"],
)
def test_streamed_dual_rows_mode_gives_the_in_memory_fit(
    step, fit_intercept, schedulers, monkeypatch
):
    """The rows mode of the streamed dual (features kept, the Gram grown row block by row block
    as the blocks come; the default on a GPU with room) fits what the slabs mode and the
    in-memory fit do, on the threaded and the processes scheduler; a NaN is named as ever."""
    from rfol_dask.solve import streamed

    monkeypatch.setattr(streamed, "ROW_STEP", step)
    U, V = smooth_operator_data(130, 10)  # chunks of 40: the last block is short
    kw = dict(
        n_features=300,
        solver="dual",
        gamma=1.0,
        alpha=1e-6,
        random_state=0,
        fit_intercept=fit_intercept,
    )
    want = RandomFeatureOperator(**kw).fit(U, V)
    Ud, Vd = da.from_array(U, chunks=(40, -1)), da.from_array(V, chunks=(40, -1))
    for scheduler in schedulers:
        with dask.config.set(
            {"rfol_dask.device-features": "rows", "rfol_dask.slab-bytes": 130 * 8 * 128},
            scheduler=scheduler,
            num_workers=2,
        ):
            model = RandomFeatureOperator(**kw).fit(Ud, Vd)
        np.testing.assert_allclose(
            model.coef_, want.coef_, rtol=1e-9, atol=1e-10 * np.abs(want.coef_).max()
        )
        np.testing.assert_allclose(model.intercept_, want.intercept_, rtol=1e-9, atol=1e-12)
    bad = U.copy()
    bad[97, 0] = np.nan
    with (
        dask.config.set({"rfol_dask.device-features": "rows"}),
        pytest.raises(ValueError, match=r"\(rows 97\)"),
    ):
        RandomFeatureOperator(**kw).fit(da.from_array(bad, chunks=(40, -1)), Vd)
    with (
        dask.config.set({"rfol_dask.device-features": "sideways"}),
        pytest.raises(ValueError, match="device-features"),
    ):
        RandomFeatureOperator(**kw).fit(Ud, Vd)


def test_predict_is_lazy_for_dask_and_keeps_chunks():
    U, V = smooth_operator_data(120, 10)
    model = RandomFeatureOperator(n_features=200, alpha=1e-6, random_state=0).fit(U, V)
    Ud = da.from_array(U, chunks=(50, -1))
    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        pred = model.predict(Ud)
        assert counter.calls == 0
    assert isinstance(pred, da.Array) and pred.chunks[0] == (50, 50, 20)
    np.testing.assert_allclose(pred.compute(), model.predict(U), rtol=1e-12)


@pytest.mark.slow
def test_real_local_cluster_two_workers_same_model(cluster_client):
    U, V = smooth_operator_data(160, 16)
    for solver, n_features in (("dual", 300), ("primal", 80)):
        ref = RandomFeatureOperator(
            n_features=n_features, alpha=1e-5, solver=solver, random_state=1
        ).fit(U, V)
        Ud, Vd = da.from_array(U, chunks=(40, -1)), da.from_array(V, chunks=(40, -1))
        from distributed import get_task_stream

        with cluster_client.as_current():
            with get_task_stream(client=cluster_client) as ts:
                model = clone(ref).fit(Ud, Vd)  # runs on the LocalCluster
            assert len(cluster_client.scheduler_info()["workers"]) == 2
            pred = model.predict(Ud).compute()
        assert {key_split(t["key"]) for t in ts.data} & {
            "dual-factor",
            "primal-factor",
        }  # ran on the cluster
        np.testing.assert_allclose(
            model.coef_, ref.coef_, rtol=1e-10, atol=1e-10 * np.abs(ref.coef_).max()
        )
        np.testing.assert_allclose(pred, ref.predict(U), rtol=1e-9, atol=1e-10)


@pytest.mark.cluster
@pytest.mark.slow
def test_one_worker_and_two_workers_agree(monkeypatch):
    from distributed import Client, LocalCluster

    from rfol_dask.solve import streamed

    monkeypatch.setattr(streamed, "ROW_STEP", 1)  # rows mode: a Gram strip per row block

    U, V = smooth_operator_data(150, 10)
    Ud, Vd = da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
    coefs = []
    for workers in (1, 2):
        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=":0"
            ) as c,
            Client(c),
        ):
            for mode in (
                "slabs",
                "rows",
            ):  # rows: each worker keeps its features (its group of columns)
                with dask.config.set({"rfol_dask.device-features": mode}):
                    coefs.append(
                        RandomFeatureOperator(n_features=250, gamma=1.0, alpha=1e-5, random_state=5)
                        .fit(Ud, Vd)
                        .coef_
                    )
    for coef in coefs[1:]:
        np.testing.assert_allclose(coef, coefs[0], rtol=1e-10, atol=1e-12)


def test_grid_shapes_and_xarray_coordinates_kept():
    rng = np.random.default_rng(0)
    U = rng.standard_normal((60, 4, 5))
    V = np.stack([U.sum(axis=(1, 2)), U[:, 0, 0], U[:, 1, 1]], axis=1).reshape(60, 3, 1)
    model = RandomFeatureOperator(n_features=100, alpha=1e-6, random_state=0).fit(U, V)
    assert model.predict(U).shape == (60, 3, 1)
    assert model.input_shape_ == (4, 5) and model.output_shape_ == (3, 1)

    Ux = xr.DataArray(
        U, dims=("sample", "x", "y"), coords={"sample": np.arange(100, 160), "x": np.arange(4.0)}
    )
    Vx = xr.DataArray(V, dims=("sample", "p", "q"), coords={"p": [0.1, 0.2, 0.3]})
    mx = clone(model).fit(Ux, Vx)
    px = mx.predict(Ux)
    assert isinstance(px, xr.DataArray) and px.dims == ("sample", "p", "q")
    np.testing.assert_array_equal(px["sample"], np.arange(100, 160))
    np.testing.assert_array_equal(px["p"], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(px.values, model.predict(U), rtol=1e-12)
    # dask-backed xarray: lazy prediction with coordinates
    pl = mx.predict(Ux.chunk({"sample": 25}))
    assert isinstance(pl.data, da.Array)
    np.testing.assert_allclose(pl.values, px.values, rtol=1e-10)
    # coordinates along 'sample' (times, ensemble members) travel to the prediction, with or
    # without a sample index; a 2-D coordinate of the input grid does not (the output grid differs)
    extra = {
        "time": ("sample", np.arange(60).astype("datetime64[D]")),
        "member": ("sample", [f"m{i}" for i in range(60)]),
        "land": (("x", "y"), np.ones((4, 5), bool)),
    }
    for Xc in (
        Ux.assign_coords(extra),
        Ux.assign_coords(extra).drop_vars("sample"),
        Ux.assign_coords(extra).chunk({"sample": 25}),
    ):
        pc = mx.predict(Xc)
        assert set(pc.coords) == {"p", "time", "member"} | ({"sample"} & set(Xc.coords))
        np.testing.assert_array_equal(pc["member"].values, Xc["member"].values)
        np.testing.assert_array_equal(pc["time"].values, Xc["time"].values)
        np.testing.assert_allclose(pc.values, px.values, rtol=1e-10)
    # 1-D targets give 1-D predictions
    m1 = clone(model).fit(U, V[:, 0, 0])
    assert m1.predict(U).shape == (60,)


@pytest.mark.slow
def test_fit_from_dataset_and_zarr_path(tmp_path):
    from rfol_dask import datasets

    ds = datasets.generate("advection1", 300, store=tmp_path / "adv.zarr", block_size=64)
    m1 = RandomFeatureOperator(n_features=500, gamma=1e-3, alpha=1e-6, random_state=0).fit(
        str(tmp_path / "adv.zarr")
    )
    m2 = RandomFeatureOperator(n_features=500, gamma=1e-3, alpha=1e-6, random_state=0).fit(
        ds.compute()
    )
    pred = m1.predict(ds)
    np.testing.assert_allclose(pred.values, m2.predict(ds["input"].values), rtol=1e-7, atol=1e-9)
    assert pred.dims == ("sample", "x") and isinstance(pred.data, da.Array)
    assert relative_l2_error(ds["output"], pred) < 0.05


@pytest.mark.parametrize("solver,n_features", [("dual", 300), ("primal", 100)])
@pytest.mark.slow
def test_float32_in_float32_out(solver, n_features):
    U, V = smooth_operator_data(200, 16)
    m64 = RandomFeatureOperator(
        n_features=n_features, alpha=1e-3, solver=solver, random_state=0
    ).fit(U, V)
    m32 = clone(m64).fit(U.astype(np.float32), V.astype(np.float32))
    p32 = m32.predict(U.astype(np.float32))
    assert m32.coef_.dtype == np.float32 and p32.dtype == np.float32
    p64 = m64.predict(U)
    assert np.linalg.norm(p32 - p64) / np.linalg.norm(p64) < 1e-3
    md = clone(m64).fit(
        da.from_array(U.astype(np.float32), chunks=(70, -1)), da.from_array(V.astype(np.float32))
    )
    assert md.coef_.dtype == np.float32
    assert md.predict(da.from_array(U.astype(np.float32))).dtype == np.float32
    # dtype= forces the working precision
    assert clone(m64).set_params(dtype="float32").fit(U, V).predict(U).dtype == np.float32


def test_save_load_roundtrip(tmp_path):
    U = xr.DataArray(
        np.random.default_rng(0).standard_normal((50, 6)),
        dims=("sample", "x"),
        coords={"x": np.linspace(0, 1, 6)},
    )
    V = xr.DataArray(U.values[:, ::2] ** 2, dims=("sample", "y"), coords={"y": [1.0, 2.0, 3.0]})
    model = RandomFeatureOperator(
        n_features=80, distribution="student_t", nu=3.0, alpha=1e-6, random_state=4
    ).fit(U, V)
    model.save(tmp_path / "m.zarr")
    loaded = RandomFeatureOperator.load(tmp_path / "m.zarr")
    assert loaded.get_params() == model.get_params()
    np.testing.assert_array_equal(loaded.predict(U).values, model.predict(U).values)
    np.testing.assert_array_equal(loaded.predict(U)["y"], [1.0, 2.0, 3.0])
    assert loaded.output_dims_ == ("y",)


def test_interrupted_save_leaves_previous_model(tmp_path, monkeypatch):
    import zarr

    U, V = smooth_operator_data(40, 6)
    old = RandomFeatureOperator(n_features=30, alpha=1e-6, random_state=0).fit(U, V)
    old.save(tmp_path / "m.zarr")
    new = RandomFeatureOperator(n_features=50, alpha=1e-6, random_state=1).fit(U, V)
    real = zarr.Group.create_array
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed mid-save")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(zarr.Group, "create_array", failing)
    with pytest.raises(KeyboardInterrupt):
        new.save(tmp_path / "m.zarr")
    monkeypatch.undo()
    loaded = RandomFeatureOperator.load(tmp_path / "m.zarr")
    np.testing.assert_array_equal(loaded.coef_, old.coef_)
    assert [p.name for p in tmp_path.iterdir()] == ["m.zarr"]  # no temporary left behind


def test_get_set_params_clone():
    model = RandomFeatureOperator(n_features=10, gamma=2.0)
    assert model.get_params()["gamma"] == 2.0
    c = clone(model.set_params(alpha=1e-3))
    assert c.alpha == 1e-3 and c is not model


@pytest.mark.cluster
@pytest.mark.slow  # its last compute spawns a process pool
def test_lazy_prediction_outlives_its_client(monkeypatch):
    # a prediction made lazily on a distributed client and computed after the client closed (a
    # notebook's `with Client(): pred = model.predict(ds)`, then `pred.plot()`): a small model
    # travels in the graph; a large one, shipped to the cluster once, is carried by the graph then
    # (it failed with "Missing dependency arrays-scattered-by-the-client-of-this-result-...")
    from distributed import Client, LocalCluster

    from rfol_dask import placement

    U, V = smooth_operator_data(120, 16)
    model = RandomFeatureOperator(n_features=64, random_state=0).fit(U, V)
    X = da.from_array(U, chunks=40)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        small = model.predict(X)
        monkeypatch.setattr(placement, "EMBED_BYTES", 0)
        large = model.predict(X)
        assert any(key_split(k) == "arrays-shipped-once" for k in dict(large.__dask_graph__()))
        np.testing.assert_allclose(large.compute(), model.predict(U), rtol=1e-12)
    np.testing.assert_allclose(small.compute(), model.predict(U), rtol=1e-12)
    np.testing.assert_allclose(large.compute(), model.predict(U), rtol=1e-12)
    with dask.config.set(
        scheduler="processes", num_workers=1
    ):  # pickled: the graph carries the arrays
        np.testing.assert_allclose(large.compute(), model.predict(U), rtol=1e-12)


def test_shipped_arrays_pickle_as_their_key_only_when_their_client_sends_them():
    # a graph sent to a scheduler that lacks the key (restarted in the meantime) fails naming it,
    # rather than computing with nothing; pickled anywhere else, the arrays go with it
    import pickle

    from rfol_dask.placement import _Shipped, _shipped_values

    class Client:
        def compute(
            self, graph
        ):  # what a client's compute, persist or get pickles for its scheduler
            return pickle.dumps(graph)

    class Held:
        status, client = "finished", Client()

    values = (np.arange(3.0),)
    shipped = _Shipped(values, "arrays-shipped-once-0", Held())
    stub = pickle.loads(Held.client.compute(shipped))
    for sent in (
        stub,
        pickle.loads(pickle.dumps(stub)),
    ):  # a bare key stays one (it was None on a worker)
        with pytest.raises(
            RuntimeError,
            match="arrays-shipped-once-0: this lazy result was sent without its arrays",
        ):
            _shipped_values(sent)
    assert _shipped_values(shipped) is values  # in process
    np.testing.assert_array_equal(
        _shipped_values(pickle.loads(pickle.dumps(shipped)))[0], values[0]
    )  # a user's pickle
    Held.status = "cancelled"  # client.restart(), a closed client
    np.testing.assert_array_equal(
        _shipped_values(pickle.loads(Held.client.compute(shipped)))[0], values[0]
    )


def _sends_large_graph(compute):
    """``(compute(), whether it sent its scheduler a graph of 1 MiB or more)`` (distributed's
    large-graph warning)."""
    import warnings

    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "1MiB"}),
        warnings.catch_warnings(record=True) as seen,
    ):
        warnings.simplefilter("always")
        result = compute()
    return result, any("Sending large graph" in str(w.message) for w in seen)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_large_models_lazy_prediction_computes_wherever_it_goes(cluster_client, monkeypatch):
    # a model shipped to one client's cluster (8 MiB or more): its lazy prediction computed by
    # another
    # client (a second Client, now the default) failed with "TypeError: 'NoneType' object is not
    # iterable" (the bare key, re-pickled by that scheduler for its workers, arrived as None), and
    # one
    # pickled (pickle, joblib) while its client was open failed elsewhere ("this lazy result was
    # sent
    # without its arrays"); its own client still sends only the key
    import io
    import pickle

    import joblib
    from distributed import Client, LocalCluster

    from rfol_dask import placement

    U, V = smooth_operator_data(120, 16)
    model = RandomFeatureOperator(n_features=6000, random_state=0).fit(U, V)  # 1.5 MiB of arrays
    want, X = model.predict(U), da.from_array(U, chunks=40)
    monkeypatch.setattr(placement, "EMBED_BYTES", 2**20)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        lazy = model.predict(X)
        got, large = _sends_large_graph(lazy.compute)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert not large  # the key, not the arrays
        saved, dumped = pickle.dumps(lazy), io.BytesIO()
        joblib.dump(lazy, dumped)
        with cluster_client.as_current():  # a scheduler in this process, its workers not
            got, large = _sends_large_graph(lazy.compute)
            np.testing.assert_allclose(got, want, rtol=1e-12)
            assert large  # the arrays went with it
    dumped.seek(0)
    for copy in (pickle.loads(saved), joblib.load(dumped)):
        np.testing.assert_allclose(copy.compute(), want, rtol=1e-12)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_large_models_lazy_prediction_passed_to_delayed_computes_on_its_cluster(
    cluster_client, monkeypatch, tmp_path
):
    # dask inlines every task of a lazy result passed to dask.delayed (ProhibitReuse), as xarray's
    # to_zarr does: the bare key of the model's arrays ran inside another task on a worker and
    # failed
    # ("TypeError: 'NoneType' object is not iterable": pred.to_zarr on a cluster, write_predictions,
    # rfol-dask predict --workers with a model of 8 MiB or more); it now reads them from the cluster
    import time

    from rfol_dask import placement

    U, V = smooth_operator_data(120, 16)
    model = RandomFeatureOperator(n_features=64, random_state=0).fit(U, V)
    want = model.predict(U)
    monkeypatch.setattr(placement, "EMBED_BYTES", 0)
    with cluster_client.as_current():
        lazy = model.predict(xr.DataArray(U, dims=("sample", "x")).chunk({"sample": 40}))
        (key,) = [
            k for k in lazy.data.__dask_graph__() if str(k).startswith("arrays-shipped-once-")
        ]
        deadline = time.monotonic() + 30
        while not (
            holders := cluster_client.sync(cluster_client.scheduler.who_has, keys=[key])[key]
        ):
            assert time.monotonic() < deadline, "the arrays never arrived on a worker"
            time.sleep(0.05)
        others = sorted(set(cluster_client.scheduler_info()["workers"]) - set(holders))
        assert len(others) == 1  # one holds them, the other runs the tasks first
        job = lazy.to_dataset(name="prediction").to_zarr(tmp_path / "p.zarr", compute=False)
        for result in (
            job,
            dask.delayed(np.asarray)(lazy.data),
        ):  # on the worker without them, and anywhere
            for workers in (others, None):
                cluster_client.compute(result, workers=workers).result(timeout=60)
        np.testing.assert_allclose(dask.delayed(np.asarray)(lazy.data).compute(), want, rtol=1e-12)
    np.testing.assert_allclose(
        xr.open_zarr(tmp_path / "p.zarr")["prediction"].values, want, rtol=1e-12
    )


@pytest.mark.cluster
@pytest.mark.slow
def test_lazy_prediction_of_a_large_model_survives_lost_workers():
    # a model of 8 MiB or more is shipped to the workers once, outside the prediction's graph: a
    # lazy prediction failed after client.restart() or a killed worker ("FutureCancelledError:
    # lost dependencies"), its arrays gone with the workers; one cluster sees both, a kill first
    import os
    import signal
    import time

    from distributed import Client, LocalCluster

    from rfol_dask import placement

    U, V = smooth_operator_data(120, 16)
    model = RandomFeatureOperator(n_features=36000, random_state=0).fit(U, V)
    assert placement._nbytes(model._predict_kernel()[1]) >= placement.EMBED_BYTES
    X = da.from_array(U, chunks=40)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        lazy = model.predict(X)
        assert not _sends_large_graph(lazy.persist)[1]  # the arrays are not in the graph

        def shipped(result):
            return {k for k in result.__dask_graph__() if str(k).startswith("arrays-shipped-once-")}

        # predicting again reuses the copy the cluster holds (one per prediction piled up on the
        # scheduler)
        assert len(shipped(lazy)) == 1 and shipped(model.predict(X[:40])) == shipped(lazy)
        # a killed worker: its nanny starts another
        before = set(client.scheduler_info()["workers"])
        os.kill(next(iter(client.run(os.getpid).values())), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (
            set(client.scheduler_info()["workers"]) in (before, set())
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        # the scheduler makes the arrays again (its task holds them): the graph need not carry them
        assert not _sends_large_graph(lazy.persist)[1]
        for _ in range(2):
            np.testing.assert_allclose(lazy.compute(), model.predict(U), rtol=1e-12)
        client.restart()  # then every worker restarted
        assert shipped(model.predict(X)).isdisjoint(shipped(lazy))  # forgotten there: shipped anew
        for _ in range(2):
            np.testing.assert_allclose(lazy.compute(), model.predict(U), rtol=1e-12)


@pytest.mark.cluster
def test_a_scheduler_chosen_in_dask_config_wins_over_the_client(monkeypatch):
    # dask.config.set(scheduler="sync") inside a Client (e.g. to debug with pdb): dask's own
    # collections compute locally, and so must a large model's prediction (it was scattered to
    # the client and failed with "Missing dependency") and the fit
    import dask
    from distributed import Client, LocalCluster

    from rfol_dask import placement, progress

    U, V = smooth_operator_data(120, 16)
    model = RandomFeatureOperator(n_features=64, random_state=0).fit(U, V)
    X = da.from_array(U, chunks=40)
    monkeypatch.setattr(placement, "EMBED_BYTES", 0)  # as for a model of 8 MiB or more
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        assert progress.active_client() is client
        for scheduler in ("sync", "threads"):
            with dask.config.set(scheduler=scheduler):
                assert progress.active_client() is None
                np.testing.assert_allclose(model.predict(X).compute(), model.predict(U), rtol=1e-12)
                refit = RandomFeatureOperator(n_features=64, random_state=0).fit(
                    X, da.from_array(V, chunks=40)
                )
                np.testing.assert_allclose(
                    refit.predict(U), model.predict(U), rtol=1e-10, atol=1e-12
                )
        for chosen in (client, client.get):
            with dask.config.set(scheduler=chosen):
                assert progress.active_client() is client
