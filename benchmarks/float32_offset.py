"""float32 random features at a large common offset of the inputs: how far the float32 model's
predictions are from the float64 one's, and both test errors, by offset (in units of the inputs'
spread). Fields such as pressures in Pa or temperatures in K sit far from zero; the phase
``u @ Omega`` then holds ``c @ Omega`` for their mean ``c``, whose float32 rounding used to swamp
the part that varies. The models measure their inputs from a centre (``input_centre_``).

Smooth synthetic data: inputs of 5 sine modes on ``n`` points, outputs their derivative-like
cosine series plus a nonlinear term; 1000 training and 500 test samples.

    python benchmarks/float32_offset.py [--n 256] [--features 800] [--alpha 1e-4] [--out
    benchmarks/results/float32_offset.json]
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from rfol_dask import RandomFeatureOperator

OFFSETS = (0.0, 1e2, 1e3, 1e4, 1e5)


def smooth_data(M, n, m=32, seed=0):
    """Inputs (M, n) of 5 sine modes with decaying random amplitudes; outputs (M, m)."""
    rng = np.random.default_rng(seed)
    x, y, k = np.linspace(0, 1, n), np.linspace(0, 1, m), np.arange(1, 6)
    a = rng.standard_normal((M, k.size)) / k**2
    U = a @ np.sin(np.pi * np.outer(k, x))
    V = (a * k) @ np.cos(np.pi * np.outer(k, y)) + np.sin(2 * U[:, n // 3 : n // 3 + 1])
    return U, V


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--features", type=int, default=800)
    p.add_argument("--alpha", type=float, default=1e-4)
    p.add_argument("--distribution", default="cauchy")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    U, V = smooth_data(1500, args.n)
    (U0, V0), (U1, V1) = (U[:1000], V[:1000]), (U[1000:], V[1000:])
    spread = float(U0.std())
    rows = []
    print(
        f"{args.distribution}, n = {args.n}, N = {args.features}, alpha = {args.alpha:g}, spread "
        f"{spread:.3g}"
    )
    print("offset / spread | test error f64 | test error f32 | |P32 - P64| / |P64|")
    for off in OFFSETS:
        P = {}
        for dt in ("float64", "float32"):
            model = RandomFeatureOperator(
                n_features=args.features,
                distribution=args.distribution,
                alpha=args.alpha,
                dtype=dt,
                random_state=1,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                P[dt] = model.fit(U0 + off * spread, V0).predict(U1 + off * spread)
        row = {
            "offset_over_spread": off,
            "test_error_f64": rel(P["float64"], V1),
            "test_error_f32": rel(P["float32"], V1),
            "f32_vs_f64": rel(P["float32"], P["float64"]),
        }
        rows.append(row)
        print(
            f"{off:15.0e} | {row['test_error_f64']:.3e} | {row['test_error_f32']:.3e} | "
            f"{row['f32_vs_f64']:.2e}",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
