"""The package's warnings point at the user's line that called into it (``rfol_dask.stacklevel``).

Each warning is recorded with ``warnings.catch_warnings(record=True)`` and must name this file
as its ``filename``: a fixed ``stacklevel`` pointed some at ``rfol_dask/backend.py``,
``memory.py`` or ``metrics.py`` instead.
"""

import ast
import concurrent.futures
import pathlib
import re
import warnings

import dask.array as da
import numpy as np
import psutil
import pytest
import sklearn.exceptions
import xarray as xr

import rfol_dask
from rfol_dask import RandomFeatureOperator, exceptions, memory
from rfol_dask.baselines import KernelOperator
from rfol_dask.exceptions import RfolDaskWarning
from rfol_dask.stacklevel import user_stacklevel


def _recorded(call, match):
    """The warnings matching ``match`` recorded while ``call()`` runs (at least one)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    found = [w for w in caught if re.search(match, str(w.message))]
    assert found, [str(w.message) for w in caught]
    return found


def _assert_here(found):
    assert [w.filename for w in found] == [__file__] * len(found), [
        (w.filename, w.lineno) for w in found
    ]
    assert all(issubclass(w.category, RfolDaskWarning) for w in found), [w.category for w in found]


def _data(M=60, n=8, seed=0):
    X = np.random.default_rng(seed).standard_normal((M, n))
    return X, np.sin(X)


def test_warnings_of_fit_point_at_the_callers_line():
    X, Y = _data()
    # memory.memory_budget (stacklevel 3: pointed into rfol_dask/memory.py)
    _assert_here(
        _recorded(
            lambda: RandomFeatureOperator(
                n_features=50, random_state=0, max_gram_bytes=4 * psutil.virtual_memory().total
            ).fit(X, Y),
            "more than this machine's memory",
        )
    )
    # memory.dual_plan on dask input (stacklevel 3: pointed into rfol_dask/rf_operator.py)
    _assert_here(
        _recorded(
            lambda: RandomFeatureOperator(n_features=100, random_state=0, max_gram_bytes=1000).fit(
                da.from_array(X, chunks=20), da.from_array(Y, chunks=20)
            ),
            "factorising it blocked",
        )
    )
    # io.align_samples (stacklevel 4 happened to fit)
    Yl = xr.DataArray(Y, dims=("sample", "d"), coords={"sample": np.arange(len(Y))})
    Yl = Yl.isel(sample=np.random.default_rng(1).permutation(len(Y)))
    _assert_here(
        _recorded(
            lambda: RandomFeatureOperator(n_features=50, random_state=0).fit(X, Yl),
            "paired by position",
        )
    )


def test_warnings_of_predict_and_score_point_at_the_callers_line():
    X, Y = _data()
    x = np.linspace(0, 1, X.shape[1])
    model = RandomFeatureOperator(n_features=50, random_state=0, recovery="spectral").fit(
        X, Y, input_grid=x, output_grid=x
    )
    _assert_here(
        _recorded(lambda: model.predict(X[:3], output_grid=np.linspace(0, 1, 16)), "as periodic")
    )
    # metrics.r2_score through score (no stacklevel: pointed into rfol_dask/metrics.py)
    _assert_here(_recorded(lambda: model.score(X[:1], Y[:1]), "less than two samples"))


def test_a_warning_in_a_task_of_the_package_points_at_the_task():
    """No user code on a pool thread's stack: the warning names the package's outermost frame
    (the task), not the pool's or dask's code that ran it."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        found = _recorded(
            lambda: pool.submit(memory.memory_budget, 4 * psutil.virtual_memory().total).result(),
            "more than this machine's memory",
        )
    assert [w.filename for w in found] == [memory.__file__]


def test_user_stacklevel_outside_the_package_is_the_caller_itself():
    def warn():
        warnings.warn("here", UserWarning, stacklevel=user_stacklevel())

    found = _recorded(warn, "here")
    assert found[0].lineno == warn.__code__.co_firstlineno + 1


def _duplicated_float32(M=100, n=16):
    """Float32 inputs with every sample twice: an exactly singular Gram, which the jitter policy
    factorises with a raised ridge (deterministic, unlike the rounding of a merely
    ill-conditioned one)."""
    X, Y = _data(M, n)
    return np.vstack([X, X]).astype(np.float32), np.vstack([Y, Y]).astype(np.float32)


def test_ridge_warning_points_at_the_callers_line():
    """The raised-ridge warning names the user's line on the in-memory, kernel and blocked dask
    paths (its fixed stacklevel=4 named rfol_dask/backend.py on the default path)."""
    X, Y = _duplicated_float32()
    _assert_here(
        _recorded(
            lambda: RandomFeatureOperator(n_features=500, random_state=0).fit(X, Y),  # defaults
            r"alpha=1e-10 is not numerically positive definite in float32; used ridge",
        )
    )
    _assert_here(
        _recorded(lambda: KernelOperator(nugget=1e-30).fit(X, Y), "nugget=1e-30 .*used ridge")
    )
    Xd, Yd = (
        da.from_array(X.astype(np.float64), chunks=50),
        da.from_array(Y.astype(np.float64), chunks=50),
    )
    found = _recorded(
        lambda: RandomFeatureOperator(
            n_features=600, alpha=1e-30, random_state=0, max_gram_bytes=1000
        ).fit(Xd, Yd),
        "used ridge",
    )
    _assert_here(found)  # the blocked factorisation's retries run on this thread


def _warn_calls():
    """``(file, line, category node or None, first argument node)`` of each ``warnings.warn``
    call in the package's source."""
    root = pathlib.Path(rfol_dask.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "warn"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "warnings"
            ):
                category = (
                    node.args[1]
                    if len(node.args) > 1
                    else next((k.value for k in node.keywords if k.arg == "category"), None)
                )
                yield path.relative_to(root), node.lineno, category, node.args[0]


def test_every_warning_of_the_package_is_an_rfol_dask_warning():
    """Each ``warnings.warn`` names a category of ``rfol_dask.exceptions`` that is an
    RfolDaskWarning, or warns an instance of the one that is made elsewhere (RidgeRaised), so that
    a filter by category reaches every warning (a filter by module cannot: they point at the
    user's line)."""
    calls = list(_warn_calls())
    assert len(calls) > 10
    wrong = []
    for path, line, category, first in calls:
        if category is None:  # warnings.warn(instance): the instance is a RidgeRaised
            ok = isinstance(first, ast.Name) and first.id in ("raised", "w")
        else:
            cls = getattr(exceptions, category.id, None) if isinstance(category, ast.Name) else None
            ok = isinstance(cls, type) and issubclass(cls, RfolDaskWarning)
        if not ok:
            wrong.append(f"{path}:{line}")
    assert not wrong, wrong
    assert issubclass(exceptions.RidgeRaised, RfolDaskWarning)


def test_a_filter_by_category_reaches_the_package_s_warnings():
    """The categories keep the standard ones they were (RuntimeWarning, UserWarning), and a
    filter on RfolDaskWarning, or on one kind, acts on them."""
    X, Y = _data()
    fit = lambda: RandomFeatureOperator(n_features=100, random_state=0, max_gram_bytes=1000).fit(  # noqa: E731
        da.from_array(X, chunks=20), da.from_array(Y, chunks=20)
    )
    kinds = [
        getattr(exceptions, name)
        for name in exceptions.__all__
        if name.endswith("Warning") or name == "RidgeRaised"
    ]
    assert not issubclass(RfolDaskWarning, (UserWarning, RuntimeWarning))
    for kind in kinds[
        1:
    ]:  # each the one standard category it always had: a filter on the other misses it
        assert issubclass(kind, RfolDaskWarning) and issubclass(kind, UserWarning) != issubclass(
            kind, RuntimeWarning
        )
    assert issubclass(exceptions.MemoryPlanWarning, RuntimeWarning)
    assert issubclass(exceptions.UndefinedMetricWarning, sklearn.exceptions.UndefinedMetricWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.filterwarnings("error", category=exceptions.MemoryPlanWarning)
        with pytest.raises(exceptions.MemoryPlanWarning, match="factorising it blocked"):
            fit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=RfolDaskWarning)
        fit()
    assert not [w for w in caught if issubclass(w.category, RfolDaskWarning)]
