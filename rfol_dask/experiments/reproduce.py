"""The reproduction driver: the paper's tables beside kernel and linear baselines on the same data.

For each data set (low and high variants separately):

- fits: RF Cauchy and RF Gaussian with the paper's (N, gamma, alpha); kernel ridge with the RBF and
  Matern 5/2 kernels (length scale: median heuristic on the training inputs; nugget chosen on a
  validation split of the training set); the linear baseline (ridge on the raw inputs, nugget chosen
  the same way); "RF tuned" (``RandomFeatureOperatorCV`` at the RF rows' N: law, gamma and alpha) and
  "kernel tuned" (``KernelOperatorCV``: kernel, length scale and nugget), both selected on the last
  20 % of the training split, never on the test set, and refitted on all of it. Relative test error, fit time, predict time and peak memory go to
  ``<out>/<name>.json``; a figure like the paper's to ``<out>/<name>.png``.
- equal time (the paper's table 2; Burgers and Navier-Stokes low): the kernels as above, each RF law
  with the N at which its fit takes about as long as the kernels' training.
- curves (the paper's figure 8; Burgers, Darcy, Navier-Stokes low): error and fit time vs N from one
  grow-by-blocks fit per seed (:mod:`rfol_dask.curves`), slopes.

Sizes: the ``[full]`` and ``[quick]`` tables of ``reference.toml``. Full: the paper's training sizes,
test sets capped at 2000 samples. Quick: 200 train / 100 test per data set (the first samples of the
same seed-0 data), N <= 2000, curves up to N = 2000 with 2 seeds, every error checked against its
bound in ``[quick.bounds]``.

Only the standard library is imported at module level, so ``rfol-dask`` builds its parser quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

from .reference import PARTS, part_applies, reference_data, sizes

__all__ = ["reproduce", "add_arguments", "run_args", "build_parser", "main"]


def _curve_figure(out):
    """``<out>/curves.png`` from the curves of every ``<out>/<name>.json`` present (this run's and earlier)."""
    from ..plotting import plot_curves
    from .report import read_results

    files = [Path(out) / f"{n}.json" for n in reference_data()["curve_sets"]]
    plots = {f.stem: read_results(f).get("curves") for f in files if f.exists()}
    plots = {n: c for n, c in plots.items() if c}
    if plots:
        plot_curves(
            Path(out) / "curves.png", plots, title="Cauchy random features: error and fit time vs N"
        )


def _check_modes(out, names, quick):
    """ValueError where ``<out>/<name>.json`` holds results of the other mode (quick or full): this
    run's parts would be merged into it beside them, one file of two sizes."""
    from .report import read_results

    for name in names:
        path = Path(out) / f"{name}.json"
        earlier = read_results(path).get("quick") if path.is_file() else None
        if earlier is not None and bool(earlier) != bool(quick):
            mode = {True: "quick (--quick)", False: "full"}
            raise ValueError(
                f"{path} holds {mode[bool(earlier)]} results and this run is {mode[bool(quick)]}: its "
                "parts would be merged into that file beside the others; give --out another folder "
                "(by default quick runs write into <out>/quick), or move the file away"
            )


def reproduce(
    names="all",
    *,
    quick=False,
    out="reproduce_output",
    data=None,
    parts=PARTS,
    workers=2,
    grow_to=None,
) -> int:
    """Run ``parts`` of the reproduction on ``names`` (a list, a comma-separated string or "all").

    ``grow_to``: the "RF tuned" row grows N from the RF rows' N up to this many features
    (``RandomFeatureOperatorCV(max_features=grow_to)``); None: it stays at their N.

    Writes ``<out>/<name>.json``, ``<name>.png``, ``curves.png`` and ``table.md``; data-set stores
    are read from (or generated into) ``data`` on a LocalCluster of ``workers`` processes (0: dask
    threads in this process). ``data`` defaults to ``<out>/data`` here; the command line
    (:func:`run_args`) passes ``reproduce_output/data`` (``benchmarks/reproduce.py``:
    ``benchmarks/results/data``) whatever ``--out``, so that its result folders share one copy.
    Returns 0, or 1 when a quick-mode error is over its bound. A run that fails or is interrupted keeps
    the parts it finished (each is written when done) and writes ``table.md`` and ``curves.png`` of
    them before it stops; a rerun computes every part again. Unknown names or parts raise
    ValueError before any work, and so does an ``out`` holding files it did not write
    (:func:`~rfol_dask.experiments.report.foreign_outputs`; it lists its own in
    ``<out>/.rfol-dask-reproduce.json``): those are never replaced; an ``<out>/<name>.json`` of the other
    mode (quick or full), into which this run would merge its parts, is refused too.
    """
    import numpy as np

    from .. import datasets
    from ..stores import check_parent_dir
    from .data import SharedCluster
    from .report import claim, foreign_outputs, render
    from .runners import run

    if isinstance(names, str):
        names = reference_data()["sets"] if names == "all" else names.split(",")
    for name in names:
        datasets.get(name)  # unknown names fail before any work
    parts = parts.split(",") if isinstance(parts, str) else list(parts)
    if set(parts) - set(PARTS):
        raise ValueError(f"parts must be a subset of {PARTS}, got {parts}")
    skipped = [(n, p) for n in names for p in parts if not part_applies(n, p)]
    if len(skipped) == len(names) * len(parts):
        raise ValueError(
            f"nothing to run: the paper has no {' or '.join(parts)} for {', '.join(names)} "
            f"(equal time: {', '.join(reference_data()['equal_time_sets'])}; "
            f"curves: {', '.join(reference_data()['curve_sets'])})"
        )
    for n, p in skipped:
        print(f"{n}: no {p} in the paper; skipped")
    if grow_to is not None and int(grow_to) < 1:
        raise ValueError(f"grow_to must be a number of features >= 1, got {grow_to}")
    cluster = SharedCluster(workers)  # checks workers; starts nothing yet
    out = Path(out)
    data = out / "data" if data is None else Path(data)
    for folder, what in ((out, "the results"), (data, "the data sets")):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a folder for {what}; pick another path")
        check_parent_dir(folder, what)
    foreign = foreign_outputs(out, data)
    if foreign:
        raise ValueError(
            f"{out} holds files that reproduce did not write: {', '.join(foreign[:5])}"
            + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            + "; it writes table.md, "
            "<name>.json, <name>.png and curves.png there and replaces only its own: give --out a new "
            "or empty folder (or one of its earlier results), or move those files away"
        )
    _check_modes(out, names, quick)
    out.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    claim(
        out,
        [f"{n}.{ext}" for n in names for ext in ("json", "png")]
        + ["curves.png", "table.md"]
        + ([data.name] if Path(os.path.abspath(data)).parent == Path(os.path.abspath(out)) else []),
    )
    cfg = dict(sizes(quick), grow_to=grow_to)
    t0 = time.perf_counter()
    results = {}
    with np.errstate(all="ignore"):
        try:
            for name in names:
                results[name] = run(name, parts, cfg, out, data, quick, cluster)
        except (
            BaseException
        ):  # a failure or Ctrl-C: the parts written so far are kept (run writes each)
            with contextlib.suppress(Exception):  # the run's own error is the one to report
                _curve_figure(out)
                render(
                    out
                )  # so table.md and curves.png show the results files as they stand, not the last run's
            raise
        finally:
            cluster.close()
    _curve_figure(out)
    print("\n" + render(out))
    print(f"total {time.perf_counter() - t0:.1f} s; results in {out}")
    failed = [
        f"{name}/{k}"
        for name, res in results.items()
        for k, m in res.get("fits", {}).get("methods", {}).items()
        if not m.get("passed", True)
    ]
    if failed:
        print(f"over the quick-mode bound: {', '.join(failed)}")
        return 1
    return 0


def add_arguments(
    parser: argparse.ArgumentParser, default_out="reproduce_output", default_data=None
):
    """The reproduction's options (shared by ``rfol-dask reproduce`` and ``benchmarks/reproduce.py``)."""
    data_help = f"{default_out}/data" if default_data is None else default_data
    parser.add_argument("name", help="a data set, a comma-separated list, or 'all'")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (CI); checks every error against a bound"
    )
    parser.add_argument(
        "--out", default=None, help=f"results folder (default {default_out}, quick: .../quick)"
    )
    parser.add_argument(
        "--data",
        default=default_data,
        help=f"data-set stores (default {data_help}, whatever --out)",
    )
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="processes generating missing data (0: threads)"
    )
    parser.add_argument(
        "--grow-to",
        type=int,
        default=None,
        metavar="N",
        help="grow the 'RF tuned' row's N up to N features while the validation error falls "
        "(RandomFeatureOperatorCV(max_features=N)); default: the RF rows' N",
    )
    parser.set_defaults(default_out=default_out)
    return parser


def run_args(args) -> int:
    """:func:`reproduce` with the options of :func:`add_arguments`: by default results in
    ``<default_out>`` (quick: ``<default_out>/quick``) and data in ``<default_out>/data``, whatever ``--out``."""
    out = args.out or str(Path(args.default_out) / ("quick" if args.quick else ""))
    data = args.data or str(Path(args.default_out) / "data")
    return reproduce(
        args.name,
        quick=args.quick,
        out=out,
        data=data,
        parts=args.parts,
        workers=args.workers,
        grow_to=args.grow_to,
    )


def build_parser(default_out="reproduce_output", default_data=None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return add_arguments(parser, default_out, default_data)


def main(argv=None, default_out="reproduce_output", default_data=None) -> int:
    """Command-line entry point; ``benchmarks/reproduce.py`` passes the source tree's result folders."""
    return run_args(build_parser(default_out, default_data).parse_args(argv))
