"""Model files: saved labels kept, damage named as damage, the user's files beside or inside a
model never deleted, a dead writer's lock released, lazy predictions pickled."""

import json
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from conftest import smooth_operator_data

from rfol_dask import RandomFeatureOperator
from rfol_dask.baselines import KernelOperator


def _rf(**kw):
    return RandomFeatureOperator(
        **{"n_features": 60, "gamma": 0.1, "alpha": 1e-8, "random_state": 0, **kw}
    )


def test_save_keeps_coordinates_of_strings_and_names_with_a_slash(tmp_path):
    U, V = smooth_operator_data(30, 4)
    XU = xr.DataArray(U, dims=("sample", "u/v"), coords={"u/v": np.arange(4.0)})
    names = np.array(["a", "bb", "c", "d"], dtype=object)  # pandas / netCDF labels
    XV = xr.DataArray(V, dims=("sample", "variable"), coords={"variable": names})
    model = _rf().fit(XU, XV)
    loaded = RandomFeatureOperator.load(model.save(tmp_path / "m.zarr"))
    assert list(loaded.predict(XU)["variable"].values) == list(names)
    np.testing.assert_array_equal(loaded.predict(XU).values, model.predict(XU).values)
    np.testing.assert_array_equal(loaded.input_coords_["u/v"], np.arange(4.0))
    objects = xr.DataArray(
        V, dims=("sample", "variable"), coords={"variable": np.array([1, "b", 2.0, None])}
    )
    with pytest.raises(ValueError, match="output coordinate 'variable' holds Python objects"):
        _rf().fit(XU, objects).save(tmp_path / "o.zarr")
    assert not (tmp_path / "o.zarr").exists()


def test_damaged_metadata_is_named_as_damage(tmp_path):
    U, V = smooth_operator_data(30, 4)
    model = _rf().fit(U, V)
    meta = Path(model.save(tmp_path / "a.zarr")) / "omega_" / "zarr.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(
        ValueError, match="array metadata of the model at .* cannot be read.*damaged"
    ):
        RandomFeatureOperator.load(tmp_path / "a.zarr")
    root = Path(model.save(tmp_path / "b.zarr")) / "zarr.json"
    doc = json.loads(root.read_text())
    doc["attributes"]["rfol_dask_model"] = doc["attributes"]["rfol_dask_model"][:50]
    root.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match="attribute 'rfol_dask_model' of the model at .* cannot be read.*damaged"
    ):
        RandomFeatureOperator.load(tmp_path / "b.zarr")


def test_an_array_without_its_checksum_is_damage(tmp_path):
    U, V = smooth_operator_data(30, 4)
    root = Path(_rf().fit(U, V).save(tmp_path / "m.zarr")) / "zarr.json"
    doc = json.loads(root.read_text())
    del doc["attributes"]["rfol_dask_checksums"]["coef_"]
    root.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match=r"checksums of arrays \['coef_'\] .* are missing.*damaged"
    ):
        RandomFeatureOperator.load(tmp_path / "m.zarr")


def test_saving_over_a_model_never_deletes_the_users_files_beside_it(tmp_path):
    U, V = smooth_operator_data(30, 4)
    a, b = _rf().fit(U, V), _rf(random_state=1).fit(U, V)
    path = Path(a.save(tmp_path / "m.zarr"))
    (path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"also holds other files \(notes.txt\).*delete"):
        b.save(path)
    assert (path / "notes.txt").read_text() == "mine"
    np.testing.assert_array_equal(RandomFeatureOperator.load(path).coef_, a.coef_)  # it still loads
    (path / "notes.txt").unlink()
    np.testing.assert_array_equal(RandomFeatureOperator.load(b.save(path)).coef_, b.coef_)


def test_saving_over_a_model_refuses_a_users_store_or_file_inside_it(tmp_path):
    U, V = smooth_operator_data(30, 4)
    a = _rf().fit(U, V)
    for what in ("store", "in-array"):
        path = Path(a.save(tmp_path / f"{what}.zarr"))
        if what == "store":  # a Zarr group of the user's inside the model folder
            xr.Dataset({"r": ("k", np.arange(3.0))}).to_zarr(path / "my_results")
        else:
            (path / "coef_" / "README").write_text("mine")
        with pytest.raises(ValueError, match="also holds other files"):
            a.save(path)
        assert (
            (path / "my_results").exists()
            if what == "store"
            else (path / "coef_" / "README").exists()
        )
    np.testing.assert_array_equal(
        RandomFeatureOperator.load(a.save(tmp_path / "fresh.zarr")).coef_, a.coef_
    )
    a.save(tmp_path / "fresh.zarr")  # a model folder of nothing but the model is replaced


def test_a_lazy_prediction_pickles():
    import pickle

    U, V = smooth_operator_data(30, 8)
    for model in (_rf().fit(U, V), KernelOperator(kernel="rbf", length_scale=1.0).fit(U, V)):
        lazy = model.predict(da.from_array(U, chunks=10))
        np.testing.assert_allclose(
            pickle.loads(pickle.dumps(lazy)).compute(), model.predict(U), rtol=1e-12
        )
