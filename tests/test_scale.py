"""Scale-out behaviour: the streamed dual, and the blocked Cholesky when the dual Gram does not
fit one worker."""

import contextlib
import functools
import glob
import os
import tempfile
import time

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import FakeClient, held_arrays, smooth_operator_data
from dask.utils import key_split

from rfol_dask import RandomFeatureOperator
from rfol_dask.features import draw_frequencies
from rfol_dask.solve import fit_dask, fit_numpy

#: the memory monitor is off so that tiny limits are only numbers the plans read
_MONITOR_OFF = {
    f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause", "terminate")
}


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.slow
def test_blocked_cholesky_matches_in_memory_fit(fit_intercept):
    U, V = smooth_operator_data(230, 12)
    ref = RandomFeatureOperator(
        n_features=400, alpha=1e-5, fit_intercept=fit_intercept, random_state=2
    ).fit(U, V)
    Ud, Vd = (
        da.from_array(U, chunks=(50, -1)),
        da.from_array(V, chunks=(50, -1)),
    )  # uneven last chunk
    with pytest.warns(RuntimeWarning, match="factorising it blocked"):
        model = RandomFeatureOperator(
            n_features=400,
            alpha=1e-5,
            fit_intercept=fit_intercept,
            random_state=2,
            max_gram_bytes=10_000,
        ).fit(Ud, Vd)
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max()
    )
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-10)


@contextlib.contextmanager
def _count_tasks():
    """Counts the tasks dask's local scheduler runs, by key name."""
    from collections import Counter

    from dask.callbacks import Callback

    count = Counter()
    with Callback(pretask=lambda key, dsk, state: count.update([key_split(key)])):
        yield count


@pytest.mark.slow
def test_tiled_duals_merge_fine_sample_chunks():
    """Chunks of one sample would make 1 x 1 tiles: a graph of M^3 / 6 tasks (80 samples took
    224 s and 3.5 GB). The tiled duals take at most MAX_TILE_BLOCKS row blocks."""
    from rfol_dask.baselines import KernelOperator
    from rfol_dask.solve.graph import MAX_TILE_BLOCKS

    U, V = smooth_operator_data(40, 8)  # 40 blocks, more than MAX_TILE_BLOCKS
    Ud, Vd = da.from_array(U, chunks=(1, -1)), da.from_array(V, chunks=(1, -1))
    ref = RandomFeatureOperator(n_features=240, alpha=1e-5, random_state=0).fit(U, V)
    with pytest.warns(RuntimeWarning, match="factorising it blocked"), _count_tasks() as count:
        model = RandomFeatureOperator(
            n_features=240, alpha=1e-5, random_state=0, max_gram_bytes=5_000
        ).fit(Ud, Vd)
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max()
    )
    assert (
        0 < count["gram-tile"] <= MAX_TILE_BLOCKS * (MAX_TILE_BLOCKS + 1) // 2
    )  # 820 tiles unmerged
    kernel = KernelOperator(kernel="rbf", length_scale=1.0)
    with _count_tasks() as count:
        lazy = kernel.fit(Ud, Vd).predict(U)
    np.testing.assert_allclose(lazy, kernel.fit(U, V).predict(U), rtol=1e-9, atol=1e-9)
    assert (
        0 < count["gram-tile"] <= MAX_TILE_BLOCKS * (MAX_TILE_BLOCKS + 1) // 2
    )  # 820 tiles unmerged


@pytest.mark.cluster
@pytest.mark.slow
def test_worker_memory_limit_triggers_blocked_factorisation():
    from distributed import Client, LocalCluster

    U, V = smooth_operator_data(400, 10)
    ref = RandomFeatureOperator(n_features=600, alpha=1e-5, random_state=0).fit(U, V)
    with (
        dask.config.set(_MONITOR_OFF),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            memory_limit="1MB",
            dashboard_address=":0",
        ) as c,
        Client(c),
    ):
        with pytest.warns(
            RuntimeWarning, match=r"400 x 400 Gram matrix needs 1,280,000 bytes.*smallest worker"
        ):
            model = RandomFeatureOperator(n_features=600, alpha=1e-5, random_state=0).fit(
                da.from_array(U, chunks=(100, -1)), da.from_array(V, chunks=(100, -1))
            )
    np.testing.assert_allclose(model.predict(U), ref.predict(U), rtol=1e-8, atol=1e-9)


def test_blocked_factorisation_reports_indefinite_gram():
    U, V = smooth_operator_data(120, 6)
    U = np.vstack([U, U])  # repeated samples: singular Gram
    V = np.vstack([V, V])
    with (
        pytest.warns(RuntimeWarning),
        pytest.raises(ValueError, match="alpha=0 leaves the Gram matrix singular"),
    ):
        RandomFeatureOperator(n_features=600, alpha=0.0, random_state=0, max_gram_bytes=1000).fit(
            da.from_array(U, chunks=(60, -1)), da.from_array(V, chunks=(60, -1))
        )


@pytest.mark.slow
def test_blocked_factorisation_retries_with_raised_ridges_as_in_memory():
    """A ridge below the Gram's rounding fails the blocked Cholesky; like the in-memory
    factorisations it is tried again with the jitter policy's raised ridges, with a warning."""
    U, V = smooth_operator_data(120, 6)
    U, V = np.vstack([U, U]), np.vstack([V, V])  # repeated samples: singular Gram
    Ud, Vd = da.from_array(U, chunks=(60, -1)), da.from_array(V, chunks=(60, -1))
    with pytest.warns(
        RuntimeWarning, match=r"alpha=1e-20 is not numerically positive definite.*used ridge"
    ):
        model = RandomFeatureOperator(
            n_features=600, alpha=1e-20, random_state=0, max_gram_bytes=1000
        ).fit(Ud, Vd)
    assert np.abs(model.predict(U) - V).max() < 1e-3 * np.abs(V).max()


@pytest.mark.parametrize("limit,keep", [("500kB", False), ("1MB", True)])
@pytest.mark.cluster
@pytest.mark.slow
def test_blocked_memory_plans_give_the_same_model(limit, keep):
    """A (200 x 350 doubles, 560 kB) is kept for C = A^T Beta when it takes at most 30 % of the
    cluster memory, else each feature block is made again (the tasks ``features-again``)."""
    from distributed import Client, LocalCluster, get_task_stream

    U, V = smooth_operator_data(200, 16)
    ref = RandomFeatureOperator(n_features=350, alpha=1e-5, random_state=3).fit(U, V)
    with (
        dask.config.set(_MONITOR_OFF),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            memory_limit=limit,
            dashboard_address=":0",
        ) as c,
        Client(c),
    ):
        with pytest.warns(RuntimeWarning, match="factorising it blocked"), get_task_stream() as ts:
            model = RandomFeatureOperator(
                n_features=350, alpha=1e-5, random_state=3, column_block=5, max_gram_bytes=10_000
            ).fit(da.from_array(U, chunks=(50, -1)), da.from_array(V, chunks=(50, -1)))
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max()
    )
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-10)
    names = [key_split(t["key"]) for t in ts.data]
    assert names.count("features") == 4  # one task per row block
    assert names.count("features-again") == (0 if keep else 4)


def test_memory_plan_thresholds():
    from rfol_dask.memory import keeps_features

    # A 1.6 GB <= 2.4 GB (30 % of the cluster): kept; A 24 GB: made again for C = A^T Beta
    assert keeps_features(FakeClient(4e9, 4e9), 10_000, 20_000, np.float64)
    assert not keeps_features(FakeClient(4e9, 4e9), 20_000, 150_000, np.float64)


def test_feature_slabs_cover_the_columns_in_contiguous_groups():
    from rfol_dask.memory import SLAB_BYTES
    from rfol_dask.solve.streamed import feature_slabs

    groups = feature_slabs(
        20_000, 150_000, 2, 8, SLAB_BYTES
    )  # 256 MiB slabs: 1536 columns (6 blocks of 256)
    flat = [s for g in groups for s in g]
    assert (
        flat[0][0] == 0
        and flat[-1][1] == 150_000
        and all(a[1] == b[0] for a, b in zip(flat, flat[1:], strict=False))
    )
    assert len(groups) == 2 and abs(len(groups[0]) - len(groups[1])) <= 1
    assert max(e - s for s, e in flat) * 20_000 * 8 <= 256 * 2**20
    assert all((e - s) % 256 == 0 for s, e in flat[:-1])  # whole frequency blocks
    assert feature_slabs(100, 3, 4, 8, SLAB_BYTES) == [
        [(0, 1)],
        [(1, 2)],
        [(2, 3)],
    ]  # fewer slabs than workers


def _cached_slabs(root):
    return glob.glob(os.path.join(root, "**", "rfol-*", "slab-*.npy"), recursive=True)


#: what the recipes below saw (the workers run in this process)
_SEEN = []


def _draw_and_count_cache(root, *args, columns=None):
    """``draw_frequencies``, noting how many slabs are cached under ``root`` when it is called."""
    _SEEN.append(len(_cached_slabs(root)))
    return draw_frequencies(*args, columns=columns)


def _draw_and_drop_slab_0(root, *args, columns=None):
    """``draw_frequencies``, deleting the cached slab 0 (noted in ``_SEEN``) once it exists."""
    for path in _cached_slabs(root):
        if os.path.basename(path) == "slab-0.npy":
            os.remove(path)
            _SEEN.append(path)
    return draw_frequencies(*args, columns=columns)


def _draw_or_fail(delay_columns, fail_columns, *args, columns=None):
    """``draw_frequencies``, slow at the slab ``delay_columns``, failing at ``fail_columns``."""
    if columns is not None and columns[0] == fail_columns:
        raise RuntimeError("this slab cannot be drawn")
    if columns is not None and columns[0] == delay_columns:
        time.sleep(1.0)
    return draw_frequencies(*args, columns=columns)


@pytest.mark.parametrize("cache", ["disk", "none"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.cluster
@pytest.mark.slow
def test_streamed_dual_sums_the_gram_over_feature_slabs_and_workers(tmp_path, cache, fit_intercept):
    """Several slabs per worker, two workers each holding a partial Gram: the same model as the
    in-memory fit; the slabs cached between the passes are deleted afterwards."""
    from distributed import Client, LocalCluster, get_task_stream

    U, V = smooth_operator_data(150, 9)
    args = (U.shape[1], 500, "cauchy", 1.0, None, 4)
    ref = fit_numpy(
        U, V, *draw_frequencies(*args), alpha=1e-6, fit_intercept=fit_intercept, solver="dual"
    )
    _SEEN.clear()
    config = {
        "rfol_dask.feature-cache": cache,
        "rfol_dask.slab-bytes": 150 * 8 * 60,
    }  # slabs of <= 60 features
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            local_directory=str(tmp_path),
        ) as c,
        Client(c),
        get_task_stream() as ts,
    ):
        coef, intercept = fit_dask(
            da.from_array(U, chunks=(40, -1)),
            da.from_array(V, chunks=(40, -1)),
            frequencies=functools.partial(_draw_and_count_cache, str(tmp_path), *args),
            n_features=500,
            dtype=np.float64,
            alpha=1e-6,
            fit_intercept=fit_intercept,
            solver="dual",
        )
    np.testing.assert_allclose(coef, ref[0], rtol=1e-9, atol=1e-9 * np.abs(ref[0]).max())
    np.testing.assert_allclose(intercept, ref[1], atol=1e-10)
    names = [key_split(t["key"]) for t in ts.data]
    assert (
        names.count("gram-slab") == names.count("coef-slab") == 10
    )  # halves 0:256, 256:500; 5 slabs each
    assert (max(_SEEN) > 0) == (cache == "disk")  # slabs were on the disk between the passes
    assert not glob.glob(str(tmp_path / "**" / "rfol-*"), recursive=True)


def test_streamed_dual_makes_a_lost_cached_slab_again(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the cache of the local scheduler
    U, V = smooth_operator_data(120, 5)
    args = (U.shape[1], 300, "cauchy", 1.0, None, 1)
    ref = fit_numpy(U, V, *draw_frequencies(*args), alpha=1e-6, fit_intercept=True, solver="dual")
    _SEEN.clear()
    with dask.config.set({"rfol_dask.slab-bytes": 120 * 8 * 100}):  # three slabs, one chain
        coef, intercept = fit_dask(
            da.from_array(U, chunks=(50, -1)),
            da.from_array(V, chunks=(50, -1)),
            frequencies=functools.partial(_draw_and_drop_slab_0, str(tmp_path), *args),
            n_features=300,
            dtype=np.float64,
            alpha=1e-6,
            fit_intercept=True,
            solver="dual",
        )
    assert len(_SEEN) == 1  # slab 0 was cached, then lost: it was made again for C
    np.testing.assert_allclose(coef, ref[0], rtol=1e-9, atol=1e-9 * np.abs(ref[0]).max())
    np.testing.assert_allclose(intercept, ref[1], atol=1e-10)
    assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_feature_cache_none_from_the_environment_fits_without_a_cache(tmp_path):
    """``DASK_RFOL_DASK__FEATURE_CACHE=none``, which dask reads as None: the fit runs with no
    cache directory and gives the cached fit's model."""
    import subprocess
    import sys

    script = """if True:
        import os, dask, dask.array as da, numpy as np
        from rfol_dask import RandomFeatureOperator
        assert dask.config.get("rfol_dask.feature-cache") is None
        rng = np.random.default_rng(0)
        U = rng.standard_normal((90, 6)); V = np.tanh(U)
        kw = dict(n_features=300, solver="dual", random_state=0)
        with dask.config.set({"rfol_dask.slab-bytes": 90 * 8 * 100}):
            model = RandomFeatureOperator(**kw).fit(da.from_array(U, 40), da.from_array(V, 40))
        with dask.config.set({"rfol_dask.feature-cache": "disk"}):
            cached = RandomFeatureOperator(**kw).fit(da.from_array(U, 40), da.from_array(V, 40))
        print(np.abs(model.coef_ - cached.coef_).max(), os.listdir(os.environ["TMPDIR"]))
    """
    env = {**os.environ, "DASK_RFOL_DASK__FEATURE_CACHE": "none", "TMPDIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    diff, listed = out.stdout.split()
    assert float(diff) < 1e-10 and listed == "[]", out.stderr


def test_feature_caches_left_by_killed_fits_are_swept_by_age(tmp_path, monkeypatch):
    from rfol_dask.solve import streamed

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old, new = "rfol-cache-" + "a" * 32, "rfol-cache-" + "b" * 32
    others = ["rfol-cache-notes", "rfol-notes", "rfol-0123abcd"]
    for name in [old, new, *others]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "slab-0.npy").write_bytes(b"x")
    for name in [old, *others]:
        os.utime(tmp_path / name, (time.time() - 2 * streamed.STALE_CACHE_S,) * 2)
    streamed.sweep_stale_caches()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new, *others])


@pytest.mark.cluster
@pytest.mark.slow
def test_failed_streamed_fit_leaves_no_feature_cache(tmp_path):
    """One worker's slab fails while the other is still making (and caching) its first slab:
    the fit fails, and nothing of its cache is left on the workers' disks, not even the slab
    that was finished after the failure."""
    from distributed import Client, LocalCluster

    U, V = smooth_operator_data(120, 5)
    args = (U.shape[1], 512, "cauchy", 1.0, None, 1)
    recipe = functools.partial(
        _draw_or_fail, 0, 256, *args
    )  # worker 1 draws 0:256, worker 2 256:512
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            local_directory=str(tmp_path),
        ) as c,
        Client(c),
    ):
        with pytest.raises(RuntimeError, match="cannot be drawn"):
            fit_dask(
                da.from_array(U, chunks=(60, -1)),
                da.from_array(V, chunks=(60, -1)),
                frequencies=recipe,
                n_features=512,
                dtype=np.float64,
                alpha=1e-6,
                fit_intercept=True,
                solver="dual",
            )
        time.sleep(
            2.0
        )  # the slow slab is finished by now; the workers (and their directories) live on
        assert glob.glob(str(tmp_path / "**" / "worker-*"), recursive=True)
        assert not glob.glob(str(tmp_path / "**" / "rfol-*"), recursive=True)


@pytest.mark.cluster
@pytest.mark.slow
def test_streamed_dual_fits_small_workers():
    """A worker process limited to 300 MB (about 190 MB of it the process itself): a 500 x 60000
    feature matrix (240 MB) in slabs that the worker memory sizes, not one 240 MB slab that gets
    the worker killed."""
    from distributed import Client, LocalCluster

    U, V = smooth_operator_data(500, 16)
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit="300MB",
            dashboard_address=":0",
        ) as c,
        Client(c),
    ):
        model = RandomFeatureOperator(n_features=60_000, alpha=1e-6, random_state=0).fit(
            da.from_array(U, chunks=(250, -1)), da.from_array(V, chunks=(250, -1))
        )
    assert model.score(U, V) > 0.999


@pytest.mark.cluster
@pytest.mark.slow
def test_predict_on_a_cluster_ships_the_model_once_not_in_the_graph():
    import warnings

    from distributed import Client, LocalCluster

    rng = np.random.default_rng(0)
    U = rng.standard_normal((300, 500))
    V = U[:, :400] ** 2
    model = RandomFeatureOperator(n_features=6000, alpha=1e-6, random_state=0).fit(
        U, V
    )  # ~43 MB of arrays
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pred = model.predict(da.from_array(U, chunks=(100, -1))).compute()
    assert not [w for w in caught if "large graph" in str(w.message)]
    np.testing.assert_allclose(pred, model.predict(U), rtol=1e-10, atol=1e-10)


def test_merged_row_blocks_stay_within_their_byte_bound():
    from rfol_dask.solve.graph import MERGED_BLOCK_BYTES, row_blocks

    U = da.zeros((100, 3), chunks=(1, 3))
    V = da.zeros((100, 2), chunks=(1, 2))
    assert np.diff(row_blocks(U, V, max_blocks=4)[2]).tolist() == [25] * 4
    capped = row_blocks(U, V, max_blocks=4, row_bytes=MERGED_BLOCK_BYTES // 10)[
        2
    ]  # 10 rows fit the bound
    assert np.diff(capped).tolist() == [10] * 10
    coarse = da.zeros(
        (100, 3), chunks=(50, 3)
    )  # chunks already coarser than needed: kept, never cut
    assert np.diff(
        row_blocks(coarse, V, max_blocks=4, row_bytes=MERGED_BLOCK_BYTES // 10)[2]
    ).tolist() == [50, 50]


@pytest.mark.cluster
def test_the_workers_grams_are_summed_by_a_tree_across_the_workers(tmp_path):
    """Four workers' Grams: each pairwise sum runs on the worker of its left Gram (the first and
    the third worker, then the first), so no worker holds more than two Grams at once. Every sum
    placed on the first worker had it fetch three Grams at once, beyond the two the memory plan
    counts."""
    from distributed import Client, LocalCluster, get_task_stream

    U, V = smooth_operator_data(120, 5)
    args = (U.shape[1], 400, "cauchy", 1.0, None, 4)
    ref = fit_numpy(U, V, *draw_frequencies(*args), alpha=1e-6, fit_intercept=True, solver="dual")
    with (
        dask.config.set({"rfol_dask.slab-bytes": 120 * 8 * 50}),
        LocalCluster(
            n_workers=4,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            local_directory=str(tmp_path),
        ) as c,
        Client(c) as client,
        get_task_stream() as ts,
    ):
        coef, intercept = fit_dask(
            da.from_array(U, chunks=(40, -1)),
            da.from_array(V, chunks=(40, -1)),
            frequencies=functools.partial(draw_frequencies, *args),
            n_features=400,
            dtype=np.float64,
            alpha=1e-6,
            fit_intercept=True,
            solver="dual",
        )
        workers = sorted(client.scheduler_info()["workers"])
    np.testing.assert_allclose(coef, ref[0], rtol=1e-9, atol=1e-9 * np.abs(ref[0]).max())
    sums = sorted(t["worker"] for t in ts.data if key_split(t["key"]) == "iadd")
    assert len({t["worker"] for t in ts.data if key_split(t["key"]) == "gram-slab"}) == 4
    assert sums == sorted([workers[0], workers[0], workers[2]])


@pytest.mark.parametrize("slots", [["a", "b"] * 3, ["a", "b", "c"] * 2 + ["a"], [None] * 5])
def test_chained_sum_sums_a_workers_own_chains_before_another_workers(slots):
    """chained_sum's tree sums each worker's chains into one before a sum of another worker's
    comes over, each sum on the worker of its left part (so a worker never holds more Grams than
    its threads and one that comes over)."""
    from rfol_dask.solve.graph import chained_sum

    def where():
        return dask.get_annotations().get("workers", [None])[0]

    def add_block(i, acc):  # the chains each block joined, and where
        assert where() == slots[i % len(slots)]
        return (acc or frozenset()) | {i % len(slots)}

    sums = []

    def combine(left, right):
        sums.append((where(), left, right))
        return left | right

    assert chained_sum(3 * len(slots), slots, add_block, combine) == frozenset(range(len(slots)))
    assert len(sums) == len(slots) - 1
    for w, left, right in sums:
        own = {c for c, s in enumerate(slots) if s == w}
        assert {slots[c] for c in left} >= {w} and w == slots[
            min(left)
        ]  # on the worker of its left part
        if any(
            slots[c] != w for c in right
        ):  # another worker's sum comes over: its own are summed already
            assert own <= left


@pytest.mark.parametrize("n_workers, threads", [(4, 1), (2, 2)])
@pytest.mark.cluster
@pytest.mark.slow
def test_primal_chains_run_one_per_worker_thread(n_workers, threads):
    """The primal's chains of in-place sums, one per worker thread, each run on a worker of their
    own: left to the scheduler, two chains shared a one-thread worker (three a two-thread one),
    which then held that many N x N accumulators, and a tree sum fetched one more, beyond the two
    the memory check counts. The chains' sums run on the worker of their left part, each worker's
    own chains first."""
    from distributed import Client, LocalCluster, get_task_stream

    U, V = smooth_operator_data(240, 9)
    ref = RandomFeatureOperator(n_features=100, alpha=1e-6, solver="primal", random_state=0).fit(
        U, V
    )
    with (
        LocalCluster(
            n_workers=n_workers, threads_per_worker=threads, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        get_task_stream() as ts,
        held_arrays(client, 100 * 100 * 8) as peaks,
    ):
        model = RandomFeatureOperator(
            n_features=100, alpha=1e-6, solver="primal", random_state=0
        ).fit(
            da.from_array(U, chunks=(30, -1)), da.from_array(V, chunks=(30, -1))
        )  # 8 row blocks, 4 chains
        workers = sorted(client.scheduler_info()["workers"])
    assert (
        max(peaks.values()) <= 2
    )  # N x N Grams held at once by a worker (two-thread workers held three)
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max()
    )
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-10)
    chains = {}  # worker -> the chains (block index mod 4) it ran
    for t in ts.data:
        if key_split(t["key"]) == "primal-partial":
            chains.setdefault(t["worker"], set()).add(int(t["key"].rsplit("-", 1)[1]) % 4)
    assert sorted(chains) == workers and all(len(c) == threads for c in chains.values())
    sums = sorted(t["worker"] for t in ts.data if key_split(t["key"]) == "add_partials")
    assert sums == sorted([workers[0], workers[0], workers[2 if n_workers == 4 else 1]])


@pytest.mark.cluster
def test_a_dask_primal_fit_asks_the_workers_for_their_memory_once(monkeypatch):
    """The dask primal's Gram check and its chains per worker (memory.gram_slots) read one budget,
    asked of the workers once a fit, for the random-feature primal and the linear kernel's alike."""
    from distributed import Client, LocalCluster

    from rfol_dask import memory
    from rfol_dask.baselines import KernelOperator

    asked, run = [], Client.run

    def counted(self, func, *args, **kwargs):
        asked.extend([func] if func is memory._process_memory else [])
        return run(self, func, *args, **kwargs)

    monkeypatch.setattr(Client, "run", counted)
    U, V = smooth_operator_data(240, 9)
    Ud, Vd = da.from_array(U, chunks=(30, -1)), da.from_array(V, chunks=(30, -1))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c),
    ):
        rf = RandomFeatureOperator(n_features=100, alpha=1e-6, solver="primal", random_state=0).fit(
            Ud, Vd
        )
        assert len(asked) == 1
        linear = KernelOperator(kernel="linear", nugget=1e-6).fit(
            Ud, Vd
        )  # 9 inputs, 240 samples: the primal
        assert len(asked) == 2
    assert linear.coef_ is not None
    ref = RandomFeatureOperator(n_features=100, alpha=1e-6, solver="primal", random_state=0).fit(
        U, V
    )
    np.testing.assert_allclose(rf.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max())


@pytest.mark.cluster
def test_a_worker_runs_as_many_primal_chains_as_its_memory_holds_grams():
    """One chain per thread held one N x N Gram per thread (16 on a 16-thread worker), where the
    memory check counts two: a worker now runs at most the chains whose Grams its budget holds
    (memory.gram_slots), here 2 of its 4 threads."""
    from distributed import Client, LocalCluster, get_task_stream

    from rfol_dask.memory import gram_slots

    U, V = smooth_operator_data(240, 9)
    gram, cross, freq = (
        100 * 100 * 8,
        100 * V.shape[1] * 8,
        10 * 100 * 8,
    )  # N = 100; Omega and b: (n + 1) x N
    budget = 2 * (gram + cross) + freq + 1000
    assert gram_slots(100, np.float64, budget, beside=freq, with_each=cross) == 2
    ref = RandomFeatureOperator(n_features=100, alpha=1e-6, solver="primal", random_state=0).fit(
        U, V
    )
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=4, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as client,
        get_task_stream() as ts,
        held_arrays(client, gram) as peaks,
    ):
        model = RandomFeatureOperator(
            n_features=100, alpha=1e-6, solver="primal", random_state=0, max_gram_bytes=budget
        ).fit(da.from_array(U, chunks=(30, -1)), da.from_array(V, chunks=(30, -1)))
    assert max(peaks.values()) <= 2
    assert sum(key_split(t["key"]) == "add_partials" for t in ts.data) == 1  # two chains, one sum
    np.testing.assert_allclose(
        model.coef_, ref.coef_, rtol=1e-9, atol=1e-9 * np.abs(ref.coef_).max()
    )
