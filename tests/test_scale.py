"""Scale-out behaviour: the blocked Cholesky when the dual Gram does not fit one worker."""

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


@pytest.mark.parametrize("spread,keep", [(False, False), (True, False), (False, True)])
def test_memory_plans_give_the_same_model(monkeypatch, spread, keep):
    from rfol_dask import solve

    U, V = smooth_operator_data(200, 16)
    ref = RandomFeatureOperator(n_features=350, alpha=1e-5, random_state=3).fit(U, V)
    monkeypatch.setattr(solve, "memory_plan", lambda *a: {"spread_solves": spread, "keep_features": keep})
    calls = []
    real = solve.features_block
    monkeypatch.setattr(solve, "features_block", lambda *a: calls.append(a[3]) or real(*a))
    model = RandomFeatureOperator(n_features=350, alpha=1e-5, random_state=3, column_block=5).fit(
        da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1)))
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10, atol=1e-10 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-11)
    assert len(calls) == (4 if keep else 8)  # features made once per block, or again for C = A^T Beta


def test_memory_plan_thresholds():
    from rfol_dask.solve import memory_plan

    class FakeClient:
        def scheduler_info(self):
            return {"workers": {"a": {"memory_limit": 4e9}, "b": {"memory_limit": 4e9}}}

    # factor 0.8 GB <= 1 GB (a quarter of a worker); A 1.6 GB <= 2.4 GB (30 % of the cluster)
    assert memory_plan(FakeClient(), 10_000, 20_000, 10, np.float64) == {"spread_solves": True,
                                                                         "keep_features": True}
    # factor 3.2 GB, A 24 GB: solve on the factorising worker, recompute the features
    assert memory_plan(FakeClient(), 20_000, 150_000, 10, np.float64) == {"spread_solves": False,
                                                                          "keep_features": False}


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
