"""KernelOperator: exact kernel ridge regression for operators (one scalar kernel shared by all
output components, as in Batlle et al. 2024), on the random-feature model's dual machinery
(:func:`rfol_dask.solve.in_memory.dual_numpy`, :func:`rfol_dask.solve.tiled.dual_graph`).

Model: ``v(u) = k(u, U_train) Beta + c0`` with ``(H K H + nugget I) Beta = V - vbar`` when fitting
an intercept (``H`` centres in feature space). Optional input PCA (``n_components``,
``pca_power``) replaces each input by its (weighted) principal scores. Where a Cholesky
factorisation cannot take the nugget, the dual is solved by an eigendecomposition
(:func:`eigen_dual`), as the search scores it. The linear kernel on fewer inputs ``p`` than
samples is solved in the primal, ``(X_c^T X_c + nugget I) W = X_c^T V_c`` (its rank-``p`` dual
loses ``log10(1 / nugget)`` digits); with ``p >= M`` by :func:`eigen_dual` without the
directions of rounding.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import re

import dask
import dask.array as da
import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from .. import backend
from ..estimator import OperatorEstimator
from ..factor import DualFactor, dual_intercept, primal_factor, primal_solve
from ..gram import check_finite, linear_partial, linear_shifts
from ..linalg import blas_limits, factor_threads, recorded_ridges, ridge_name
from ..memory import (
    ROW_BLOCK_BYTES,
    check_gram_memory,
    check_host_memory,
    dual_plan,
    gram_slots,
    memory_budget,
    n_slots,
)
from ..progress import active_client
from ..solve.graph import (
    MAX_TILE_BLOCKS,
    TaskNames,
    column_slab,
    compute_fit,
    row_blocks,
    with_ridges,
)
from ..solve.in_memory import dual_numpy, row_ranges
from ..solve.primal import primal_sums, solve_primal
from ..solve.tiled import dual_graph
from ..tuning import (
    eigh_above,
    median_length_scale,
    rounding_floor,
    sample_rows,
    weighted_directions,
)
from .kernels import KERNELS, kernel_tile

__all__ = ["KernelOperator", "eigen_dual", "pca", "transform_inputs"]


def transform_inputs(U, start, mean, components, dtype):
    """Checked inputs of one row block, projected on the PCA directions if any: (k, n) -> (k, p);
    computed where the directions live (a numpy ``U`` is moved to a device's directions), else
    where ``U`` lives."""
    ref = components if backend.is_array_api(components) else U
    xp = backend.namespace(ref) if backend.is_array_api(ref) else np
    U = xp.asarray(
        backend.to_namespace(U, xp) if xp is not np else U, dtype=getattr(xp, np.dtype(dtype).name)
    )
    check_finite(U, start, "U")
    return U if components is None else (U - mean) @ components


def _predict_linear(U, coef, intercept, mean, components):
    """``x W + c0`` for one row block (k, n) -> (k, m): the linear kernel fitted in the primal."""
    xp = backend.namespace(coef)
    X = transform_inputs(
        backend.to_namespace(U, xp), 0, mean, components, backend.to_numpy_dtype(coef.dtype)
    )
    out = X @ coef
    out += intercept
    return out


def _predict_block(U, X_train, Beta, intercept, mean, components, tile):
    """``k(U, X_train) Beta + c0`` for one row block (k, n) -> (k, m), in row chunks."""
    xp = backend.namespace(Beta)
    X = transform_inputs(
        backend.to_namespace(U, xp), 0, mean, components, backend.to_numpy_dtype(Beta.dtype)
    )
    M = X.shape[0]
    out = xp.empty((M, Beta.shape[1]), dtype=Beta.dtype)
    step = max(1, ROW_BLOCK_BYTES // (backend.itemsize(Beta.dtype) * max(1, X_train.shape[0])))
    for s in range(0, M, step):
        e = min(s + step, M)
        out[s:e, ...] = tile(X[s:e, ...], X_train) @ Beta
    out += intercept
    return out


@contextlib.contextmanager
def _nugget_messages():
    """The shared solvers (:mod:`rfol_dask.solve`) call their ridge ``alpha``; this model's is
    ``nugget``: their errors are re-raised with the name this model takes, and a raised ridge's
    warning names it (:func:`rfol_dask.linalg.ridge_name`: this thread's context only)."""
    with ridge_name("nugget"):
        try:
            yield
        except ValueError as exc:
            raise ValueError(re.sub(r"\balpha\b", "nugget", str(exc))) from exc


def pca(U, n_components, power=None):
    """Mean (n,) and leading principal directions (n, p) of the rows of ``U`` (numpy or dask),
    each weighted by ``(s_j / s_1)^power`` if ``power`` is given (:func:`pca_from_scatter`).

    One pass over ``U`` (the ``n x n`` scatter matrix is summed over sample blocks) and an
    ``n x n`` symmetric eigendecomposition; memory ``n^2``.
    """
    if backend.is_array_api(
        U
    ):  # CuPy: the scatter on the device, the small eigenproblem on the host
        check_finite(U, 0, "U")
        xp = backend.namespace(U)
        mean = xp.mean(U, axis=0)
        Uc = U - mean
        mean, Q = pca_from_scatter(
            backend.to_numpy(mean), backend.to_numpy(Uc.T @ Uc), n_components, power
        )
        return backend.to_namespace(mean, xp), backend.to_namespace(Q, xp)
    mean = U.mean(axis=0)
    Uc = U - mean
    lib = da if isinstance(U, da.Array) else np
    mean, scatter, bad = dask.compute(
        mean, Uc.T @ Uc, lib.flatnonzero(~lib.isfinite(U).all(axis=1))
    )
    if bad.size:  # the eigensolver would not converge: named as the fit's own check names them
        raise ValueError(
            f"U contains NaN or infinity in {bad.size} samples (first bad sample: {bad[0]}); drop "
            "or "
            "fill those samples before fitting"
        )
    return pca_from_scatter(mean, scatter, n_components, power)


def pca_from_scatter(mean, scatter, n_components, power=None):
    """``(mean (n,), leading principal directions (n, p))`` from the scatter matrix (n, n).

    With ``power`` (``pca_power``) the directions are weighted by ``(s_j / s_1)^power`` (``s_j^2``
    the scatter's eigenvalues), with the rule of :func:`rfol_dask.tuning.weighted_directions`
    (the directions that hardly count left out, then at most ``n_components`` of the rest)."""
    lam, Q = np.linalg.eigh(np.asarray(scatter))
    lam, Q = lam[::-1], Q[:, ::-1]
    if power is None:
        p = min(int(n_components), Q.shape[1])
        return np.asarray(mean), np.ascontiguousarray(Q[:, :p])
    ratio = np.sqrt(np.clip(lam, 0.0, None) / lam[0]) if lam[0] > 0 else np.ones_like(lam)
    return np.asarray(mean), weighted_directions(
        Q, ratio, power, None if n_components is None else int(n_components)
    )


def eigen_dual(X, V, tile=None, *, alpha, fit_intercept):
    """The dual by one eigendecomposition of the centred Gram, ``(DualFactor, centred Beta
    (M, m))``: ``H K H = Q diag(lam) Q^T`` and ``Beta = Q (lam_+ + alpha)^-1 Q^T (V - vbar)``, the
    solution the searches score (:class:`rfol_dask.tuning.EigenPath`: eigenvalues below zero are
    rounding, set to zero), for any ``alpha > 0``, where a Cholesky factorisation of
    ``H K H + alpha I`` may fail on the Gram's rounding. ``K = tile(X, X, True)``; ``tile=None``:
    the linear kernel ``X X^T``, whose directions with an eigenvalue within the bound of its
    rounding (``eps trace`` of ``K``, :func:`rfol_dask.tuning.rounding_floor`) are left out:
    with more inputs than samples on rank-deficient inputs, the solve divided the outputs' part
    outside the inputs' span by the nugget and the prediction cancelled it again, losing about
    ``log10(1 / nugget)`` digits against scikit-learn's ``Ridge(solver="svd")``; outside the span
    ``Beta`` has no effect on any prediction. ``X`` (M, p), ``V`` (M, m). Cost the Gram and an
    ``eigh`` (about 9 Cholesky factorisations) on :func:`rfol_dask.linalg.factor_threads` BLAS
    threads; memory the Gram and its eigenvectors, ``2 M^2``."""
    from ..solve.in_memory import _checked

    V = _checked(V, X)
    xp = backend.namespace(X)
    M = X.shape[0]
    with blas_limits(factor_threads()):
        K = (X @ X.T).T if tile is None else backend.as_fortran(tile(X, X, True))
        r = xp.sum(K, axis=1)
        floor = rounding_floor(K, bound=True) if tile is None else None
        if fit_intercept:
            backend.centre_gram(K, r / M, xp.sum(r) / M**2)
        lam, Q = eigh_above(K, floor)
        del K
        vbar = xp.mean(V, axis=0) if fit_intercept else xp.zeros(V.shape[1], dtype=V.dtype)
        lam = xp.maximum(lam, xp.zeros_like(lam))
        Beta = Q @ ((Q.T @ (V - vbar)) / (lam + alpha)[:, None])
    if fit_intercept:
        Beta -= xp.mean(Beta, axis=0)
    fac = DualFactor(L=None, r=r, vbar=vbar, M=M, fit_intercept=fit_intercept, ridge=float(alpha))
    return fac, Beta


def _block_moments(X):
    """Column sums, sum of squares and row count of the row block ``X``."""
    return X.sum(axis=0), float((X * X).sum()), X.shape[0]


def _linear_mean_diag(Xb, centred):
    """The mean diagonal of the linear kernel's Gram, centred (``H X X^T H``:
    ``mean |x_i - xbar|^2``) or not, from the delayed row blocks ``Xb``: one pass over them."""
    parts = dask.compute(*[dask.delayed(_block_moments)(x) for x in Xb])
    total, squares, M = (sum(p[k] for p in parts) for k in range(3))
    return squares / M - (float(total @ total) / M**2 if centred else 0.0)


class KernelOperator(OperatorEstimator):
    """Kernel ridge regression for operators, with the conventions of ``RandomFeatureOperator``.

    Parameters
    ----------
    kernel : {"rbf", "matern12", "matern32", "matern52", "inverse_quadratic", "linear"}, \
default="rbf"
        Scalar kernel of the (flattened, optionally PCA-reduced) input functions; see
        :mod:`rfol_dask.baselines.kernels`. ``"linear"`` is the linear baseline (ridge on raw
        inputs).
    length_scale : float or "median", default="median"
        Kernel length scale ``l`` (ignored by ``"linear"``). ``"median"``: ``l = median
        ||x_i - x_j||_2`` over a sample of at most 2000 training inputs (seed 0; after PCA if any;
        :func:`rfol_dask.tuning.median_length_scale`), the distance of a typical pair.
    nugget : float, default=1e-8
        Ridge added to the diagonal of the centred Gram (>= 0).
    n_components : int, default=None
        Input PCA: fit on the leading ``n_components`` principal scores of the inputs.
    pca_power : float or None, default=None
        The input metric, as ``RandomFeatureOperator``'s: the principal scores (of all training
        inputs) weighted by ``(s_j / s_1)^pca_power``; the kernel and its median length scale
        are taken in them (with ``n_components``, of at most that many directions).
    fit_intercept : bool, default=True
        Centre in feature space and fit an intercept per output component.
    dtype : {None, "float32", "float64"}, default=None
        Working precision; ``None`` follows the input.
    column_block : int, default=None
        Output columns per solve task for dask input (default: spread over all worker threads).
    max_gram_bytes : int, default=None
        Memory budget for the M x M Gram (default: 60 % of available / worker memory).
    progress : bool, default=False
        Show a progress bar while fitting dask input.
    recovery : str, dict or 2-tuple, default="cubic"
        Recovery maps ``(R_U, R_V)`` used by ``predict`` on other grids, as in
        :class:`rfol_dask.RandomFeatureOperator`.
    device : {"cpu", "cuda"}, default="cpu"
        Where numpy / xarray input is computed, as in :class:`rfol_dask.RandomFeatureOperator`
        (CuPy input is computed on its GPU whatever this says).

    Attributes
    ----------
    X_train_ : ndarray of shape (M, p) or None
        Training inputs (``p = n``, or the PCA scores: ``p = n_components``), needed to predict;
        the model's own copy (as scikit-learn's ``GaussianProcessRegressor(copy_X_train=True)``:
        changing the caller's array afterwards does not change the model); None where the linear
        kernel is fitted in the primal (``p < M``: see ``coef_``).
    dual_coef_ : ndarray of shape (M, m) or None
        Dual coefficients ``Beta`` (``m`` output grid points); None where the linear kernel is
        fitted in the primal.
    coef_ : ndarray of shape (p, m) or None
        The linear kernel with fewer inputs ``p`` than samples ``M``: the ridge weights ``W``
        of ``(X_c^T X_c + nugget I) W = X_c^T V_c`` (the same ridge as the dual, solved in
        the primal, where the rank-deficient dual loses precision at small nuggets);
        predictions are ``x W + intercept_`` (``x`` the inputs, or their PCA scores). None for
        the other kernels and for the linear kernel with ``p >= M`` (fitted in the dual; with a
        nugget by :func:`eigen_dual`, an ``eigh`` that leaves out the Gram's directions of
        rounding: for dask input in one task, where its worker holds the Gram with the
        eigenvectors, inputs and outputs, else by the blocked Cholesky factorisation).
    intercept_ : ndarray of shape (m,)
        Intercept ``c0`` of each output grid point.
    pca_mean_ : ndarray of shape (n,) or None
        Mean of the training inputs (None without ``n_components`` and ``pca_power``).
    pca_components_ : ndarray of shape (n, p) or None
        Leading principal directions of the training inputs, weighted with ``pca_power`` (None
        without ``n_components`` and ``pca_power``).
    n_features_in_, input_shape_, output_shape_, input_dims_, output_dims_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_coords_, output_coords_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_grid_, output_grid_, input_periods_, output_periods_, output_attrs_, output_coord_attrs_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    length_scale_ : float
        The length scale used (``length_scale``, or its median-heuristic value; 1.0 for
        ``"linear"``).
    kernel_ : str
        The kernel fitted (``kernel`` at fit time): ``predict`` uses it, so a
        ``set_params(kernel=...)``
        after the fit changes nothing until the next fit, as for every other parameter.

    Memory: the M x M Gram (factorised in place; blocked across workers for dask input that
    does not fit one) plus the training inputs. The fitted arrays, which a dask fit gathers into
    this process, are checked against its available memory before any work
    (:func:`rfol_dask.memory.check_host_memory`, whatever ``max_gram_bytes``). Cost: ``M^2 n``
    (Gram) + ``M^3 / 3`` + ``2 M^2 m``.
    The linear kernel with ``p < M``: the ``p x p`` Gram (one per worker thread for dask input,
    summed over row blocks as the random-feature primal sums its Gram) plus one row block;
    cost ``M p^2 + 2 M p m`` + ``p^3 / 3`` + ``2 p^2 m``. With ``p >= M`` and a nugget: the
    Gram and its eigenvectors (``2 M^2``; for dask input on one worker, with the inputs and
    outputs), cost ``M^2 p`` + an ``eigh`` (about ``3 M^3``) + ``4 M^2 m``.
    """

    _parameter_constraints = {
        "kernel": [StrOptions(set(KERNELS))],
        "length_scale": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"median"})],
        "nugget": [Interval(numbers.Real, 0, None, closed="left")],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "pca_power": [Interval(numbers.Real, None, None, closed="neither"), None],
        **OperatorEstimator._common_constraints,
    }
    _fitted_arrays = (
        "X_train_",
        "dual_coef_",
        "coef_",
        "intercept_",
        "pca_mean_",
        "pca_components_",
    )
    _fitted_scalars = ("length_scale_", "kernel_")

    def __init__(
        self,
        *,
        kernel="rbf",
        length_scale="median",
        nugget=1e-8,
        n_components=None,
        pca_power=None,
        fit_intercept=True,
        dtype=None,
        column_block=None,
        max_gram_bytes=None,
        progress=False,
        recovery="cubic",
        device="cpu",
    ):
        self.kernel = kernel
        self.length_scale = length_scale
        self.nugget = nugget
        self.n_components = n_components
        self.pca_power = pca_power
        self.fit_intercept = fit_intercept
        self.dtype = dtype
        self.column_block = column_block
        self.max_gram_bytes = max_gram_bytes
        self.progress = progress
        self.recovery = recovery
        self.device = device

    def _tile(self):
        return functools.partial(
            kernel_tile, kernel=self.kernel_, length_scale=float(self.length_scale_)
        )

    def _older_scalars(self):
        """Models saved before ``kernel_`` was kept were fitted with the kernel of their
        parameters."""
        return {"kernel_": self.kernel}

    def _resolve_length_scale(self, U, transform):
        """``length_scale_`` from the parameter, or the median heuristic on a sample of the
        (transformed) inputs ``U`` (numpy or dask; only the sample is read). ValueError for a
        length scale whose square is beyond float64 (the kernels divide by it)."""
        if self.kernel == "linear":
            return 1.0
        if self.length_scale != "median":
            ell = float(self.length_scale)
        else:
            ell = median_length_scale(transform(sample_rows(U, random_state=0), 0), random_state=0)
        with np.errstate(over="ignore", under="ignore"):
            if not 0 < np.float64(ell) ** 2 < np.inf:
                source = (
                    " (the median distance of the inputs)" if self.length_scale == "median" else ""
                )
                raise ValueError(
                    f"length scale {ell:.3g}{source}: its square is beyond the range of float64; "
                    "rescale the inputs (e.g. to unit spread)"
                )
        return ell

    def _primal(self, M, p):
        """Whether the fit solves in the primal: the linear kernel on ``p < M`` inputs (PCA
        scores)."""
        return self.kernel == "linear" and p < M

    def _eigen_dual(self):
        """Whether the dual is solved by :func:`eigen_dual` (the linear kernel with a nugget; a dask
        fit where it fits one worker, else blocked: :meth:`_solve`)."""
        return self.kernel == "linear" and self.nugget > 0

    def _width(self, n):
        """The input width ``p`` the kernel sees: the PCA scores' once computed, else at most ``n``
        (``n_components`` of them with input PCA)."""
        components = getattr(self, "pca_components_", None)
        if components is not None:
            return components.shape[1]
        return n if self.n_components is None else min(n, int(self.n_components))

    def _check_memory(self, U, V, lazy, dtype, client=None):
        """ValueError when the fitted model would not fit this process
        (:meth:`_check_model_memory`),
        or the in-memory fit's ``M x M`` Gram of ``U`` (M, n) in ``dtype`` exceeds
        the memory budget (:func:`rfol_dask.memory.check_gram_memory`; on a GPU, its share of the
        GPU's); a dask fit's Gram is not refused for memory (a Gram that does not fit one worker is
        factorised blocked across the workers), but on a GPU it is NotImplementedError
        (:meth:`_refuse_device`). The linear kernel's primal checks its ``p x p`` Gram,
        for dask input too (two of them on a worker that sums several chains')."""
        if lazy:
            self._refuse_device(U)
        self._check_model_memory(U, V, lazy, dtype)
        self._check_gram_memory(U, lazy, dtype, client)

    def _check_gram_memory(self, U, lazy, dtype, client=None, budget=None):
        """The Gram's part of :meth:`_check_memory`, which a fit makes once it knows the input
        width (after the PCA; it checked the device and the model before any work). ``budget``: the
        workers' :class:`rfol_dask.memory.Budget` for a dask primal, if the caller has it."""
        M, p = U.shape[0], self._width(U.shape[1])
        xp = backend.namespace(U) if not lazy and backend.is_array_api(U) else None
        if self._primal(M, p):
            check_gram_memory(
                p,
                dtype,
                self.max_gram_bytes,
                client if lazy else None,
                solver="linear",
                peak_copies=2 if lazy and n_slots(client) > 1 else 1,
                xp=xp,
                budget=budget,
            )
        elif not lazy:  # the linear kernel's eigen solve holds the eigenvectors beside the Gram
            held = (
                {f"its {M} x {M} eigenvectors": M * M * np.dtype(dtype).itemsize}
                if self._eigen_dual()
                else None
            )
            check_gram_memory(M, dtype, self.max_gram_bytes, solver="kernel", xp=xp, held=held)

    def _model_bytes(self, M, n, m, dtype, lazy):
        """The fitted arrays a fit on ``M`` samples of ``n`` inputs and ``m`` outputs adds to this
        process, ``{what: bytes}`` in ``dtype``: the dual coefficients (M x m) and the training
        inputs (M x p, a copy: changing the caller's array afterwards does not change the model), or
        the linear kernel's primal weights (p x m); with input PCA its directions (n x p)."""
        size, p = np.dtype(dtype).itemsize, self._width(n)
        pca_on = self.n_components is not None or self.pca_power is not None
        if self._primal(M, p):
            held = {f"the {p} x {m} weights": p * m * size}
        else:
            held = {f"the {M} x {p} training inputs": M * p * size}
            held[f"the {M} x {m} dual coefficients"] = M * m * size
        if pca_on:
            held[f"the {n} x {p} principal directions"] = (n + 1) * p * size
        return held

    def _check_model_memory(self, U, V, lazy, dtype):
        """ValueError (:func:`rfol_dask.memory.check_host_memory`) when the fitted arrays
        (:meth:`_model_bytes`) exceed this process's available memory where they end up in it:
        after a dask fit (gathered from the workers), or an in-memory fit of numpy (CuPy's stay on
        its GPU, within the GPU's budget)."""
        if lazy or not backend.is_array_api(U):
            M, n, m = U.shape[0], U.shape[1], V.shape[1]
            fewer = (
                "inputs (n_components)"
                if self._primal(M, self._width(n))
                else "training samples (the model holds them), inputs (n_components)"
            )
            check_host_memory(self._model_bytes(M, n, m, dtype, lazy), dtype, fewer=fewer)

    def _model_format(self):
        """Format 3 for the linear kernel's primal weights (``coef_``, no ``X_train_``)."""
        return 3 if getattr(self, "coef_", None) is not None else super()._model_format()

    def _fit_arrays(self, U, V, lazy, dtype):
        """Solve for ``dual_coef_`` (M, m) and ``intercept_`` (m,) and keep the training inputs; for
        the linear kernel on fewer inputs than samples, for ``coef_`` (p, m) and ``intercept_``."""
        with _nugget_messages():
            self._solve(U, V, lazy, dtype)

    def _solve(self, U, V, lazy, dtype):
        M = U.shape[0]
        self.pca_mean_ = self.pca_components_ = None
        if lazy:
            self._refuse_device(U)
        self._check_model_memory(
            U, V, lazy, dtype
        )  # before any work (the PCA, the median length scale)
        if self.n_components is not None or self.pca_power is not None:
            xp = backend.namespace(U) if backend.is_array_api(U) else np
            self.pca_mean_, self.pca_components_ = (
                xp.astype(a, getattr(xp, dtype.name))
                for a in pca(U, self.n_components, self.pca_power)
            )
        transform = functools.partial(
            transform_inputs, mean=self.pca_mean_, components=self.pca_components_, dtype=dtype
        )
        alpha = float(self.nugget)
        self.kernel_ = self.kernel
        self.length_scale_ = self._resolve_length_scale(U, transform)
        self.coef_ = None
        if self._primal(M, self._width(U.shape[1])):
            self.X_train_ = self.dual_coef_ = None
            self.coef_, self.intercept_ = self._solve_primal(U, V, lazy, dtype, transform, alpha)
            return
        if not lazy:
            self._check_gram_memory(U, lazy, dtype)
            X = transform(U, 0)
            if (
                X is U
                # the caller's array, maybe (validated without a copy): kept as it is now, not as it
                # will be
            ):
                X = backend.copy(X)
            fac, Beta = self._dual_in_memory(X, V, dtype, alpha)
            self.X_train_, self.dual_coef_, self.intercept_ = X, Beta, dual_intercept(fac, Beta)
            return
        self._solve_lazy(U, V, dtype, transform, alpha)

    def _solve_lazy(self, U, V, dtype, transform, alpha):
        """The dual of dask input: the eigen solve of the linear kernel in one task where its
        worker holds it, else the tiled Gram factorised (blocked where it does not fit a worker)
        with the jitter policy's raised ridges."""
        M, client = U.shape[0], active_client()
        m, size, eigen = V.shape[1], np.dtype(dtype).itemsize, self._eigen_dual()
        Ub, Vb, starts, cols = row_blocks(
            U, V, self.column_block, client, max_blocks=MAX_TILE_BLOCKS, row_bytes=U.shape[1] * size
        )
        # the eigen solve's worker holds the eigenvectors, the inputs and the outputs beside the
        # Gram; the
        # chain that assembles it a row of tiles (tiled.dual_graph): one Gram more with one row
        # block
        held, what = (
            (M * (M + self._width(U.shape[1]) + m) * size, "the data")
            if eigen
            else (int(max(np.diff(starts))) * M * size, "a row of Gram tiles")
        )
        # the Gram is assembled from its tiles on one worker (or made in the eigen solve's task): no
        # sum of Grams
        blocked = dual_plan(
            M, dtype, self.max_gram_bytes, client, held_bytes=held, summed=False, held_what=what
        ).blocked
        Xb = [dask.delayed(transform)(Ub[i], starts[i]) for i in range(len(Ub))]

        def run(ridge):  # the blocked factorisation is tried again with raised ridges if it fails
            fac, betas = dual_graph(
                Xb,
                Vb,
                starts,
                self._tile(),
                cols,
                alpha=ridge,
                fit_intercept=self.fit_intercept,
                dtype=dtype,
                blocked=blocked,
            )
            intercepts = [
                dask.delayed(dual_intercept)(fac, Beta, start=c0)
                for (c0, _), Beta in zip(cols, betas, strict=False)
            ]
            return compute_fit(
                dask.delayed(np.concatenate)(Xb),
                betas,
                intercepts,
                progress=self.progress,
                client=client,
                desc="fit (kernel)",
                alpha=ridge,
                factor=fac,
            )

        if (
            eigen and not blocked
        ):  # the in-memory solve, in one task: the other dual too makes its Gram on one worker
            X = dask.delayed(np.concatenate)(Xb)
            fac, Beta = dask.delayed(eigen_dual, nout=2)(
                X,
                dask.delayed(column_slab)(0, m, dtype, *Vb),
                alpha=alpha,
                fit_intercept=self.fit_intercept,
            )
            X, betas, intercepts = compute_fit(
                X,
                [Beta],
                [dask.delayed(dual_intercept)(fac, Beta)],
                progress=self.progress,
                client=client,
                desc="fit (linear kernel, eigen)",
                alpha=alpha,
            )
        else:
            # the linear kernel's diagonal is not 1: its mean sets the raised ridges, as in memory
            mean_diag = (
                functools.partial(_linear_mean_diag, Xb, self.fit_intercept)
                if self.kernel == "linear"
                else 1.0
            )
            X, betas, intercepts = with_ridges(run, alpha, dtype, mean_diag)
        self.X_train_ = X
        self.dual_coef_ = np.concatenate(betas, axis=1).astype(dtype, copy=False)
        self.intercept_ = np.concatenate(intercepts).astype(dtype, copy=False)

    def _dual_in_memory(self, X, V, dtype, alpha):
        """The in-memory dual: :func:`eigen_dual` for the linear kernel; else a Cholesky solve, or
        in float64 where ``H K H + nugget I`` is not numerically positive definite,
        :func:`eigen_dual` at the nugget itself (a search's refit is the model it scored), its
        ``M x M`` eigenvectors checked against the memory budget."""
        kw = dict(alpha=alpha, fit_intercept=self.fit_intercept)
        if self._eigen_dual():
            return eigen_dual(X, V, **kw)
        if np.dtype(dtype) != np.float64:  # float32 predictions could not use such a solution
            return dual_numpy(X, V, tile=self._tile(), **kw)
        with recorded_ridges() as raised:
            fac, Beta = dual_numpy(X, V, tile=self._tile(), **kw)
        if not raised:
            return fac, Beta
        M = X.shape[0]
        xp = backend.namespace(X) if backend.is_array_api(X) else None
        held = {f"its {M} x {M} eigenvectors": M * M * np.dtype(dtype).itemsize}
        check_gram_memory(M, dtype, self.max_gram_bytes, solver="kernel", xp=xp, held=held)
        return eigen_dual(X, V, self._tile(), **kw)

    def _refuse_device(self, U):
        """NotImplementedError for dask input on a GPU (``device="cuda"`` or CuPy chunks)."""
        if self.device != "cpu" or backend.is_array_api(getattr(U, "_meta", None)):
            raise NotImplementedError(
                "KernelOperator fits dask input on the CPU only (its tiled Gram has no GPU path): "
                "pass "
                "device='cpu', or compute the data into memory (numpy with device='cuda', or "
                "CuPy) for the GPU fit"
            )

    def _solve_primal(self, U, V, lazy, dtype, transform, alpha):
        """The linear kernel's ridge in the primal: ``(coef (p, m), intercept (m,))`` from the
        ``p x p`` Gram ``X_c^T X_c`` summed over row blocks of the (transformed) inputs ``X``
        (:func:`rfol_dask.gram.linear_partial`), factorised once (the jitter policy on its own
        diagonal) and solved for every output column. In memory the shifts are the exact
        column means; for dask input those of the first block's 64 rows, with the exact
        correction of :func:`rfol_dask.factor.primal_factor`, so the data are read once."""
        M = U.shape[0]
        if not lazy:
            self._check_gram_memory(U, lazy, dtype)
            X = transform(U, 0)
            shifts = linear_shifts(X, V, self.fit_intercept, rows=None)
            sums = None
            for s, e in row_ranges(M, X.shape[1] * backend.itemsize(X.dtype)):
                sums = linear_partial(X[s:e, ...], V[s:e, ...], s, sums, shifts)
            return primal_solve(
                primal_factor(sums, shifts, alpha, self.fit_intercept), 0, V.shape[1]
            )
        client = active_client()
        budget = memory_budget(
            self.max_gram_bytes, client
        )  # asked once, for the check and the chains
        self._check_gram_memory(U, lazy, dtype, client, budget)
        Ub, Vb, starts, cols = row_blocks(U, V, self.column_block, client)
        names = TaskNames()
        Xb = [
            dask.delayed(transform)(Ub[i], starts[i], dask_key_name=names("inputs", i))
            for i in range(len(Ub))
        ]
        shifts = dask.delayed(linear_shifts, nout=2)(Xb[0], Vb[0], self.fit_intercept)

        def add_block(i, acc):
            return dask.delayed(linear_partial)(
                Xb[i], Vb[i], starts[i], acc, shifts, dask_key_name=names("primal-partial", i)
            )

        p = self._width(
            U.shape[1]
        )  # a worker runs the chains its memory holds, each with its p x p and p x m sums
        per_worker = gram_slots(
            p, dtype, with_each=p * V.shape[1] * np.dtype(dtype).itemsize, budget=budget
        )
        coef, intercept = solve_primal(
            primal_sums(len(Ub), add_block, client, per_worker),
            shifts,
            cols,
            names,
            alpha=alpha,
            fit_intercept=self.fit_intercept,
            client=client,
            progress=self.progress,
            desc="fit (linear kernel, primal)",
        )
        return coef.astype(dtype, copy=False), intercept.astype(dtype, copy=False)

    def _predict_kernel(self):
        if getattr(self, "coef_", None) is not None:  # (a model saved before coef_ has none)
            return _predict_linear, (
                self.coef_,
                self.intercept_,
                self.pca_mean_,
                self.pca_components_,
            )
        return _predict_block, (
            self.X_train_,
            self.dual_coef_,
            self.intercept_,
            self.pca_mean_,
            self.pca_components_,
            self._tile(),
        )
