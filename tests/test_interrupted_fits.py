"""A fit interrupted (Ctrl-C) or failing leaves the previous model whole; a predict during a refit
reads the previous model; on a cluster, the user's persisted data survive an interrupted fit and
a cluster without workers is named."""

import dask.array as da
import numpy as np
import pytest
from conftest import rel, smooth_operator_data

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


def _interrupt(monkeypatch, module, name):
    """``module.name`` raises KeyboardInterrupt: a Ctrl-C at that step of a fit."""

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, stop)


@pytest.mark.parametrize("lazy", [False, True])
def test_interrupted_refit_leaves_the_previous_model(monkeypatch, lazy):
    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(60, 8)
    Ut = smooth_operator_data(10, 8, seed=1)[0]
    data = (da.from_array(U, chunks=20), da.from_array(V, chunks=20)) if lazy else (U, V)
    model = _rf().fit(*data)
    want, state = model.predict(Ut), dict(vars(model))
    model.set_params(random_state=1)  # re-run with another seed, Ctrl-C during the solve
    with monkeypatch.context() as mp:
        _interrupt(mp, rfo, "fit_dask" if lazy else "fit_numpy")
        with pytest.raises(KeyboardInterrupt):
            model.fit(*data)
    # the previous model, whole: not its coefficients with the new frequencies (predicted 30x off)
    assert set(vars(model)) == set(state) and all(
        vars(model)[k] is v for k, v in state.items() if k != "random_state"
    )
    np.testing.assert_array_equal(model.predict(Ut), want)
    again = np.asarray(
        model.fit(*data).predict(Ut)
    )  # a re-run in the same process fits the new seed
    assert rel(again, _rf(random_state=1).fit(U, V).predict(Ut)) < 1e-6 and rel(again, want) > 1e-3


@pytest.mark.parametrize("case", ["numpy", "dask", "kernel"])
def test_a_prediction_in_another_thread_during_a_refit_is_the_previous_models(monkeypatch, case):
    """A refit set its attributes as it went: a predict from another thread (a notebook serving the
    model while it is refitted) read the new frequencies (numpy; for dask the new input centre,
    while the client drew Omega; the kernel's new PCA and length scale) beside the old coefficients
    and returned silently wrong values. The refit is now published whole at its end."""
    import threading

    import rfol_dask.baselines.kernel as kmod
    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(60, 8)
    Ut = smooth_operator_data(10, 8, seed=1)[0]
    data, other = (
        (da.from_array(X, chunks=20), da.from_array(V, chunks=20)) if case == "dask" else (X, V)
        for X in (U, U + 0.5)
    )  # the refit's data: another input centre too
    if case == "kernel":
        model, change, (module, name) = (
            KernelOperator(length_scale=1.0),
            {"length_scale": 2.0},
            (kmod, "dual_numpy"),
        )
    else:
        model, change = _rf(), {"random_state": 1}
        module, name = rfo, "fit_numpy" if case == "numpy" else "_timed_draw"
    want = np.asarray(model.fit(*data).predict(Ut))
    step, seen = getattr(module, name), []

    def paused(*args, **kwargs):  # the refit is half done: another thread predicts now
        reader = threading.Thread(target=lambda: seen.append(np.asarray(model.predict(Ut))))
        reader.start()
        reader.join()
        return step(*args, **kwargs)

    monkeypatch.setattr(module, name, paused)
    model.set_params(**change).fit(*other)
    np.testing.assert_array_equal(seen[0], want)
    assert rel(np.asarray(model.predict(Ut)), want) > 1e-3  # the refit, in place once it ended


def test_interrupted_first_fit_leaves_an_unfitted_model(monkeypatch):
    from sklearn.exceptions import NotFittedError

    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(60, 8)
    model = _rf()
    with monkeypatch.context() as mp:
        _interrupt(mp, rfo, "fit_numpy")
        with pytest.raises(KeyboardInterrupt):
            model.fit(U, V)
    assert not [k for k in vars(model) if k.endswith("_")]
    with pytest.raises(NotFittedError):
        model.predict(U)


def test_failed_kernel_refit_leaves_the_previous_model(monkeypatch):
    import rfol_dask.baselines.kernel as kmod

    U, V = smooth_operator_data(60, 8)
    model = KernelOperator(kernel="rbf", length_scale=1.0, n_components=4).fit(U, V)
    want = model.predict(U[:5])
    model.set_params(n_components=6, length_scale=2.0)
    with monkeypatch.context() as mp:
        _interrupt(mp, kmod, "dual_numpy")  # after the new PCA and length scale were set
        with pytest.raises(KeyboardInterrupt):
            model.fit(U, V)
    np.testing.assert_array_equal(model.predict(U[:5]), want)


def test_interrupted_search_refit_leaves_the_previous_search(monkeypatch):
    import rfol_dask.rf_operator as rfo

    U, V = smooth_operator_data(80, 8)
    search = RandomFeatureOperatorCV(
        n_features=40, distributions=("gaussian",), random_state=0
    ).fit(U, V)
    want, params, best = search.predict(U[:5]), dict(search.best_params_), search.best_estimator_
    search.set_params(random_state=3, distributions=("cauchy",))
    with monkeypatch.context() as mp:
        _interrupt(mp, rfo, "fit_numpy")  # the search is done: its winner's refit stops
        with pytest.raises(KeyboardInterrupt):
            search.fit(U, V)
    assert search.best_params_ == params and search.best_estimator_ is best
    np.testing.assert_array_equal(search.predict(U[:5]), want)


@pytest.mark.slow
@pytest.mark.cluster
def test_interrupted_cluster_fit_keeps_the_users_persisted_data(cluster_client, monkeypatch):
    import time

    from distributed import wait

    import rfol_dask.progress as prog

    rng = np.random.default_rng(0)
    U = rng.standard_normal((1200, 64))
    V = np.cumsum(U, 1)

    def tasks():
        return cluster_client.run_on_scheduler(
            lambda dask_scheduler: {
                str(k): sorted(c.client_key for c in t.who_wants or ())
                for k, t in dask_scheduler.tasks.items()
            }
        )

    with cluster_client.as_current():
        dU, dV = (
            da.from_array(U, chunks=(300, -1)).persist(),
            da.from_array(V, chunks=(300, -1)).persist(),
        )
        wait([dU, dV])
        held = tasks()
        assert len(held) == 8

        def stop(*args, **kwargs):  # Ctrl-C while the fit graph runs (its centre task still ahead)
            raise KeyboardInterrupt

        with monkeypatch.context() as mp:
            mp.setattr(prog, "_collect", stop)
            with pytest.raises(KeyboardInterrupt):
                RandomFeatureOperator(n_features=1500, gamma=0.01, random_state=0).fit(dU, dV)
        # the scheduler forgets the fit's tasks and keeps the client with what it holds (a cancel
        # of the fit's futures once dropped the client and all its futures: lost dependencies)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and tasks() != held:
            time.sleep(0.05)
        assert tasks() == held
        assert float(dU.sum().compute()) == pytest.approx(U.sum())
        model = RandomFeatureOperator(n_features=100, gamma=0.01, random_state=0).fit(dU, dV)
        assert (
            rel(
                model.predict(U[:5]),
                RandomFeatureOperator(n_features=100, gamma=0.01, random_state=0)
                .fit(U, V)
                .predict(U[:5]),
            )
            < 1e-6
        )


@pytest.mark.cluster
@pytest.mark.slow
def test_a_fit_on_a_cluster_without_workers_waits_for_one_then_says_so(monkeypatch):
    """A dual fit of dask arrays on a client whose cluster had no workers (not yet scaled up, or
    workers restarted again and again by their nannies) raised ZeroDivisionError from the slab
    layout; now it waits a little for a first worker, which it then uses, and else says what is
    wrong, leaving the model unfitted."""
    from distributed import Client, LocalCluster

    from rfol_dask import placement
    from rfol_dask.progress import NoWorkersError

    U, V = smooth_operator_data(80, 8)
    dU, dV = da.from_array(U, chunks=40), da.from_array(V, chunks=40)
    model = RandomFeatureOperator(n_features=200, gamma=0.05, random_state=0, solver="dual")
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        monkeypatch.setattr(placement, "WORKER_WAIT_S", 0.5)
        with pytest.raises(
            NoWorkersError, match=r"no workers \(none arrived within 0.5 s\): start some"
        ):
            model.fit(dU, dV)
        assert not hasattr(model, "coef_")
        monkeypatch.setattr(placement, "WORKER_WAIT_S", 60)
        cluster.scale(1)  # not there yet when the fit starts: waited for
        model.fit(dU, dV)
        assert len(client.scheduler_info()["workers"]) == 1
    ref = RandomFeatureOperator(n_features=200, gamma=0.05, random_state=0, solver="dual").fit(U, V)
    assert (
        rel(model.predict(U[:5]), ref.predict(U[:5])) < 1e-6
    )  # alpha 1e-10: the dask and numpy fits round apart


@pytest.mark.cluster
def test_a_median_gamma_fit_on_a_cluster_without_workers_says_so(monkeypatch):
    """``gamma="median"`` samples the inputs before the fit's graph, in a compute that waited for
    ever on a cluster without workers: the check for workers comes first."""
    from distributed import Client, LocalCluster

    from rfol_dask import placement
    from rfol_dask.progress import NoWorkersError

    U, V = smooth_operator_data(80, 8)
    monkeypatch.setattr(placement, "WORKER_WAIT_S", 0.5)
    model = RandomFeatureOperator(n_features=50, gamma="median", random_state=0)
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster),
    ):
        with pytest.raises(NoWorkersError, match=r"no workers \(none arrived within 0.5 s\)"):
            model.fit(da.from_array(U, chunks=40), da.from_array(V, chunks=40))
    assert not hasattr(model, "coef_")
