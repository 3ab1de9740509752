"""The memory policy: what a fit may hold, and what the user is told when it cannot."""

import warnings

import dask.array as da
import numpy as np
import pytest
from conftest import FakeClient, smooth_operator_data

from rfol_dask import RandomFeatureOperator
from rfol_dask.memory import SLAB_BYTES, check_gram_memory, dual_plan, memory_budget


def test_budget_of_small_workers_leaves_out_what_the_process_holds():
    # 300 MB workers that hold 190 MB each: 0.8 * 300 - 190 = 50 MB, not 60 % of the limit (180 MB)
    assert memory_budget(client=FakeClient(300e6, 300e6, used=190e6)).bytes == pytest.approx(50e6)
    assert memory_budget(client=FakeClient(16e9, used=190e6)).bytes == pytest.approx(0.6 * 16e9)
    assert memory_budget(1234, client=FakeClient(16e9)).bytes == 1234


def test_a_budget_above_what_the_workers_hold_is_kept_but_warned_about():
    import psutil

    with pytest.warns(
        UserWarning,
        match=r"max_gram_bytes=5,000,000,000 is more than the memory limit of "
        r"worker w1 \(2,000,000,000 bytes\).*killed, not refused",
    ):
        assert memory_budget(5e9, client=FakeClient(8e9, 2e9)).bytes == 5e9
    with pytest.warns(UserWarning, match="more than this machine's memory"):
        memory_budget(2 * psutil.virtual_memory().total)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memory_budget(1.9e9, client=FakeClient(8e9, 2e9))  # within every limit: silent
        memory_budget(1e6)


def test_dual_plan_counts_the_feature_slab():
    """A 300 MB worker: the Gram (2 MB) fits, a 256 MiB feature slab does not; the slab is cut
    to what the budget leaves beside the Gram and the data."""
    M, n, m, N = 500, 16, 16, 30_000
    client = FakeClient(300e6, used=190e6)
    held = M * (n + m) * 8
    plan = dual_plan(M, np.float64, client=client, held_bytes=held, n_features=N)
    assert not plan.blocked
    assert 0 < plan.slab_bytes < SLAB_BYTES
    assert M**2 * 8 + held + 2 * plan.slab_bytes <= memory_budget(client=client).bytes
    roomy = dual_plan(M, np.float64, client=FakeClient(64e9), held_bytes=held, n_features=N)
    assert roomy.slab_bytes == SLAB_BYTES  # the default where memory allows


def test_dual_plan_blocks_when_the_gram_and_the_narrowest_slabs_do_not_fit():
    # a 32 MB Gram fits 40 MB, but not with two slabs of 64 columns (2 MB each) and 8 MB of data
    M = 2000
    with pytest.warns(
        RuntimeWarning,
        match=r"2000 x 2000 Gram matrix needs 32,000,000 bytes .*feature slabs.*"
        r"factorising it blocked",
    ):
        plan = dual_plan(M, np.float64, 40e6, held_bytes=8_000_000, n_features=10_000)
    assert plan.blocked
    assert not dual_plan(M, np.float64, 40e6, held_bytes=0, n_features=10_000).blocked


@pytest.mark.parametrize("lazy", [False, True])
def test_oversized_primal_fit_advises_the_dual_solver(lazy):
    U, V = smooth_operator_data(60, 8)
    if lazy:
        U, V = da.from_array(U, chunks=(30, -1)), da.from_array(V, chunks=(30, -1))
    model = RandomFeatureOperator(n_features=400, solver="primal", max_gram_bytes=100_000)
    with pytest.raises(ValueError, match="400 x 400 Gram") as info:
        model.fit(U, V)
    assert "solver='dual'" in str(info.value) and "solver='primal'" not in str(info.value)


def test_oversized_dual_fit_advises_the_primal_solver():
    U, V = smooth_operator_data(200, 8)
    with pytest.raises(ValueError, match="200 x 200 Gram.*solver='primal'"):
        RandomFeatureOperator(n_features=100, solver="dual", max_gram_bytes=10_000).fit(U, V)
    with pytest.raises(ValueError, match="fewer samples, pass dask arrays"):
        check_gram_memory(200, np.float64, 10_000, solver="kernel")


@pytest.mark.parametrize(
    "solver, match",
    [
        (
            "dual",
            r"the 200 x 200 Gram matrix needs 320,000 bytes \(0.00 GiB\), and 8,680,000 more "
            r"bytes for the 8 x "
            r"5000 frequencies \(360,000 bytes\), the 5000 x 8 coefficients \(320,000 bytes\) and "
            r"the 200 x 5000 "
            r"features A \(8,000,000 bytes\) held with it, but the budget \(max_gram_bytes\) is "
            r"2,000,000 bytes; "
            r"use fewer features",
        ),
        ("primal", r"the 5000 x 5000 Gram matrix needs 200,000,000 bytes"),
    ],
)
def test_in_memory_fit_checks_its_features_and_frequencies_before_drawing_them(
    solver, match, monkeypatch
):
    """The in-memory dual holds A (M x N) whole and Omega (n x N) beside its Gram: a 320 kB Gram
    fitted, then numpy ran out of memory on A (2000 x 10^6: 14.9 GiB); the primal drew Omega
    (4.7 s at N = 10^6) before its Gram was refused. Both are refused before Omega is drawn."""
    from rfol_dask import rf_operator

    def no_draw(*args, **kwargs):
        raise AssertionError("Omega drawn before the memory check")

    U, V = smooth_operator_data(200, 8)
    monkeypatch.setattr(rf_operator, "draw_frequencies", no_draw)
    with pytest.raises(ValueError, match=match):
        RandomFeatureOperator(
            n_features=5000, solver=solver, gamma=1.0, max_gram_bytes=2_000_000
        ).fit(U, V)


def test_workers_with_no_room_left_are_an_error_before_any_work():
    # an idle worker already past dask's pause line: the fit used to wait forever on paused workers
    with pytest.raises(
        ValueError,
        match=r"no memory to spare: worker w0 holds 190,000,000 bytes of its "
        r"200,000,000-byte limit",
    ):
        memory_budget(client=FakeClient(200e6, 200e6, used=190e6))


def test_the_worker_that_sums_the_grams_holds_two():
    # 440 MiB workers holding 184 MiB: one 122 MiB Gram fits the budget, but the worker that sums
    # two workers' Grams holds 244 MiB, over the 168 MiB it has before dask pauses it
    M, held = 4000, 4000 * 80 * 8
    limit, used = 440 * 2**20, 184 * 2**20
    assert not dual_plan(
        M, np.float64, client=FakeClient(limit, used=used), held_bytes=held, n_features=6000
    ).blocked
    with pytest.warns(
        RuntimeWarning,
        match=r"a worker that sums the 2 workers' Grams holds two: 258,560,000 bytes",
    ):
        plan = dual_plan(
            M,
            np.float64,
            client=FakeClient(limit, limit, used=used),
            held_bytes=held,
            n_features=6000,
        )
    assert plan.blocked
    # the one Gram fits the budget: the reason says so, not "but the budget is" a larger number
    assert plan.reason.startswith(
        "the 4000 x 4000 Gram matrix needs 128,000,000 bytes (0.12 GiB), but a worker"
    )
    # with room for both (16 GB workers) the streamed dual stays
    assert not dual_plan(
        M, np.float64, client=FakeClient(16e9, 16e9, used=used), held_bytes=held, n_features=6000
    ).blocked


@pytest.mark.slow
def test_the_primal_centring_makes_no_n_by_n_temporary():
    import tracemalloc

    from rfol_dask.factor import primal_factor
    from rfol_dask.gram import PrimalSums

    N, m, M = 3000, 4, 100
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, N))
    sums = PrimalSums(
        G=np.asfortranarray(A.T @ A),
        AtV=A.T @ np.ones((M, m)),
        colsum=A.sum(0),
        vsum=np.full(m, float(M)),
        count=M,
    )
    tracemalloc.start()
    primal_factor(sums, (np.zeros(N), np.zeros(m)), 1e-3, True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 0.5 * N * N * 8  # an N x N temporary was 72 MB here


def test_the_primal_counts_the_second_gram_of_its_reduction():
    client = FakeClient(330 * 2**20, 330 * 2**20, used=191 * 2**20)
    assert (
        check_gram_memory(3000, np.float64, client=client, solver="primal") == 72_000_000
    )  # one fits
    with pytest.raises(
        ValueError,
        match=r"holds 2: 144,000,000 bytes against the .* it has before dask pauses it; "
        r"use fewer features",
    ):
        check_gram_memory(3000, np.float64, client=client, solver="primal", peak_copies=2)


def test_a_blocked_dual_tile_that_cannot_fit_a_worker_is_an_error_before_any_work():
    from rfol_dask.memory import check_tile_memory

    small = FakeClient(
        280 * 2**20, 280 * 2**20, used=184 * 2**20
    )  # workers were killed, three times, after 26 s
    with pytest.raises(
        ValueError,
        match=r"a Gram tile of the blocked dual needs 50,000,000 bytes \(two blocks of 500 "
        r"rows x 6000 features and their tile\)",
    ):
        check_tile_memory(500, 6000, np.float64, client=small)
    assert (
        check_tile_memory(125, 6000, np.float64, client=small) == 12_125_000
    )  # smaller chunks fit
    assert (
        check_tile_memory(500, 6000, np.float64, max_gram_bytes=1000, client=small) == 50_000_000
    )  # user's budget
    # the worker of a tile holds the frequencies too: 4096 x 6000 of them (197 MB) were not counted,
    # and the workers were killed where the fit should have been refused
    with pytest.raises(
        ValueError, match=r"their tile and the 4096 x 6000 frequencies\) but a worker has"
    ):
        check_tile_memory(125, 6000, np.float64, client=small, n_inputs=4096)


def test_the_primal_counts_its_frequencies_beside_its_gram():
    client = FakeClient(400 * 2**20, used=150 * 2**20)
    check_gram_memory(2500, np.float64, client=client, solver="primal")  # 50 MB: fits
    with pytest.raises(
        ValueError, match=r"a worker holds one beside 163,860,000 bytes of frequencies"
    ):
        check_gram_memory(2500, np.float64, client=client, solver="primal", beside=8193 * 2500 * 8)


def test_dask_sizeof_counts_the_arrays_our_task_results_hold():
    """The factor, the primal sums and the rows mode's resident features travel between dask
    tasks; dask's sizeof counted about 60 bytes for each (the scheduler and the workers'
    memory managers saw a 3 GB factor as nothing)."""
    from dask.sizeof import sizeof

    from rfol_dask.factor import DualFactor, PrimalFactor
    from rfol_dask.gram import PrimalSums
    from rfol_dask.solve.streamed import Resident

    L, r, vbar = np.zeros((300, 300)), np.zeros(300), np.zeros(7)
    factor = DualFactor(L, r, vbar, 300, True)
    assert (
        L.nbytes + r.nbytes + vbar.nbytes
        <= sizeof(factor)
        < L.nbytes + r.nbytes + vbar.nbytes + 2000
    )
    assert sizeof(factor.without_factor()) < 4000
    primal = PrimalFactor(np.zeros((50, 50)), np.zeros((50, 7)), np.zeros(50), vbar)
    assert sizeof(primal) >= 50 * 57 * 8 + 50 * 8
    sums = PrimalSums(np.zeros((50, 50)), np.zeros((50, 7)), np.zeros(50), np.zeros(7), 10)
    assert sizeof(sums) >= 50 * 57 * 8
    acc = Resident()
    acc.A, acc.K, acc.g0, acc.shifts = (
        np.zeros((300, 40)),
        np.zeros((300, 300)),
        0,
        {0: np.zeros(40)},
    )
    acc.pairs = {0: (np.zeros((16, 40)), np.zeros(40))}  # a slot left unset counts nothing
    assert sizeof(acc) >= acc.A.nbytes + acc.K.nbytes + 40 * 8 + 17 * 40 * 8


@pytest.mark.parametrize(
    "make, match",
    [
        (
            "kernel",
            r"the 400 x 400 Gram matrix needs 1,280,000 bytes \(0.00 GiB\), and 4,480,000 more "
            r"bytes for the "
            r"distances, a copy and the eigenvectors, 400 x 400 each \(3,840,000 bytes\) and the "
            r"validation "
            r"distances and cross-Gram, 100 x 400 each \(640,000 bytes\) held with it",
        ),
        (
            "rf",
            r"the 400 x 400 Gram matrix needs 1,280,000 bytes .* the 100 x 400 cross-Gram "
            r"\(320,000 bytes\), the "
            r"solve's copy of a Gram \(1,280,000 bytes\) and two 500 x 300 feature slabs "
            r"\(2,400,000 bytes\)",
        ),
    ],
)
@pytest.mark.parametrize("budget", ["max_gram_bytes", "machine"])
def test_searches_check_their_memory_before_searching(make, match, budget, monkeypatch):
    """The searches ignored max_gram_bytes and the memory budget until the refit, after the whole
    search (KernelOperatorCV on 30000 rows searched > 100 s with 24000 x 24000 Grams): their
    least peak on the largest split is now refused before any work."""
    import collections

    import psutil

    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperatorCV
    from rfol_dask.selection import SelectionCV

    def no_search(*args, **kwargs):
        raise AssertionError("searched before the memory check")

    rng = np.random.default_rng(0)
    U = rng.standard_normal((500, 4))
    V = U[:, :2] ** 2
    monkeypatch.setattr(SelectionCV, "_search", no_search)
    kw = {}
    if budget == "max_gram_bytes":
        kw["max_gram_bytes"] = 10**6
    else:  # a 5 MB machine: a 3 MB budget
        memory = collections.namedtuple("memory", "available total")
        monkeypatch.setattr(psutil, "virtual_memory", lambda: memory(5e6, 5e6))
    search = (
        KernelOperatorCV(**kw)
        if make == "kernel"
        else RandomFeatureOperatorCV(n_features=300, random_state=0, **kw)
    )
    with pytest.raises(ValueError, match=match + r".*search on fewer samples"):
        search.fit(U, V)


@pytest.mark.parametrize(
    "case",
    [
        "rf_growth",
        "rf_n_features",
        "rf_float32",
        "rf_dask_primal",
        "kernel",
        "kernel_linear",
        "kernel_and_linear",
    ],
)
def test_searches_check_their_refit_s_memory_before_searching(case, monkeypatch):
    """The searches checked their own memory up front, not the refit's: a search (an hour of it)
    could end in a refit refused for memory. Every n_features a winner may take (the searched
    ones, the growth's checkpoints up to max_features) is checked as the refit checks it (in
    memory: the Gram and the features held with it; on dask: the primal's Gram) in the refit's
    dtype, before the search; refit=False searches."""
    from rfol_dask import RandomFeatureOperatorCV
    from rfol_dask.baselines import KernelOperatorCV
    from rfol_dask.selection import SelectionCV

    def no_search(*args, **kwargs):
        raise AssertionError("searched")

    rng = np.random.default_rng(0)
    U = rng.standard_normal((500, 4))
    V = U[:, :2] ** 2
    rf = dict(random_state=0, alphas=(1e-3,))
    few = [(np.arange(100), np.arange(100, 120))]  # a small search, the refit on all 500 samples
    search, data, match = {
        # 500 x N features (8 bytes each) beside the 500 x 500 Gram, at N from 300 to 20000: 9600
        # on do not fit 30 MB
        "rf_growth": (
            RandomFeatureOperatorCV(n_features=300, max_features=20000, max_gram_bytes=3e7, **rf),
            (U, V),
            r"RandomFeatureOperatorCV would refit its winner on all 500 training samples after "
            r"the search, "
            r"and that refit would be refused for memory at n_features=9600, 19200, 20000 \(of "
            r"300, 600, "
            r"1200, 2400, 4800, 9600, 19200, 20000: leave those out of the search\): the 500 x "
            r"500 Gram "
            r"matrix needs 2,000,000 bytes .* the 500 x 9600 features A \(38,400,000 bytes\) held "
            r"with it, "
            r"but the budget \(max_gram_bytes\) is 30,000,000 bytes; .*; or pass refit=False to "
            r"search only",
        ),
        "rf_n_features": (
            RandomFeatureOperatorCV(n_features=(300, 3000), cv=few, max_gram_bytes=1e7, **rf),
            (U, V),
            r"at n_features=3000 \(of 300, 3000: .* the 500 x 3000 features A \(12,000,000 bytes\)",
        ),
        # the refit of float32 data works in float32: 7.1 MB at N = 3000 (14.2 MB in float64)
        "rf_float32": (
            RandomFeatureOperatorCV(
                n_features=(300, 3000), cv=few, max_gram_bytes=7.2e6, dtype="float32", **rf
            ),
            (U.astype(np.float32), V.astype(np.float32)),
            None,
        ),
        # a dask refit at N = 450 < M is the primal, its 450 x 450 Gram (1.62 MB) summed over two
        # chains
        "rf_dask_primal": (
            RandomFeatureOperatorCV(n_features=450, cv=few, max_gram_bytes=1.5e6, **rf),
            (da.from_array(U, chunks=100), da.from_array(V, chunks=100)),
            r"refused for memory at n_features=450 \(of 450\): the 450 x 450 Gram matrix needs "
            r"1,620,000 bytes.*use fewer features",
        ),
        "kernel": (
            KernelOperatorCV(cv=few, max_gram_bytes=1.9e6),
            (U, V),
            r"KernelOperatorCV would refit its winner on all 500 training samples after the "
            r"search, and that "
            r"refit would be refused for memory: the 500 x 500 Gram matrix needs 2,000,000 bytes "
            r"\(0.00 GiB\) "
            r"but the budget \(max_gram_bytes\) is 1,900,000 bytes; use fewer samples.*; or pass "
            r"refit=False",
        ),
        # the linear kernel on 4 inputs refits in the primal (a 4 x 4 Gram): it was checked as the
        # dual
        "kernel_linear": (
            KernelOperatorCV(kernels=("linear",), cv=few, max_gram_bytes=1.9e6),
            (U, V),
            None,
        ),
        "kernel_and_linear": (
            KernelOperatorCV(kernels=("rbf", "linear"), cv=few, max_gram_bytes=1.9e6),
            (U, V),
            r"refused for memory at kernel=rbf \(of rbf, linear: leave those out of the search\): "
            r"the 500 x 500 Gram matrix needs 2,000,000 bytes",
        ),
    }[case]
    monkeypatch.setattr(SelectionCV, "_search", no_search)
    if match is not None:
        with pytest.raises(ValueError, match=match):
            search.fit(*data)
        search.set_params(refit=False)
    with pytest.raises(AssertionError, match="searched"):  # the search's own check passes
        search.fit(*data)


def _machine(monkeypatch, available):
    """psutil reports ``available`` bytes free on a machine too large for a max_gram_bytes "
    "warning."""
    import collections

    import psutil

    memory = collections.namedtuple("memory", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory(available, 10**15))


@pytest.mark.parametrize("case", ["numpy", "dask", "search_refit"])
def test_a_model_beyond_this_process_s_memory_is_refused_before_any_work(case, monkeypatch):
    """The memory checks covered the Gram, not the fitted model the client holds: a fit at
    N = 10^8 ended in numpy's MemoryError for the coefficients (47.7 GiB), after the work (and
    max_gram_bytes lifted even the in-memory check). Omega, b and the coefficients (680 kB at
    N = 5000) are now checked against this process's available memory (600 kB here) first."""
    from rfol_dask import RandomFeatureOperatorCV, rf_operator
    from rfol_dask.selection import SelectionCV

    def no_work(*args, **kwargs):
        raise AssertionError("work done")

    U, V = smooth_operator_data(60, 8)
    for name in ("draw_frequencies", "input_scales"):
        monkeypatch.setattr(rf_operator, name, no_work)
    monkeypatch.setattr(SelectionCV, "_search", no_work)
    _machine(monkeypatch, 600_000)
    if case == "dask":
        U, V = da.from_array(U, chunks=(30, -1)), da.from_array(V, chunks=(30, -1))

    def make(N):  # max_gram_bytes: the Gram's budget is no limit here
        if case == "search_refit":
            return RandomFeatureOperatorCV(
                n_features=N,
                cv=[(np.arange(40), np.arange(40, 50))],
                alphas=(1e-3,),
                random_state=0,
                max_gram_bytes=10**12,
            )
        return RandomFeatureOperator(n_features=N, max_gram_bytes=10**12)

    match = (
        r"the fitted model needs 680,000 bytes \(0.00 GiB\) in this process for the 8 x 5000 "
        r"frequencies "
        r"\(360,000 bytes\) and the 5000 x 8 coefficients \(320,000 bytes\), but it has 600,000 "
        r"bytes \(0.00 GiB\) "
        r"available; use fewer features \(n_features\), dtype='float32' \(half the bytes\)"
    )
    if case == "search_refit":
        match = (
            r"refit would be refused for memory at n_features=5000 .*"
            + match
            + r".*or pass refit=False"
        )
    with pytest.raises(ValueError, match=match):
        make(5000).fit(U, V)
    with pytest.raises(AssertionError, match="work done"):  # 544 kB at N = 4000: the work starts
        make(4000).fit(U, V)


@pytest.mark.parametrize(
    "case, arrays",
    [
        # in memory without input PCA the model keeps a copy of U too (not the caller's array)
        (
            "numpy",
            r"the 60 x 8 training inputs \(3,840 bytes\) and the 60 x 100 dual coefficients "
            r"\(48,000 bytes\)",
        ),
        (
            "dask",
            r"the 60 x 8 training inputs \(3,840 bytes\) and the 60 x 100 dual coefficients "
            r"\(48,000 bytes\)",
        ),
        (
            "dask_pca",
            r"the 60 x 3 training inputs \(1,440 bytes\), the 60 x 100 dual coefficients \(48,000 "
            r"bytes\) "
            r"and the 8 x 3 principal directions \(216 bytes\)",
        ),
        ("dask_linear", r"the 8 x 100 weights \(6,400 bytes\)"),
        (
            "search_refit",
            r"the 60 x 8 training inputs \(3,840 bytes\) and the 60 x 100 dual coefficients",
        ),
    ],
)
def test_a_kernel_model_beyond_this_process_s_memory_is_refused_before_any_work(
    case, arrays, monkeypatch
):
    """A dask KernelOperator fit gathers its model here (the training inputs and dual
    coefficients, or the linear kernel's primal weights) unchecked: beyond this process's
    available memory it ended in numpy's MemoryError after the work. It is now checked first,
    for a KernelOperatorCV's refit too, and max_gram_bytes does not lift it."""
    from rfol_dask.baselines import KernelOperator, KernelOperatorCV, kernel
    from rfol_dask.selection import SelectionCV

    def no_work(*args, **kwargs):
        raise AssertionError("work done")

    U, V = smooth_operator_data(60, 8, n_out=8)
    V = np.tile(V, (1, 13))[:, :100]
    for name in ("pca", "median_length_scale", "row_blocks"):
        monkeypatch.setattr(kernel, name, no_work)
    monkeypatch.setattr(SelectionCV, "_search", no_work)
    if case != "numpy":
        U, V = da.from_array(U, chunks=(30, -1)), da.from_array(V, chunks=(30, -1))
    params = {"dask_pca": dict(n_components=3), "dask_linear": dict(kernel="linear")}.get(case, {})
    need = {
        "numpy": 60 * 108,
        "dask": 60 * 108,
        "dask_pca": 60 * 103 + 9 * 3,
        "dask_linear": 8 * 100,
        "search_refit": 60 * 108,
    }[case] * 8
    if case == "search_refit":
        model = KernelOperatorCV(cv=[(np.arange(40), np.arange(40, 50))], max_gram_bytes=10**12)
    else:
        model = KernelOperator(max_gram_bytes=10**12, **params)
    _machine(monkeypatch, need - 1)
    match = (
        f"the fitted model needs {need:,} bytes .* in this process for {arrays}.*, but it has "
        f"{need - 1:,} "
        r"bytes .* available; use fewer "
        + (r"inputs \(n_components\)" if case == "dask_linear" else "training samples")
    )
    if case == "search_refit":
        match = (
            r"KernelOperatorCV would refit its winner .* refused for memory: "
            + match
            + r".*or pass refit=False"
        )
    with pytest.raises(ValueError, match=match):
        model.fit(U, V)
    _machine(monkeypatch, need)  # the model fits: the work starts
    with pytest.raises(AssertionError, match="work done"):
        model.fit(U, V)


@pytest.mark.parametrize("N", [20_000, 150_000])
def test_the_navier_stokes_fits_pass_every_memory_check_on_a_24_gib_machine(N, monkeypatch):
    """The benchmark's fits (M = 20000 samples of 64 x 64 inputs and outputs from Zarr, float64,
    one 20 GB worker on a 24 GiB machine) ran; their checks, made on the shapes alone, must let
    them run: at N = 150000 the model is Omega (4096 x 150000) and C (150000 x 4096), 9.8 GB, within
    the 21 GiB such a machine has available (3 GiB for the system and the interpreters)."""
    from rfol_dask.memory import check_host_memory
    from rfol_dask.solve import model_bytes

    M, n, m, size = 20_000, 4096, 4096, 8
    available = 21 * 2**30
    _machine(monkeypatch, available)
    model = (n + 1) * N * size + N * m * size
    assert check_host_memory(model_bytes(n, N, m, np.float64), np.float64) == model < available
    U = da.zeros((M, n), chunks=(500, -1))
    RandomFeatureOperator(n_features=N)._check_memory(U, U, True, np.float64, FakeClient(20e9))
    _machine(monkeypatch, model - 1)  # the same fit where the model does not fit
    with pytest.raises(ValueError, match=f"the fitted model needs {model:,} bytes"):
        RandomFeatureOperator(n_features=N)._check_memory(U, U, True, np.float64, FakeClient(20e9))


@pytest.mark.parametrize("on_output_grid", [False, True])
def test_an_in_memory_prediction_beyond_this_process_s_memory_is_a_clear_error(
    on_output_grid, monkeypatch
):
    """A numpy predict allocated its M x m output (and its values on an output_grid) unchecked: a
    huge one ended in numpy's MemoryError traceback. It is now a ValueError before the
    allocation, naming the sizes and the fix; a dask predict stays lazy (nothing allocated)."""
    from rfol_dask import rf_operator

    U, V = smooth_operator_data(60, 8)
    x = np.arange(8) / 8
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(
        U, V, input_grid=[x], output_grid=[x]
    )
    X = np.tile(U, (10, 1))  # 600 samples
    grid = [np.linspace(0, 7 / 8, 30)] if on_output_grid else None
    need = 600 * 8 * 8 + (600 * 30 * 8 if on_output_grid else 0)

    def no_work(*args, **kwargs):
        raise AssertionError("work done")

    monkeypatch.setattr(rf_operator, "_predict_block", no_work)
    _machine(monkeypatch, need - 1)
    arrays = r"the 600 x 8 predictions \(38,400 bytes\)" + (
        r" and their 600 x 30 values on output_grid \(144,000 bytes\)" if on_output_grid else ""
    )
    with pytest.raises(
        ValueError,
        match=rf"predicting 600 samples in memory needs {need:,} bytes \(0.00 GiB\) for "
        rf"{arrays}, but this process has {need - 1:,} bytes .* available; predict "
        r"in parts .*, or pass a dask array .* for a lazy prediction",
    ):
        model.predict(X, output_grid=grid)
    lazy = model.predict(da.from_array(X, chunks=(300, -1)), output_grid=grid)  # lazy: not refused
    assert isinstance(lazy, da.Array) and lazy.shape == (600, 30 if on_output_grid else 8)
    _machine(monkeypatch, need)  # it fits: the prediction starts
    with pytest.raises(AssertionError, match="work done"):
        model.predict(X, output_grid=grid)


@pytest.mark.parametrize("kind", ["numpy", "xarray"])
def test_an_in_memory_prediction_from_another_input_grid_is_refused_before_its_inputs_are_resampled(
    kind, monkeypatch
):
    """predict(X, input_grid=...) resampled X to the training grid (a new M x n array) before the
    prediction memory check, so a prediction too large for this process allocated its resampled
    inputs first. The check, on the shapes alone, now comes first."""
    import xarray as xr

    from rfol_dask.recovery.interpolation import Recovery

    U, V = smooth_operator_data(60, 8)
    x, fine, out = np.arange(8) / 8, np.linspace(0, 7 / 8, 15), np.linspace(0, 7 / 8, 30)
    model = RandomFeatureOperator(n_features=50, random_state=0).fit(
        U, V, input_grid=[x], output_grid=[x]
    )
    X = model.predict(np.tile(U, (10, 1)), output_grid=[fine])  # 600 samples on the finer grid
    if kind == "xarray":
        X = xr.DataArray(X, dims=("sample", "dim_0"), coords={"dim_0": fine})
    grid = {"input_grid": [fine]} if kind == "numpy" else {}
    calls = {"resample": 0}
    resample = Recovery.resample

    def counted(name, method):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(Recovery, "resample", counted("resample", resample))
    need = 600 * 8 * 8 + 600 * 30 * 8
    _machine(monkeypatch, need - 1)
    with pytest.raises(ValueError, match=rf"predicting 600 samples in memory needs {need:,} bytes"):
        model.predict(X, output_grid=[out], **grid)
    assert calls == {"resample": 0}  # refused before X was resampled
    _machine(monkeypatch, need)  # it fits: X resampled to the training grid, the prediction to out
    calls.update({"resample": 0})
    pred = model.predict(X, output_grid=[out], **grid)
    assert calls == {"resample": 2} and pred.shape == (600, 30)
    by_hand = model._recovery("input", [fine]).resample(
        np.asarray(X), [x]
    )  # the same prediction as before
    np.testing.assert_array_equal(np.asarray(pred), model.predict(by_hand, output_grid=[out]))


def test_a_memory_probe_that_no_worker_answers_says_what_failed():
    """Workers lost while asked (killed, their jobs ended) are left out; if none answers, twice,
    one error says so, not distributed's CommClosedError."""
    from distributed.comm.core import CommClosedError

    from rfol_dask.exceptions import NoWorkersError

    class Lost(FakeClient):
        def run(self, func, *args, **kwargs):
            return {"w0": CommClosedError("in <TCP (closed) Scheduler Broadcast>"), "w1": 1e6}

    assert memory_budget(client=Lost(300e6, 300e6)).bytes == pytest.approx(0.6 * 300e6)
    Lost.run = lambda self, func, *a, **k: {"w0": CommClosedError("closed")}
    with pytest.raises(NoWorkersError, match="every worker of the dask cluster was lost while"):
        memory_budget(client=Lost(300e6))
