"""Scaling study: strong scaling over workers, an N sweep and an M sweep, with the time of each
phase of the fit (features, Gram, factorisation, solves, coefficients) read from dask's task
stream, plus prediction. The same script runs unchanged on a larger cluster (--cluster).

    python benchmarks/scaling.py                              # LocalCluster, 1 and 2 workers
    python benchmarks/scaling.py --cluster slurm --workers 4,8,16

Phase columns: ``busy`` = summed task time of the phase over all workers, ``span`` = first start
to last end of its tasks (phases overlap). Results: results/scaling.json (--quick:
results/scaling_quick.json), rewritten after each row, so an interrupted run keeps the rows it
finished; the file records the settings of the fits and the cluster beside the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import dask.array as da
from dask.utils import key_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import blas_info, dual_flops, matmul_rate, primal_flops, synthetic_operator  # noqa: E402

from rfol_dask import RandomFeatureOperator  # noqa: E402
from rfol_dask.cluster import local_client, start_client  # noqa: E402

#: the fit's tasks by name (``dask.utils.key_split`` of their keys) and the phase they belong to
PHASES = {
    "features": "features",
    "features-again": "features",
    "block_means": "features",
    "stack-inputs": "features",
    "gram-tile": "gram",
    "gram-place": "gram",
    "primal-partial": "features+gram",
    "add_partials": "gram",
    "gram-slab": "features+gram",
    "symmetrize": "gram",
    "after_v_check": "features",
    "like": "solve",
    "colsum": "solve",
    "dual-factor": "factor",
    "primal-factor": "factor",
    "dual-solve": "solve",
    "primal-solve": "solve",
    "column_slab": "solve",
    "cross_block": "coef",
    "iadd": "coef",
    "rows": "coef",
    "coef-slab": "coef",
    "coef_part": "coef",
}


def phase_times(stream):
    busy, first, last = defaultdict(float), {}, {}
    for task in stream:
        phase = PHASES.get(key_split(task["key"]), "other")
        for ss in task["startstops"]:
            if ss["action"] == "compute":
                busy[phase] += ss["stop"] - ss["start"]
                first[phase] = min(first.get(phase, ss["start"]), ss["start"])
                last[phase] = max(last.get(phase, ss["stop"]), ss["stop"])
    return {p: {"busy_s": busy[p], "span_s": last[p] - first[p]} for p in busy}


#: the model of every row (``gamma`` times ``1 / n``), recorded in the results
MODEL = {"distribution": "cauchy", "gamma_times_n": 2.0, "alpha": 1e-4, "random_state": 0}
REPEATS = 2


def run(client, M, n, N, m, chunk, repeats=REPEATS):
    from distributed import get_task_stream

    U, V = synthetic_operator(M, n, seed=0)
    Ud = da.from_array(U, chunks=(chunk, -1)).persist()
    Vd = da.from_array(V, chunks=(chunk, -1)).persist()
    model = RandomFeatureOperator(
        n_features=N,
        distribution=MODEL["distribution"],
        gamma=MODEL["gamma_times_n"] / n,
        alpha=MODEL["alpha"],
        random_state=MODEL["random_state"],
    )
    times = []
    for _ in range(repeats):
        with get_task_stream(client=client) as ts:
            t0 = time.perf_counter()
            model.fit(Ud, Vd)
            times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    model.predict(Ud).compute()
    predict_s = time.perf_counter() - t0
    flops = (dual_flops if model.solver_ == "dual" else primal_flops)(M, n, N, m)
    return {
        "M": M,
        "n": n,
        "N": N,
        "m": m,
        "chunk": chunk,
        "solver": model.solver_,
        "fit_s": min(times),
        "flops": flops,
        "predict_s": predict_s,
        "phases": phase_times(ts.data),
    }


def write(path, results):
    """``results`` to the JSON file ``path``, atomically (a temporary file renamed over it)."""
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workers",
        default="1,2",
        help="comma-separated worker counts of the strong-scaling rows "
        "(the sweeps run at the largest)",
    )
    p.add_argument("--cluster", default=None, help="cluster configuration (default: LocalCluster)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    p.add_argument(
        "--out",
        default=None,
        help="results JSON (default results/scaling.json, --quick: results/scaling_quick.json)",
    )
    args = p.parse_args(argv)
    results_dir = Path(__file__).resolve().parent / "results"
    out = Path(args.out or results_dir / ("scaling_quick.json" if args.quick else "scaling.json"))
    n = m = 256
    strong = [(4000, 4000)]
    n_sweep = [(3000, N) for N in (3000, 6000, 12000)]
    m_sweep = [(M, 2000) for M in (4000, 8000, 16000)]
    if args.quick:
        strong, n_sweep, m_sweep = [(600, 800)], [(400, 500)], [(1000, 200)]
    rate = matmul_rate()
    rows = []
    results = {
        "matmul_gflops": rate / 1e9,
        "settings": {
            "model": MODEL,
            "repeats": REPEATS,
            "n": n,
            "m": m,
            "data": "synthetic_operator(M, n, seed=0)",
            "chunk": "max(250, M // 8)",
            "cluster": args.cluster or "LocalCluster",
            "workers": args.workers,
            "quick": args.quick,
            "blas": blas_info(),
        },
        "rows": rows,
    }
    for workers in [int(w) for w in args.workers.split(",")]:
        client = start_client(args.cluster) if args.cluster else local_client(n_workers=workers)
        if args.cluster:
            client.cluster.scale(workers)
            client.wait_for_workers(workers)
        try:
            for study, cases in (("strong", strong), ("N sweep", n_sweep), ("M sweep", m_sweep)):
                if study != "strong" and workers != max(int(w) for w in args.workers.split(",")):
                    continue
                for M, N in cases:
                    row = run(client, M, n, N, m, chunk=max(250, M // 8))
                    row.update(
                        study=study,
                        workers=workers,
                        threads=sorted(client.nthreads().values()),
                        flop_bound_s=row["flops"] / rate,
                    )
                    rows.append(row)
                    write(out, results)
                    ph = " ".join(
                        f"{k}={v['busy_s']:.2f}/{v['span_s']:.2f}"
                        for k, v in sorted(row["phases"].items())
                    )
                    print(
                        f"{study:8s} workers={workers} M={M:6d} N={N:6d} {row['solver']:6s} fit "
                        f"{row['fit_s']:6.2f} s "
                        f"(bound {row['flop_bound_s']:.2f}) predict {row['predict_s']:.2f} s | "
                        f"busy/span: {ph}",
                        flush=True,
                    )
        finally:
            client.close()
            client.cluster.close()
    write(out, results)


if __name__ == "__main__":
    main()
