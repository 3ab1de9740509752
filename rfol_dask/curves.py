"""Error-vs-N and fit-time-vs-N curves from one fit per seed that grows N block by block.

The dual Gram of ``N`` features is a sum over feature blocks, ``K_N = sum_f A_f A_f^T``, so one
pass over the blocks of a single draw ``Omega`` (n, N_max) gives the fit at every checkpoint ``N``:
the running sum is factorised (``factor.dual_factor``) and solved there, and the test predictions
come from the cross Gram ``K*_N = sum_f A*_f A_f^T`` accumulated alike (``A*_{1:N} C_N = K*_N
Beta``). Each checkpoint equals ``RandomFeatureOperator(n_features=N)`` of the same seed
(``draw_frequencies`` is nested in ``N``). In memory (numpy). :func:`fit_slope` fits ``log error =
a + s log N`` before saturation; :func:`fit_excess` ``error = floor + c N^(-p)`` past ``N = 2 M``.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from .curve_data import append_curve, curve_dataset
from .factor import dual_factor, dual_intercept, dual_solve
from .features import draw_frequencies, integer_seed
from .gram import check_finite, features_block
from .linalg import symmetrize, syrk
from .metrics import relative_l2_error
from .stores import check_sources
from .tuning import input_scales

__all__ = ["doubling", "error_curve", "error_curves", "curve_dataset", "append_curve",
           "saturation_index", "fit_slope", "fit_excess"]  # fmt: skip

#: bytes of one block of training (or test) features held at a time
_BLOCK_BYTES = 64 * 2**20


def doubling(start=250, stop=64000):
    """Checkpoints ``start, 2 start, 4 start, ...`` up to ``stop`` inclusive (int ndarray).

    ``start`` and ``stop`` are integers (integral floats such as ``6.4e4`` are taken) with
    ``1 <= start <= stop``; anything else raises ValueError (TypeError if not numbers)."""
    start, stop = _integer(start, "start", 1), _integer(stop, "stop", 1)
    if stop < start:
        raise ValueError(f"stop must be >= start, got doubling({start}, {stop})")
    out = [start]
    while out[-1] * 2 <= stop:
        out.append(out[-1] * 2)
    return np.array(out)


def _integers(values, name, minimum):
    """``values`` as int64; TypeError unless numbers, ValueError unless integral and >= minimum."""
    a = np.asarray(values)
    what = "integers" if a.ndim else "an integer"
    if a.dtype.kind not in "iuf":  # bool, str, object (None, nested ragged lists, ...)
        raise TypeError(f"{name} must be {what}, got {values!r}")
    if not np.all(np.isfinite(a) & (a == np.round(a)) & (np.abs(a) < 2**62)):
        raise ValueError(f"{name} must be {what}, got {values!r}")
    if np.any(a < minimum):
        raise ValueError(f"{name} must be >= {minimum}, got {values!r}")
    return a.astype(np.int64)


def _integer(value, name, minimum):
    """One integer ``value`` as an int, checked as :func:`_integers` checks."""
    a = _integers(value, name, minimum)
    if a.ndim:
        raise TypeError(f"{name} must be one integer, got {value!r}")
    return int(a)


def error_curve(
    U: ArrayLike,
    V: ArrayLike,
    U_test: ArrayLike,
    V_test: ArrayLike,
    n_features: Sequence[int],
    *,
    distribution: str = "cauchy",
    gamma: float | str = "median",
    nu: float | None = None,
    alpha: float = 1e-10,
    fit_intercept: bool = True,
    random_state: int | np.random.Generator | None = None,
    frequencies: tuple[ArrayLike, ArrayLike] | None = None,
    block_size: int | None = None,
    error: Callable[[np.ndarray, np.ndarray], float] = relative_l2_error,
    return_predictions: bool = False,
    pca_power: float | None = None,
) -> dict:
    """Test error and fit time of the dual random-feature fit at each ``N`` in ``n_features``.

    Parameters
    ----------
    U : array-like of shape (M, n)
        Training inputs (flattened grids); computed in float64.
    V : array-like of shape (M, m) or (M,)
        Training outputs.
    U_test : array-like of shape (M_t, n)
        Test inputs.
    V_test : array-like of shape (M_t, m) or (M_t,)
        Test outputs.
    n_features : sequence of int
        Increasing checkpoints; the largest is ``N_max``.
    distribution : {"cauchy", "gaussian", "student_t", "rational_quadratic"}, default="cauchy"
        Frequency law, as in :class:`rfol_dask.RandomFeatureOperator`.
    gamma : float or "median", default="median"
        Frequency scale; ``"median"``: the median heuristic measured on ``U`` as
        ``RandomFeatureOperator`` measures it. The value used is returned as ``gamma``.
    nu : float, optional
        Degrees of freedom of ``"student_t"``, shape of ``"rational_quadratic"``.
    alpha : float, default=1e-10
        Ridge parameter.
    fit_intercept : bool, default=True
        Centre features and outputs.
    random_state : int, Generator or None, default=None
        Seed of the one draw ``Omega`` (n, N_max): checkpoint ``N`` is the model
        ``RandomFeatureOperator(n_features=N)`` of the same ``random_state``.
    frequencies : tuple (omega (n, N_max), b (N_max,)), optional
        Use these frequencies instead of drawing them (``random_state`` then plays no part).
    block_size : int, optional
        Features per block (default: about 64 MiB of training or test features per block).
    error : callable, default=relative_l2_error
        ``error(V_test, prediction) -> float``.
    return_predictions : bool, default=False
        Also return the test predictions at every checkpoint (``M_t m`` memory each).
    pca_power : float, optional
        Draw in the input metric of ``RandomFeatureOperator(pca_power=...)``, measured on ``U``
        as that model measures it.

    Returns
    -------
    dict
        Arrays of shape (n_checkpoints,): ``n_features``, ``error``, ``fit_time`` (what a single
        fit at that ``N`` costs: its blocks' feature and Gram work, one factorisation and solve)
        and ``predict_time``; ``gamma``, ``n_train``, ``seed`` (the draw's integer seed; None
        with given ``frequencies``), ``settings`` (what else the curve depends on) and, with
        ``return_predictions``, ``predictions``. :func:`curve_dataset` makes it a Dataset.

    Raises
    ------
    ValueError
        If ``n_features`` is not increasing positive integers, ``block_size`` not a positive
        integer, ``frequencies`` are too few, the arrays' shapes do not match, ``gamma`` is not
        positive, ``alpha`` is negative, or ``V`` or ``V_test`` holds NaN / Inf.

    Notes
    -----
    A ridge raised by the jitter policy is announced by a RuntimeWarning, as in a plain fit. For
    ``N < M`` the solve leans on ``alpha`` (a plain fit would use the primal solver). Memory:
    ``Omega``, two ``M x M`` Grams, the ``M_t x M`` cross Gram and one feature block of each set.
    """
    U, V, U_test, V_test = _check_curve_data(U, V, U_test, V_test, gamma, alpha)
    check_finite(V, 0, "V")
    # else every error, and every slope fitted to them, is NaN
    check_finite(V_test, 0, "V_test", "computing error curves")
    checkpoints = _integers(n_features, "n_features", 1)
    if checkpoints.ndim != 1 or len(checkpoints) == 0 or np.any(np.diff(checkpoints) <= 0):
        raise ValueError(f"n_features must be increasing positive integers, got {n_features!r}")
    if block_size is not None:
        block_size = _integer(block_size, "block_size", 1)
    M, n = U.shape
    seed, metric, gamma_arg = integer_seed(random_state), None, gamma
    if pca_power is not None and frequencies is not None:
        raise ValueError(
            "pass pca_power or frequencies, not both (the metric shapes the frequencies)"
        )
    if frequencies is None and (pca_power is not None or gamma == "median"):
        # as the model measures them
        metric, gammas = input_scales(U, [distribution], pca_power, random_state=seed)
        gamma = gammas[distribution] if gamma == "median" else gamma
    N_max = int(checkpoints[-1])
    omega, b = _curve_frequencies(frequencies, n, N_max, distribution, gamma, nu, seed, metric)
    block_size = block_size or max(64, _BLOCK_BYTES // (8 * max(M, len(U_test))))
    # feature blocks end at every checkpoint and every multiple of block_size
    edges = np.unique(np.r_[0, np.arange(0, N_max + 1, block_size), checkpoints])
    data = (U, V, U_test, V_test, omega, b)
    out, predictions = _sweep(data, edges, checkpoints, float(alpha), fit_intercept, error)
    out["gamma"] = float(gamma) if gamma != "median" else float("nan")  # nan: given frequencies
    out["seed"] = None if frequencies is not None else seed  # also where random_state was None
    out["n_train"], rule = int(M), "median" if gamma_arg == "median" else "given"
    rule = "frequencies" if frequencies is not None else rule
    nu, pca_power = (None if x is None else float(x) for x in (nu, pca_power))
    out["settings"] = dict(
        distribution=distribution, nu=nu, alpha=float(alpha), fit_intercept=bool(fit_intercept),
        pca_power=pca_power, gamma_rule=rule, error=getattr(error, "__name__", repr(error)),
        n_test=len(U_test),
    )  # fmt: skip
    if return_predictions:
        out["predictions"] = predictions
    return out


def _sweep(data, edges, checkpoints, alpha, fit_intercept, error):
    """One pass over the feature blocks between ``edges``: the curve and its predictions."""
    U, V, U_test, V_test, omega, b = data
    S = np.zeros((len(U), len(U)), order="F")  # lower triangle of sum_f A_f A_f^T
    S_test, vsum = np.zeros((len(U_test), len(U))), V.sum(axis=0)
    out = {k: [] for k in ("n_features", "error", "fit_time", "predict_time")}
    t_fit, t_pred, predictions = 0.0, 0.0, []
    for lo, hi in zip(edges[:-1], edges[1:], strict=False):
        block = (omega[:, lo:hi], b[lo:hi])
        dt_fit, dt_pred = _accumulate_block(U, U_test, *block, fit_intercept, S, S_test)
        t_fit, t_pred = t_fit + dt_fit, t_pred + dt_pred
        if hi not in checkpoints:
            continue
        pred, dt_fit, dt_pred = _checkpoint_prediction(S, S_test, hi, V, vsum, alpha, fit_intercept)
        values = (int(hi), float(error(V_test, pred)), t_fit + dt_fit, t_pred + dt_pred)
        for k, v in zip(out, values, strict=True):
            out[k].append(v)
        predictions.append(pred)
    return {k: np.asarray(v) for k, v in out.items()}, predictions


def _check_curve_data(U, V, U_test, V_test, gamma, alpha):
    """The four arrays in float64, outputs 2-D; ValueError naming what does not match."""

    def number(x):
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and np.isfinite(x)

    if not (gamma == "median" or number(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a number > 0 or 'median', got {gamma!r}")
    if not (number(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a number >= 0, got {alpha!r}")
    # a missing chunk file of a Zarr store: an error, not its fill value
    check_sources(U, V, U_test, V_test)
    U, U_test = (np.ascontiguousarray(X, dtype=np.float64) for X in (U, U_test))
    V, V_test = (np.asarray(Y, dtype=np.float64) for Y in (V, V_test))
    V, V_test = (Y[:, None] if Y.ndim == 1 else Y for Y in (V, V_test))
    for name, X in (("U", U), ("U_test", U_test), ("V", V), ("V_test", V_test)):
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D (samples, flattened grid), got shape {X.shape}: "
                             f"reshape it to ({name}.shape[0], -1)")  # fmt: skip
    if len(V) != len(U) or len(V_test) != len(U_test):
        raise ValueError(f"samples differ: U {len(U)}, V {len(V)}, U_test {len(U_test)}, "
                         f"V_test {len(V_test)}")  # fmt: skip
    if U_test.shape[1] != U.shape[1] or V_test.shape[1] != V.shape[1]:
        raise ValueError(f"widths differ: U {U.shape[1]} vs U_test {U_test.shape[1]}, V "
                         f"{V.shape[1]} vs V_test {V_test.shape[1]}")  # fmt: skip
    return U, V, U_test, V_test


def _curve_frequencies(frequencies, n, n_max, distribution, gamma, nu, random_state, metric=None):
    """``(omega (n, >= n_max), b)``: the given ``frequencies`` (checked) or a draw of ``n_max``."""
    if frequencies is None:
        return draw_frequencies(n, n_max, distribution, gamma, nu, random_state, metric=metric)
    omega, b = (np.asarray(a, dtype=np.float64) for a in frequencies)
    if omega.shape[0] != n or omega.shape[1] < n_max or b.shape != (omega.shape[1],):
        raise ValueError(f"frequencies have shape {omega.shape}; need ({n}, >= {n_max})")
    return omega, b


def _scaled_features(X, omega, b, shift=None, name="U"):
    """Features of ``X`` for one block of frequencies, times ``sqrt(w)`` (then ``K_N = S / N``
    for every ``N``), minus ``shift`` if given."""
    A = features_block(X, omega, b, name=name)
    A *= np.sqrt(omega.shape[1])
    if shift is not None:
        A -= shift
    return A


def _accumulate_block(U, U_test, omega, b, fit_intercept, S, S_test):
    """``S += A A^T`` (lower triangle) and ``S_test += A* A^T`` in place, both centred by ``A``'s
    column means if ``fit_intercept``; returns the seconds of the training and the test part."""
    t0 = time.perf_counter()
    A = _scaled_features(U, omega, b)
    shift = A.mean(axis=0) if fit_intercept else None
    if shift is not None:
        A -= shift
    syrk(A, trans=False, C=S)
    t1 = time.perf_counter()
    At = _scaled_features(U_test, omega, b, shift, name="U_test")
    S_test += At @ A.T
    return t1 - t0, time.perf_counter() - t1


def _checkpoint_prediction(S, S_test, N, V, vsum, alpha, fit_intercept):
    """The fit at checkpoint ``N`` (``K_N = S / N``): the test prediction and the seconds of the
    factorisation and solve and of the prediction."""
    t0 = time.perf_counter()
    K = symmetrize(S.copy(order="F"))
    K /= N
    fac = dual_factor(K, vsum, alpha, fit_intercept)
    Beta = dual_solve(fac, V)
    intercept = dual_intercept(fac, Beta)
    t1 = time.perf_counter()
    pred = (S_test @ Beta) / N + intercept
    return pred, t1 - t0, time.perf_counter() - t1


def error_curves(U, V, U_test, V_test, n_features, seeds=(0, 1, 2, 3, 4), **kwargs):
    """:func:`error_curve` for each seed in ``seeds`` (integers >= 0; one only with given
    ``frequencies``, which fix the draw): a dict of (n_seeds, n_points) arrays ``error``,
    ``fit_time``, ``predict_time``, the ``n_features``, ``seeds``, each seed's ``gamma``,
    ``n_train``, ``settings``, the :func:`fit_slope` of the geometric-mean error (``slope``) and
    of the median fit time (``time_slope``), the :func:`fit_excess` of that error (``excess``)
    and, with ``return_predictions=True``, each seed's ``predictions``."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed (one curve per seed)")
    seeds = _integers(seeds, "seeds", 0)  # numpy's seeds, not floats truncated to them
    if seeds.ndim != 1:
        raise ValueError(f"seeds must be a sequence of integers, got shape {seeds.shape}")
    if kwargs.get("frequencies") is not None and len(seeds) > 1:
        raise ValueError(f"frequencies fix the draw whatever the seed: seeds {seeds.tolist()} "
                         f"would give {len(seeds)} identical curves labelled as different draws; "
                         "pass one seed (seeds=(s,), the label of the curve of these frequencies), "
                         "or leave out frequencies to draw them per seed")  # fmt: skip
    data = (U, V, U_test, V_test, n_features)
    runs = [error_curve(*data, random_state=int(s), **kwargs) for s in seeds]
    res = {k: np.stack([r[k] for r in runs]) for k in ("error", "fit_time", "predict_time")}
    res.update({k: runs[0][k] for k in ("n_features", "n_train", "settings")})
    res["gamma"] = np.asarray([r["gamma"] for r in runs])
    res["seeds"] = np.asarray(seeds)
    if "predictions" in runs[0]:
        res["predictions"] = [r["predictions"] for r in runs]
    N, error = res["n_features"], np.exp(np.log(res["error"]).mean(axis=0))
    res["slope"] = fit_slope(N, error)
    res["time_slope"] = fit_slope(N, np.median(res["fit_time"], axis=0), min_decay=None)
    res["excess"] = fit_excess(N, error, start_at=2 * len(U))
    return res


def saturation_index(n_features, errors, min_decay=0.1):
    """Index of the first checkpoint at which the error has saturated.

    Rule: with the local slopes ``s_k = log(e_k / e_{k-1}) / log(N_k / N_{k-1})``, the curve
    saturates at the first ``k`` with ``s_k > -min_decay`` (for doubling ``N`` and the default
    0.1: the error fell by less than 7 % over the last doubling, or rose). Points ``0 .. k-1``
    are before saturation; ``len(errors)`` means no saturation. A noisy curve (few seeds,
    or near the interpolation threshold ``N ~ M`` with a tiny ridge) can trip the rule early.
    """
    n, e = np.log(np.asarray(n_features, float)), np.log(np.asarray(errors, float))
    local = np.diff(e) / np.diff(n)
    bad = np.flatnonzero(local > -min_decay)
    return int(bad[0] + 1) if len(bad) else len(e)


def fit_slope(n_features, errors, min_decay=0.1, min_points=2):
    """Least-squares slope of ``log errors`` against ``log n_features`` before saturation.

    Parameters
    ----------
    n_features, errors : array (k,)
        Checkpoints and (positive) errors (or times).
    min_decay : float or None
        Saturation threshold of :func:`saturation_index`; ``None`` fits every point (for
        growing quantities such as fit times).
    min_points : int
        Fewer points before saturation than this gives ``slope = nan``.

    Returns
    -------
    dict ``slope``, ``intercept`` (of the log-log line), ``n_points`` (points used) and
    ``saturated_at`` (the first saturated ``N``, or None).
    """
    N, err = np.asarray(n_features, float), np.asarray(errors, float)
    k = len(N) if min_decay is None else saturation_index(N, err, min_decay)
    sat = None if k >= len(N) else float(N[k])
    slope = intercept = float("nan")
    if k >= min_points:
        slope, intercept = np.polyfit(np.log(N[:k]), np.log(err[:k]), 1)
    return dict(slope=float(slope), intercept=float(intercept), n_points=k, saturated_at=sat)


def fit_excess(n_features, errors, start_at=None, min_points=4):
    """Fit ``error = floor + c N^(-p)`` (least squares on ``log error``) over the checkpoints
    with ``N >= start_at``: the decay of the error towards its limit (the kernel interpolant
    for a tiny ridge and ``N >> M``). Returns a dict ``floor``, ``c``, ``p``, ``n_points``,
    ``from_n``; NaNs with fewer than ``min_points`` points or if the fit fails."""
    from scipy.optimize import curve_fit

    N, err = np.asarray(n_features, float), np.asarray(errors, float)
    keep = N >= (start_at or 0)
    N, err = N[keep], err[keep]
    out = dict(floor=float("nan"), c=float("nan"), p=float("nan"), n_points=int(len(N)))
    out["from_n"] = float(N[0]) if len(N) else None
    if len(N) < min_points:
        return out

    def model(logn, log_floor, log_c, p):
        return np.logaddexp(log_floor, log_c - p * logn)

    floor0 = 0.9 * err.min()
    p0 = (np.log(floor0), np.log(max(err[0] - floor0, 1e-12 * err[0])) + 0.5 * np.log(N[0]), 0.5)
    how = dict(p0=p0, bounds=([-50, -50, 0], [5, 50, 4]), maxfev=20000)
    try:
        (lf, lc, p), _ = curve_fit(model, np.log(N), np.log(err), **how)
    except (RuntimeError, ValueError):
        return out
    out.update(floor=float(np.exp(lf)), c=float(np.exp(lc)), p=float(p))
    return out
