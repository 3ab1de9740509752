"""Can another draw of the same features close the gap to the exact kernel? (issue 10, NS high)

    OPENBLAS_NUM_THREADS=2 python benchmarks/feature_variants.py 4000,8000
    benchmarks/results/feature_variants.json

At N = 160000 (8 features per training sample) the tuned rational-quadratic model on the
20000-sample Navier-Stokes-high set is 1.33 x the tuned exact kernel (``tuning.py --ns-high`` and
``--ns-high-kernel``). This probe asks whether a lower-variance draw of the same features, at the
same N, gets closer. On the first M samples of the NS-high store (80 / 20 % train / validation
split, no test data), with the law and gamma multiple the NS-high search chose
(``rational_quadratic``, 1/64 of the median-heuristic gamma of these rows), at N = 4 and 8
features per training row, one pass over feature slabs per variant
(:func:`rfol_dask.tuning.validation_slab`, the search's own code):

- ``iid``: the library's draw (``draw_frequencies``), ``cos(Omega^T u + b)``, ``b ~ U(0, 2 pi)``;
- ``paired``: N / 2 frequencies of that draw, each as a cosine and a sine feature (``b = 0`` and
  ``-pi / 2``): the kernel estimate has no phase noise;
- ``orthogonal``: the directions of each 256-column block made orthonormal (QR of a Gaussian
  block), the column norms kept, so every column keeps its law (orthogonal random features);
- ``linear``: ``iid`` plus the linear kernel ``c (u - mean)^T (u' - mean)`` with ``c = 2 gamma``
  (the weight of the linear term in the kernel's expansion; not a random feature model).

Each variant is scored over a quarter-decade alpha grid; ``decade`` is the best on the default
decade grid alone (how much a finer alpha grid would gain). Writes JSON: per M, variant and N the
best validation error and its alpha.
"""

import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

from rfol_dask.features import FREQUENCY_BLOCK, draw_frequencies
from rfol_dask.tuning import (
    frequency_scale,
    median_gammas,
    path_errors,
    slab_bounds,
    validation_grams,
    validation_slab,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from limit_probe import _training_samples  # noqa: E402

LAW, MULTIPLE = "rational_quadratic", 1 / 64
ALPHAS = 10.0 ** np.arange(-14, -2.99, 0.25)
VARIANTS = ("iid", "paired", "orthogonal", "linear")


def paired(n, N, seed, columns):
    """Columns ``f0:f1`` (even bounds) of the paired draw: frequency ``j`` as columns 2j, 2j + 1."""
    f0, f1 = columns
    om, _ = draw_frequencies(n, N // 2, LAW, 1.0, None, seed, columns=(f0 // 2, f1 // 2))
    return np.repeat(om, 2, axis=1), np.tile([0.0, -np.pi / 2], (f1 - f0) // 2)


def orthogonal(n, N, seed, columns):
    """Columns ``f0:f1`` of the orthogonal draw: each 256-column block of the library's draw with
    its directions replaced by orthonormal ones (a QR of a Gaussian block seeded by the block; in
    groups of ``n`` columns where ``n < 256``)."""
    f0, f1 = columns
    B = FREQUENCY_BLOCK
    a, z = f0 // B * B, min(N, -(-f1 // B) * B)
    om, b = draw_frequencies(n, N, LAW, 1.0, None, seed, columns=(a, z))
    for k in range(a, z, B):
        rng = np.random.default_rng([seed, k // B])
        for j in range(k - a, min(k - a + B, z - a), n):
            blk = om[:, j : min(j + n, k - a + B, z - a)]
            q, _ = np.linalg.qr(rng.standard_normal(blk.shape))
            blk[...] = q * np.linalg.norm(blk, axis=0)
    return om[:, f0 - a : f1 - a], b[f0 - a : f1 - a]


def probe(M, seed=0):
    ds = _training_samples(M)
    X = np.ascontiguousarray(ds["input"].values.reshape(M, -1))
    Y = ds["output"].values.reshape(M, -1)
    n_train = int(0.8 * M)
    gamma = MULTIPLE * median_gammas(X[:n_train], (LAW,), random_state=0)[LAW]
    scale = frequency_scale(LAW, gamma)
    segments = [4 * n_train, 8 * n_train]
    N = segments[-1]
    draws = {
        "iid": functools.partial(draw_frequencies, X.shape[1], N, LAW, 1.0, None, seed),
        "paired": functools.partial(paired, X.shape[1], N, seed),
        "orthogonal": functools.partial(orthogonal, X.shape[1], N, seed),
    }
    decade = np.isclose(np.log10(ALPHAS), np.round(np.log10(ALPHAS)))
    Xc = X - X[:n_train].mean(axis=0)
    lin = (2 * gamma * (Xc[:n_train] @ Xc[:n_train].T), 2 * gamma * (Xc[n_train:] @ Xc[:n_train].T))
    out = {"M": M, "n_train": n_train, "gamma": gamma, "law": LAW, "multiple": MULTIPLE}
    for variant in VARIANTS:
        t0, acc = time.perf_counter(), None
        for f0, f1 in slab_bounds(N, M, segments):
            acc = validation_slab(
                acc, X, n_train, draws.get(variant, draws["iid"]), N, f0, f1, [scale], segments
            )
        rows = {}
        for g, Ng in enumerate(segments):
            G, K, factor = validation_grams(acc, 0, segments, g)
            if variant == "linear":  # the features' Grams carry 2 / N: scale the kernel to match
                G, K = G + lin[0] / factor, K + lin[1] / factor
            errs = path_errors(G, K, Y[:n_train], Y[n_train:], ALPHAS / factor, method="eigh")
            i, j = int(np.argmin(errs)), int(np.argmin(np.where(decade, errs, np.inf)))
            rows[Ng] = {
                "error": float(errs[i]),
                "alpha": float(ALPHAS[i]),
                "decade_error": float(errs[j]),
                "decade_alpha": float(ALPHAS[j]),
            }
            print(
                f"M = {M}, {variant:10s} N = {Ng:6d}: {100 * errs[i]:.4f} % (alpha "
                f"{ALPHAS[i]:.3g}; "
                f"decade grid {100 * errs[j]:.4f} %)",
                flush=True,
            )
        out[variant] = {"rows": rows, "seconds": time.perf_counter() - t0}
    return out


def main():
    from _common import argv_or_usage, blas_info

    argv = argv_or_usage(__doc__, 2)
    sizes, path = [int(s) for s in argv[0].split(",")], Path(argv[1])
    res = {"blas": blas_info(), "probes": [probe(M) for M in sizes]}
    path.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
