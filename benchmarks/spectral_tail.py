"""The generators' resolution check against the error it stands for.

For Burgers and Navier-Stokes at several viscosities and grids, the spectral tail of the solution
(``datasets.resolution.spectral_tail``: the share of the upper half of the kept modes) next to its
relative L2 error against the same samples solved on a finer grid (Burgers 8192 points,
Navier-Stokes 256 x 256 with 4 x the steps), both subsampled to the coarse grid. The generators
refuse a tail above ``MAX_TAIL``; this table is what that limit rests on.

    python benchmarks/spectral_tail.py [--samples 4] [--out benchmarks/results/spectral_tail.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from rfol_dask.datasets import burgers, grf, navier_stokes
from rfol_dask.datasets.registry import sample_rng
from rfol_dask.datasets.resolution import MAX_TAIL, spectral_tail

BURGERS = [(0.1, 100), (1e-3, 800), (3e-4, 1600)]  # (nu, n_steps)
BURGERS_GRIDS, BURGERS_FINE = (1024, 2048), 8192
NAVIER_STOKES = [
    (0.025, 10.0, 40),
    (1e-3, 10.0, 100),
    (1e-4, 10.0, 200),
    (1e-5, 50.0, 2000),
]  # (nu, T, n_steps)
NS_GRIDS, NS_FINE = (32, 64, 128), 256


def _error(coarse, fine):
    step = fine.shape[-1] // coarse.shape[-1]
    sub = fine[(Ellipsis,) + (slice(None, None, step),) * (fine.ndim - 1)]
    return float(np.linalg.norm(coarse - sub) / np.linalg.norm(sub))


def burgers_rows(n_samples):
    rows = []
    for nu, n_steps in BURGERS:

        def run(n):
            u0 = np.stack(
                [grf.burgers_initial(sample_rng(0, i), n, n_modes=511) for i in range(n_samples)]
            )
            return burgers.solve(u0, nu=nu, n_steps=n_steps)

        fine = run(BURGERS_FINE)
        for n in BURGERS_GRIDS:
            u = run(n)
            rows.append(
                {
                    "set": "burgers",
                    "nu": nu,
                    "T": 1.0,
                    "n_steps": n_steps,
                    "grid": n,
                    "tail": spectral_tail(u, n // 3, 1),
                    "error": _error(u, fine),
                    "fine_tail": spectral_tail(fine, BURGERS_FINE // 3, 1),
                }
            )
            print(rows[-1], flush=True)
    return rows


def navier_stokes_rows(n_samples):
    rows = []
    for nu, T, n_steps in NAVIER_STOKES:

        def run(n, steps):
            x = 2.0 * np.pi * np.arange(n) / n
            f = np.stack(
                [grf.periodic_forcing_2d(sample_rng(0, i), x, x) for i in range(n_samples)]
            )
            return navier_stokes.solve(
                navier_stokes.initial_vorticity(n), f, T=T, nu=nu, n_steps=steps
            )

        fine = run(NS_FINE, 4 * n_steps)
        for n in NS_GRIDS:
            w = run(n, n_steps)
            rows.append(
                {
                    "set": "navier_stokes",
                    "nu": nu,
                    "T": T,
                    "n_steps": n_steps,
                    "grid": n,
                    "tail": spectral_tail(w, (n - 1) // 3, 2),
                    "error": _error(w, fine),
                    "fine_tail": spectral_tail(fine, (NS_FINE - 1) // 3, 2),
                }
            )
            print(rows[-1], flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4, help="samples per case (default 4)")
    parser.add_argument(
        "--out", default="benchmarks/results/spectral_tail.json", help="results JSON"
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    rows = burgers_rows(args.samples) + navier_stokes_rows(args.samples)
    print(
        f"\n| set | nu | T | steps | grid | tail | refused (> {MAX_TAIL:g}) | error vs fine | "
        "fine grid's tail |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} | {r['nu']:g} | {r['T']:g} | {r['n_steps']} | {r['grid']} | "
            f"{r['tail']:.1e} | "
            f"{'yes' if r['tail'] > MAX_TAIL else 'no'} | {r['error']:.1e} | {r['fine_tail']:.1e} |"
        )
    with open(args.out, "w") as fh:
        json.dump(
            {
                "max_tail": MAX_TAIL,
                "samples": args.samples,
                "seconds": time.perf_counter() - t0,
                "rows": rows,
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main()
