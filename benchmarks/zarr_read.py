"""How the Zarr codec of a data set's fields costs its reads (why rfol_dask stores them raw).

    python benchmarks/zarr_read.py [STORE] [--samples 20000] [--out results/zarr_read.json]

STORE is an rfol_dask data set (``input`` and ``output`` arrays, samples first); default the
Navier-Stokes high store of ``tuning.py --ns-high`` if it is there, else synthetic smooth
64 x 64 fields (``gpu.synthetic_fields``). The first ``--samples`` rows of each array are
written again with each codec, in chunks of 2000 rows (as the GPU benchmark's store), and read
back as a dask array on dask's threaded scheduler with every core (``.sum()``, the median of 5
reads; the files are in the page cache, so this is the decoding and copying, not the disk).
Reported per array and codec: the stored bytes over the raw bytes, the write and read seconds,
and the read over the uncompressed read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NS_HIGH = HERE / "results" / "data" / "navier_stokes_high_22000.zarr"


def codecs():
    from zarr.codecs import BloscCodec

    return {
        "none": None,
        "zstd (zarr default)": "auto",
        "blosc lz4 shuffle": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
        "blosc lz4 bitshuffle": BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),
        "blosc zstd-1 shuffle": BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"),
    }


def fields(store, samples):
    """``{name: (samples, points) float64}`` of the store's input and output, or synthetic ones."""
    if store is not None:
        import zarr

        group = zarr.open_group(str(store), mode="r")
        return {
            k: np.asarray(group[k][:samples]).reshape(samples, -1) for k in ("input", "output")
        }, str(store)
    from gpu import synthetic_fields

    U, V = synthetic_fields(samples, 64)
    return {"input": U, "output": V}, "synthetic 64 x 64 fields (gpu.synthetic_fields)"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", nargs="?", default=str(NS_HIGH) if NS_HIGH.exists() else None)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results" / "zarr_read.json"))
    args = parser.parse_args(argv)

    import dask
    import dask.array as da
    import zarr

    data, source = fields(args.store, args.samples)
    report = {
        "source": source,
        "samples": args.samples,
        "chunk_rows": 2000,
        "cores": os.cpu_count(),
        "zarr": zarr.__version__,
        "dask": dask.__version__,
        "rows": [],
    }
    work = Path(tempfile.mkdtemp(prefix="zarr-read-"))
    try:
        for name, X in data.items():
            base = None
            for codec, compressors in codecs().items():
                path = work / f"{name}-{codec.split()[0]}.zarr"
                shutil.rmtree(path, ignore_errors=True)
                z = zarr.create_array(
                    str(path),
                    shape=X.shape,
                    chunks=(2000, X.shape[1]),
                    dtype=X.dtype,
                    compressors=compressors,
                )
                t = time.perf_counter()
                z[:] = X
                write = time.perf_counter() - t
                d = da.from_zarr(str(path))
                reads = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    d.sum().compute(scheduler="threads")
                    reads.append(time.perf_counter() - t)
                read = statistics.median(reads)
                base = read if base is None else base
                row = {
                    "array": name,
                    "codec": codec,
                    "stored_over_raw": z.nbytes_stored() / z.nbytes,
                    "write_seconds": write,
                    "read_seconds": read,
                    "read_over_uncompressed": read / base,
                    "reads": reads,
                }
                report["rows"].append(row)
                print(
                    f"{name:6s} {codec:22s} stored/raw {row['stored_over_raw']:.3f}  write "
                    f"{write:5.2f} s  "
                    f"read {read:5.3f} s  ({row['read_over_uncompressed']:.2f} x raw)",
                    flush=True,
                )
                shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
