"""Saved curves: :func:`rfol_dask.curves.error_curve` results as ``xarray.Dataset`` and studies of
them grown curve by curve in a Zarr store."""

from __future__ import annotations

import os

import numpy as np

#: what each fit of :func:`error_curves` describes (the ``long_name`` of its variables in
#: :func:`curve_dataset`)
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
    ``predict_time`` (with ``long_name`` and, for the times, ``units`` "s", which label xarray's
    plots); ``gamma`` (per seed); the fits (``slope``, ``time_slope``, ``excess``:
    dicts of numbers) become 0-d variables ``<fit>_<key>`` (``slope_slope``,
    ``slope_saturated_at``, ``excess_floor``, ...; NaN for a None), and the training size ``M``
    the scalar coordinate ``n_train``. The ``settings`` of the curve (law, ``nu``, ``alpha``,
    ``fit_intercept``, ``pca_power``, ``gamma_rule``, the ``error`` metric's name, ``n_test``) are
    attributes (None left out, booleans as 0 / 1), and a single curve's ``seed`` a 0-d variable
    (a float64: ``int(ds.seed)``), so that a saved curve says how to make it again. Predictions are
    left out.

    The fits are data, not attributes, so that they survive combining the curves of a study:
    ``xr.concat(curves, dim="n_train")`` (or ``xr.open_mfdataset(paths, combine="nested",
    concat_dim="n_train")``) gives each fit along ``n_train``, one value per curve, where
    attributes would keep only one curve's; the settings, alike in every curve of a study, stay
    attributes (``xr.concat`` keeps the first curve's: combine curves of one setting, as
    :func:`append_curve` checks; it grows a Zarr store curve by curve). Each fit is over the seeds
    of its own curve: fit the combined seeds again (:func:`fit_slope`) rather
    than appending seeds to a saved curve. Curve datasets of earlier versions hold the fits as
    attributes of the same names (:func:`rfol_dask.plotting.plot_curves` reads both forms)."""
    import xarray as xr

    many = "seeds" in result
    dims = ("seed", "n_features") if many else ("n_features",)
    coords = {
        "n_features": (
            "n_features",
            np.asarray(result["n_features"]),
            {"long_name": "random features N"},
        )
    }
    if many:
        coords["seed"] = np.asarray(result["seeds"])
    if "n_train" in result:  # absent in results made before it was returned
        coords["n_train"] = ((), int(result["n_train"]), {"long_name": "training samples M"})
    metric = result.get("settings", {}).get("error") or "relative_l2_error"
    error_name = (
        "relative test error" if metric == "relative_l2_error" else f"test error ({metric})"
    )
    # xarray's .plot labels its axes by them
    labels = {
        "error": {"long_name": error_name},
        "fit_time": {"long_name": "fit time", "units": "s"},
        "predict_time": {"long_name": "predict time", "units": "s"},
    }
    data = {k: (dims, np.asarray(result[k]), labels[k]) for k in labels}
    data["gamma"] = (
        ("seed",) if many else (),
        np.asarray(result["gamma"]),
        {"long_name": "frequency scale gamma"},
    )
    # data, as the fits: each curve of a study keeps its own
    if not many and result.get("seed") is not None:
        # float64: exact below 2**53, and netCDF3 (scipy's, xarray's fallback) has no int64 for a
        # seed >= 2**31
        data["seed"] = ((), np.float64(result["seed"]), {"long_name": "seed of the frequency draw"})
    for fit, description in _FITS.items():
        for k, v in result.get(fit, {}).items():
            data[f"{fit}_{k}"] = (
                (),
                np.float64(np.nan) if v is None else np.asarray(v),
                {"long_name": f"{description}: {k}"},
            )
    attrs = {
        k: int(v) if isinstance(v, bool) else v
        for k, v in result.get("settings", {}).items()
        if v is not None
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)


#: the attributes of a :func:`curve_dataset` that every curve of a study shares (``n_test`` may
#: differ)
_SHARED_SETTINGS = (
    "distribution",
    "nu",
    "alpha",
    "fit_intercept",
    "pca_power",
    "gamma_rule",
    "error",
)


def append_curve(store, curve):
    """Add one curve to the study in the Zarr store ``store`` along ``n_train`` (the first call
    makes the store); returns the study as stored (a lazy Dataset over ``(n_train, seed,
    n_features)``).

    ``curve`` is a result of :func:`error_curves` or :func:`error_curve`, or its
    :func:`curve_dataset`. A Zarr append keeps the store's own ``n_features`` and ``seed``
    coordinates and writes the new values under them, so a curve with other checkpoints or seeds
    would relabel the whole study without an error: it is refused (ValueError naming both), as
    are a curve of other settings (law, ``nu``, ``alpha``, ``fit_intercept``, ``pca_power``,
    ``gamma_rule``, error metric: the attributes of :func:`curve_dataset`), a training size the
    study already holds, a curve without ``n_train`` (results of earlier versions) and a store
    that holds no curves, before anything is written. Memory: the store's coordinates and the
    one curve."""
    import xarray as xr

    from .io import user_path

    new = curve_dataset(curve) if isinstance(curve, dict) else curve
    if "n_train" not in new.coords or new["n_train"].ndim:
        raise ValueError(
            "the curve has no training size n_train (a result of an earlier version, or a study "
            "already combined along n_train): append one curve of error_curve or error_curves"
        )
    new = new.expand_dims("n_train")
    path = user_path(store)
    if not os.path.exists(path):
        return _write_study(new, path, mode="w-")
    try:
        study = xr.open_zarr(path, consolidated=False)
    except (KeyError, ValueError, OSError) as exc:  # zarr's "no group found" is both
        raise ValueError(
            f"{store} exists and is not a Zarr store of curves ({exc}); give a new path"
        ) from exc
    with study:
        _check_appendable(study, new, store)
    return _write_study(new, path, append_dim="n_train")


def _check_appendable(study, new, store):
    """ValueError unless the one-curve ``new`` fits the ``study`` in ``store``: same kind,
    settings, ``n_features`` and ``seed``, and a training size it does not hold yet."""
    if "error" not in study or "n_train" not in study["error"].dims:
        raise ValueError(
            f"{store} holds no curves along n_train (variables {list(study.data_vars)}); append "
            "to a store that append_curve made, or give a new path"
        )
    if study["error"].dims != new["error"].dims:
        raise ValueError(
            f"the curve has dims {new['error'].dims} but the curves in {store} have "
            f"{study['error'].dims}: a study holds curves of one kind (error_curves, or "
            "error_curve)"
        )
    settings = [{k: ds.attrs.get(k) for k in _SHARED_SETTINGS} for ds in (study, new)]
    # stores of earlier versions hold no settings
    if any(v is not None for v in settings[0].values()) and settings[0] != settings[1]:
        diff = {k: (settings[1][k], v) for k, v in settings[0].items() if v != settings[1][k]}
        raise ValueError(
            f"the curve was made with other settings than the curves in {store} (this curve's vs "
            f"the study's: {diff}): a study compares training sizes at one setting; use the "
            "study's settings, or start another store"
        )
    for d in ("n_features", "seed"):
        if d in new.coords and not np.array_equal(study[d].values, new[d].values):
            raise ValueError(
                f"the curve's {d} {new[d].values.tolist()} differ from the study's "
                f"{study[d].values.tolist()} in {store}: appended, its values would be labelled "
                f"with the study's {d}; use the same {d} for every curve of a study, or start "
                "another store"
            )
    M = int(new["n_train"][0])
    if M in study["n_train"].values:
        raise ValueError(
            f"{store} already holds a curve of n_train = {M}; a study holds one curve per training "
            "size (combine the seeds before, or start another store)"
        )


def _write_study(curves, path, **how):
    """Write ``curves`` to the Zarr store ``path`` (``how``: ``to_zarr``'s mode or append_dim) and
    consolidate its metadata again (the consolidated metadata of a store that ``to_zarr`` wrote
    by default would otherwise still show the study before the append); returns it reopened."""
    import xarray as xr
    import zarr

    from .stores import quiet_consolidated

    with quiet_consolidated():
        curves.to_zarr(path, consolidated=False, **how)
        zarr.consolidate_metadata(path)
        return xr.open_zarr(path)
