"""Samples per second of each data-set generator, end to end (dask job into a Zarr store).

Each generator runs as `rfol_dask.datasets.generate(..., store=...)` on a LocalCluster of
--workers worker processes x 1 thread (BLAS 1 thread each, distributed's default), blocks of
--block-size samples, after one warm-up block per worker (which pays the one-off set-up such as
the elasticity factorisation; its time is reported separately).

    python benchmarks/generate_speed.py                       # all generators
    python benchmarks/generate_speed.py --names burgers,darcy
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from rfol_dask import datasets
from rfol_dask.cluster import local_client

# (samples timed, issue target in samples/s)
PLAN = {
    "advection1": (20000, None),
    "advection2": (20000, None),
    "advection3": (20000, None),
    "burgers": (2000, 20),
    "darcy": (60, 1),
    "helmholtz_high": (600, 10),
    "helmholtz_low": (600, 10),
    "structural_mechanics_high": (4000, 10),
    "structural_mechanics_low": (4000, 10),
    "navier_stokes_high": (600, 5),
    "navier_stokes_low": (600, 5),
}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--names", default=",".join(PLAN))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the sample counts")
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "results" / "generate_speed.json")
    )
    args = parser.parse_args(argv)
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="rfol-gen-"))
    try:
        with local_client(n_workers=args.workers) as client:
            for name in args.names.split(","):
                n, target = PLAN[name]
                n = max(args.workers * 2, int(n * args.scale))
                block = max(1, n // (8 * args.workers))
                t0 = time.perf_counter()  # warm-up: one block per worker pays the set-up
                datasets.generate(
                    name, block * args.workers, store=tmp / f"{name}-warm.zarr", block_size=block
                )
                setup = time.perf_counter() - t0
                t0 = time.perf_counter()
                datasets.generate(name, n, store=tmp / f"{name}.zarr", seed=1, block_size=block)
                dt = time.perf_counter() - t0
                rate = n / dt
                ok = "" if target is None else ("meets" if rate >= target else "MISSES")
                print(
                    f"{name:28s} {n:6d} samples {dt:7.1f} s  {rate:8.1f} samples/s  "
                    f"(warm-up incl. set-up {setup:5.1f} s)  target {target or '-'} {ok}",
                    flush=True,
                )
                rows.append(
                    {
                        "name": name,
                        "samples": n,
                        "block_size": block,
                        "seconds": dt,
                        "samples_per_s": rate,
                        "warmup_s": setup,
                        "target": target,
                    }
                )
            client.cluster.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"workers": args.workers, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
