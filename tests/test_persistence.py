"""Saving and loading models as a user meets it: what save may replace, damaged and foreign-version
models, interrupted saves (exceptions and kills) and what they leave behind."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator, datasets
from rfol_dask import persistence as rio

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def models():
    U, V = smooth_operator_data(40, 6)
    return [
        RandomFeatureOperator(n_features=20 + 10 * k, alpha=1e-6, random_state=k).fit(U, V)
        for k in range(3)
    ]


def _hidden(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("."))


@pytest.mark.slow
def test_save_refuses_anything_but_a_model_and_leaves_it_untouched(tmp_path, models):
    a, b, _ = models
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    plain = tmp_path / "plain.txt"
    plain.write_text("keep")
    data = tmp_path / "d.zarr"
    datasets.generate("advection1", 6, store=data)
    for path, what in (
        (mine, "a directory holding other files"),
        (plain, "a file"),
        (data, "an rfol_dask data set"),
    ):
        for overwrite in (True, False):
            with pytest.raises(
                ValueError, match=f"exists and is {what}, not an rfol_dask model.*refuses"
            ):
                a.save(path, overwrite=overwrite)
    assert (mine / "notes.txt").read_text() == "mine" and sorted(os.listdir(mine)) == ["notes.txt"]
    assert plain.read_text() == "keep"
    assert datasets.open(data)["input"].shape == (6, 40)
    assert _hidden(tmp_path) == []
    # an empty directory and an existing model (unless overwrite=False) may be replaced
    (tmp_path / "empty.zarr").mkdir()
    np.testing.assert_array_equal(
        RandomFeatureOperator.load(a.save(tmp_path / "empty.zarr")).coef_, a.coef_
    )
    os.symlink(
        tmp_path / "empty.zarr", tmp_path / "link.zarr"
    )  # a link to a model loads, is never replaced
    np.testing.assert_array_equal(RandomFeatureOperator.load(tmp_path / "link.zarr").coef_, a.coef_)
    with pytest.raises(ValueError, match="is a symbolic link, not an rfol_dask model"):
        b.save(tmp_path / "link.zarr")
    with pytest.raises(ValueError, match="a model already exists.*overwrite=True"):
        b.save(tmp_path / "empty.zarr", overwrite=False)
    np.testing.assert_array_equal(
        RandomFeatureOperator.load(b.save(tmp_path / "empty.zarr")).coef_, b.coef_
    )
    assert _hidden(tmp_path) == []


def _chunk_files(model, name):
    return [p for p in (Path(model) / name).rglob("*") if p.is_file() and p.name != "zarr.json"]


def test_damaged_model_is_refused_naming_the_array(tmp_path, models):
    a = models[0]
    path = a.save(tmp_path / "m.zarr")
    (chunk,) = _chunk_files(path, "coef_")
    chunk.unlink()  # a lost chunk: the array reads back as its fill value
    with pytest.raises(ValueError, match=r"array 'coef_' of the model at .*checksum.*damaged"):
        RandomFeatureOperator.load(path)
    a.save(path)
    (chunk,) = _chunk_files(path, "intercept_")
    chunk.write_bytes(b"\x00garbage" * 4)  # a corrupt chunk: the codec fails
    with pytest.raises(
        ValueError, match=r"array 'intercept_' of the model at .*(cannot be read|checksum)"
    ):
        RandomFeatureOperator.load(path)
    a.save(path)
    import shutil

    shutil.rmtree(Path(path) / "omega_")  # a whole array gone
    with pytest.raises(ValueError, match=r"array 'omega_' of the model at .* is missing"):
        RandomFeatureOperator.load(path)


@pytest.mark.slow
def test_model_format_version_checked(tmp_path, models):
    a = models[0]
    path = a.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(path), mode="r+")
    # the lowest format that reads it (3: a linear KernelOperator's primal weights), so older
    # versions load it
    assert group.attrs["rfol_dask_format"] == 2 and rio.MODEL_FORMAT == 3
    group.attrs["rfol_dask_format"] = 99
    with pytest.raises(
        ValueError, match=r"has format 99 .*reads formats 1 to 3: upgrade rfol_dask"
    ):
        RandomFeatureOperator.load(path)
    # a model saved before the format was versioned (no format, no checksums) is refused, and a
    # save never replaces it (its arrays are not known to be its own)
    attrs = dict(group.attrs)
    for key in ("rfol_dask_format", "rfol_dask_checksums", "rfol_dask_saved"):
        del attrs[key]
    group.attrs.clear()
    group.attrs.update(attrs)
    with pytest.raises(ValueError, match=r"has format None .*fit and save an older one again"):
        RandomFeatureOperator.load(path)
    with pytest.raises(ValueError, match="also holds other files"):
        models[1].save(path)


def test_exception_mid_save_restores_previous_model_and_leaves_nothing(
    tmp_path, models, monkeypatch
):
    a, b, _ = models
    path = a.save(tmp_path / "m.zarr")
    real, calls = os.replace, []

    def second_rename_fails(src, dst):
        if Path(dst).parent == tmp_path:  # a rename of save's, not one of zarr's file writes
            calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt("interrupted between the two renames")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(KeyboardInterrupt):
        b.save(path)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == [
        "m.zarr"
    ]  # the previous model is back, nothing hidden left
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, a.coef_)


@pytest.mark.slow
def test_ctrl_c_just_after_the_swap_leaves_the_new_model_alone(tmp_path, models, monkeypatch):
    """Interrupted once the new model is in place, a save left the previous one beside it as
    ``.m.zarr.old-*`` until the next save; it now removes it, and the new model is read."""
    a, b, _ = models
    path = a.save(tmp_path / "m.zarr")
    real, calls = os.replace, []

    def interrupted_after_the_swap(src, dst):
        real(src, dst)
        if Path(dst).parent == tmp_path:  # a rename of save's, not one of zarr's file writes
            calls.append(dst)
            if len(calls) == 2:
                raise KeyboardInterrupt("just after the second rename")

    monkeypatch.setattr(os, "replace", interrupted_after_the_swap)
    with pytest.raises(KeyboardInterrupt):
        b.save(path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["m.zarr"]
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, b.coef_)


_KILLED_SAVE = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from conftest import smooth_operator_data
    from rfol_dask import RandomFeatureOperator
    U, V = smooth_operator_data(40, 6)
    def fit(k):
        return RandomFeatureOperator(n_features=20 + 10 * k, alpha=1e-6, random_state=k).fit(U, V)
    fit(0).save({path!r})
    real, calls = os.replace, []
    def killed_after(n):
        def replace(src, dst):
            real(src, dst)
            if os.path.dirname(os.fspath(dst)) != os.path.dirname({path!r}):
                return  # one of zarr's file writes, not a rename of save's
            calls.append(1)
            if len(calls) == n:
                os._exit(9)  # as a kill: no finally, no cleanup
        return replace
    os.replace = killed_after({n})
    fit({k}).save({path!r})
""")


def _killed_save(path, k, n_renames):
    """Save model 0 at ``path``, then save model ``k`` in a process killed after its n-th rename."""
    code = _KILLED_SAVE.format(tests=str(ROOT / "tests"), path=str(path), n=n_renames, k=k)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert res.returncode == 9, res.stderr


@pytest.mark.slow
def test_a_save_killed_between_renames_is_finished_by_the_next_save(tmp_path, models):
    path = tmp_path / "m.zarr"
    _killed_save(path, k=1, n_renames=1)  # killed after moving the previous model aside
    assert not path.exists()
    # and its lock, which the next save takes over (its process is gone)
    assert [n.split("-")[0] for n in _hidden(tmp_path)] == [
        ".m.zarr.lock",
        ".m.zarr.old",
        ".m.zarr.tmp",
    ]
    with pytest.raises(FileNotFoundError, match="no model at"):
        RandomFeatureOperator.load(path)
    # the next save finishes the job: one model, no hidden leftovers
    models[2].save(path)
    assert os.listdir(tmp_path) == ["m.zarr"]
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, models[2].coef_)


@pytest.mark.slow
def test_successful_save_removes_the_leftovers_of_interrupted_saves(tmp_path, models):
    """Holding the lock, a save knows no other save writes beside the path: every temporary and
    previous model that interrupted saves left goes."""
    path = tmp_path / "m.zarr"
    for name in (".m.zarr.old-1234abcd1234", ".m.zarr.tmp-5678abcd5678"):
        models[0].save(tmp_path / name)
    models[1].save(path)
    assert os.listdir(tmp_path) == ["m.zarr"]


@pytest.mark.parametrize("writer", ["save", "predictions", "generate"])
def test_an_empty_lock_file_left_by_a_full_disk_blocks_nothing(tmp_path, models, writer):
    """On a full disk the old lock file was created but left empty, and refused every save,
    prediction and resumed generation of the path for a minute ("another save is running")."""
    from rfol_dask.predictions import write_predictions

    target = tmp_path / ("d.zarr" if writer == "generate" else "m.zarr")
    if writer == "generate":
        datasets.generate("advection1", 8, store=target, block_size=4)
        (target / ".rfol_dask.lock").write_text("")
        assert datasets.generate("advection1", 8, store=target, block_size=4).sizes["sample"] == 8
        assert not (target / ".rfol_dask.lock").exists()
        return
    (tmp_path / ".m.zarr.lock").write_text("")
    if writer == "save":
        models[0].save(target)
    else:
        write_predictions(
            xr.DataArray(np.ones((3, 4)), dims=("sample", "x")), target, progress=False
        )
    assert os.listdir(tmp_path) == ["m.zarr"]


def test_predictions_carry_the_output_attributes(tmp_path):
    ds = datasets.generate("advection2", 60, store=tmp_path / "d.zarr")
    ds["x"].attrs["note"] = "grid attrs travel"
    model = RandomFeatureOperator(n_features=300, gamma=1e-4, alpha=1e-10, random_state=0).fit(ds)
    for m in (model, RandomFeatureOperator.load(model.save(tmp_path / "m.zarr"))):
        pred = m.predict(ds["input"][:5])
        assert pred.attrs["long_name"] == ds["output"].attrs["long_name"] == "solution u(x, t)"
        assert pred.attrs["units"] == "1"
        assert pred["x"].attrs["units"] == ds["x"].attrs["units"]
        assert pred["x"].attrs["note"] == "grid attrs travel"
        assert isinstance(pred, xr.DataArray)


def test_loading_with_another_estimator_class_names_the_right_one(tmp_path, models):
    import json

    from rfol_dask.baselines import KernelOperator
    from rfol_dask.exceptions import ForeignModelError

    path = models[0].save(tmp_path / "m.zarr")
    with pytest.raises(
        ForeignModelError,
        match=r"is a RandomFeatureOperator, not a KernelOperator: load it with "
        r"RandomFeatureOperator.load",
    ):
        KernelOperator.load(path)
    # the class's name deleted from its attributes: the parameters do not fit the class
    group = zarr.open_group(str(path), mode="r+")
    state = json.loads(group.attrs["rfol_dask_model"])
    del state["estimator"]
    group.attrs["rfol_dask_model"] = json.dumps(state)
    with pytest.raises(ValueError, match="that KernelOperator of .* does not know .* fit and save"):
        KernelOperator.load(path)
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, models[0].coef_)


def test_a_users_hidden_folders_beside_the_model_are_never_removed(tmp_path, models):
    mine = [".m.zarr.old-backup", ".m.zarr.old-cafe", ".m.zarr.tmp-notes"]  # cafe: hex, not a tag
    for name in mine:
        (tmp_path / name).mkdir()
        (tmp_path / name / "thesis.txt").write_text("mine")
    models[0].save(tmp_path / "m.zarr")
    models[1].save(tmp_path / "m.zarr")
    assert _hidden(tmp_path) == mine
    assert (tmp_path / ".m.zarr.old-backup" / "thesis.txt").read_text() == "mine"


def test_a_model_with_parameters_of_a_newer_version_says_upgrade(tmp_path):
    import json

    U, V = smooth_operator_data(30, 6)
    path = tmp_path / "m"
    RandomFeatureOperator(n_features=20, random_state=0).fit(U, V).save(path)
    group = zarr.open_group(str(path), mode="r+")
    state = json.loads(group.attrs["rfol_dask_model"])
    state["params"]["future_option"] = 1
    group.attrs["rfol_dask_model"] = json.dumps(state)
    with pytest.raises(
        ValueError,
        match=r"parameters \['future_option'\] that RandomFeatureOperator of rfol_dask .* "
        r"does not know .*attributes were changed after it was saved",
    ):
        RandomFeatureOperator.load(path)  # this version saved it: edited
    state["version"] = "9.9.9"
    group.attrs["rfol_dask_model"] = json.dumps(state)
    with pytest.raises(
        ValueError, match=r"saved by rfol_dask 9\.9\.9\): load it with rfol_dask 9\.9\.9"
    ):
        RandomFeatureOperator.load(path)


def test_a_model_with_damaged_group_metadata_is_called_damaged(tmp_path):
    U, V = smooth_operator_data(30, 6)
    path = tmp_path / "m"
    RandomFeatureOperator(n_features=20, random_state=0).fit(U, V).save(path)
    meta = path / "zarr.json"
    meta.write_text(meta.read_text()[:40])  # truncated
    with pytest.raises(ValueError, match="a Zarr store whose metadata cannot be read"):
        RandomFeatureOperator.load(path)
    zarr.create_array(
        str(tmp_path / "arr"), shape=(3,), dtype="f8"
    )  # a valid Zarr array: not damaged
    with pytest.raises(ValueError, match="is not an rfol_dask model") as err:
        RandomFeatureOperator.load(tmp_path / "arr")
    assert "cannot be read" not in str(err.value)


def test_a_model_and_a_data_set_each_say_what_they_are_where_the_other_is_read(tmp_path):
    """open_dataset (and fit) on a model said it "cannot be read as an xarray data set ...
    dimension_names"; load on a data set said what it is but not what to do with it."""
    from rfol_dask import datasets
    from rfol_dask.baselines import KernelOperator
    from rfol_dask.io import open_dataset

    U, V = smooth_operator_data(30, 6)
    for model in (RandomFeatureOperator(n_features=20, random_state=0), KernelOperator()):
        path = model.fit(U, V).save(tmp_path / type(model).__name__)
        for read in (
            open_dataset,
            datasets.open_dataset,
            lambda p: RandomFeatureOperator().fit(str(p)),
        ):
            with pytest.raises(
                ValueError,
                match=rf"is a saved model, not a data set: load it with "
                rf"{type(model).__name__}\.load to predict with it",
            ) as err:
                read(path)
            assert "dimension_names" not in str(err.value)
    data = tmp_path / "d.zarr"
    datasets.generate("advection1", 4, store=data)
    with pytest.raises(
        ValueError,
        match=r"d\.zarr is not an rfol_dask model \(no 'rfol_dask_model' attribute; it is "
        r"an rfol_dask data set\): open it with rfol_dask\.datasets\.open_dataset, or "
        r"fit a model on it \(fit\(path\)\); load reads the path a model was saved to",
    ):
        RandomFeatureOperator.load(data)


@pytest.mark.slow
def test_numpy_scalar_parameters_are_saved_as_python_values(tmp_path):
    from rfol_dask.baselines import KernelOperator

    U, V = smooth_operator_data(30, 6)
    for k, model in enumerate(
        (
            RandomFeatureOperator(
                n_features=np.int64(20),
                gamma=np.float32(0.05),
                alpha=np.float64(1e-6),
                fit_intercept=np.bool_(True),
                random_state=np.int64(3),
                recovery={"kind": "rf", "n_features": np.int64(16), "random_state": np.int32(1)},
            ),
            KernelOperator(length_scale=np.float32(3.0)),
        )
    ):
        loaded = type(model).load(model.fit(U, V).save(tmp_path / f"m{k}"))
        np.testing.assert_array_equal(loaded.predict(U), model.predict(U))
        for name, value in model.get_params().items():
            assert (
                loaded.get_params()[name] == value
                and type(loaded.get_params()[name]).__module__ != "numpy"
            )
    assert (
        loaded.length_scale == np.float32(3.0)
        and RandomFeatureOperator.load(tmp_path / "m0").random_state == 3
    )


def test_a_random_state_generator_is_dropped_at_the_top_and_refused_in_the_recovery(tmp_path):
    U, V = smooth_operator_data(30, 6)
    model = RandomFeatureOperator(n_features=20, random_state=np.random.default_rng(0)).fit(U, V)
    loaded = RandomFeatureOperator.load(
        model.save(tmp_path / "m")
    )  # the fitted arrays hold its draw
    assert loaded.random_state is None
    np.testing.assert_array_equal(loaded.predict(U), model.predict(U))
    model.set_params(
        recovery={"kind": "rf", "random_state": np.random.default_rng(0)}
    )  # drawn from at prediction
    with pytest.raises(
        ValueError,
        match=r"parameter recovery=.* holds a Generator, which a saved model cannot "
        r"store: .*an integer seed",
    ):
        model.save(tmp_path / "g")
    assert not (tmp_path / "g").exists() and _hidden(tmp_path) == []


def test_save_refuses_the_current_directory_and_paths_inside_a_model(tmp_path, models, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    for path in (
        ".",
        "sub/..",
        "..",
    ):  # replacing them would leave this process in a deleted directory
        with pytest.raises(ValueError, match="is the current directory or holds it"):
            models[0].save(path)
    np.testing.assert_array_equal(
        RandomFeatureOperator.load(models[0].save("./m.zarr/")).coef_, models[0].coef_
    )
    for inner in ("m.zarr/inner", "m.zarr/coef_/x"):
        with pytest.raises(
            ValueError,
            match=r"inside the Zarr store .*m\.zarr \(an rfol_dask model\), which replacing",
        ):
            models[1].save(inner)
    models[1].save("m.zarr")  # the outer model is still a model that may be replaced
    assert sorted(os.listdir(tmp_path / "cwd")) == ["m.zarr"]
    zarr.open_group(str(tmp_path / "zg"), mode="w").create_array("a", shape=(2,), dtype="f8")
    with pytest.raises(
        ValueError,
        match=r"exists and is a Zarr store of other data, not an rfol_dask model; saving",
    ) as err:
        models[0].save(tmp_path / "zg")
    assert str(err.value).count("not an rfol_dask model") == 1
    # inside a data set (or any Zarr store): regenerating the data set would delete the model
    from rfol_dask import datasets

    datasets.generate("advection1", 8, store=tmp_path / "d.zarr", block_size=8)
    for inner in ("d.zarr/model", "d.zarr/input/model"):
        with pytest.raises(
            ValueError,
            match=r"inside the Zarr store .*d\.zarr \(an rfol_dask data set\), which "
            r"replacing or regenerating it would delete; save it beside",
        ):
            models[0].save(tmp_path / inner)
    with pytest.raises(
        ValueError, match=r"inside the Zarr store .*zg \(a Zarr store of other data\)"
    ):
        models[0].save(tmp_path / "zg" / "m")
    assert not (tmp_path / "d.zarr" / "model").exists() and not (tmp_path / "zg" / "m").exists()


def test_a_second_save_of_the_same_path_meanwhile_is_refused(tmp_path, models, monkeypatch):
    a, b, c = models
    path = a.save(tmp_path / "m.zarr")
    real, errors = rio._checksum, []

    def second_save_meanwhile(value):  # another save of the path while this one writes its arrays
        if not errors:
            with pytest.raises(
                ValueError, match=r"another save of the model at .*m\.zarr is running; wait for it"
            ) as err:
                c.save(path)
            errors.append(err)
        return real(value)

    monkeypatch.setattr(rio, "_checksum", second_save_meanwhile)
    b.save(path)
    monkeypatch.undo()
    assert errors and sorted(os.listdir(tmp_path)) == ["m.zarr"]  # the lock is gone with the save
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, b.coef_)
