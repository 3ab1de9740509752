"""The ``rfol-dask`` command: ``quickstart``, ``datasets``, ``generate``, ``fit``, ``predict``, ``reproduce``."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from ._version import __version__
from .features import DISTRIBUTIONS

__all__ = ["main"]

_log = logging.getLogger(
    "rfol_dask.cli"
)  # a child of the package's logger: shown as its messages are


def _parse_param(text):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--param takes key=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        value = json.loads(value)
    except json.JSONDecodeError:
        pass
    return key.strip(), value


def _count(least):
    """An argparse type: a whole number >= ``least``."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {least}, got {text!r}"
            ) from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
        return value

    return parse


def _cmd_datasets(args):
    from . import datasets

    for name in datasets.names():
        spec = datasets.get(name)
        print(f"{name:28s} {spec.description}")
        print(" " * 29 + ", ".join(f"{k}={v!r}" for k, v in spec.defaults.items()))
    return 0


def _start_cluster(config=None, n_workers=None):
    """A client of the cluster configuration ``config`` (shipped name or YAML path), or of a
    LocalCluster with ``n_workers``; its dashboard link goes to stderr."""
    from .cluster import local_client, start_client

    client = start_client(config) if config else local_client(n_workers=n_workers)
    _print_dashboard(client)
    return client


def _print_dashboard(client):
    """The dashboard link of ``client``, logged (INFO: on stderr unless ``--quiet``)."""
    from .cluster import dashboard_link

    link = dashboard_link(client) or "none (needs bokeh: pip install 'rfol-dask[diagnostics]')"
    _log.info("dask dashboard: %s", link)


def _optional_cluster(args):
    """A client of ``--cluster`` or of a LocalCluster of ``--workers`` K, or None (dask's local
    scheduler) without either; ValueError for both."""
    if args.cluster and args.workers is not None:
        raise ValueError("give --cluster or --workers, not both (--workers starts a LocalCluster)")
    return (
        _start_cluster(args.cluster, args.workers)
        if args.cluster or args.workers is not None
        else None
    )


def _close_cluster(client):
    from .cluster import close_client

    close_client(client)


def _cmd_generate(args):
    from . import datasets

    params = {}
    for key, value in args.param or []:
        if key in params and params[key] != value:  # else the last one would win, silently
            raise ValueError(
                f"--param {key} is given twice ({key}={params[key]!r} and {key}={value!r}): give it once"
            )
        params[key] = value
    client = _optional_cluster(args)
    try:
        t0 = time.perf_counter()
        ds = datasets.generate(
            args.name,
            args.samples,
            store=args.out,
            seed=args.seed,
            client=client,
            block_size=args.block_size,
            overwrite=args.overwrite,
            progress=not args.quiet,
            **params,
        )
        dt = time.perf_counter() - t0
    finally:
        _close_cluster(client)
    print(
        f"{args.name}: {args.samples} samples in {args.out} ({dt:.1f} s, "
        f"input {ds['input'].shape}, output {ds['output'].shape})"
    )
    return 0


def _cmd_quickstart(args):
    from . import RandomFeatureOperator, datasets
    from .cluster import local_client
    from .metrics import relative_l2_error
    from .plotting import plot_prediction
    from .progress import scheduler_workers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = datasets.get(args.dataset)
    paper = spec.paper
    n_train, n_test = args.train, args.test
    store = out / (
        f"{args.dataset}.zarr" if args.seed == 0 else f"{args.dataset}_seed{args.seed}.zarr"
    )
    print(f"rfol-dask quickstart: {args.dataset} ({spec.description})")
    with local_client(n_workers=args.workers) as client:
        print(f"LocalCluster: {len(scheduler_workers(client))} workers")
        _print_dashboard(client)
        t0 = time.perf_counter()
        ds = datasets.reuse_or_generate(args.dataset, n_train + n_test, store, seed=args.seed)
        print(
            f"data: {n_train} train + {n_test} test samples in {store} ({time.perf_counter() - t0:.1f} s)"
        )
        train, test = ds.isel(sample=slice(0, n_train)), ds.isel(sample=slice(n_train, None))
        truth = test["output"].values
        predictions, rows = {}, []
        for dist in ("cauchy", "gaussian"):
            model = RandomFeatureOperator(
                n_features=args.n_features or paper.get("n_features", 1000),
                distribution=dist,
                gamma=args.gamma or paper.get("gamma", 1.0),
                alpha=args.alpha if args.alpha is not None else paper.get("alpha", 1e-10),
                random_state=args.seed,
            )
            t0 = time.perf_counter()
            model.fit(train)
            fit_time = time.perf_counter() - t0
            pred = model.predict(test["input"]).compute()
            err = relative_l2_error(truth, pred.values)
            predictions[dist] = pred.values[0]
            rows.append((dist, err, fit_time, paper.get(dist)))
            model.save(out / f"model_{dist}.zarr")
        print(
            f"\n{'features':10s} {'rel. L2 test error':>20s} {'fit time [s]':>13s} {'paper':>10s}"
        )
        for dist, err, fit_time, ref in rows:
            ref_s = "-" if ref is None else f"{ref:.3g}"
            print(f"{dist:10s} {err:20.3e} {fit_time:13.2f} {ref_s:>10s}")
        out_dims = ds["output"].dims[1:]
        grid = (
            ds[out_dims[0]] if len(out_dims) == 1 and out_dims[0] in ds.coords else None
        )  # with its units
        png = plot_prediction(
            out / "quickstart.png",
            truth[0],
            predictions,
            grid=grid,
            title=f"{args.dataset}: test sample 0",
        )
        print(f"\nfigure: {png}\nmodels: {out}/model_cauchy.zarr, {out}/model_gaussian.zarr")
    return 0  # leaving the with block closed the client and its cluster


def _gamma(text):
    """``--gamma``: "median" or a positive number."""
    if text == "median":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number > 0 or 'median', got {text!r}"
        ) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"gamma must be > 0 (or 'median'), got {text}")
    return value


_REPORT_MARK = '<meta name="generator" content="rfol-dask fit --report">'
_OLD_REPORT_MARK = "<title>Dask Performance Report</title>"  # in the reports of earlier versions


def _report_context(path):
    """A dask performance report of the block, written to ``path`` only when the block succeeded
    (a failed fit leaves an earlier report as it was): to a temporary sibling, marked as this
    tool's (:data:`_REPORT_MARK`), then renamed over ``path``. A no-op context without ``path``."""
    if not path:
        return contextlib.nullcontext()
    from distributed import performance_report

    try:
        import bokeh  # noqa: F401
    except ImportError:
        raise ValueError("--report needs bokeh: pip install 'rfol-dask[diagnostics]'") from None
    return _written_report(Path(path), performance_report)


@contextlib.contextmanager
def _written_report(path, performance_report):
    import fsspec

    tmp = path.with_name(
        f".{path.name}.{os.getpid()}.partial{path.suffix}"
    )  # same suffix: same compression
    # stacklevel 3: the report's "calling code" is the with block's (past this generator and contextlib)
    report = performance_report(filename=str(tmp), stacklevel=3)
    report.__enter__()  # leaves nothing to undo: an exception in the block just skips the report
    yield
    try:
        report.__exit__(None, None, None)
        with fsspec.open(str(tmp), "r", compression="infer") as f:
            html = f.read()
        with fsspec.open(str(tmp), "w", compression="infer") as f:
            f.write(html.replace("<head>", f"<head>\n    {_REPORT_MARK}", 1))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _is_report(path):
    """Whether the file ``path`` is a performance report that ``--report`` wrote (this version's
    mark, or the title of dask's reports that earlier versions wrote unmarked)."""
    import fsspec

    try:
        with fsspec.open(str(path), "r", compression="infer") as f:
            head = f.read(4096)
    except Exception:  # noqa: BLE001  (unreadable, binary, not what its name says: not ours)
        return False
    return _REPORT_MARK in head or _OLD_REPORT_MARK in head


def _check_report_path(path, out=None):
    """ValueError unless an HTML report can be written at ``path`` (checked before the fit):
    nothing may be there but a report of ``--report``, and neither a Zarr store (a data set, a
    model: Zarr metadata in a folder above) nor the model path ``out`` may hold it."""
    from .io import zarr_parents

    path = Path(os.path.abspath(path))
    if path.is_dir():
        raise ValueError(f"--report {path} is a directory; give the path of an HTML file")
    if not path.parent.is_dir():
        raise ValueError(
            f"--report {path}: its folder {path.parent} does not exist or is not a directory"
        )
    store = next(zarr_parents(path), None)
    if store is not None:
        raise ValueError(
            f"--report {path} is inside the Zarr store {store}, which it would damage; "
            "write the report outside it"
        )
    if out is not None and Path(os.path.abspath(out)) in (path, *path.parents):
        raise ValueError(
            f"--report {path} is at or inside the model path --out {out}; write it elsewhere"
        )
    if (path.exists() or path.is_symlink()) and not _is_report(path):
        raise ValueError(
            f"--report {path} exists and is not a performance report of rfol-dask fit; it is never "
            "replaced: give a new path (or move the file away)"
        )


def _powers(text):
    """``--pca-power``: a number, ``none``, or a comma-separated list of them."""
    values = []
    for part in text.split(","):
        try:
            values.append(None if part.strip().lower() == "none" else float(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be numbers or 'none', comma-separated, got {text!r}"
            ) from None
    return values


def _fit_model(args):
    """The estimator ``rfol-dask fit`` fits: RandomFeatureOperatorCV with ``--tune``, else
    RandomFeatureOperator with the given settings."""
    if args.distribution == "student_t" and args.nu is None:
        raise ValueError(
            "--distribution student_t needs its degrees of freedom: add --nu, e.g. --nu 3"
        )
    from .features import NU_LAWS

    if (
        args.nu is not None
        and (args.distribution or "cauchy") not in NU_LAWS
        and not (args.tune and args.distribution is None)
    ):
        law = args.distribution or "cauchy (the default law)"
        raise ValueError(
            f"--nu applies to student_t and rational_quadratic, not {law}: add --distribution, "
            "or leave out --nu"
        )
    if args.tune:
        from .rf_operator_cv import DEFAULT_LAWS, RandomFeatureOperatorCV

        if args.gamma != "median" or args.alpha is not None:
            raise ValueError("--tune searches gamma and alpha: leave out --gamma and --alpha")
        laws = DEFAULT_LAWS if args.distribution is None else (args.distribution,)
        return RandomFeatureOperatorCV(
            n_features=args.n_features,
            max_features=args.max_features,
            distributions=laws,
            nu=args.nu,
            pca_power=None if args.pca_power is None else tuple(args.pca_power),
            refit={"solver": args.solver},
            dtype=args.dtype,
            random_state=args.seed,
            progress=not args.quiet,
            device=_device(args),
        )
    if args.max_features is not None:
        raise ValueError(
            "--max-features grows N during the --tune search: add --tune, or set N with --n-features"
        )
    from . import RandomFeatureOperator

    return RandomFeatureOperator(
        n_features=args.n_features,
        distribution=args.distribution or "cauchy",
        gamma=args.gamma,
        nu=args.nu,
        alpha=1e-10 if args.alpha is None else args.alpha,
        pca_power=_one_power(args.pca_power),
        solver=args.solver,
        dtype=args.dtype,
        random_state=args.seed,
        progress=not args.quiet,
        device=_device(args),
    )


def _one_power(powers):
    if powers is None:
        return None
    if len(powers) > 1:
        raise ValueError(
            "--pca-power takes one value without --tune (a list is searched with --tune)"
        )
    return powers[0]


def _device(args):
    """``--device``, by default ``cuda`` on a GPU cluster configuration (``local-cuda``,
    ``slurm-gpu``: :func:`rfol_dask.cluster.gpu_config`), else ``cpu``."""
    if args.device is not None:
        return args.device
    from .cluster import gpu_config

    return "cuda" if args.cluster and gpu_config(args.cluster) else "cpu"


def _print_fit(args, model, n_train, fit_time):
    if args.tune:
        best = model.best_params_
        print(
            f"search: {len(model.cv_results_['mean_test_score'])} candidates in {model.search_time_:.2f} s; "
            f"best {best['distribution']}, gamma {best['gamma']:.4g}, alpha {best['alpha']:.3g}, "
            f"N={best['n_features']}"
            + (f", nu {best['nu']}" if best.get("nu") is not None else "")
            + (f", pca_power {best['pca_power']}" if "pca_power" in best else "")
            + f"; validation relative L2 error {-model.best_score_:.4e} "
            f"(last 20 % of the training samples)"
        )
        print(
            f"fit: {n_train} samples, N={best['n_features']} {best['distribution']} features, solver "
            f"{model.best_estimator_.solver_}: {fit_time:.2f} s (search + refit)"
        )
    else:
        print(
            f"fit: {n_train} samples, N={args.n_features} {model.distribution} features, "
            f"gamma {model.gamma_:.4g}, solver {model.solver_}: {fit_time:.2f} s"
        )


def _cmd_fit(args):
    from .io import open_dataset
    from .metrics import relative_l2_error
    from .persistence import check_model_path

    if args.out:
        check_model_path(
            args.out
        )  # before the fit: never replace a file, a data set or other files
    if args.train is not None and args.train < 1:
        raise ValueError(f"--train must be at least 1, got {args.train}")
    if args.report:
        _check_report_path(args.report, args.out)
    report = _report_context(args.report)
    # a performance report needs a distributed scheduler: without --cluster, a local one
    client = _start_cluster(args.cluster or "local") if args.cluster or args.report else None
    try:
        ds = open_dataset(args.data)
        missing = [v for v in ("input", "output") if v not in ds.data_vars]
        if missing:
            raise ValueError(
                f"{args.data} has no variable {' or '.join(map(repr, missing))}: fit needs 'input' and "
                f"'output', and it holds {', '.join(map(repr, ds.data_vars)) or 'no variables'}; "
                "rename its variables to input and output"
            )
        if "sample" not in ds["input"].dims or "sample" not in ds["output"].dims:
            raise ValueError(
                f"{args.data}: input and output need a 'sample' dimension (got {ds['input'].dims} and "
                f"{ds['output'].dims}); rename the dimension that runs over the samples"
            )
        n = ds.sizes["sample"]
        n_train = n if args.train is None else args.train
        if not 1 <= n_train <= n:
            raise ValueError(
                f"--train must be between 1 and the {n} samples of {args.data}, got {n_train}"
            )
        train, test = ds.isel(sample=slice(0, n_train)), ds.isel(sample=slice(n_train, None))
        model = _fit_model(args)
        with report:
            t0 = time.perf_counter()
            model.fit(train)
            _print_fit(args, model, n_train, time.perf_counter() - t0)
            if args.out:  # before the test and the report: a failure there keeps the model
                model.save(args.out)
                print(f"model: {args.out}")
            if test.sizes["sample"]:
                err = relative_l2_error(test["output"], model.predict(test["input"]))
                print(
                    f"relative L2 error on the {test.sizes['sample']} remaining samples: {err:.4e}"
                )
            else:
                print(
                    f"no test: all {n} samples trained (--train M keeps the samples after the first M for a test)"
                )
    finally:
        _close_cluster(client)
    return 0


def _sample_range(text):
    """``--samples``: ``START:STOP`` (either may be left out) as ``(start, stop)``, None for a
    bound not given; checked against the store's size by :func:`_chosen_samples`."""
    bounds = text.split(":")
    if len(bounds) != 2:
        raise argparse.ArgumentTypeError(
            f"expected START:STOP (e.g. 800:1000, or 800: for the rest), got {text!r}"
        )
    try:
        start, stop = (int(b) if b.strip() else None for b in bounds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"START and STOP must be whole numbers, got {text!r}"
        ) from None
    if min(b for b in (start, stop, 0) if b is not None) < 0:
        raise argparse.ArgumentTypeError(f"START and STOP count samples from 0, got {text!r}")
    return start, stop


def _chosen_samples(bounds, n, data):
    """``(start, stop)`` of ``--samples`` among the ``n`` samples of the store ``data``."""
    start, stop = 0 if bounds[0] is None else bounds[0], n if bounds[1] is None else bounds[1]
    if not start < stop <= n:
        given = ":".join("" if b is None else str(b) for b in bounds)
        raise ValueError(
            f"--samples {given} is not a range of the {n} samples of {data}: give START < STOP <= {n}"
        )
    return start, stop


def _load_any_model(path, device=None):
    """The model saved at ``path``, loaded by the estimator class it records (a model saved
    before the class was recorded: the first class that takes its parameters; any other error of
    a class, a damaged or unusable model of it, is raised as it is), to predict on ``device``
    (None: the saved one, the CPU with a warning where that is not here)."""
    from . import RandomFeatureOperator
    from .baselines import KernelOperator
    from .exceptions import ForeignModelError
    from .io import user_path
    from .persistence import load_model, restore_estimator

    classes = {cls.__name__: cls for cls in (RandomFeatureOperator, KernelOperator)}
    arrays, attrs = load_model(user_path(path))
    saved = attrs.get("estimator")
    if saved is not None and saved not in classes:
        raise ValueError(
            f"the model at {path} is a {saved}, which rfol-dask predict does not load (it loads "
            f"{' and '.join(classes)} models)"
        )
    candidates = [classes[saved]] if saved else list(classes.values())
    for cls in candidates[:-1]:
        with contextlib.suppress(ForeignModelError):  # parameters of another class: the next one
            return restore_estimator(cls, arrays, attrs, path, device)
    return restore_estimator(candidates[-1], arrays, attrs, path, device)


def _cmd_predict(args):
    from .io import open_dataset, user_path
    from .predictions import check_prediction_path, write_predictions

    out = Path(os.path.abspath(user_path(args.out)))
    check_prediction_path(out)  # before any work: never replace a data set, a model or other files
    model = _load_any_model(args.model, _device(args))  # a CPU model predicts on GPUs, and back
    ds = open_dataset(args.data)
    if "input" not in ds.data_vars or "sample" not in ds["input"].dims:
        raise ValueError(
            f"{args.data} has no variable 'input' with a 'sample' dimension: predict reads the inputs "
            f"from it, and it holds {', '.join(map(repr, ds.data_vars)) or 'no variables'}; rename the "
            "variable (and the dimension that runs over the samples)"
        )
    _warn_unsorted_by_position(model, ds, args.data)
    start, stop = _chosen_samples(args.samples, ds.sizes["sample"], args.data)
    chosen = ds.isel(sample=slice(start, stop))
    block = ds["input"].chunksizes["sample"][
        0
    ]  # the store's blocks: regular chunks, as Zarr writes them
    client = _optional_cluster(args)
    try:
        t0 = time.perf_counter()
        other = _other_output_dims(model, ds)  # not compared: predicted on the model's grid
        pred = model.predict(
            chosen["input"].chunk({"sample": block}),  # lazy: checks the grids now
            output_grid=None if other else _store_output_grid(model, ds),
        )
        pred = _labelled_as_store(model, pred, ds)
        attrs = {
            "title": f"rfol-dask predict: samples {start}:{stop} of {args.data}",
            "model": os.path.abspath(user_path(args.model)),
            "store": os.path.abspath(user_path(args.data)),
            "samples": [start, stop],
        }
        write_predictions(pred, out, attrs, client, progress=not args.quiet)
        print(
            f"predictions: samples {start}:{stop} of {args.data} in {args.out} ({time.perf_counter() - t0:.1f} s, "
            f"prediction {pred.shape})"
        )
        if other:
            print(_other_dims_note(other, model.output_dims_, ds))
        else:
            _print_prediction_error(chosen, out, stop - start)
    finally:
        _close_cluster(client)
    return 0


def _other_output_dims(model, ds):
    """The grid dims of the store's ``output`` where they are not the model's output dims (of a
    model fitted on xarray, which matches grid dims by name, in any order), else None: its
    predictions are on the model's grid, neither resampled to that output nor compared with it."""
    dims = getattr(model, "output_dims_", None)
    if "output" not in ds.data_vars or dims is None:
        return None
    store = tuple(d for d in ds["output"].dims if d != "sample")
    return store if set(store) != set(dims) else None


def _other_dims_note(other, dims, ds):
    """Why the predictions on the model's output ``dims`` are not compared with the store's output
    on ``other`` dims, with the rename that would compare them where the store can take it."""
    rename = dict(zip(other, dims)) if len(other) == len(dims) else {}
    fits = rename and all(
        ds.sizes.get(new, ds.sizes[old]) == ds.sizes[old] for old, new in rename.items()
    )
    note = f"no error: the store's output has grid dims {other} but the model predicts on {tuple(dims)}"
    if fits:
        return f"{note}: rename the store's output dims to the model's to compare them (xarray: ds.rename({rename}))"
    return (
        f"{note} (of other sizes in the store): only an output on the model's grid dims is compared"
    )


def _store_output_grid(model, ds):
    """The grid ``{dim: coordinates}`` of the store's ``output``, in increasing order (as
    predictions come out), where the predictions go so that they compare with it (the training
    grid itself is not resampled; a store of another resolution is, by the model's ``recovery``);
    None without ``output``, its coordinates or a training output grid of the model."""
    import numpy as np

    if "output" not in ds.data_vars or getattr(model, "output_grid_", None) is None:
        return None
    dims = [d for d in ds["output"].dims if d != "sample"]
    return {d: np.sort(ds[d].values) for d in dims} if all(d in ds.coords for d in dims) else None


def _warn_unsorted_by_position(model, ds, data):
    """A DataWarning where a model fitted on arrays (no grid: it reads the store's ``input``, and
    labels its predictions with the store's ``output`` grid, by position) meets grid coordinates
    of the store that do not increase: models fitted on xarray read them sorted, and arrays taken
    from such data in increasing order would be predicted wrongly. Other coordinates in the same
    order cannot be told from the training grid, which the model does not know."""
    import warnings

    from .exceptions import DataWarning
    from .io import unsorted_axis
    from .stacklevel import user_stacklevel

    dims = [
        d
        for var in ("input", "output")
        if var in ds.data_vars and not model._knows_grid(var)
        for d in ds[var].dims
        if d != "sample"
    ]
    unsorted = [d for d in dict.fromkeys(dims) if d in ds.coords and unsorted_axis(ds[d].values)]
    if unsorted:
        names, by = ", ".join(map(repr, unsorted)), unsorted[0] if len(unsorted) == 1 else unsorted
        warnings.warn(
            f"the model was fitted on arrays without a grid: it reads {data} by position, in the store's "
            f"order, and its coordinates {names} do not increase (a model fitted on xarray reads them "
            "sorted); the predictions are right only if the training arrays were in this order. If they "
            f"were in increasing order, write the store sorted (ds.sortby({by!r})) and predict "
            "that",
            DataWarning,
            stacklevel=user_stacklevel(),
        )


def _labelled_as_store(model, pred, ds):
    """``pred`` of a model fitted on arrays (no output dims or grid: its grid dims are ``dim_0``,
    ...) with the dims and coordinates of the store's ``output`` of the same grid shape, which it
    predicts by position as it reads the inputs (unlabelled, it broadcast against the store's
    output in xarray arithmetic); else ``pred`` as it is."""
    if (
        "output" not in ds.data_vars
        or model._knows_grid("output")
        or ds["output"].dims[0] != "sample"
    ):
        return pred
    out = ds["output"]
    if out.shape[1:] != pred.shape[1:]:
        return pred
    pred = pred.rename(dict(zip(pred.dims[1:], out.dims[1:])))
    return pred.assign_coords({d: out[d].values for d in out.dims[1:] if d in out.coords})


def _print_prediction_error(chosen, out, n):
    """The relative L2 error of the predictions written at ``out`` against the ``output`` of the
    ``n`` samples ``chosen``, read back from the store (no second prediction), if there is one."""
    import xarray as xr

    from .metrics import relative_l2_error

    if "output" not in chosen.data_vars:
        print("no error: the store has no 'output' variable to compare with")
        return
    written, truth = xr.open_zarr(out, consolidated=True)["prediction"], chosen["output"]
    if set(truth.dims) == set(written.dims):  # grid dims matched by name, in any order
        truth = truth.transpose(*written.dims)
    if (
        truth.shape != written.shape
    ):  # an output grid of other sizes without coordinates to predict on
        print(
            f"no error: the store's output {_sizes(truth)} is on another grid than the predictions "
            f"{_sizes(written)}, and without its coordinates they cannot be predicted there"
        )
        return
    print(
        f"relative L2 error on the {n} predicted samples: {relative_l2_error(truth, written):.4e}"
    )


def _sizes(array):
    return f"({', '.join(f'{d}: {k}' for d, k in array.sizes.items())})"


def _cmd_reproduce(args):
    from .experiments.reproduce import run_args

    return run_args(args)


def _shipped():
    from .cluster import shipped_configs

    return shipped_configs()


def _output_options():
    """A parent parser of every subcommand: ``-q/--quiet`` and ``-v/--verbose``, what goes to stderr."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="stderr: warnings and errors only (no progress bars, dashboard link or wait messages)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="stderr: also the debug messages (the times of the steps of a fit)",
    )
    return common


def _add_fit_parser(sub, common):
    """The ``fit`` subcommand's arguments."""
    f = sub.add_parser(
        "fit",
        help="fit a model on a data-set store (train on the first --train samples)",
        parents=[common],
    )
    f.add_argument("data", help="Zarr store with variables input and output")
    f.add_argument(
        "--train",
        type=int,
        default=None,
        help="train on the first M samples and test on the rest (default: train on all, no test)",
    )
    f.add_argument("--n-features", type=int, default=1000, help="features N (default %(default)s)")
    f.add_argument(
        "--distribution",
        default=None,
        choices=list(DISTRIBUTIONS),
        help="frequency law (default cauchy; with --tune: search this law only, default the "
        "library's search: cauchy, gaussian and rational_quadratic)",
    )
    f.add_argument(
        "--gamma",
        type=_gamma,
        default="median",
        help="a number > 0, or 'median' (default): 1 / the median pairwise distance of the inputs",
    )
    f.add_argument(
        "--nu",
        type=float,
        default=None,
        help="degrees of freedom of student_t; shape of rational_quadratic (default 1)",
    )
    f.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="ridge on the centred Gram of unit-variance features (default 1e-10, as "
        "RandomFeatureOperator; --tune searches it)",
    )
    f.add_argument(
        "--pca-power",
        type=_powers,
        default=None,
        metavar="POWER[,POWER...]",
        help="input metric: distances in the inputs' principal directions weighted by "
        "(s_j / s_1)^POWER (e.g. 1: stress the smooth, large-variance directions); default: the "
        "grid values' own distance. With --tune a list (e.g. none,1) is searched",
    )
    f.add_argument(
        "--tune",
        action="store_true",
        help="choose the law, gamma and alpha by validation on the training samples "
        "(RandomFeatureOperatorCV); prints the choice and its validation error",
    )
    f.add_argument(
        "--max-features",
        type=int,
        default=None,
        help="with --tune: after the search at --n-features, grow N (doubling) up to this many "
        "features while the validation error falls by at least 1 %% a doubling",
    )
    f.add_argument("--solver", default="auto", choices=["auto", "dual", "primal"])
    f.add_argument("--dtype", default=None, choices=["float32", "float64"])
    f.add_argument("--seed", type=int, default=0)
    f.add_argument(
        "--cluster",
        default=None,
        metavar="NAME|PATH",
        help=f"cluster configuration: a shipped name ({', '.join(_shipped())}) or a YAML file",
    )
    _add_device_option(f, "the fit computes")
    f.add_argument(
        "--report",
        default=None,
        help="write dask's performance report (HTML) here once the fit succeeded; an existing "
        "file is replaced only if it is such a report",
    )
    f.add_argument("--out", default=None, help="save the model to this Zarr path")
    f.set_defaults(func=_cmd_fit)


def _add_device_option(parser, what):
    """``--device`` (read by :func:`_device`) of ``fit`` and ``predict``: where ``what``."""
    parser.add_argument(
        "--device",
        default=None,
        choices=["cpu", "cuda"],
        help=f"where {what} (default: cuda with a GPU cluster configuration such as "
        "local-cuda or slurm-gpu, else cpu); cuda needs rfol-dask[gpu]",
    )


def _add_predict_parser(sub, common):
    """The ``predict`` subcommand's arguments."""
    p = sub.add_parser(
        "predict",
        help="apply a saved model to the inputs of a data-set store and write the "
        "predictions to a Zarr store",
        parents=[common],
    )
    p.add_argument("model", help="a saved model (rfol-dask fit --out, or save in Python)")
    p.add_argument(
        "data",
        help="Zarr store with the variable input (and output: then the relative L2 error of "
        "the predictions is printed)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="Zarr store to write, with the variable prediction (sample, <output grid dims>): a new path, "
        "an empty folder, or an earlier prediction store of this command, which is replaced; "
        "anything else is refused",
    )
    p.add_argument(
        "--samples",
        type=_sample_range,
        default=(None, None),
        metavar="START:STOP",
        help="predict the samples START to STOP - 1 only (e.g. 800:1000; 800: for the rest; default all)",
    )
    p.add_argument(
        "--workers",
        type=_count(1),
        default=None,
        help="start a LocalCluster with this many workers",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="NAME|PATH",
        help=f"cluster configuration: a shipped name ({', '.join(_shipped())}) or a YAML file",
    )
    _add_device_option(p, "the predictions are computed, whatever the model was fitted on")
    p.set_defaults(func=_cmd_predict)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="rfol-dask", description="Random-feature operator learning on Dask"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = _output_options()

    q = sub.add_parser(
        "quickstart",
        help="make a small data set, fit Cauchy and Gaussian models, plot",
        parents=[common],
    )
    q.add_argument(
        "--dataset",
        default="advection1",
        help="data set (default %(default)s; see rfol-dask datasets)",
    )
    q.add_argument(
        "--train", type=_count(1), default=1000, help="training samples (default %(default)s)"
    )
    q.add_argument(
        "--test", type=_count(1), default=1000, help="test samples (default %(default)s)"
    )
    q.add_argument(
        "--n-features", type=int, default=None, help="default: the paper's N for the data set"
    )
    q.add_argument(
        "--gamma",
        type=float,
        default=None,
        help="frequency scale (default: the paper's for the data set)",
    )
    q.add_argument(
        "--alpha", type=float, default=None, help="ridge (default: the paper's for the data set)"
    )
    q.add_argument(
        "--workers",
        type=_count(1),
        default=2,
        help="LocalCluster worker processes (default %(default)s)",
    )
    q.add_argument(
        "--seed", type=int, default=0, help="data and feature seed (default %(default)s)"
    )
    q.add_argument(
        "--out",
        default="quickstart_output",
        help="output folder (default %(default)s); its data set, <dataset>.zarr (<dataset>_seed<S>.zarr "
        "for --seed S), is reused by later runs",
    )
    q.set_defaults(func=_cmd_quickstart)

    d = sub.add_parser(
        "datasets", help="list the data sets and their default parameters", parents=[common]
    )
    d.set_defaults(func=_cmd_datasets)

    _add_fit_parser(sub, common)
    _add_predict_parser(sub, common)

    g = sub.add_parser(
        "generate", help="generate a data set into a Zarr store (resumable)", parents=[common]
    )
    g.add_argument("name", help="data set (see rfol-dask datasets)")
    g.add_argument("--samples", type=int, required=True, help="number of samples")
    g.add_argument(
        "--out", required=True, help="Zarr store to write (an interrupted run resumes from it)"
    )
    g.add_argument("--seed", type=int, default=0, help="data seed, >= 0 (default %(default)s)")
    g.add_argument(
        "--workers",
        type=_count(1),
        default=None,
        help="start a LocalCluster with this many workers",
    )
    g.add_argument(
        "--cluster",
        default=None,
        metavar="NAME|PATH",
        help=f"cluster configuration: a shipped name ({', '.join(_shipped())}) or a YAML file",
    )
    g.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="samples per task and per chunk (default: chunks of "
        "about 32 MiB, at most 1000 samples; a resumed "
        "store's own)",
    )
    g.add_argument(
        "--param",
        type=_parse_param,
        action="append",
        metavar="KEY=VALUE",
        help="a generator parameter (repeatable, once per key; rfol-dask datasets lists them with their "
        "defaults)",
    )
    g.add_argument(
        "--overwrite", action="store_true", help="replace a store that holds another data set"
    )
    g.set_defaults(func=_cmd_generate)

    r = sub.add_parser(
        "reproduce",
        help="the paper's tables, equal-time comparison and error-vs-N curves, "
        "beside kernel and linear baselines (rfol_dask.experiments)",
        parents=[common],
    )
    from .experiments.reproduce import add_arguments

    add_arguments(r)
    r.set_defaults(func=_cmd_reproduce)
    return parser


def _terminate(signum, frame):
    """SIGTERM (a batch system's kill, ``timeout``) as SystemExit, so that the fit's clean-up runs
    (its feature cache, its cluster) as it does for Ctrl-C."""
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _log_to_stderr(level):
    """The package's log messages (logger ``rfol_dask``: a queued job's or an MPI scheduler
    file's wait, the dashboard link) of ``level`` and above on stderr as ``rfol-dask: <message>``
    for the block. Only that logger is configured (level, one handler, no propagation to the
    root logger's handlers: no message twice), and as it was again after the block; the
    library itself configures no logging."""
    logger = logging.getLogger("rfol_dask")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("rfol-dask: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


@contextlib.contextmanager
def _warnings_as_lines(command):
    """The package's warnings printed as ``rfol-dask COMMAND: warning (Category): message``:
    Python's format names the console script's file and line, of no use to a command-line user.
    Other libraries' warnings keep it. Only the format changes: recorded warnings stay recorded."""
    import warnings

    from .exceptions import RfolDaskWarning

    default = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        if issubclass(category, RfolDaskWarning):
            return f"rfol-dask {command}: warning ({category.__name__}): {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = formatwarning
    try:
        yield
    finally:
        warnings.formatwarning = default


def main(argv=None):
    args = build_parser().parse_args(argv)
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    from .exceptions import ClusterStartError, NoDeviceError, NoWorkersError, WorkersKilledError

    try:
        with (
            _log_to_stderr(
                logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
            ),
            _warnings_as_lines(args.command),
        ):
            return args.func(args)
    # ImportError: an optional extra; NotImplementedError: a combination of settings not supported
    # FloatingPointError: a data-set generator's time stepping blew up (the message names the fix)
    # WorkersKilledError: a task ran its workers out of memory (the message says what to change)
    # NoWorkersError: the cluster has no workers to place a fit on (the message says what to check)
    # NoDeviceError: --device cuda where CuPy finds no GPU (the message says what to check)
    except (
        ValueError,
        TypeError,
        FileNotFoundError,
        ImportError,
        NotImplementedError,
        ClusterStartError,
        FloatingPointError,
        WorkersKilledError,
        NoWorkersError,
        NoDeviceError,
    ) as exc:
        print(f"rfol-dask {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = "; rerun the same command to resume" if args.command == "generate" else ""
        print(f"rfol-dask {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


def _exit_now(code):
    """Exit with ``code`` at once after an interrupt (SIGTERM, Ctrl-C), its clean-up done.

    The interpreter's own exit joins every non-daemon thread, and an interrupt, raised in the
    main thread wherever it was, can leave a thread pool's worker that no join ever ends: started
    but off concurrent.futures' exit list (an interrupt inside the pool's thread start), or
    waiting for a lock of the pool that the main thread held (a ``with`` block interrupted
    between acquiring the lock and entering). Nothing is left to do by then: the fit's clean-up
    (its feature cache, its cluster) ran as the exception unwound, and the logs and the standard
    streams are flushed here."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe
            pass
    os._exit(code)


def run(argv=None):
    """The ``rfol-dask`` command: :func:`main`, then exit with its code; after an interrupt at
    once (:func:`_exit_now`), so that the exit cannot hang."""
    try:
        code = main(argv)
    except SystemExit as exc:
        if exc.code == 128 + signal.SIGTERM:  # _terminate's; argparse's exits go on as they are
            _exit_now(exc.code)
        raise
    if code == 130:
        _exit_now(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
