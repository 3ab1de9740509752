"""Saved curves: :func:`rfol_dask.curves.error_curve` results as ``xarray.Dataset`` and studies of
them grown curve by curve in a Zarr store."""

from __future__ import annotations

import os

import numpy as np

#: the ``long_name`` of the variables of each fit of :func:`error_curves`
_FITS = {
    "slope": "error slope fit (fit_slope of the geometric-mean error over seeds)",
    "time_slope": "fit-time slope fit (fit_slope of the median fit time over seeds)",
    "excess": "error = floor + c N^-p fit past N = 2 n_train (fit_excess of the geometric-mean "
    "error)",
}


def curve_dataset(result):
    """The result of :func:`error_curve` or :func:`error_curves` as an ``xarray.Dataset``, to save
    (``.to_netcdf``, ``.to_zarr``) and plot (``ds.error.plot.line(x="n_features", xscale="log")``).

    Variables over ``(n_features,)`` or ``(seed, n_features)``: ``error``, ``fit_time``,
    ``predict_time`` (labelled for xarray's plots); ``gamma`` (per seed); each fit (``slope``,
    ``time_slope``, ``excess``) as 0-d variables ``<fit>_<key>`` (``slope_slope``,
    ``excess_floor``, ...; NaN for a None), data so that ``xr.concat(curves, dim="n_train")``
    keeps every curve's; the training size the scalar coordinate ``n_train``. The ``settings``
    (law, ``nu``, ``alpha``, ``fit_intercept``, ``pca_power``, ``gamma_rule``, ``error``,
    ``n_test``) are attributes (None left out, booleans as 0 / 1) and a single curve's ``seed`` a
    0-d float64, so that a saved curve says how to make it again. Predictions are left out."""
    import xarray as xr

    many = "seeds" in result
    dims = ("seed", "n_features") if many else ("n_features",)
    N = ("n_features", np.asarray(result["n_features"]), {"long_name": "random features N"})
    coords = {"n_features": N}
    if many:
        coords["seed"] = np.asarray(result["seeds"])
    if "n_train" in result:  # absent in results made before it was returned
        coords["n_train"] = ((), int(result["n_train"]), {"long_name": "training samples M"})
    settings = result.get("settings", {})
    metric = settings.get("error") or "relative_l2_error"
    error = "relative test error" if metric == "relative_l2_error" else f"test error ({metric})"
    labels = {"error": {"long_name": error}, "fit_time": {"long_name": "fit time", "units": "s"}}
    labels["predict_time"] = {"long_name": "predict time", "units": "s"}
    data = {k: (dims, np.asarray(result[k]), labels[k]) for k in labels}
    gamma = {"long_name": "frequency scale gamma"}
    data["gamma"] = (("seed",) if many else (), np.asarray(result["gamma"]), gamma)
    if not many and result.get("seed") is not None:  # float64: netCDF3 has no int64
        data["seed"] = ((), np.float64(result["seed"]), {"long_name": "seed of the frequency draw"})
    for fit, description in _FITS.items():
        for k, v in result.get(fit, {}).items():
            value, label = np.float64(np.nan) if v is None else np.asarray(v), f"{description}: {k}"
            data[f"{fit}_{k}"] = ((), value, {"long_name": label})
    attrs = {k: int(v) if isinstance(v, bool) else v for k, v in settings.items() if v is not None}
    return xr.Dataset(data, coords=coords, attrs=attrs)


#: the attributes of a :func:`curve_dataset` that every curve of a study shares (not ``n_test``)
_SHARED_SETTINGS = "distribution nu alpha fit_intercept pca_power gamma_rule error".split()


def append_curve(store, curve):
    """Add one curve to the study in the Zarr store ``store`` along ``n_train`` (the first call
    makes the store); returns the study as stored (a lazy Dataset over ``(n_train, seed,
    n_features)``).

    ``curve`` is a result of :func:`error_curves` or :func:`error_curve`, or its
    :func:`curve_dataset`. Refused before anything is written (ValueError): a curve of other
    ``n_features`` or ``seed`` (a Zarr append would write it under the study's), of other
    settings, of a training size the study holds, without ``n_train``, and a store of no curves."""
    import xarray as xr

    from .io import user_path

    new = curve_dataset(curve) if isinstance(curve, dict) else curve
    if "n_train" not in new.coords or new["n_train"].ndim:
        raise ValueError("the curve has no training size n_train (a result of an earlier version, "
                         "or a study already combined along n_train): append one curve of "
                         "error_curve or error_curves")  # fmt: skip
    new, path = new.expand_dims("n_train"), user_path(store)
    if not os.path.exists(path):
        return _write_study(new, path, mode="w-")
    try:
        study = xr.open_zarr(path, consolidated=False)
    except (KeyError, ValueError, OSError) as exc:  # zarr's "no group found" is both
        msg = f"{store} exists and is not a Zarr store of curves ({exc}); give a new path"
        raise ValueError(msg) from exc
    with study:
        _check_appendable(study, new, store)
    return _write_study(new, path, append_dim="n_train")


def _check_appendable(study, new, store):
    """ValueError unless the one-curve ``new`` fits the ``study`` in ``store``."""
    if "error" not in study or "n_train" not in study["error"].dims:
        raise ValueError(f"{store} holds no curves along n_train (variables "
                         f"{list(study.data_vars)}); append to a store that append_curve made, or "
                         "give a new path")  # fmt: skip
    if study["error"].dims != new["error"].dims:
        raise ValueError(f"the curve has dims {new['error'].dims} but the curves in {store} have "
                         f"{study['error'].dims}: a study holds curves of one kind (error_curves, "
                         "or error_curve)")  # fmt: skip
    old, now = ({k: ds.attrs.get(k) for k in _SHARED_SETTINGS} for ds in (study, new))
    if any(v is not None for v in old.values()) and old != now:  # earlier versions: no settings
        diff = {k: (now[k], v) for k, v in old.items() if v != now[k]}
        raise ValueError(f"the curve was made with other settings than the curves in {store} "
                         f"(this curve's vs the study's: {diff}): a study compares training sizes "
                         "at one setting; use the study's settings, or start another "
                         "store")  # fmt: skip
    for d in ("n_features", "seed"):
        if d in new.coords and not np.array_equal(study[d].values, new[d].values):
            raise ValueError(f"the curve's {d} {new[d].values.tolist()} differ from the study's "
                             f"{study[d].values.tolist()} in {store}: appended, its values would "
                             f"be labelled with the study's {d}; use the same {d} for every curve "
                             "of a study, or start another store")  # fmt: skip
    if (M := int(new["n_train"][0])) in study["n_train"].values:
        raise ValueError(f"{store} already holds a curve of n_train = {M}; a study holds one "
                         "curve per training size (combine the seeds before, or start another "
                         "store)")  # fmt: skip


def _write_study(curves, path, **how):
    """Write ``curves`` to ``path`` (``how``: ``to_zarr``'s mode or append_dim), its metadata
    consolidated again (else it would show the study before the append); returns it reopened."""
    import xarray as xr
    import zarr

    from .stores import quiet_consolidated

    with quiet_consolidated():
        curves.to_zarr(path, consolidated=False, **how)
        zarr.consolidate_metadata(path)
        return xr.open_zarr(path)
