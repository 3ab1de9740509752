import numpy as np
import pytest
import xarray as xr
import zarr

from rfol_dask import __version__, datasets
from rfol_dask.stores import block_flags


def test_registry_lists_and_rejects():
    assert {"advection1", "advection2"} <= set(datasets.names())
    with pytest.raises(ValueError, match="unknown data set 'nope'; known data sets: .*advection1"):
        datasets.generate("nope", 3)
    with pytest.raises(
        ValueError, match=r"unknown parameter\(s\) \['speed'\] for data set 'advection1'"
    ):
        datasets.generate("advection1", 3, speed=2)
    for bad in (0, -5, 2.5):
        with pytest.raises(ValueError, match="n_samples must be a positive integer"):
            datasets.generate("advection1", bad)


@pytest.mark.cluster
@pytest.mark.slow
def test_same_bytes_for_any_block_size_and_workers(tmp_path):
    ref = datasets.generate("advection2", 23, seed=5, block_size=23)
    a = datasets.generate("advection2", 23, store=tmp_path / "a.zarr", seed=5, block_size=4)
    np.testing.assert_array_equal(a["input"].values, ref["input"].values)
    np.testing.assert_array_equal(a["output"].values, ref["output"].values)
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as cl,
    ):
        b = datasets.generate(
            "advection2", 23, store=tmp_path / "b.zarr", seed=5, block_size=7, client=cl
        )
        np.testing.assert_array_equal(b["output"].values, ref["output"].values)
    assert not np.array_equal(
        datasets.generate("advection2", 23, seed=6)["input"].values, ref["input"].values
    )


def test_store_layout_attributes_and_chunks(tmp_path):
    ds = datasets.generate(
        "advection1", 10, store=tmp_path / "s.zarr", seed=2, block_size=4, t_index=10
    )
    assert ds["input"].dims == ("sample", "x") and ds["input"].chunks == ((4, 4, 2), (40,))
    assert (
        ds.attrs["seed"] == 2
        and ds.attrs["param_t_index"] == 10
        and ds.attrs["param_n_points"] == 40
    )
    assert ds.attrs["rfol_dask_version"] == __version__
    assert ds["x"].attrs["units"] == "m" and ds["x"].attrs["period"] == 1.0
    assert "block_done" not in ds
    import zarr

    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert (
        group["input"].compressors == () and group["output"].compressors == ()
    )  # fields stored raw


@pytest.mark.slow
def test_resume_after_interruption_equals_uninterrupted(tmp_path, monkeypatch):
    from rfol_dask.datasets import store as store_mod

    path = tmp_path / "r.zarr"
    real = store_mod._write_block

    def dies_on_block_2(p, name, seed, start, stop, block, params):
        if block == 2:
            raise KeyboardInterrupt("worker killed")
        return real(p, name, seed, start, stop, block, params)

    monkeypatch.setattr(store_mod, "_write_block", dies_on_block_2)
    import dask

    with pytest.raises(KeyboardInterrupt), dask.config.set(scheduler="sync"):
        datasets.generate("advection1", 20, store=path, seed=1, block_size=5)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="incomplete.*rerun the same generate command"):
        datasets.open(path)
    # the missing block is NaN in the raw store, never zeros
    raw = xr.open_zarr(path)
    done = block_flags(path).astype(int)  # the bookkeeping, hidden from xarray
    missing = int(np.flatnonzero(done == 0)[0])
    assert np.isnan(raw["input"].values[missing * 5 : (missing + 1) * 5]).all()

    calls = []
    monkeypatch.setattr(store_mod, "_write_block", lambda *a: calls.append(a[5]) or real(*a))
    resumed = datasets.generate("advection1", 20, store=path, seed=1, block_size=5)
    assert sorted(calls) == list(np.flatnonzero(done == 0))  # only the unwritten blocks were made
    assert done.sum() >= 1  # something had been written before the kill
    ref = datasets.generate("advection1", 20, seed=1)
    np.testing.assert_array_equal(resumed["input"].values, ref["input"].values)
    np.testing.assert_array_equal(resumed["output"].values, ref["output"].values)


@pytest.mark.slow
def test_existing_store_not_overwritten(tmp_path):
    path = tmp_path / "o.zarr"
    datasets.generate("advection1", 8, store=path, seed=0)
    with pytest.raises(ValueError, match="holds another data set.*overwrite=True"):
        datasets.generate("advection2", 8, store=path, seed=0)
    with pytest.raises(ValueError, match="holds another data set") as info:
        datasets.generate("advection1", 8, store=path, seed=1)
    assert "block_size" not in str(info.value)
    with pytest.raises(ValueError, match=r"\{'n_samples': \(8, 30\), 'seed': \(0, 1\)\}"):
        datasets.generate(
            "advection1", 30, store=path, seed=1
        )  # its default block size, not asked for, differs
    with pytest.raises(ValueError, match=r"'block_size': \(8, 4\)"):
        datasets.generate("advection1", 8, store=path, seed=1, block_size=4)  # asked for: named
    ds = datasets.generate("advection2", 8, store=path, seed=0, overwrite=True)
    assert ds.attrs["dataset"] == "advection2"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an rfol_dask data set"):
        datasets.generate("advection1", 8, store=other)
    assert (other / "keep.txt").read_text() == "mine"


def test_open_rejects_foreign_store(tmp_path):
    with pytest.raises(FileNotFoundError):
        datasets.open(tmp_path / "missing.zarr")
    g = zarr.open_group(str(tmp_path / "z.zarr"), mode="w")
    g.create_array("a", shape=(2,), dtype="f8")
    with pytest.raises(ValueError, match="cannot be read as an xarray data set in Zarr"):
        datasets.open(tmp_path / "z.zarr")


# ---------------------------------------------------------------------- concurrency, kills, layout
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _python(code, wait=True):
    """Run ``code`` in a fresh interpreter importing this checkout (``Popen`` if not ``wait``)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    if not wait:
        return subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # subprocesses
def test_concurrent_generate_into_one_store_is_refused(tmp_path, capfd):
    from rfol_dask.cli import main

    store, gate = tmp_path / "s.zarr", tmp_path / "gate"
    # run A writes seed 1 and waits inside its first block until the gate file appears
    a = _python(
        f"""
        import time
        from pathlib import Path
        from rfol_dask.datasets import store
        real = store._write_block
        def waits(*args):
            while not Path({str(gate)!r}).exists():
                time.sleep(0.05)
            return real(*args)
        store._write_block = waits
        from rfol_dask.cli import main
        args = ["generate", "advection1", "--samples", "8", "--seed", "1"]
        raise SystemExit(main([*args, "--out", {str(store)!r}]))
    """,
        wait=False,
    )
    try:
        deadline = time.time() + 120
        while not (store / ".rfol_dask.lock").exists():
            assert a.poll() is None and time.time() < deadline, a.communicate()
            time.sleep(0.05)
        b = ["generate", "advection1", "--samples", "8", "--seed", "2", "--out", str(store)]
        assert main(b) == 2  # run B, in this process
        err = capfd.readouterr().err
        assert "being written by another generate run" in err and "Traceback" not in err
    finally:
        gate.write_text("go")
        out, err = a.communicate(timeout=120)
    assert a.returncode == 0, err
    assert not (store / ".rfol_dask.lock").exists()
    ds = datasets.open(store)
    assert ds.attrs["seed"] == 1
    np.testing.assert_array_equal(
        ds["input"].values, datasets.generate("advection1", 8, seed=1)["input"].values
    )
    # run B again, now alone: a clash of seeds, reported as such
    assert main(b) == 2
    err = capfd.readouterr().err
    assert "holds another data set" in err and "'seed': (1, 2)" in err


def test_a_lock_file_whose_holder_is_gone_blocks_nothing(tmp_path):
    """The lock is the OS's (filelock): a killed run's lock file, whatever it holds (an older
    version's JSON naming a dead pid or another host), is taken without a question."""
    store = tmp_path / "s.zarr"
    store.mkdir()
    (store / ".rfol_dask.lock").write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    ds = datasets.generate("advection1", 6, store=store)
    assert ds["input"].shape == (6, 40) and not (store / ".rfol_dask.lock").exists()


@pytest.mark.slow  # subprocesses
@pytest.mark.parametrize("legacy", [False, True])
def test_generate_killed_while_writing_the_template_is_restarted_by_the_same_command(
    tmp_path, legacy
):
    from rfol_dask.cli import main

    store = tmp_path / "s.zarr"
    killed = _python(f"""
        import os, zarr
        # killed after the variables, before the bookkeeping
        zarr.Group.require_group = lambda *a, **k: os._exit(9)
        from rfol_dask.cli import main
        main(["generate", "advection2", "--samples", "10", "--seed", "3", "--block-size", "4",
              "--out", {str(store)!r}])
    """)
    assert killed.returncode == 9, killed.stderr
    assert (store / ".rfol_dask.template").exists() and (store / ".rfol_dask.lock").exists()
    if legacy:  # as a version without the marker would leave it
        (store / ".rfol_dask.template").unlink()
    again = ["--samples", "10", "--seed", "3", "--block-size", "4", "--out", str(store)]
    assert main(["generate", "advection2", *again]) == 0  # in this process
    ref = datasets.generate("advection2", 10, seed=3)
    ds = datasets.open(store)
    np.testing.assert_array_equal(ds["input"].values, ref["input"].values)
    np.testing.assert_array_equal(ds["output"].values, ref["output"].values)
    assert not any(p.startswith(".rfol_dask") for p in os.listdir(store))


def test_store_follows_cf_conventions_and_hides_bookkeeping(tmp_path):
    path = tmp_path / "s.zarr"
    datasets.generate("advection1", 6, store=path, block_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # consolidated metadata: no warning from a plain open_zarr
        ds = xr.open_zarr(path)
    assert "block_done" not in ds.variables and "block" not in ds.dims
    assert ds.attrs["Conventions"].startswith("CF-")
    for var in ("input", "output"):
        assert ds[var].attrs["long_name"] and ds[var].attrs["units"] == "1"
    assert ds["input"].attrs["long_name"] == "initial condition u(x, 0)"
    assert block_flags(path).tolist() == [True, True]


def test_generate_replaces_only_rfol_dask_data_sets(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    plain = tmp_path / "plain.txt"
    plain.write_text("keep")
    from rfol_dask import RandomFeatureOperator

    model = tmp_path / "m.zarr"
    RandomFeatureOperator(n_features=10, random_state=0).fit(
        np.ones((5, 3)) * np.arange(5)[:, None], np.ones((5, 2))
    ).save(model)
    for path, what in ((other, "a directory holding other files"), (model, "an rfol_dask model")):
        with pytest.raises(
            ValueError, match=f"exists and is not an rfol_dask data set \\(it is {what}\\)"
        ):
            datasets.generate("advection1", 8, store=path, overwrite=True)
    with pytest.raises(ValueError, match="is a file, not a data-set store"):
        datasets.generate("advection1", 8, store=plain, overwrite=True)
    assert sorted(os.listdir(other)) == ["keep.txt"] and plain.read_text() == "keep"
    RandomFeatureOperator.load(model)


@pytest.mark.slow
def test_generate_refuses_a_store_inside_another_zarr_store(tmp_path, capsys):
    """A data set was written inside another store (its folder, or an array's), which replacing
    or regenerating that store deletes; refused as a model save there is, before any write."""
    from rfol_dask import RandomFeatureOperator
    from rfol_dask.cli import main

    outer = tmp_path / "outer.zarr"
    datasets.generate("advection1", 8, store=outer, block_size=8)
    model = tmp_path / "m.zarr"
    RandomFeatureOperator(n_features=10, random_state=0).fit(
        np.ones((5, 3)) * np.arange(5)[:, None], np.ones((5, 2))
    ).save(model)
    before = {p: sorted(os.listdir(p)) for p in (outer, outer / "input", model)}
    for inner in (outer / "inner.zarr", outer / "input" / "d.zarr"):
        with pytest.raises(
            ValueError,
            match=r"cannot write a data set at .*: it is inside the Zarr store .*outer\.zarr "
            r"\(an rfol_dask data set\), which replacing or regenerating it would "
            r"delete; write it beside the store \(e\.g\. .*(inner|d)\.zarr\)",
        ):
            datasets.generate("advection1", 8, store=inner)
    with pytest.raises(
        ValueError, match=r"inside the Zarr store .*m\.zarr \(an rfol_dask model\), which replacing"
    ):
        datasets.generate("advection1", 8, store=model / "d.zarr")
    assert (
        main(["generate", "advection1", "--samples", "8", "--out", str(outer / "inner.zarr")]) == 2
    )
    assert "cannot write a data set at" in capsys.readouterr().err
    assert before == {p: sorted(os.listdir(p)) for p in (outer, outer / "input", model)}
    datasets.generate("advection1", 8, store=tmp_path / "beside.zarr")  # beside the store: written


def test_nan_from_a_generator_is_an_error_in_memory_as_in_a_store(tmp_path, monkeypatch):
    from rfol_dask.datasets import burgers

    def broken(u0, **kwargs):
        return np.full_like(np.asarray(u0, dtype=float), np.nan)

    monkeypatch.setattr(burgers, "solve", broken)
    for store in (None, tmp_path / "b.zarr"):
        with pytest.raises(
            FloatingPointError, match="burgers: generator produced NaN/Inf in output of samples 0-1"
        ):
            datasets.generate("burgers", 2, store=store)


def test_the_title_names_non_default_parameters():
    plain = datasets.generate("advection1", 2)
    assert plain.attrs["title"] == datasets.get("advection1").description
    other = datasets.generate("advection1", 2, n_points=80)
    assert other.attrs["title"].endswith(
        "with non-default parameters n_points=80 (the description is for the defaults)"
    )
    assert other.attrs["param_n_points"] == 80


def _clear_flags(path, blocks):
    group = zarr.open_group(str(path), mode="r+")
    for k in blocks:
        group["_rfol_dask/block_done"][k] = 0


def test_an_xarray_copy_of_a_data_set_is_never_cleared(tmp_path):
    """A processed copy written by xarray keeps the data set's attributes but not generate's
    bookkeeping: it is someone's data, not a template cut short."""
    src = datasets.generate("advection1", 12, store=tmp_path / "a.zarr")
    copy = src.load()
    copy["input"] = 2 * copy["input"]
    for v in copy.variables.values():
        v.encoding = {}
    copy.to_zarr(tmp_path / "copy.zarr")
    for name in ("advection2", "advection1"):
        with pytest.raises(ValueError, match="a copy of a data set without generate's bookkeeping"):
            datasets.generate(name, 5, store=tmp_path / "copy.zarr", overwrite=True)
    np.testing.assert_array_equal(
        xr.open_zarr(tmp_path / "copy.zarr")["input"].values, copy["input"].values
    )


@pytest.mark.slow
def test_overwrite_never_deletes_a_users_files_in_a_data_set(tmp_path):
    path = tmp_path / "s.zarr"
    datasets.generate("advection1", 8, store=path)
    (path / "my_notes.txt").write_text("mine")
    with pytest.raises(
        ValueError, match=r"also holds other files \(my_notes\.txt\).*move them away"
    ):
        datasets.generate("advection1", 8, store=path, seed=1, overwrite=True)
    assert (path / "my_notes.txt").read_text() == "mine"
    assert datasets.open(path).attrs["seed"] == 0  # untouched
    (path / "my_notes.txt").unlink()
    zarr.open_group(str(path), mode="r+").create_array(
        "my_predictions", shape=(8,), dtype="f8"
    )  # a user's array
    with pytest.raises(ValueError, match=r"also holds other files \(my_predictions"):
        datasets.generate("advection1", 8, store=path, seed=1, overwrite=True)
    assert (path / "my_predictions" / "zarr.json").is_file()  # untouched
    import shutil

    shutil.rmtree(path / "my_predictions")
    assert datasets.generate("advection1", 8, store=path, seed=1, overwrite=True).attrs["seed"] == 1


@pytest.mark.slow
def test_resume_takes_the_stored_block_size_and_refuses_another_version(tmp_path, monkeypatch):
    from rfol_dask.datasets import store as store_mod

    path = tmp_path / "s.zarr"
    datasets.generate("advection1", 20, store=path, block_size=3)
    _clear_flags(path, [2, 5])  # an interrupted run
    with pytest.raises(
        ValueError,
        match=r"started with block_size=3: rerun with that block size \(--block-size 3\)",
    ):
        datasets.generate("advection1", 20, store=path, block_size=5)
    calls = []
    real = store_mod._write_block
    monkeypatch.setattr(store_mod, "_write_block", lambda *a: calls.append(a[5]) or real(*a))
    datasets.generate("advection1", 20, store=path)  # no block size: the stored one, resumed
    assert sorted(calls) == [2, 5]
    _clear_flags(path, [1])
    zarr.open_group(str(path), mode="r+").attrs["rfol_dask_version"] = "0.0.1"
    with pytest.raises(
        ValueError,
        match=r"started by rfol_dask 0\.0\.1 and this is .*could mix samples of two versions",
    ):
        datasets.generate("advection1", 20, store=path)


@pytest.mark.slow
def test_reuse_or_generate_reads_resumes_or_refuses(tmp_path, monkeypatch):
    from rfol_dask.datasets import store as store_mod

    path = tmp_path / "d.zarr"
    ref = datasets.generate("advection1", 30, seed=0)
    datasets.generate("advection1", 30, store=path, block_size=10)  # three blocks
    made = []
    real = store_mod.generate
    monkeypatch.setattr(
        store_mod, "generate", lambda *a, **k: made.append((a[1], k["overwrite"])) or real(*a, **k)
    )
    first = datasets.reuse_or_generate("advection1", 30, path)
    smaller = datasets.reuse_or_generate(
        "advection1", 12, path
    )  # the first samples of the larger store
    assert made == []
    np.testing.assert_array_equal(smaller["input"].values, ref["input"].values[:12])
    np.testing.assert_array_equal(first["output"].values, ref["output"].values)
    _clear_flags(path, [1])  # an interrupted run of 30: its first block written, not its second
    head = datasets.reuse_or_generate(
        "advection1", 10, path
    )  # within the written blocks: read as it is
    assert made == [] and head.sizes["sample"] == 10
    np.testing.assert_array_equal(head["input"].values, ref["input"].values[:10])
    resumed = datasets.reuse_or_generate(
        "advection1", 20, path
    )  # beyond them: resumed, with its block size
    assert made == [(30, False)] and resumed.sizes["sample"] == 20
    assert datasets.open(path).sizes["sample"] == 30
    larger = datasets.reuse_or_generate(
        "advection1", 40, path
    )  # the same data, more of it: made again
    assert made[-1] == (40, True)
    np.testing.assert_array_equal(larger["input"].values[:30], ref["input"].values)
    for other in (dict(seed=1), dict(n_points=80)):
        with pytest.raises(ValueError, match="holds other data .*left untouched"):
            datasets.reuse_or_generate("advection1", 10, path, **other)
    with pytest.raises(ValueError, match="holds other data"):
        datasets.reuse_or_generate("advection2", 10, path)
    assert datasets.open(path).sizes["sample"] == 40 and len(made) == 2


@pytest.mark.slow
def test_open_dataset_reads_the_written_leading_samples_of_an_interrupted_store(tmp_path):
    path = tmp_path / "i.zarr"
    datasets.generate("advection1", 30, store=path, block_size=10)
    _clear_flags(path, [2])
    assert datasets.open(path, samples=20).sizes["sample"] == 20
    assert datasets.open(path, samples=15)["input"].shape[0] == 15
    with pytest.raises(ValueError, match="incomplete"):
        datasets.open(path, samples=21)
    with pytest.raises(ValueError, match="incomplete"):
        datasets.open(path)
    for bad in (0, 31, 2.5, True):
        with pytest.raises(
            ValueError, match="samples must be a whole number from 1 to the 30 samples"
        ):
            datasets.open(path, samples=bad)


def test_reproduction_data_never_replace_other_data(tmp_path):
    """The experiments' splits: a store of other data in their folder is refused, not replaced."""
    from rfol_dask.experiments.data import load_split

    path = tmp_path / "advection1.zarr"
    datasets.generate("advection1", 10, store=path, seed=9)
    with pytest.raises(ValueError, match="holds other data"):
        load_split("advection1", tmp_path, 10)
    assert datasets.open(path).attrs["seed"] == 9


def test_a_copy_with_renamed_variables_is_never_cleared(tmp_path):
    """A processed copy that keeps the data-set attributes but renames its variables is no
    template cut short: generate and reuse_or_generate refuse it, with and without overwrite."""
    src = datasets.generate("advection1", 6, store=tmp_path / "a.zarr").load()
    copy = src.rename({"input": "u0", "output": "uT"})
    for v in copy.variables.values():
        v.encoding = {}
    copy.to_zarr(tmp_path / "copy.zarr")
    for call in (
        lambda: datasets.generate("advection2", 8, store=tmp_path / "copy.zarr"),
        lambda: datasets.generate("advection1", 6, store=tmp_path / "copy.zarr", overwrite=True),
        lambda: datasets.reuse_or_generate("advection1", 6, tmp_path / "copy.zarr"),
    ):
        with pytest.raises(ValueError, match="holding other data"):
            call()
    np.testing.assert_array_equal(
        xr.open_zarr(tmp_path / "copy.zarr")["u0"].values, src["input"].values
    )


def test_request_mismatch_and_load_subset_use_only_the_same_data(tmp_path):
    """``load_subset`` slices the paper-size store only when it holds the default seed-0 data; a
    store of another seed (or another data set) is left alone and the subset made beside it."""
    import json

    from rfol_dask.experiments.data import load_subset

    datasets.generate("advection1", 12, store=tmp_path / "advection1.zarr", seed=1)
    meta = json.loads(datasets.open(tmp_path / "advection1.zarr").attrs["rfol_dask_meta"])
    assert datasets.request_mismatch(meta, "advection1", seed=1) == {}
    assert datasets.request_mismatch(meta, "advection1") == {"seed": (1, 0)}
    assert datasets.request_mismatch(meta, "advection2", seed=1) == {
        "dataset": ("advection1", "advection2")
    }
    assert set(datasets.request_mismatch(meta, "advection1", seed=1, n_points=80)) == {"params"}
    train, test = load_subset("advection1", 6, 2, tmp_path)
    ref = datasets.generate("advection1", 8, seed=0)
    np.testing.assert_array_equal(train["input"].values, ref["input"].values[:6])
    np.testing.assert_array_equal(test["output"].values, ref["output"].values[6:])
    assert (tmp_path / "subsets" / "advection1_8.zarr").is_dir()
    assert (
        json.loads(datasets.open(tmp_path / "advection1.zarr").attrs["rfol_dask_meta"])["seed"] == 1
    )


# ---------------------------------------------------------------------- Ctrl-C, then the same call
# at once
import re  # noqa: E402
import signal  # noqa: E402


@pytest.mark.slow
def test_ctrl_c_while_blocks_are_written_waits_for_them_before_the_lock_goes(
    tmp_path, monkeypatch, capsys, ctrl_c
):
    """dask's threaded scheduler returns from an interrupt while its pool threads still write their
    blocks; they went on writing after the lock was released (into whatever a next run had made of
    the
    store). Now the running blocks end first, the others never start, and the same call resumes."""
    from rfol_dask.datasets import store as store_mod

    path = tmp_path / "b.zarr"
    real, started, finished = store_mod._write_block, [], []

    def write(p, name, seed, start, stop, block, params):
        started.append(block)
        if len(started) == 1:
            ctrl_c()
            import time

            time.sleep(0.5)  # still writing well after the interrupt
        result = real(p, name, seed, start, stop, block, params)
        finished.append(block)
        return result

    monkeypatch.setattr(store_mod, "_write_block", write)
    with pytest.raises(KeyboardInterrupt), dask_threads(2):
        datasets.generate("advection1", 40, store=path, seed=1, block_size=5)
    flags = block_flags(path)
    assert started[0] in finished and flags[started[0]]  # written before the interrupt propagated
    assert (
        sorted(finished) == sorted(started) == sorted(np.flatnonzero(flags))
    )  # none still running
    assert not flags.all() and not (path / ".rfol_dask.lock").exists()
    assert re.search(
        r"generate advection1 \(8 blocks\): stopping; waiting for the [12] running tasks? to end",
        capsys.readouterr().err,
    )
    monkeypatch.setattr(store_mod, "_write_block", real)
    ds = datasets.generate("advection1", 40, store=path, seed=1, block_size=5)
    ref = datasets.generate("advection1", 40, seed=1)
    np.testing.assert_array_equal(ds["input"].values, ref["input"].values)
    np.testing.assert_array_equal(ds["output"].values, ref["output"].values)


def dask_threads(n):
    import dask

    return dask.config.set(scheduler="threads", num_workers=n)


@pytest.mark.slow
def test_ctrl_c_on_a_cluster_waits_for_the_blocks_on_the_workers(
    tmp_path, monkeypatch, cluster_client, ctrl_c
):
    """On a distributed client an interrupted generate released its futures and the workers finished
    their running blocks unseen, after the lock was gone; now those end first and the rest never
    start.
    (``ctrl_c``: for Python's SIGINT handler; the signal comes from a worker.)"""
    import os

    from rfol_dask.datasets import store as store_mod

    path, first, me = tmp_path / "c.zarr", tmp_path / "first", os.getpid()
    real = store_mod._write_block

    def write(p, name, seed, start, stop, block, params):  # shipped by value to the workers
        import time

        try:
            os.close(os.open(first, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:  # the first block to start: Ctrl-C in the client, then a block still being written
            first.write_text(str(block))
            os.kill(me, signal.SIGINT)
            time.sleep(1.0)
        return real(p, name, seed, start, stop, block, params)

    monkeypatch.setattr(store_mod, "_write_block", write)
    with pytest.raises(KeyboardInterrupt):
        datasets.generate("advection1", 60, store=path, seed=1, block_size=5, client=cluster_client)
    flags = block_flags(path)
    assert (
        flags[int(first.read_text())] and not flags.all()
    )  # written before the interrupt propagated
    assert not (path / ".rfol_dask.lock").exists()
    monkeypatch.setattr(store_mod, "_write_block", real)
    ds = datasets.generate(
        "advection1", 60, store=path, seed=1, block_size=5, client=cluster_client
    )
    ref = datasets.generate("advection1", 60, seed=1)
    np.testing.assert_array_equal(ds["input"].values, ref["input"].values)
    np.testing.assert_array_equal(ds["output"].values, ref["output"].values)


@pytest.mark.cluster
@pytest.mark.slow
def test_relative_store_paths_are_the_clients_when_workers_run_elsewhere(tmp_path, monkeypatch):
    """Workers that started in another folder (``a``: where the job script ran) wrote a relative
    ``store="data.zarr"`` into *their* ``a/data.zarr``, over the data set there; the path is now
    made absolute on the client, for the generated store and for predictions alike."""
    from distributed import Client, LocalCluster

    from rfol_dask.predictions import write_predictions

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    monkeypatch.chdir(a)
    datasets.generate("advection1", 8, store="data.zarr", seed=1, block_size=4)
    before = sorted(p.relative_to(a) for p in a.rglob("*"))
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as c:
        monkeypatch.chdir(b)  # the client moves on; the worker stays in a
        with Client(c, set_as_default=False) as client:
            ds = datasets.generate("advection1", 8, store="data.zarr", seed=2, client=client)
            write_predictions(ds["output"], "p.zarr", client=client, progress=False)
    assert sorted(p.relative_to(a) for p in a.rglob("*")) == before
    assert datasets.open(a / "data.zarr").attrs["seed"] == 1
    np.testing.assert_array_equal(
        datasets.open(b / "data.zarr")["input"].values,
        datasets.generate("advection1", 8, seed=2)["input"].values,
    )
    assert xr.open_zarr(b / "p.zarr")["prediction"].shape == (8, 40)
