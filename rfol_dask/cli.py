"""The ``rfol-dask`` command. It parses, calls the library and prints; the estimators validate.
Only the commands import numpy, dask, xarray and scikit-learn: ``--help`` answers at once."""

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import warnings
from importlib import resources
from pathlib import Path

from ._version import __version__

_log = logging.getLogger("rfol_dask.cli")  # a child of the package's logger

EPILOG = """examples:
  rfol-dask fit data.zarr --train 1000 --tune --out model.zarr   # law, gamma and alpha chosen
  rfol-dask fit data.nc --input u0 --output uT --sample-dim case --periods x=6.2832 --tune
  rfol-dask predict model.zarr data.zarr --samples 1000: --out predictions.zarr
  rfol-dask generate burgers --samples 1200 --out data.zarr      # a data set to try it on"""


def _count(text):
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _gamma(text):
    return text if text == "median" else float(text)


def _powers(text):  # --pca-power: numbers or none, comma-separated
    return [None if p.strip().lower() == "none" else float(p) for p in text.split(",")]


def _periods(text):  # --periods: one number, or DIM=NUMBER,... (a mapping dim -> period)
    pairs = (part.split("=", 1) for part in text.split(","))
    return {k.strip(): float(v) for k, v in pairs} if "=" in text else float(text)


def _param(text):  # --param KEY=VALUE, VALUE read as JSON where it is, else a string
    key, _, value = text.partition("=")
    with contextlib.suppress(json.JSONDecodeError):
        value = json.loads(value)
    return key.strip(), value


def _sample_range(text):  # START:STOP, either may be left out
    start, stop = (int(b) if b.strip() else None for b in text.split(":"))  # else argparse's error
    return slice(start, stop)


@contextlib.contextmanager
def _client(args, default=None):
    """A client of ``--cluster`` (else ``default``) or of a LocalCluster of ``--workers`` K, its
    dashboard link logged, closed after the block; None (dask's threads) without either."""
    from .cluster import close_client, dashboard_link, local_client, start_client

    cluster = args.cluster or (default if args.workers is None else None)  # argparse: not both
    if not cluster and args.workers is None:
        how = "--workers K or --cluster NAME: a cluster"
        _log.info(f"running on dask's threads in this process; {how}")
        yield None
        return
    client = start_client(cluster) if cluster else local_client(n_workers=args.workers)
    try:
        link = dashboard_link(client) or "none (needs bokeh: pip install 'rfol-dask[diagnostics]')"
        _log.info("dask dashboard: %s", link)
        yield client
    finally:
        close_client(client)


def _device(args):  # --device; by default cuda on a GPU cluster configuration, else cpu
    from .cluster import gpu_config

    return args.device or ("cuda" if args.cluster and gpu_config(args.cluster) else "cpu")


def _names(args, *which):  # the keywords which of the names (and periods) given
    return {k: v for k in which if (v := getattr(args, k, None)) is not None}


def _cmd_datasets(args):
    from . import datasets

    for name in datasets.names():
        spec = datasets.get(name)
        defaults = ", ".join(f"{k}={v!r}" for k, v in spec.defaults.items())
        print(f"{name:28s} {spec.description}\n{' ' * 29}{defaults}")
    return 0


def _cmd_generate(args):
    from . import datasets

    params = dict(args.param or [])  # a key given twice with two values: the last would win
    if twice := sorted(k for k, v in args.param or [] if params[k] != v):
        raise ValueError(f"--param {twice[0]} is given twice with two values: give it once")
    params.update(seed=args.seed, block_size=args.block_size, overwrite=args.overwrite)
    with _client(args) as client:
        t0 = time.perf_counter()
        params.update(store=args.out, client=client, progress=not args.quiet)
        ds = datasets.generate(args.name, args.samples, **params)
    print(f"{args.name}: {args.samples} samples in {args.out} ({time.perf_counter() - t0:.1f} s, "
          f"input {ds['input'].shape}, output {ds['output'].shape})")  # fmt: skip
    return 0


def _cmd_quickstart(args):
    from .experiments.quickstart import quickstart

    with _client(args) as client:
        return quickstart(args, client)


def _fit_model(args):
    given = dict(n_features=args.n_features, nu=args.nu, solver=args.solver, dtype=args.dtype)
    given.update(random_state=args.seed, progress=not args.quiet, device=_device(args))
    if not args.tune:
        if args.max_features is not None or len(args.pca_power or ()) > 1:
            raise ValueError("--max-features and a list of --pca-power are searched: add --tune")
        from .rf_operator import RandomFeatureOperator

        given.update(distribution=args.distribution, gamma=args.gamma, alpha=args.alpha)
        given["pca_power"] = args.pca_power and args.pca_power[0]
        return RandomFeatureOperator(**{k: v for k, v in given.items() if v is not None})
    if args.gamma is not None or args.alpha is not None:
        raise ValueError("--tune searches gamma and alpha: leave out --gamma and --alpha")
    from .rf_operator_cv import RandomFeatureOperatorCV

    laws = {"distributions": (args.distribution,)} if args.distribution else {}
    given.update(max_features=args.max_features, pca_power=args.pca_power and tuple(args.pca_power))
    return RandomFeatureOperatorCV(**laws, refit={"solver": given.pop("solver")}, **given)


def _cmd_fit(args):
    from distributed import performance_report

    from .io import open_dataset
    from .metrics import relative_l2_error
    from .persistence import check_model_path
    from .stores import zarr_parents

    if args.out:
        check_model_path(args.out)  # before the fit: never replace a data set or other files
    if args.report:  # an HTML file outside Zarr stores and --out, a new one or a report
        path = Path(os.path.abspath(args.report))
        in_out = args.out and Path(os.path.abspath(args.out)) in (path, *path.parents)
        if in_out or next(zarr_parents(path), None) or path.is_dir() or not path.parent.is_dir():
            raise ValueError(f"--report {path}: give an HTML file in an existing folder, outside "
                             "Zarr stores and --out")  # fmt: skip
        if path.exists() and "<title>Dask Perf" not in path.read_text(errors="replace")[:4096]:
            raise ValueError(f"--report {path} exists and is not a performance report: give a "
                             "new path")  # fmt: skip
    names = _names(args, "input", "output", "sample_dim", "periods")
    sample = names.get("sample_dim", "sample")
    ds = open_dataset(args.data, check=())  # fit checks the arrays it reads
    train, test = ds, None
    if args.train is not None:
        if args.train > ds.sizes.get(sample, args.train):
            raise ValueError(f"--train {args.train} is more than the samples of {args.data}")
        train, test = (ds.isel({sample: slice(*b)}) for b in ((0, args.train), (args.train, None)))
    model = _fit_model(args)
    report = performance_report(args.report) if args.report else contextlib.nullcontext()
    with _client(args, "local" if args.report else None), report:
        t0 = time.perf_counter()
        model.fit(train, **names)
        _print_fit(args, model, time.perf_counter() - t0)
        if args.out:  # before the test: a failure there keeps the model
            model.save(args.out)
            print(f"model: {args.out}")
        if test is not None and test.sizes[sample]:
            pred = model.predict(test, **_names(args, "input", "sample_dim"))
            truth = test[names.get("output", "output")]
            err = relative_l2_error(_samples_first(truth, sample), _samples_first(pred, sample))
            print(f"relative L2 error on the {test.sizes[sample]} remaining samples: {err:.4e}")
        else:
            print("no test: all samples trained (--train M tests on the samples after the first M)")
    return 0


def _samples_first(x, sample):  # the metrics pair samples along "sample"
    return x.rename({sample: "sample"}) if sample != "sample" and sample in x.dims else x


def _print_fit(args, model, seconds):
    if args.tune:
        best, n = model.best_params_, len(model.cv_results_["mean_test_score"])
        chosen = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in best.items() if v is not None)  # fmt: skip
        error = f"validation relative L2 error {-model.best_score_:.4e} (last 20 % of the training)"
        print(f"search: {n} candidates in {model.search_time_:.2f} s; best {chosen}; {error}")
        model = model.best_estimator_
    what = f"N={model.n_features} {model.distribution} features, gamma {model.gamma_:.4g}"
    print(f"fit: {what}, solver {model.solver_}: {seconds:.2f} s{' (search + refit)' * args.tune}")


def _cmd_predict(args):
    from .baselines import KernelOperator
    from .io import open_dataset, user_path
    from .persistence import load_model, restore_estimator
    from .predictions import check_prediction_path, write_predictions
    from .rf_operator import RandomFeatureOperator

    out = Path(os.path.abspath(user_path(args.out)))
    check_prediction_path(out)  # before any work: never replace a data set, a model or files
    arrays, attrs = load_model(user_path(args.model))  # restored as the class it records
    cls = KernelOperator if attrs.get("estimator") == "KernelOperator" else RandomFeatureOperator
    model = restore_estimator(cls, arrays, attrs, args.model, _device(args))
    names = _names(args, "input", "sample_dim")
    sample = names.get("sample_dim") or getattr(model, "sample_dim_", None) or "sample"
    output = args.output or getattr(model, "output_name_", None) or "output"
    ds = open_dataset(args.data, check=(output,))  # predict checks the input
    n, given = ds.sizes.get(sample, 0), args.samples != slice(None)
    start, stop = args.samples.start or 0, n if args.samples.stop is None else args.samples.stop
    if given and not start < stop <= n:
        raise ValueError(f"--samples {start}:{stop} is not a range of the {n} samples of "
                         f"{args.data}: give START < STOP <= {n}")  # fmt: skip
    chosen = ds.isel({sample: slice(start, stop)}) if given else ds
    truth, grid, model_dims = chosen.get(output), None, getattr(model, "output_dims_", None)
    dims = [] if truth is None else [d for d in truth.dims if d != sample]  # the store's grid
    if model_dims and set(dims) == set(model_dims) and all(d in ds.coords for d in dims):
        grid = {d: ds[d].sortby(d).values for d in dims}  # the predictions go on it
    where = f"samples {start}:{stop} of {args.data}"
    attrs = {"title": f"rfol-dask predict: {where}", "samples": [start, stop]}
    attrs.update(model=os.path.abspath(args.model), store=os.path.abspath(args.data))
    t0 = time.perf_counter()
    pred = model.predict(chosen, **names, output_grid=grid)  # lazy: it checks the data now
    if not model_dims and dims and truth.shape[1:] == pred.shape[1:]:
        # a model fitted on arrays predicts the store's grid by position: labelled as it
        pred = pred.rename(dict(zip(pred.dims[1:], dims, strict=True)))
        pred = pred.assign_coords({d: truth[d].values for d in dims if d in truth.coords})
    with _client(args) as client:
        write_predictions(pred, out, attrs, client, progress=not args.quiet)
    dt = time.perf_counter() - t0
    print(f"predictions: {where} in {args.out} ({dt:.1f} s, prediction {pred.shape})")
    _print_prediction_error(truth, out, sample)
    return 0


def _print_prediction_error(truth, out, sample):
    import xarray as xr  # the predictions read back: no second prediction

    from .metrics import relative_l2_error

    if truth is None:
        return print("no error: the store has no output to compare with")
    written = _samples_first(xr.open_zarr(out, consolidated=True)["prediction"], sample)
    truth = _samples_first(truth, sample)
    truth = truth.transpose(*written.dims) if set(truth.dims) == set(written.dims) else truth
    if truth.dims != written.dims or truth.shape != written.shape:
        sizes = [", ".join(f"{d}: {k}" for d, k in x.sizes.items()) for x in (truth, written)]
        return print(f"no error: the store's output ({sizes[0]}) is not on the predictions' grid "
                     f"({sizes[1]}); rename its dims to the model's to compare them")  # fmt: skip
    error = relative_l2_error(truth, written)
    print(f"relative L2 error on the {truth.shape[0]} predicted samples: {error:.4e}")


# fmt: off
def _cluster_options(workers=None):
    shipped = sorted(p.stem for p in resources.files(__package__).joinpath("clusters").iterdir())
    return (("--workers", dict(type=_count, default=workers, help="LocalCluster worker processes")),
            ("--cluster", dict(metavar="NAME|PATH", help=f"a YAML file or {', '.join(shipped)}")))


def _name_options(remembered=""):
    return (
        ("--input", dict(help=f"the input variable (default: 'input'{remembered})")),
        ("--output", dict(help=f"the output variable (default: 'output'{remembered})")),
        ("--sample-dim", dict(help=f"the dim of the samples (default: 'sample'{remembered})")),
        ("--device", dict(choices=["cpu", "cuda"], help="default: cuda on GPU clusters, else cpu")),
    )


FIT = (
    ("data", dict(help="a Zarr store or NetCDF file with input and output variables")),
    ("--train", dict(type=_count, help="train on the first M samples, test on the rest")),
    ("--tune", dict(action="store_true", help="choose the law, gamma and alpha (recommended)")),
    ("--n-features", dict(type=_count, default=1000, help="features N (default 1000)")),
    ("--max-features", dict(type=_count, help="--tune: grow N up to this many features")),
    ("--distribution", dict(metavar="LAW", help="cauchy (default), gaussian, student_t, ...")),
    ("--gamma", dict(type=_gamma, help="a number > 0, or 'median' (default)")),
    ("--nu", dict(type=float, help="the degrees of freedom of student_t")),
    ("--alpha", dict(type=float, help="the ridge (default 1e-10)")),
    ("--pca-power", dict(type=_powers, metavar="P[,P...]", help="input metric (--tune: a list)")),
    ("--periods", dict(type=_periods, metavar="P|DIM=P,...", help="periodic grid axes")),
    ("--solver", dict(choices=["auto", "dual", "primal"], default="auto")),
    ("--dtype", dict(choices=["float32", "float64"])),
    ("--seed", dict(type=int, default=0)),
    ("--report", dict(help="write dask's performance report (HTML) here")),
    ("--out", dict(help="save the model to this Zarr path")),
)


def build_parser():
    """The parser of ``rfol-dask`` and its commands."""
    raw = argparse.RawDescriptionHelpFormatter  # the examples as they are written
    parser = argparse.ArgumentParser(prog="rfol-dask", epilog=EPILOG, formatter_class=raw,
                                     description="Random-feature operator learning on Dask")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = [argparse.ArgumentParser(add_help=False)]  # -q and -v of every command
    group = common[0].add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", help="stderr: warnings and errors")
    group.add_argument("-v", "--verbose", action="store_true", help="stderr: debug messages too")

    def command(name, func, text, *options):  # options: (flags, keywords) pairs
        parsed = sub.add_parser(name, parents=common, help=text, description=text, epilog=EPILOG,
                                formatter_class=raw)
        one = options and parsed.add_mutually_exclusive_group()  # --workers or --cluster
        for flags, kwargs in options:
            where = one if flags in ("--workers", "--cluster") else parsed
            where.add_argument(*flags.split(), **kwargs)
        parsed.set_defaults(func=func)
        return parsed

    command("quickstart", _cmd_quickstart, "make a small data set, fit a tuned model, plot",
        ("--dataset", dict(default="advection1", help="data set (default advection1)")),
        ("--train", dict(type=_count, default=1000, help="training samples (default 1000)")),
        ("--test", dict(type=_count, default=1000, help="test samples (default 1000)")),
        ("--n-features", dict(type=_count, help="default: the paper's N for the data set")),
        ("--seed", dict(type=int, default=0, help="data and feature seed (default 0)")),
        ("--out", dict(default="quickstart_output", help="output folder (its data are reused)")),
        *_cluster_options(workers=2))
    command("datasets", _cmd_datasets, "list the data sets and their parameters")
    command("fit", _cmd_fit, "fit a model on a data set (Zarr or NetCDF)",
            *FIT, *_name_options(), *_cluster_options())
    command("predict", _cmd_predict, "predict the inputs of a data set; write them to Zarr",
        ("model", dict(help="a saved model (rfol-dask fit --out, or save in Python)")),
        ("data", dict(help="a Zarr store or NetCDF file (with an output: the error is shown)")),
        ("--out", dict(required=True, help="Zarr store to write (new, empty, or a prediction's)")),
        ("--samples", dict(type=_sample_range, default=slice(None), metavar="START:STOP")),
        *_name_options(", or the model's"), *_cluster_options())
    command("generate", _cmd_generate, "generate a data set into a Zarr store (resumable)",
        ("name", dict(help="data set (see rfol-dask datasets)")),
        ("--samples", dict(type=_count, required=True, help="number of samples")),
        ("--out", dict(required=True, help="Zarr store (an interrupted run resumes it)")),
        ("--seed", dict(type=int, default=0, help="data seed, >= 0 (default 0)")),
        ("--block-size", dict(type=_count, help="samples per task and chunk")),
        ("--param", dict(type=_param, action="append", metavar="KEY=VALUE", help="repeatable")),
        ("--overwrite", dict(action="store_true", help="replace a store of another data set")),
        *_cluster_options())
    from .experiments.reproduce import add_arguments, run_args

    r = sub.add_parser("reproduce", parents=common, help="the paper's tables beside baselines")
    add_arguments(r).set_defaults(func=run_args)
    return parser
# fmt: on


@contextlib.contextmanager
def _console(command, level):
    """For the block: the package's log messages on stderr as ``rfol-dask: <message>`` and its
    warnings as ``rfol-dask COMMAND: warning (Category): message`` (no file and line)."""
    logger, handler = logging.getLogger("rfol_dask"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("rfol-dask: %(message)s"))
    saved, seen = (logger.level, logger.propagate, warnings.formatwarning), set()

    def once(record):  # a link (the dashboard's) is shown once, whoever logs it
        links = {w for w in record.getMessage().split() if "://" in w}
        return (not links or not links <= seen, seen.update(links))[0]

    def formatwarning(message, category, filename, lineno, line=None):
        if category.__module__.startswith("rfol_dask"):
            return f"rfol-dask {command}: warning ({category.__name__}): {message}\n"
        return saved[2](message, category, filename, lineno, line)

    handler.addFilter(once)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate, warnings.formatwarning = False, formatwarning
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate, warnings.formatwarning = saved[1:]


def _as_options(message):
    """The library's naming hints (``fit(ds, input='u0', sample_dim='case')``) as options."""
    message = re.sub(r"fit\(ds, ((?:\w+='[^']*'(?:, )?)+)\)", r"\1", message)
    option = re.compile(r"\b(input|output|sample_dim)='([^']*)'(, )?")
    return option.sub(lambda m: f"--{m[1].replace('_', '-')} {m[2]}" + " " * bool(m[3]), message)


def main(argv=None):
    """Run ``argv``; returns 0, 2 after an error (one line, no traceback), 130 after Ctrl-C."""
    args = build_parser().parse_args(argv)
    from . import exceptions as e

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))  # runs clean-up
    errors = (ValueError, TypeError, OSError, ImportError, NotImplementedError, FloatingPointError)
    errors += (e.ClusterStartError, e.WorkersKilledError, e.NoWorkersError, e.NoDeviceError)
    hint = "; rerun the same command to resume" if args.command == "generate" else ""
    level = logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
    try:
        with _console(args.command, level):
            return args.func(args)
    except errors as exc:  # ImportError: a missing extra; FloatingPointError: a generator blew up
        more = hint if isinstance(exc, OSError) else ""  # a full disk: space, then resume
        print(f"rfol-dask {args.command}: error: {_as_options(str(exc))}{more}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rfol-dask {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


def run(argv=None):
    """The ``rfol-dask`` console script: :func:`main`, then exit with its code; after Ctrl-C or
    SIGTERM with ``os._exit`` (clean-up done), as an interrupted thread pool can leave a thread."""
    try:
        code = main(argv)
    except KeyboardInterrupt:  # a Ctrl-C before main's own handler is in place
        print("rfol-dask: interrupted", file=sys.stderr)
        code = 130
    except SystemExit as exc:  # _terminate's; argparse's exits go on as they are
        if exc.code != 128 + signal.SIGTERM:
            raise
        code = exc.code
    if code in (130, 128 + signal.SIGTERM):
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
                stream.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
