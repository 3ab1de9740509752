"""The in-memory dual outside numpy (``solve.in_memory.dual_slabs``): the Gram summed over
feature slabs, ``C = A^T Beta`` slab by slab, never the features ``A`` (M x N) whole.

It runs for every namespace but numpy's fast path (CuPy on a GPU; here numpy inside
``backend.generic_numpy`` and array_api_strict) and must give the numpy fit to 1e-10. Its
memory is measured with tracemalloc on the generic numpy path; the tight GPU bound
``1.2 x (8 M^2 + slab + U + V)`` (Cholesky in place) is asserted in tests/test_gpu.py.
"""

import tracemalloc

import dask
import numpy as np
import pytest
from conftest import rel

from rfol_dask import backend
from rfol_dask.features import draw_frequencies, feature_map
from rfol_dask.solve import in_memory
from rfol_dask.solve.in_memory import fit_numpy

xs = pytest.importorskip("array_api_strict")

TOL = 1e-10


@pytest.fixture
def problem():
    rng = np.random.default_rng(11)
    U = rng.standard_normal((80, 9))
    V = np.sin(U[:, :4]) + 0.1 * rng.standard_normal((80, 4))
    om, b = draw_frequencies(9, 730, gamma=0.4, random_state=3)
    return U, V, om, b


def _generic_numpy(U, V, om, b, **kw):
    with backend.generic_numpy():
        return fit_numpy(U, V, om, b, **kw)


def _strict(U, V, om, b, **kw):
    return fit_numpy(*(xs.asarray(a) for a in (U, V, om, b)), **kw)


@pytest.mark.parametrize(
    "fit", [_generic_numpy, _strict], ids=["generic-numpy", "array-api-strict"]
)
@pytest.mark.parametrize(
    "width", [100, 256]
)  # 730 columns: 8 slabs or 3 (whole frequency blocks), the last ragged
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_slab_dual_equals_the_numpy_dual(problem, fit, width, fit_intercept, monkeypatch):
    U, V, om, b = problem
    made = []
    real = in_memory.slab_features
    monkeypatch.setattr(
        in_memory, "slab_features", lambda *a, **k: made.append(a[3:5]) or real(*a, **k)
    )
    kw = dict(alpha=1e-6, fit_intercept=fit_intercept, solver="dual")
    C0, c0 = fit_numpy(U, V, om, b, **kw)
    assert not made  # numpy keeps its fast path: A whole
    C, c = fit(U, V, om, b, slab_bytes=8 * 80 * width, **kw)
    edges = [(f0, min(f0 + width, 730)) for f0 in range(0, 730, width)]
    assert (
        made == edges + edges
    )  # two passes over the same slabs (the Gram, then C), the last one ragged
    assert edges[-1][1] - edges[-1][0] < width
    assert rel(C, C0) < TOL
    assert np.abs(backend.to_numpy(c) - c0).max() < TOL * max(1.0, np.abs(c0).max())
    U_test = np.random.default_rng(12).standard_normal((20, 9))
    A_test = feature_map(U_test, om, b)
    assert rel(A_test @ backend.to_numpy(C) + backend.to_numpy(c), A_test @ C0 + c0) < TOL
    if not fit_intercept:
        assert not np.any(backend.to_numpy(c))


def test_slab_bytes_default_from_dask_config(problem, monkeypatch):
    U, V, om, b = problem
    made = []
    real = in_memory.slab_features
    monkeypatch.setattr(
        in_memory, "slab_features", lambda *a, **k: made.append(a[3:5]) or real(*a, **k)
    )
    with dask.config.set({"rfol_dask.slab-bytes": 8 * 80 * 300}):
        _generic_numpy(U, V, om, b, alpha=1e-6, fit_intercept=True, solver="dual")
    assert made[:3] == [
        (0, 256),
        (256, 512),
        (512, 730),
    ]  # widths rounded down to whole frequency blocks
    made.clear()
    _generic_numpy(U, V, om, b, alpha=1e-6, fit_intercept=True, solver="dual")  # 256 MiB: one slab
    assert made == [(0, 730), (0, 730)]


@pytest.mark.slow
def test_slab_dual_peak_memory(monkeypatch):
    """tracemalloc peak of the generic numpy dual (U and V allocated inside the trace; Omega
    and b before it, as the model's own arrays).

    - the Gram pass stays within ``1.2 x (8 M^2 + 2 slab + U + V)``: the second slab is the
      cosine's copy, which generic namespaces cannot write in place (CuPy does);
    - the whole fit within ``1.2 x (8 M^2 + slab + U + V) + 3 x 8 M^2 + 8 N m``: the generic
      Cholesky holds the identity, ``G + ridge I`` and the factor beside the Gram (only numpy
      and CuPy factorise in place; the tight bound is asserted on a GPU, tests/test_gpu.py),
      and the coefficients (N x m) are the output.

    Forming A whole (``8 M N`` bytes) would break both bounds.
    """
    M, N, n, m, width = 600, 6000, 64, 64, 128  # 47 slabs, the last one of 112 columns
    slab = 8 * M * width
    om, b = draw_frequencies(n, N, gamma=0.05, random_state=0)
    at_factor = []
    real = in_memory.dual_factor
    monkeypatch.setattr(
        in_memory,
        "dual_factor",
        lambda *a, **k: at_factor.append(tracemalloc.get_traced_memory()[1]) or real(*a, **k),
    )
    tracemalloc.start()
    try:
        rng = np.random.default_rng(0)
        U = rng.standard_normal((M, n))
        V = np.tanh(U @ rng.standard_normal((n, m)) / 8)
        C, _ = _generic_numpy(
            U, V, om, b, alpha=1e-6, fit_intercept=True, solver="dual", slab_bytes=slab
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    model = 8 * M * M + slab + U.nbytes + V.nbytes
    gram_pass = 1.2 * (model + slab)
    whole = 1.2 * model + 3 * 8 * M * M + C.nbytes
    assert at_factor[0] <= gram_pass, (at_factor[0], gram_pass)
    assert peak <= whole, (peak, whole)
    assert 8 * M * N > whole > gram_pass  # the old generic path (A whole) could not have met them
    assert at_factor[0] > 8 * M * M  # the measurement sees the Gram
