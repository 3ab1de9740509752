"""Markdown tables of the reproduction results (``<out>/<name>.json`` -> ``<out>/table.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .reference import METHODS, PARTS, TUNED, reference_data

_TABLE_HEADS = ("| data set |", "| equal time |", "| curve (Cauchy) |")  # a table.md's first line


def fmt_error(x, pct=True, missing="-"):
    """``x`` in percent (or plain) to 3 digits; ``missing`` for None / NaN (a measured error
    passes ``"nan"``: never read as a figure the paper lacks)."""
    if x is None or not np.isfinite(x):
        return missing
    return f"{100 * x:.3g}" if pct else f"{x:.3g}"


def write_results(path, results):
    """Write ``results`` to the JSON file ``path`` atomically, non-finite floats as ``null``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    safe = json.loads(json.dumps(results), parse_constant=lambda _: None)  # NaN, Infinity: null
    tmp.write_text(json.dumps(safe, indent=1, allow_nan=False))
    tmp.replace(path)


def read_results(path):
    """The results in the JSON file ``path``; ValueError naming the file when it is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); delete it and run again") from exc


def _is_results(path):
    """Whether ``path`` is a results file of :func:`write_results`: a JSON object holding a part."""
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    ours = isinstance(res, dict) and bool(set(PARTS) & set(res))
    return ours and res.get("name", path.stem) == path.stem


def foreign_outputs(out, names=None):
    """The files in ``out`` that a run of ``names`` (default all) would write over and that
    reproduce did not write (results files, their figures, ``curves.png``, ``table.md``)."""
    out, sets = Path(out), reference_data()["sets"]
    results = [n for n in sets if _is_results(out / f"{n}.json")]
    own = {f"{n}.{ext}" for n in results for ext in ("json", "png")}
    own |= {"curves.png"} if results else set()
    table = out / "table.md"
    if table.is_file() and table.read_text(errors="replace").startswith(_TABLE_HEADS):
        own.add("table.md")
    written = [f"{n}.{ext}" for n in names or sets for ext in ("json", "png")]
    written += ["curves.png", "table.md"]
    return sorted(f for f in written if (out / f).exists() and f not in own)


def _slope(x, digits=3):
    """A fitted slope, or "-" where there is none (too few points, NaN: ``None`` in JSON)."""
    return "-" if x is None or not np.isfinite(x) else f"{x:+.{digits}f}"


def fits_table(results: dict) -> list[str]:
    """Rows of the fits table: one per data set and method; a quick run's ``bound %`` and a full
    run's error / paper ``ratio`` columns where some row has them (a folder may hold both)."""
    fits = {name: r for name, r in results.items() if "fits" in r}
    kinds = [k for k in (True, False) if k in {bool(r["quick"]) for r in fits.values()}]
    heads = " | ".join({True: "bound %", False: "ratio"}[k] for k in kinds)
    head = f"| data set | train / test | method | error % | paper % | {heads} | fit s | predict s "
    lines = [head + "| peak MiB |", "|---|---|---|---|---|" + "---|" * len(kinds) + "---|---|---|"]
    for name, r in fits.items():
        size = f"{r['train']} / {r['test']}"
        if r["paper_test"] != r["test"] and not r["quick"]:
            size += f" (paper {r['paper_test']})"
        for label in (k for k in METHODS if k in r["fits"]["methods"]):
            m = r["fits"]["methods"][label]
            col = fmt_error(m.get("bound"))  # full runs: the ratio; None is a NaN in strict JSON
            if not r["quick"]:
                ratio = None if None in (m["error"], m["paper"]) else m["error"] / m["paper"]
                col = "-" if m["paper"] is None else fmt_error(ratio, pct=False, missing="nan")
            cols = " | ".join(col if k == bool(r["quick"]) else "-" for k in kinds)
            error = fmt_error(m["error"], missing="nan")
            error += "" if m.get("passed", True) else " **over bound**"
            times = f"{m['fit_s']:.3g} | {m['predict_s']:.3g} | {m['peak_mib']:.0f}"
            paper = fmt_error(m["paper"])
            lines.append(f"| {name} | {size} | {label} | {error} | {paper} | {cols} | {times} |")
    return lines


def tuned_note(results: dict) -> list[str]:
    """The lines under the fits table: how the tuned rows were selected and what they chose."""
    from ..baselines.kernel_cv import DEFAULT_LENGTH_SCALES
    from ..rf_operator_cv import DEFAULT_LAWS
    from ..selection import DEFAULT_ALPHAS, DEFAULT_GAMMAS

    chosen, grown = [], set()
    for name, r in results.items():
        methods = r.get("fits", {}).get("methods", {})
        for label in (k for k in TUNED if k in methods):
            m = methods[label]
            p, grown = m["best_params"], grown | {m.get("grow_to")}
            scale = p.get("gamma", p.get("length_scale"))
            chosen.append(f"{name} {label}: {p.get('distribution', p.get('kernel'))}"
                          + ("" if scale is None else f", scale {scale:.3g}")
                          + f", ridge {p.get('alpha', p.get('nugget')):.0e}"
                          + (f", N {p['n_features']}" if "n_features" in p else "")
                          + f", validation {fmt_error(m['validation_error'])} %")  # fmt: skip
    if not chosen:
        return []
    span = {g: f"{min(grid):.3g}..{max(grid):.3g}" for g, grid in (("gamma", DEFAULT_GAMMAS),
            ("alpha", DEFAULT_ALPHAS), ("scale", DEFAULT_LENGTH_SCALES))}  # fmt: skip
    grown = ", ".join(str(g) for g in sorted(grown - {None}))
    grown = grown and f", then N grown up to {grown} features while the validation error falls"
    grown = grown and f"{grown} (its N is not the paper's)"
    return [
        f"rf_tuned: RandomFeatureOperatorCV ({', '.join(DEFAULT_LAWS)}; gamma {span['gamma']} x "
        f"the median heuristic, alpha {span['alpha']}) at the N of the RF rows{grown}"
        f"; kernel_tuned: KernelOperatorCV (RBF, Matern 5/2, inverse quadratic, length scale "
        f"{span['scale']} x the median, nugget {span['alpha']}). Both are selected on the last "
        "20 % of the TRAINING split (never the test set) and refitted on all of it; their fit "
        "time includes the search. Their paper % is the better published figure of their kind "
        "(RF; RBF / Matern 5/2). Chosen: " + "; ".join(chosen) + "."
    ]


def equal_time_table(results: dict) -> list[str]:
    """Rows of the equal-time table (the paper's table 2)."""
    head = "| equal time | train / test | method | N | error % | train s | paper error % |"
    lines = [head + " paper s |", "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        e = r["equal_time"]
        for label in ("rbf", "matern52", "rf_cauchy", "rf_gaussian"):
            m = e["methods"][label]
            p, size = m["paper"] or (None, None), f"{e['train']} / {e['test']}"
            lines.append(f"| {name} | {size} | {label} | {m.get('n_features', '-')} | "
                         f"{fmt_error(m['error'], missing='nan')} | {m['train_s']:.3g} | "
                         f"{fmt_error(p[0])} | {p[1] or '-'} |")  # fmt: skip
    return lines


def curves_table(results: dict) -> list[str]:
    """Rows of the curves table: slopes, saturation and the floor fit past N = 2M."""
    lines = ["| curve (Cauchy) | train / test | N | seeds | error slope | points fitted | "]
    lines[0] += "saturated at N | fit-time slope | N >= 2M: floor + c N^-p, p | floor % |"
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        c = r["curves"]
        s, ex = c["slope"], c.get("excess", {})
        sat = "-" if s["saturated_at"] is None else int(s["saturated_at"])
        floor = f"{fmt_error(ex.get('p'), pct=False)} | {fmt_error(ex.get('floor'))}"
        n, time_slope = c["n_features"], _slope(c["time_slope"]["slope"], 2)
        size, slope = f"{c['train']} / {c['test']}", f"{_slope(s['slope'])} | {s['n_points']}"
        row = f"{n[0]}-{n[-1]} | {len(c['seeds'])} | {slope} | {sat} | {time_slope} | {floor}"
        lines.append(f"| {name} | {size} | {row} |")
    return lines


def render(out, names=None) -> str:
    """The markdown tables of every ``<out>/<name>.json`` present (of ``names``, default all):
    fits and the note on its tuned rows, equal time, curves; also written to ``<out>/table.md``."""
    out = Path(out)
    names = reference_data()["sets"] if names is None else names
    results = {n: read_results(out / f"{n}.json") for n in names if (out / f"{n}.json").exists()}
    tables = []
    if any("fits" in r for r in results.values()):
        tables += [fits_table(results)] + ([note] if (note := tuned_note(results)) else [])
    for part, table in (("equal_time", equal_time_table), ("curves", curves_table)):
        if subset := {n: r for n, r in results.items() if part in r}:
            tables.append(table(subset))
    text = "\n\n".join("\n".join(t) for t in tables) + "\n"
    (out / "table.md").write_text(text)
    return text
