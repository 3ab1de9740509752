"""The reproduction driver: the paper's tables beside kernel and linear baselines on the same data.

Per data set: ``fits`` (RF Cauchy and Gaussian at the paper's settings; RBF, Matern 5/2 and linear
kernel ridge; ``RandomFeatureOperatorCV`` and ``KernelOperatorCV`` selected on the last 20 % of the
training split), ``equal_time`` (the paper's table 2) and ``curves`` (error and fit time vs N, the
paper's figure 8). Sizes: the ``[full]`` and ``[quick]`` tables of ``reference.toml``; a quick run
checks every error against its bound. Only the standard library is imported at module level, so
``rfol-dask`` builds its parser quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from .reference import PARTS, part_applies, reference_data, sizes


def _curve_figure(out):
    """``<out>/curves.png`` from the curves of every ``<out>/<name>.json`` present."""
    from ..plotting import plot_curves
    from .report import read_results

    files = [Path(out) / f"{n}.json" for n in reference_data()["curve_sets"]]
    plots = {f.stem: read_results(f).get("curves") for f in files if f.exists()}
    if plots := {n: c for n, c in plots.items() if c}:
        title = "Cauchy random features: error and fit time vs N"
        plot_curves(Path(out) / "curves.png", plots, title=title)


def _check_run(names, parts, out, data, quick):
    """The names and parts to run; ValueError before any work for unknown names or parts, a file
    for ``out`` or ``data``, files in ``out`` that reproduce did not write (never replaced), or
    results files of the other mode (quick or full: one file would hold two sizes)."""
    from .. import datasets
    from ..stores import check_parent_dir
    from .report import foreign_outputs, read_results

    if isinstance(names, str):
        names = reference_data()["sets"] if names == "all" else names.split(",")
    for name in names:
        datasets.get(name)  # unknown names fail before any work
    parts = parts.split(",") if isinstance(parts, str) else list(parts)
    if set(parts) - set(PARTS):
        raise ValueError(f"parts must be a subset of {PARTS}, got {parts}")
    skipped = [(n, p) for n in names for p in parts if not part_applies(n, p)]
    if len(skipped) == len(names) * len(parts):
        has = {k: ", ".join(reference_data()[f"{k}_sets"]) for k in ("equal_time", "curve")}
        msg = f"{' or '.join(parts)} for {', '.join(names)}"
        msg += f" (equal time: {has['equal_time']}; curves: {has['curve']})"
        raise ValueError(f"nothing to run: the paper has no {msg}")
    for n, p in skipped:
        print(f"{n}: no {p} in the paper; skipped")
    for folder, what in ((out, "the results"), (data, "the data sets")):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a folder for {what}; pick another path")
        check_parent_dir(folder, what)
    if foreign := foreign_outputs(out, names):
        raise ValueError(f"{out} holds files that reproduce did not write: {', '.join(foreign)}; "
                         "it would write over them: give --out another folder (or move them "
                         "away)")  # fmt: skip
    mode = {True: "quick (--quick)", False: "full"}
    for path in (Path(out) / f"{name}.json" for name in names):
        earlier = read_results(path).get("quick") if path.is_file() else None
        if earlier is not None and bool(earlier) != bool(quick):
            raise ValueError(f"{path} holds {mode[bool(earlier)]} results and this run is "
                             f"{mode[bool(quick)]}: give --out another folder (by default quick "
                             "runs write into <out>/quick), or move the file away")  # fmt: skip
    return names, parts


def reproduce(names="all", *, quick=False, out="reproduce_output", data=None, parts=PARTS,
              workers=2, grow_to=None) -> int:  # fmt: skip
    """Run ``parts`` of the reproduction on ``names`` (a list, a comma-separated string or "all"):
    ``<out>/<name>.json`` and ``.png`` written after each part, ``curves.png`` and ``table.md``;
    missing data generated into ``data`` (default ``<out>/data``) on ``workers`` processes (0:
    dask threads); ``grow_to``: the "RF tuned" row grows N up to this many features. Returns 0, or
    1 when a quick-mode error is over its bound."""
    import numpy as np

    from .data import SharedCluster
    from .report import render
    from .runners import run

    out, data = Path(out), Path(out) / "data" if data is None else Path(data)
    names, parts = _check_run(names, parts, out, data, quick)
    if grow_to is not None and int(grow_to) < 1:
        raise ValueError(f"grow_to must be a number of features >= 1, got {grow_to}")
    cluster = SharedCluster(workers)  # checks workers; starts nothing yet
    for folder in (out, data):
        folder.mkdir(parents=True, exist_ok=True)
    cfg, t0, results = dict(sizes(quick), grow_to=grow_to), time.perf_counter(), {}
    with np.errstate(all="ignore"):
        try:
            for name in names:
                results[name] = run(name, parts, cfg, out, data, quick, cluster)
        except BaseException:  # a failure or Ctrl-C: the table of the parts written so far
            with contextlib.suppress(Exception):  # the run's own error is the one to report
                _curve_figure(out)
                render(out)
            raise
        finally:
            cluster.close()
    _curve_figure(out)
    print("\n" + render(out))
    print(f"total {time.perf_counter() - t0:.1f} s; results in {out}")
    fits = {n: r.get("fits", {}).get("methods", {}) for n, r in results.items()}
    failed = [f"{n}/{k}" for n, f in fits.items() for k, m in f.items() if not m.get("passed", 1)]
    if failed:
        print(f"over the quick-mode bound: {', '.join(failed)}")
    return 1 if failed else 0


def add_arguments(parser, default_out="reproduce_output", default_data=None):
    """The reproduction's options (of ``rfol-dask reproduce`` and ``benchmarks/reproduce.py``)."""
    d, on, data_help = default_data, "store_true", default_data or f"{default_out}/data"
    grow = "grow the 'RF tuned' row's N up to N features while the validation error falls "
    grow += "(RandomFeatureOperatorCV(max_features=N)); default: the RF rows' N"
    for flag, text, kw in (
        ("name", "a data set, a comma-separated list, or 'all'", {}),
        ("--quick", "small sizes (CI); checks every error against a bound", {"action": on}),
        ("--out", f"results folder (default {default_out}, quick: .../quick)", {}),
        ("--data", f"data-set stores (default {data_help}, whatever --out)", dict(default=d)),
        ("--parts", f"comma-separated subset of {','.join(PARTS)}", dict(default=",".join(PARTS))),
        ("--workers", "processes generating missing data (0: threads)", dict(type=int, default=2)),
        ("--grow-to", grow, dict(type=int, metavar="N")),
    ):  # fmt: skip
        parser.add_argument(flag, help=text, **kw)
    parser.set_defaults(default_out=default_out)
    return parser


def run_args(args) -> int:
    """:func:`reproduce` with the options of :func:`add_arguments`: by default results in
    ``<default_out>`` (quick: ``.../quick``), data in ``<default_out>/data`` whatever ``--out``."""
    out = args.out or str(Path(args.default_out) / ("quick" if args.quick else ""))
    data = args.data or str(Path(args.default_out) / "data")
    return reproduce(args.name, quick=args.quick, out=out, data=data, parts=args.parts,
                     workers=args.workers, grow_to=args.grow_to)  # fmt: skip


def main(argv=None, default_out="reproduce_output", default_data=None) -> int:
    """Command-line entry point; ``benchmarks/reproduce.py`` passes its result folders."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    return run_args(add_arguments(parser, default_out, default_data).parse_args(argv))
