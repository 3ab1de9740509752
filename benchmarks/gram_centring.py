"""Time the step between the dual Gram and its Cholesky factorisation, before and after the
tenth session's change (issue 13's "CPU figures unchanged").

Before: the centring ``H K H`` in three passes over ``K`` (subtract the row means, the column
means, add the grand mean: symmetric only to rounding), then the upper triangle mirrored into
the lower one before the first factorisation attempt (:func:`rfol_dask.linalg.symmetrize`).
After: :func:`rfol_dask.backend.centre_gram`, one pass that keeps ``K`` exactly symmetric, and
no mirror before the first attempt. Medians of ``--repeats`` runs on a fresh copy of ``K``.

    OPENBLAS_NUM_THREADS=2 python benchmarks/gram_centring.py --sizes 2000,5000,10000
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from threadpoolctl import threadpool_info

from rfol_dask.backend import centre_gram
from rfol_dask.linalg import symmetrize


def before(K):
    M = K.shape[0]
    r = K.sum(axis=1)
    K -= (r / M)[:, None]
    K -= (r / M)[None, :]
    K += r.sum() / M**2
    symmetrize(K, "upper")


def after(K):
    M = K.shape[0]
    r = K.sum(axis=1)
    centre_gram(K, r / M, r.sum() / M**2)


def timed(step, K0, repeats):
    times = []
    for _ in range(repeats):
        K = K0.copy(order="F")
        t = time.perf_counter()
        step(K)
        times.append(time.perf_counter() - t)
    return float(np.median(times)), K


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000,5000,10000")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    blas = [(i["internal_api"], i.get("architecture"), i["num_threads"]) for i in threadpool_info()]
    print(f"machine: {platform.machine()}, blas {blas}")
    rows = []
    for M in map(int, args.sizes.split(",")):
        A = np.random.default_rng(0).standard_normal((M, 64))
        K0 = np.asfortranarray(A @ A.T)
        t_before, Kb = timed(before, K0, args.repeats)
        t_after, Ka = timed(after, K0, args.repeats)
        H = np.abs(Ka - Kb).max() / np.abs(Kb).max()
        rows.append(
            {
                "M": M,
                "before_s": t_before,
                "after_s": t_after,
                "max_rel_diff": float(H),
                "after_exactly_symmetric": bool(np.array_equal(Ka, Ka.T)),
            }
        )
        print(
            f"M = {M:6d}: before {t_before * 1e3:7.1f} ms, after {t_after * 1e3:7.1f} ms "
            f"({t_after / t_before:.2f} x); results differ by {H:.1e}, after exactly symmetric: "
            f"{rows[-1]['after_exactly_symmetric']}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"blas": blas, "rows": rows}, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
