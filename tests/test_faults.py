"""Failure behaviour on a real distributed cluster (docs/user_guide/scaling_out.md, "Failures")."""

import os
import signal
import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import smooth_operator_data
from distributed import Client, LocalCluster

from rfol_dask import RandomFeatureOperator, datasets

pytestmark = [pytest.mark.cluster, pytest.mark.slow]  # every test runs a process cluster


def _slow_block(block):
    time.sleep(0.15)  # makes the fit last long enough to kill a worker in its middle
    return block


@pytest.mark.parametrize("solver,n_features", [("dual", 900), ("primal", 150)])
def test_worker_killed_mid_fit_gives_same_model(solver, n_features):
    U, V = smooth_operator_data(800, 24)
    ref = RandomFeatureOperator(n_features=n_features, alpha=1e-6, solver=solver, random_state=0)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        Ud = da.from_array(U, chunks=(50, -1)).map_blocks(_slow_block, dtype=U.dtype)
        Vd = da.from_array(V, chunks=(50, -1))
        clean = ref.__class__(**ref.get_params()).fit(Ud, Vd)
        pids = list(client.run(os.getpid).values())
        killer = threading.Timer(0.8, os.kill, (pids[0], signal.SIGKILL))
        killer.start()
        t0 = time.perf_counter()
        model = ref.__class__(**ref.get_params()).fit(Ud, Vd)
        assert time.perf_counter() - t0 > 0.8  # the kill happened during the fit
        killer.join()
        assert pids[0] not in client.run(os.getpid).values()  # a fresh worker replaced it
    # A lost or doubly counted row block would move the model by far more than 1e-6. What may
    # differ is the order of the sums: the replacement worker can take another share of the row
    # blocks, and rounding differences of the Gram (1e-16) grow by its condition number in the
    # coefficients (seen: 6e-8 relative for the primal on a loaded machine); predictions are
    # better conditioned.
    np.testing.assert_allclose(
        model.coef_, clean.coef_, rtol=1e-6, atol=1e-7 * np.abs(clean.coef_).max()
    )
    np.testing.assert_allclose(model.intercept_, clean.intercept_, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        model.predict(U), clean.predict(U), rtol=1e-7, atol=1e-7 * np.abs(V).max()
    )


def _kill_worker(block):
    os._exit(1)


def test_task_that_kills_every_worker_gives_clear_error_and_writes_nothing(tmp_path):
    U, V = smooth_operator_data(100, 8)
    good = RandomFeatureOperator(n_features=200, alpha=1e-6, random_state=0).fit(U, V)
    good.save(tmp_path / "model.zarr")
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 1}),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster),
    ):
        Ud = da.from_array(U, chunks=(25, -1))
        Ud = da.map_blocks(
            lambda b, block_info=None: (
                _kill_worker(b) if block_info[0]["chunk-location"][0] == 2 else b
            ),
            Ud,
            dtype=U.dtype,
        )
        model = RandomFeatureOperator(n_features=200, alpha=1e-6, random_state=1)
        with pytest.raises(
            RuntimeError,
            match=r"killed the workers it ran on .*ran out of memory \(memory limit "
            r"per worker: [0-9,]+ bytes\)",
        ):
            model.fit(Ud, da.from_array(V, chunks=(25, -1)))
        assert not hasattr(model, "coef_")
        # the previous model on disk is untouched
        np.testing.assert_array_equal(
            RandomFeatureOperator.load(tmp_path / "model.zarr").coef_, good.coef_
        )

        # a data-set generation whose block kills its workers leaves an incomplete store, never a
        # complete one
        from rfol_dask.datasets import store as store_mod

        real = store_mod._write_block
        store_mod._write_block = lambda p, name, seed, a, b, k, params: (
            os._exit(1) if k == 1 else real(p, name, seed, a, b, k, params)
        )
        try:
            with pytest.raises(RuntimeError, match="killed the workers it ran on"):
                datasets.generate("advection1", 40, store=tmp_path / "data.zarr", block_size=10)
        finally:
            store_mod._write_block = real
        with pytest.raises(ValueError, match="incomplete"):
            datasets.open(tmp_path / "data.zarr")


def test_fit_under_memory_pressure_spills_and_completes():
    U, V = smooth_operator_data(1200, 64)
    ref = RandomFeatureOperator(n_features=1500, gamma=1.0, alpha=1e-6, random_state=0).fit(U, V)
    # a low spill threshold: feature blocks and tiles are spilled to disk during the fit
    spill = {
        "distributed.worker.memory.target": 0.02,
        "distributed.worker.memory.spill": 0.03,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": False,
    }
    with (
        dask.config.set(spill),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit="1500MB",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        from distributed import get_task_stream

        Ud, Vd = da.from_array(U, chunks=(150, -1)), da.from_array(V, chunks=(150, -1))
        with get_task_stream(client=client) as ts:
            # (a numeric gamma: the default "median" reads a sample of U in a compute of its own
            # first)
            model = RandomFeatureOperator(
                n_features=1500, gamma=1.0, alpha=1e-6, random_state=0
            ).fit(Ud, Vd)
        spilled = client.run(
            lambda dask_worker: sum(
                v
                for k, v in dask_worker.digests_total.items()
                if "disk-write" in k and k[-1] == "bytes"
            )
        )
    assert sum(spilled.values()) > 0
    keys = [t["key"] for t in ts.data]
    assert len(keys) == len(set(keys))  # one pass: no task (data loads included) ran twice
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-9, atol=1e-10 * np.abs(ref.coef_).max()
    )


class _KillOnce:
    """A worker plugin that kills its worker when a task whose key starts with ``prefix`` starts,
    once per ``flag`` file."""

    def __init__(self, prefix, flag):
        self.prefix, self.flag = prefix, flag

    def transition(self, key, start, finish, **kwargs):
        if (
            finish == "executing"
            and str(key).startswith(self.prefix)
            and not os.path.exists(self.flag)
        ):
            open(self.flag, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("prefix", ["dual-factor", "coef-rows"])
def test_rows_mode_survives_a_worker_lost_after_the_gram_pass(tmp_path, prefix):
    from distributed.diagnostics.plugin import WorkerPlugin

    U, V = smooth_operator_data(600, 16)
    kw = dict(n_features=900, gamma=0.05, alpha=1e-6, random_state=0)
    want = RandomFeatureOperator(**kw).fit(U, V)
    plugin = type("KillOnce", (_KillOnce, WorkerPlugin), {})(prefix, str(tmp_path / "killed"))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
        dask.config.set({"rfol_dask.device-features": "rows"}),
    ):
        client.register_plugin(plugin)
        model = RandomFeatureOperator(**kw).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
    assert (tmp_path / "killed").exists()  # a worker died during the fit
    np.testing.assert_allclose(model.predict(U), want.predict(U), rtol=1e-7, atol=1e-9)


def _dies_on(pid, func):
    if os.getpid() == pid:
        os._exit(1)
    return func()


def test_a_worker_lost_during_the_memory_probe_leaves_the_fit_to_the_others(monkeypatch):
    """The fit asks every worker for its memory; one killed then failed the fit with distributed's
    CommClosedError. The workers that answer are enough."""
    import functools

    from rfol_dask import memory

    U, V = smooth_operator_data(200, 8)
    kw = dict(n_features=300, gamma=0.05, alpha=1e-6, random_state=0)
    want = RandomFeatureOperator(**kw).fit(U, V).predict(U)
    run, asked = Client.run, []

    def dying(self, func, *args, **kwargs):
        if func is memory._process_memory:
            asked.append(func)
            func = functools.partial(_dies_on, victim, func)
        return run(self, func, *args, **kwargs)

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        victim = sorted(client.run(os.getpid).items())[0][1]
        monkeypatch.setattr(Client, "run", dying)
        model = RandomFeatureOperator(**kw).fit(
            da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1))
        )
        monkeypatch.undo()
        assert asked and victim not in client.run(os.getpid).values()  # it died in the probe
    np.testing.assert_allclose(model.predict(U), want, rtol=1e-6, atol=1e-8)


def test_a_fit_whose_workers_all_end_fails_in_bounded_time():
    """Every worker ending mid-fit (jobs past their walltime, preempted, cancelled) left the fit
    waiting for ever; after distributed's no-workers-timeout it fails with one clear error."""
    from dask.utils import parse_timedelta

    from rfol_dask.exceptions import NoWorkersError
    from rfol_dask.progress import NO_WORKERS_TIMEOUT

    assert dask.config.get("distributed.scheduler.no-workers-timeout") == NO_WORKERS_TIMEOUT
    assert parse_timedelta(NO_WORKERS_TIMEOUT) == 300  # the package's default, upstream's is None
    U, V = smooth_operator_data(800, 24)
    with (
        dask.config.set({"distributed.scheduler.no-workers-timeout": "2s"}),
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        Ud = da.from_array(U, chunks=(50, -1)).map_blocks(_slow_block, dtype=U.dtype)

        ended = []

        def end_every_worker():  # once the fit's tasks run
            while not any(client.processing().values()):
                time.sleep(0.05)
            cluster.scale(0)
            ended.append(time.perf_counter())

        threading.Thread(target=end_every_worker, daemon=True).start()
        with pytest.raises(NoWorkersError, match=r"every worker of the cluster ended.*walltime"):
            RandomFeatureOperator(n_features=900, gamma=0.05, random_state=0).fit(
                Ud, da.from_array(V, chunks=(50, -1))
            )
        assert time.perf_counter() - ended[0] < 30
