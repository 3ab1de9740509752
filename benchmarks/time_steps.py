"""Do the generators need a time-step check? The error of stable but coarse ``n_steps``.

Burgers and Navier-Stokes step in time with ETDRK4 (fourth order) and refuse a run that blows up
(Burgers, Navier-Stokes) or ends above a CFL number of 2 (Navier-Stokes). This table asks what
error those checks leave: for each setting and ``n_steps``, the relative L2 error of ``u(., T)``
against the same samples with 4 x the largest count tried (the spatial grid
unchanged, so the error is the time-stepping error alone), the step-doubling estimate of
``datasets.resolution.step_error`` on the first sample, and what ``make_block`` says with all its
checks (the time-step check included: ``datasets.resolution.check_time_steps``).

    python benchmarks/time_steps.py [--samples 4] [--out benchmarks/results/time_steps.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from rfol_dask.datasets import burgers, navier_stokes
from rfol_dask.datasets.resolution import step_error

#: (data set, its module, parameters, the step counts tried)
CASES = [
    ("burgers", burgers, dict(nu=0.1), (1, 3, 5, 10, 25, 50, 100)),
    ("burgers", burgers, dict(nu=0.01), (3, 5, 8, 12, 20, 30, 50, 100, 200)),
    ("burgers", burgers, dict(nu=0.001), (150, 160, 170, 200, 400, 800)),
    ("navier_stokes", navier_stokes, dict(), (10, 12, 15, 20, 40, 80)),
    ("navier_stokes", navier_stokes, dict(nu=1e-3, T=10.0), (30, 40, 50, 100, 200)),
]


def _unchecked(module, n_samples, n, params):
    """``u(., T)`` of the first samples with every check of make_block but the time-step one."""
    real = module.check_time_steps
    module.check_time_steps = lambda *a, **k: None
    try:
        return np.asarray(module.make_block(0, 0, n_samples, n_steps=n, **params)[1])
    except (ValueError, FloatingPointError) as exc:
        return str(exc).split(";")[0].split(":")[0]
    finally:
        module.check_time_steps = real


def _verdict(module, n, params):
    try:
        module.make_block(0, 0, 1, n_steps=n, **params)
        return "accepted"
    except (ValueError, FloatingPointError) as exc:
        return str(exc).split(";")[0].split(":")[0].split(" (")[0]


def run_case(module, params, counts, n_samples):
    outputs = {n: _unchecked(module, n_samples, n, params) for n in counts}
    stable = [n for n in counts if not isinstance(outputs[n], str)]
    if not stable:
        return [{"n_steps": n, "verdict": _verdict(module, n, params)} for n in counts]
    ref_steps = 4 * max(counts)
    ref = _unchecked(module, n_samples, ref_steps, params)
    rows = []
    for n in counts:
        out, row = (
            outputs[n],
            {"n_steps": n, "reference_steps": ref_steps, "verdict": _verdict(module, n, params)},
        )
        if not isinstance(out, str):
            row["error"] = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
            doubled = outputs.get(2 * n)
            doubled = _unchecked(module, 1, 2 * n, params) if doubled is None else doubled
            row["estimate"] = (
                step_error(out[0], doubled[0]) if not isinstance(doubled, str) else None
            )
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--out", default="benchmarks/results/time_steps.json")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    results = []
    print(
        "| data set | parameters | n_steps | error | estimate | make_block "
        "|\n|---|---|---|---|---|---|"
    )
    for name, module, params, counts in CASES:
        rows = run_case(module, params, counts, args.samples)
        results.append({"dataset": name, "params": params, "rows": rows})
        for r in rows:
            err = f"{r['error']:.1e}" if "error" in r else "-"
            est = f"{r['estimate']:.1e}" if r.get("estimate") is not None else "-"
            print(
                f"| {name} | {json.dumps(params)} | {r['n_steps']} | {err} | {est} | "
                f"{r['verdict']} |",
                flush=True,
            )
    with open(args.out, "w") as f:
        json.dump(
            {"samples": args.samples, "seconds": time.perf_counter() - start, "cases": results},
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
