"""Model files: a fitted estimator's Zarr group (arrays with SHA-256 checksums, JSON attributes),
written into a hidden sibling and renamed into place under a lock; loading verifies it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import numbers
import os
import re
import shutil
import time
import uuid
import warnings
from pathlib import Path
from urllib.parse import quote

import filelock
import numpy as np
import xarray as xr
import zarr

from . import backend, stores
from ._version import __version__
from .exceptions import ForeignModelError, ModelFileWarning
from .stacklevel import user_stacklevel
from .stores import MODEL_KEY, describe_path

# The newest model layout this version reads (a model is written with the lowest that reads it):
# 3 a primal KernelOperator's coef_, 2 input_centre_, 1 checksums (older models are refused).
MODEL_FORMAT = 3
_DAMAGED = "the model is damaged; fit and save it again"


@contextlib.contextmanager
def path_lock(lock, busy):
    """Hold the file lock ``lock`` (its file removed after); ValueError ``busy`` if it is held."""
    held = filelock.FileLock(os.fspath(lock), timeout=0)
    try:
        held.acquire()
    except filelock.Timeout:
        raise ValueError(busy) from None
    try:
        yield
    finally:
        Path(lock).unlink(missing_ok=True)
        held.release()


def _checksum(value):
    h = hashlib.sha256(f"{value.dtype.str}{value.shape}".encode())
    h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


def check_model_path(path, overwrite=True):
    """ValueError unless ``path`` is free, an empty folder or (``overwrite``) a model alone."""
    path = Path(os.path.abspath(path))
    stores.check_outside_stores(path)
    if (kind := describe_path(path)) is None:
        return stores.check_parent_dir(path, "a model")
    if kind == "model":
        if not overwrite:
            raise ValueError(f"a model already exists at {path}; pass overwrite=True to replace it")
        own = set(stores.group_attrs(path).get("rfol_dask_checksums", {}))  # its arrays' names
        foreign = stores.foreign_entries(path, own)
        stores.refuse_foreign(foreign, f"the model at {path}", "save elsewhere")
    elif kind != "empty":
        raise ValueError(
            f"{path} exists and is {kind}, not an rfol_dask model; saving refuses to replace it "
            "(only a model is ever replaced): choose another path or move it away yourself"
        )


def save_model(path, arrays, attrs, *, overwrite=True, model_format=MODEL_FORMAT):
    """Write ``arrays`` (name -> numpy) and JSON-able ``attrs`` as a model at ``path``."""
    path = Path(os.path.abspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in arrays.items()}

    def write(tmp):
        group = zarr.open_group(str(tmp), mode="w")
        for key, v in arrays.items():
            fill = np.nan if v.dtype.kind in "fc" else None
            group.create_array(key, data=v, chunks=v.shape or None, fill_value=fill)
        sums = {k: _checksum(v) for k, v in arrays.items()}
        meta = dict(rfol_dask_format=int(model_format), rfol_dask_version=__version__)
        meta |= dict(rfol_dask_checksums=sums, rfol_dask_saved=time.time_ns())
        group.update_attributes({**meta, MODEL_KEY: json.dumps(attrs)})  # one write

    busy = f"another save of the model at {path} is running"
    swap_into_place(path, write, lambda: check_model_path(path, overwrite), busy)


def swap_into_place(path, write, check, busy):
    """Under a lock, ``write(tmp)`` beside ``path``, ``check()``, swap in; errors keep ``path``."""
    with path_lock(path.with_name(f".{path.name}.lock"), f"{busy}; wait for it or write elsewhere"):
        tmp, old = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}"), None
        try:
            write(tmp)
            check()
            if path.exists():  # an empty folder or what check() lets a save replace
                old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:12]}")
                os.replace(path, old)
            os.replace(tmp, path)
        except BaseException:
            if old is not None and old.exists() and not path.exists():
                os.replace(old, path)  # put the earlier one back
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and path.exists():
                shutil.rmtree(old, ignore_errors=True)
        # what killed saves left (their 12-digit hex tag), never a user's .NAME.old-cafe
        left = re.compile(rf"\.{re.escape(path.name)}\.(old|tmp)-[0-9a-f]{{12}}")
        for p in (p for p in path.parent.iterdir() if left.fullmatch(p.name)):
            shutil.rmtree(p, ignore_errors=True)


def load_model(path):
    """``(arrays, attrs)`` of the model :func:`save_model` wrote at ``path``, arrays verified."""
    path = Path(os.path.abspath(path))
    kind = describe_path(path.resolve())  # a link to a model loads it (save never replaces a link)
    if kind is None:
        raise FileNotFoundError(f"no model at {path}")
    if kind != "model":
        hint = stores.use_hint(path, kind)
        raise ValueError(
            f"{path} is not an rfol_dask model (no '{MODEL_KEY}' attribute; it is "
            f"{'an empty directory' if kind == 'empty' else kind}): {hint}{'; ' * bool(hint)}"
            "load reads the path a model was saved to (save, rfol-dask fit --out)"
        )
    group = zarr.open_group(str(path), mode="r")
    attrs = dict(group.attrs)
    fmt = attrs.get("rfol_dask_format")
    if isinstance(fmt, bool) or not isinstance(fmt, int) or not 1 <= fmt <= MODEL_FORMAT:
        raise ValueError(
            f"the model at {path} has format {fmt!r} (written by rfol_dask "
            f"{attrs.get('rfol_dask_version', '?')}); this rfol_dask {__version__} reads formats "
            f"1 to {MODEL_FORMAT}: upgrade rfol_dask to load it (fit and save an older one again)"
        )

    def damaged(subject, problem, exc=None):
        why = "" if exc is None else f" ({type(exc).__name__}: {exc})"
        return ValueError(f"{subject} of the model at {path} {problem}{why}: {_DAMAGED}")

    sums, arrays = attrs.get("rfol_dask_checksums", {}), {}
    try:
        unsummed = sorted(set(group.array_keys()) - set(sums))
    except Exception as exc:  # noqa: BLE001  (an array's metadata unreadable)
        raise damaged("the array metadata", "cannot be read", exc) from exc
    if unsummed:
        raise damaged(f"the checksums of arrays {unsummed}", "are missing")
    for key, expected in sums.items():
        try:
            arrays[key] = group[key][...]
        except Exception as exc:  # noqa: BLE001  (KeyError, codec errors of a corrupt chunk)
            raise damaged(f"array {key!r}", "is missing or cannot be read", exc) from exc
        if _checksum(arrays[key]) != expected:
            raise damaged(f"array {key!r}", "does not match its checksum (missing or changed)")
    try:
        return arrays, json.loads(attrs[MODEL_KEY])
    except (TypeError, ValueError) as exc:
        raise damaged(f"the attribute {MODEL_KEY!r}", "cannot be read", exc) from exc


def jsonable(value, strict=False):
    """``value`` in JSON types; other objects as ``str`` (``strict``: TypeError of the object)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v, strict) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v, strict) for v in value]
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if strict:
        raise TypeError(value)
    return str(value)


def attrs_of(V, dims):
    """``(attrs, {dim: coordinate attrs})`` of an xarray output ``V``; empty for arrays."""
    if not isinstance(V, xr.DataArray):
        return {}, {}
    coords = {d: jsonable(dict(V[d].attrs)) for d in dims or () if d in V.coords}
    return jsonable(dict(V.attrs)), coords


def _coord_key(which, dim):
    """The array name of a training coordinate (``/``, a Zarr group separator, escaped)."""
    return f"coord_{which}_{quote(str(dim), safe='')}"


def estimator_state(model):
    """``(arrays, attrs)``: a fitted estimator's numpy arrays and JSON attributes, to save."""
    params = model.get_params()
    params["dtype"] = None if params["dtype"] is None else np.dtype(params["dtype"]).name
    if not isinstance(params.get("random_state", 0), numbers.Integral):  # a Generator: None,
        params["random_state"] = None  # the fitted arrays hold its draw
    for name, value in params.items():
        try:
            params[name] = jsonable(value, strict=True)
        except TypeError as exc:
            raise ValueError(
                f"the parameter {name}={value!r} holds a {type(exc.args[0]).__name__}, which a "
                "saved model cannot store: give numbers, strings, lists or dicts (an integer seed "
                "for a random state), then fit and save again"
            ) from None
    attrs = dict(estimator=type(model).__name__, params=params, version=__version__)
    names = ("n_features_in_", "feature_names_in_", *model._fitted_scalars)  # sklearn's and ours
    attrs |= {n: jsonable(getattr(model, n, None)) for n in names}
    attrs |= {n: getattr(model, n, {}) for n in ("output_attrs_", "output_coord_attrs_")}
    attrs["periods_"] = {}
    # numpy on disk whatever the device of the fit: a model fitted on a GPU loads on a CPU
    fitted = {n: getattr(model, n) for n in model._fitted_arrays}
    arrays = {n: backend.to_numpy(a) for n, a in fitted.items() if a is not None}
    for which in ("input", "output"):
        side = {a: getattr(model, f"{which}_{a}_", None) for a in ("shape", "dims", "periods")}
        attrs |= {f"{which}_{a}_": jsonable(side[a]) for a in ("shape", "dims")}
        attrs["periods_"][which] = jsonable(side["periods"])
        grid = getattr(model, f"{which}_grid_", None)
        attrs[f"{which}_grid_ndim"] = None if grid is None else len(grid)
        arrays.update({f"grid_{which}_{k}": ax for k, ax in enumerate(grid or ())})
        for dim, values in getattr(model, f"{which}_coords_").items():
            text = (values := np.asarray(values)).dtype == object  # strings of pandas, netCDF
            if text and not all(isinstance(v, str) for v in values.ravel()):
                raise ValueError(
                    f"the {which} coordinate {dim!r} holds Python objects, which a model cannot "
                    "store: give it numbers, strings or datetimes (e.g. .astype(str))"
                )
            arrays[_coord_key(which, dim)] = values.astype(str) if text else values
    return arrays, attrs


def restore_estimator(cls, arrays, attrs, path=None, device=None):
    """A fitted ``cls`` from :func:`estimator_state`'s output, on ``device`` (else its own/CPU)."""
    params = dict(attrs["params"])
    if device is not None and "device" in params:
        backend.check_device(params["device"])  # a device no version knows: an unusable model
        params["device"] = device
    if isinstance(params.get("recovery"), list):
        params["recovery"] = tuple(params["recovery"])
    if (saved := attrs.get("estimator", cls.__name__)) != cls.__name__:
        raise ForeignModelError(
            f"the model at {path} is a {saved}, not a {cls.__name__}: load it with {saved}.load"
        )
    try:
        model = cls(**params)
    except TypeError as exc:  # parameters this class does not know
        unknown, version = sorted(set(params) - set(cls().get_params())), attrs.get("version")
        fix = "the model's attributes were changed after it was saved; fit and save it again"
        fix = f"load it with rfol_dask {version}" if version and version != __version__ else fix
        raise ValueError(
            f"the model at {path} has parameters {unknown} that {cls.__name__} of rfol_dask "
            f"{__version__} does not know (saved by rfol_dask {version or '?'}): {fix}"
        ) from exc
    if device is None and getattr(model, "device", "cpu") != "cpu":
        try:
            backend.device_namespace(model.device)
        except (ImportError, RuntimeError) as exc:
            warnings.warn(
                f"the model at {path} was fitted with device={model.device!r}, which is not "
                f"available here ({exc}); it predicts on the CPU (device='cpu')",
                ModelFileWarning,
                stacklevel=user_stacklevel(),
            )
            model.device = "cpu"
    for name in model._fitted_arrays:
        setattr(model, name, arrays.get(name))
    for name in model._fitted_scalars:  # a scalar newer than the model: its class says what it was
        setattr(model, name, attrs[name] if name in attrs else model._older_scalars()[name])
    for name in ("n_features_in_", "output_attrs_", "output_coord_attrs_"):
        setattr(model, name, attrs[name])
    if attrs.get("feature_names_in_") is not None:  # the columns of a DataFrame it was fitted on
        model.feature_names_in_ = np.asarray(attrs["feature_names_in_"], dtype=object)
    for which in ("input", "output"):
        dims, ndim = attrs[f"{which}_dims_"] or (), attrs.get(f"{which}_grid_ndim")
        coords = {d: arrays[k] for d in dims if (k := _coord_key(which, d)) in arrays}
        grid = None if ndim is None else [arrays[f"grid_{which}_{k}"] for k in range(ndim)]
        side = dict(shape=attrs[f"{which}_shape_"], dims=attrs[f"{which}_dims_"], grid=grid)
        side["periods"] = attrs.get("periods_", {}).get(which)
        for a, v in side.items():
            setattr(model, f"{which}_{a}_", None if v is None else tuple(v))
        setattr(model, f"{which}_coords_", coords)
    return model
