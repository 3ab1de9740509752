import contextlib
import os

import dask
import numpy as np
import pytest
import xarray as xr
from distributed import WorkerPlugin

# Markers (registered in pyproject.toml): ``slow`` for tests over about a quarter second on an idle
# 2-core machine (subprocesses, clusters, process pools, large fits), so that the fast loop
# ``python -m pytest -m "not slow"`` takes a minute; ``cluster`` for tests that start a distributed
# LocalCluster. Users of the ``cluster_client`` fixture get ``cluster`` here; a test that starts a
# cluster itself carries the marker, and the guard below fails one that does not.


# small dask data are fitted in memory (rfol_dask.inputs.in_memory); the tests of the dask path,
# and the command lines they start, keep it; the tests of that loading set the fraction themselves
os.environ["DASK_RFOL_DASK__IN_MEMORY_FRACTION"] = "0"
dask.config.set({"rfol_dask.in-memory-fraction": 0})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cluster_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(autouse=True)
def _clusters_only_in_cluster_tests(request, monkeypatch):
    """Fail a test that starts a LocalCluster in this process without the ``cluster`` marker."""
    if request.node.get_closest_marker("cluster") is None:
        import functools

        from distributed import LocalCluster

        @functools.wraps(
            LocalCluster.__init__
        )  # its signature stays LocalCluster's (load_config reads it)
        def refuse(self, *args, **kwargs):
            raise AssertionError(
                f"{request.node.nodeid} starts a LocalCluster: mark it @pytest.mark.cluster"
            )

        monkeypatch.setattr(LocalCluster, "__init__", refuse)
    yield


@pytest.fixture(scope="session")
def cluster_client():
    """A real distributed LocalCluster (processes, 2 workers x 1 thread), shared by the session.

    It is not the default client: a test uses it inside ``with cluster_client.as_current():``,
    so that other tests keep dask's local scheduler.
    """
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


@pytest.fixture
def ctrl_c():
    """A Ctrl-C as a terminal delivers it: a function sending SIGINT to the main thread, which
    raises KeyboardInterrupt there even while it waits on a lock (``_thread.interrupt_main`` waits
    for the lock first). Python's own SIGINT handler is installed for the test: an earlier import of
    dask_jobqueue replaces it with ``sys.exit()``."""
    import signal
    import threading

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def ctrl_c_in_zarr_write(monkeypatch, ctrl_c):
    """``arm(target, hold)``: the first zarr write (in zarr's IO thread) of a path for which
    ``target(path)`` is true sends Ctrl-C to the main thread, waits ``hold()`` and then writes;
    returns ``(held, landed)``: the paths held, an Event set once the write has landed."""
    import threading

    import zarr.storage._local as local

    real_put = local._put

    def arm(target, hold):
        held, landed = [], threading.Event()

        def put(p, value, exclusive=False):
            if target(p) and not held:
                held.append(p)
                ctrl_c()
                hold()
                try:
                    return real_put(p, value, exclusive)
                finally:
                    landed.set()
            return real_put(p, value, exclusive)

        monkeypatch.setattr(local, "_put", put)
        return held, landed

    return arm


def rel(a, b):
    """Largest absolute difference of ``a`` and ``b`` over the largest ``|b|`` (arrays of any
    namespace: CuPy and array_api_strict arrays are brought to numpy)."""
    from rfol_dask.backend import to_numpy

    a, b = to_numpy(a), to_numpy(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def smooth_operator_data(n_samples=240, n_points=32, seed=0, n_out=None):
    """Inputs: random smooth periodic functions; outputs: a heat-semigroup smoothing of them."""
    rng = np.random.default_rng(seed)
    x = np.arange(n_points) / n_points
    k = np.arange(1, 6)
    a = rng.standard_normal((n_samples, k.size)) / k
    U = a @ np.sin(2 * np.pi * np.outer(k, x))
    V = (a * np.exp(-0.05 * k**2)) @ np.sin(2 * np.pi * np.outer(k, x))
    V = V[:, : (n_out or n_points)] + 0.3 * U[:, : (n_out or n_points)] ** 2
    return U, V


class FakeClient:
    """A stand-in for a distributed client whose workers have the given memory limits (bytes)
    and hold ``used`` bytes each already (what ``run`` reports)."""

    def __init__(self, *limits, used=0):
        self.limits, self.used = limits, used

    def scheduler_info(self):
        return {
            "workers": {
                f"w{i}": {"memory_limit": m, "nthreads": 1} for i, m in enumerate(self.limits)
            }
        }

    def run(self, func, *args, **kwargs):
        return {f"w{i}": self.used for i in range(len(self.limits))}


def same_scores(model, ref, tol):
    """Assert that the validation scores of two searches agree to ``tol`` (relative), their
    unsolved (NaN) and failed (-inf) candidates alike."""
    np.testing.assert_allclose(
        model.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=tol
    )


def _array_ids(value, min_bytes):
    """Ids of the memory of the numpy arrays of at least ``min_bytes`` in ``value`` (an array, a
    list or tuple of values, or an object's attributes)."""
    if isinstance(value, np.ndarray):
        return (
            {id(value if value.base is None else value.base)}
            if value.nbytes >= min_bytes
            else set()
        )
    if isinstance(value, (list, tuple)):
        return set().union(*(_array_ids(v, min_bytes) for v in value))
    names = getattr(value, "__slots__", ()) or getattr(value, "__dict__", {})
    return set().union(*(_array_ids(getattr(value, n, None), min_bytes) for n in names))


class _HeldArrays(WorkerPlugin):
    """A worker plugin noting the most arrays of at least ``min_bytes`` its worker holds at once
    (task results and fetched inputs; results that share memory, in-place sums, count once)."""

    name = "held-arrays"

    def __init__(self, min_bytes):
        self.min_bytes, self.peak = min_bytes, 0

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory":
            data = self.worker.data
            held = set().union(
                *(_array_ids(data.get(k), self.min_bytes) for k in list(data.keys()))
            )
            self.peak = max(self.peak, len(held))


@contextlib.contextmanager
def held_arrays(client, min_bytes):
    """Yields a dict that, on exit, maps each worker of ``client`` to the most arrays of at least
    ``min_bytes`` it held at once meanwhile (:class:`_HeldArrays`): to check what a memory plan
    counts."""
    peaks = {}
    client.register_plugin(_HeldArrays(min_bytes))
    yield peaks
    peaks.update(client.run(lambda dask_worker: dask_worker.plugins[_HeldArrays.name].peak))
    client.unregister_worker_plugin(_HeldArrays.name)


class _FetchedKeys(WorkerPlugin):
    """A worker plugin noting the keys its worker fetched from another worker (flight -> memory)."""

    name = "fetched-keys"

    def __init__(self):
        self.keys = []

    def transition(self, key, start, finish, **kwargs):
        if start == "flight" and finish == "memory":
            self.keys.append(key)


@contextlib.contextmanager
def fetched_keys(client):
    """Yields a dict that, on exit, maps each worker of ``client`` to the keys it fetched from
    other workers meanwhile (:class:`_FetchedKeys`): to check what a graph moves between workers."""
    fetched = {}
    client.register_plugin(_FetchedKeys())
    yield fetched
    fetched.update(client.run(lambda dask_worker: dask_worker.plugins[_FetchedKeys.name].keys))
    client.unregister_worker_plugin(_FetchedKeys.name)


@pytest.fixture
def predict_devices(monkeypatch):
    """The ``device`` of each ``estimator._predict_chunk`` call (a block of a lazy prediction),
    recorded while the test runs."""
    from rfol_dask import estimator

    devices, real = [], estimator._predict_chunk

    def recorded(*args, device, **kwargs):
        devices.append(device)
        return real(*args, device=device, **kwargs)

    monkeypatch.setattr(estimator, "_predict_chunk", recorded)
    return devices


@pytest.fixture(scope="module")
def grid2d():
    """Inputs and outputs on a 4 x 5 grid (x, y) as DataArrays with coordinates."""
    rng = np.random.default_rng(0)
    U = rng.standard_normal((40, 4, 5))
    V = np.cumsum(U, axis=1) + 0.2 * U**2
    coords = {"sample": np.arange(40), "x": np.linspace(0, 1, 4), "y": np.linspace(0, 2, 5)}
    return (
        xr.DataArray(U, dims=("sample", "x", "y"), coords=coords),
        xr.DataArray(V, dims=("sample", "x", "y"), coords=coords),
    )


def stations():
    """Inputs on 5 named stations (string coordinates), outputs on two named components."""
    rng = np.random.default_rng(0)
    st = ["BER", "PAR", "ROM", "MAD", "OSL"]
    U = xr.DataArray(
        rng.standard_normal((50, 5)),
        dims=("sample", "station"),
        coords={"sample": np.arange(50), "station": st},
    )
    V = xr.DataArray(
        np.c_[U.values.sum(1), U.values[:, 0] - U.values[:, 3]],
        dims=("sample", "out"),
        coords={"sample": np.arange(50), "out": ["sum", "diff"]},
    )
    return U, V
