"""Scale-out behaviour: the streamed dual, and the blocked Cholesky when the dual Gram does not fit one worker."""

import os

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_blocked_cholesky_matches_in_memory_fit(fit_intercept):
    U, V = smooth_operator_data(230, 12)
    ref = RandomFeatureOperator(n_features=400, alpha=1e-5, fit_intercept=fit_intercept, random_state=2).fit(U, V)
    Ud, Vd = da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))  # uneven last chunk
    with pytest.warns(RuntimeWarning, match="factorising it blocked"):
        model = RandomFeatureOperator(n_features=400, alpha=1e-5, fit_intercept=fit_intercept, random_state=2,
                                      max_gram_bytes=10_000).fit(Ud, Vd)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-10)


def test_worker_memory_limit_triggers_blocked_factorisation():
    from distributed import Client, LocalCluster

    U, V = smooth_operator_data(400, 10)
    ref = RandomFeatureOperator(n_features=600, alpha=1e-5, random_state=0).fit(U, V)
    # the limit is only a number here: the memory monitor is off so the tiny limit cannot pause workers
    off = {f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause", "terminate")}
    with dask.config.set(off), LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                            memory_limit="1MB", dashboard_address=":0") as c, Client(c):
        with pytest.warns(RuntimeWarning, match=r"400 x 400 Gram matrix needs 1,280,000 bytes.*smallest worker"):
            model = RandomFeatureOperator(n_features=600, alpha=1e-5, random_state=0).fit(
                da.from_array(U, chunks=(100, -1)), da.from_array(V, chunks=(100, -1)))
    np.testing.assert_allclose(model.predict(U), ref.predict(U), rtol=1e-8, atol=1e-9)


def test_blocked_factorisation_reports_indefinite_gram():
    U, V = smooth_operator_data(120, 6)
    U = np.vstack([U, U])  # repeated samples: singular Gram
    V = np.vstack([V, V])
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="blocked Cholesky factorisation failed"):
        RandomFeatureOperator(n_features=600, alpha=0.0, random_state=0, max_gram_bytes=1000).fit(
            da.from_array(U, chunks=(60, -1)), da.from_array(V, chunks=(60, -1)))


@pytest.mark.parametrize("keep", [False, True])
def test_blocked_memory_plans_give_the_same_model(monkeypatch, keep):
    from rfol_dask import solve

    U, V = smooth_operator_data(200, 16)
    ref = RandomFeatureOperator(n_features=350, alpha=1e-5, random_state=3).fit(U, V)
    monkeypatch.setattr(solve, "memory_plan", lambda *a: {"keep_features": keep})
    calls = []
    real = solve.features_block
    monkeypatch.setattr(solve, "features_block", lambda *a: calls.append(a[3]) or real(*a))
    with pytest.warns(RuntimeWarning, match="factorising it blocked"):
        model = RandomFeatureOperator(n_features=350, alpha=1e-5, random_state=3, column_block=5,
                                      max_gram_bytes=10_000).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1)))
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-10)
    assert len(calls) == (4 if keep else 8)  # features made once per block, or again for C = A^T Beta


def test_memory_plan_thresholds():
    from rfol_dask.solve import memory_plan

    class FakeClient:
        def scheduler_info(self):
            return {"workers": {"a": {"memory_limit": 4e9}, "b": {"memory_limit": 4e9}}}

    # A 1.6 GB <= 2.4 GB (30 % of the cluster): kept; A 24 GB: made again for C = A^T Beta
    assert memory_plan(FakeClient(), 10_000, 20_000, 10, np.float64) == {"keep_features": True}
    assert memory_plan(FakeClient(), 20_000, 150_000, 10, np.float64) == {"keep_features": False}


def test_feature_slabs_cover_the_columns_in_contiguous_groups():
    from rfol_dask.solve import feature_slabs

    groups = feature_slabs(20_000, 150_000, 2, 8)  # 256 MiB slabs: 1536 columns (6 blocks of 256)
    flat = [s for g in groups for s in g]
    assert flat[0][0] == 0 and flat[-1][1] == 150_000 and all(a[1] == b[0] for a, b in zip(flat, flat[1:]))
    assert len(groups) == 2 and abs(len(groups[0]) - len(groups[1])) <= 1
    assert max(e - s for s, e in flat) * 20_000 * 8 <= 256 * 2**20
    assert all((e - s) % 256 == 0 for s, e in flat[:-1])  # whole frequency blocks
    assert feature_slabs(100, 3, 4, 8) == [[(0, 1)], [(1, 2)], [(2, 3)]]  # fewer slabs than workers


@pytest.mark.parametrize("cache", ["disk", "none"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_streamed_dual_sums_the_gram_over_feature_slabs_and_workers(monkeypatch, tmp_path, cache, fit_intercept):
    """Several slabs per worker, two workers each holding a partial Gram: the same model as the
    in-memory fit; the slabs cached between the passes are deleted afterwards."""
    import glob
    import tempfile

    from distributed import Client, LocalCluster

    from rfol_dask import solve

    U, V = smooth_operator_data(150, 9)
    ref = RandomFeatureOperator(n_features=500, alpha=1e-6, fit_intercept=fit_intercept, random_state=4).fit(U, V)
    monkeypatch.setattr(solve, "SLAB_BYTES", 150 * 8 * 60)  # slabs of at most 60 features: 5 per worker
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    saved = []
    real_save = np.save
    monkeypatch.setattr(np, "save", lambda path, a: saved.append(path) or real_save(path, a))
    with dask.config.set({"rfol_dask.feature-cache": cache}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                         local_directory=str(tmp_path)) as c, Client(c):
        model = RandomFeatureOperator(n_features=500, alpha=1e-6, fit_intercept=fit_intercept, random_state=4).fit(
            da.from_array(U, chunks=(40, -1)), da.from_array(V, chunks=(40, -1)))
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-10)
    assert len(saved) == (10 if cache == "disk" else 0)  # halves 0:256 and 256:500, 5 slabs of <= 60 each
    assert not glob.glob(str(tmp_path / "**" / "rfol-*.npy"), recursive=True)


def test_streamed_dual_makes_a_lost_cached_slab_again(monkeypatch):
    from rfol_dask import solve

    U, V = smooth_operator_data(120, 5)
    ref = RandomFeatureOperator(n_features=300, alpha=1e-6, random_state=1).fit(U, V)
    monkeypatch.setattr(solve, "SLAB_BYTES", 120 * 8 * 100)
    real_gram = solve.gram_slab

    def gram_then_drop(K, U, freq, N, f0, f1, centre, token=None):
        K = real_gram(K, U, freq, N, f0, f1, centre, token)
        if f0 == 0:
            os.remove(solve._cache_file(token, f0))
        return K

    monkeypatch.setattr(solve, "gram_slab", gram_then_drop)
    made = []
    real_slab = solve._slab
    monkeypatch.setattr(solve, "_slab", lambda *a: (len(a[0]) > solve._SHIFT_ROWS and made.append(a[3]))
                        or real_slab(*a))
    model = RandomFeatureOperator(n_features=300, alpha=1e-6, random_state=1).fit(
        da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1)))
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max())
    assert sorted(made) == [0, 0, 100, 200]  # slab 0 made again for C; the others read back


def test_predict_on_a_cluster_ships_the_model_once_not_in_the_graph():
    import warnings

    from distributed import Client, LocalCluster

    rng = np.random.default_rng(0)
    U = rng.standard_normal((300, 500))
    V = U[:, :400] ** 2
    model = RandomFeatureOperator(n_features=6000, alpha=1e-6, random_state=0).fit(U, V)  # ~43 MB of arrays
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as c, Client(c):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pred = model.predict(da.from_array(U, chunks=(100, -1))).compute()
    assert not [w for w in caught if "large graph" in str(w.message)]
    np.testing.assert_allclose(pred, model.predict(U), rtol=1e-10, atol=1e-10)
