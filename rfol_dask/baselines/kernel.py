"""KernelOperator: exact kernel ridge regression for operators (one scalar kernel shared by all
output components, as in Batlle et al. 2024), on the random-feature model's dual machinery.

Model: ``v(u) = k(u, U_train) Beta + c0`` with ``(H K H + nugget I) Beta = V - vbar`` when fitting
an intercept (``H`` centres in feature space); optional input PCA replaces each input by its
(weighted) principal scores. The linear kernel on fewer inputs than samples is solved in the
primal (its rank-deficient dual loses ``log10(1 / nugget)`` digits); with a nugget otherwise by
:func:`eigen_dual`, as is any dual where a Cholesky factorisation cannot take the nugget.
"""

from __future__ import annotations

import functools
import numbers
import re

import dask
import numpy as np
from dask.array.utils import meta_from_array

from .. import backend, memory
from ..estimator import OperatorEstimator
from ..factor import DualFactor, dual_intercept, primal_factor, primal_solve
from ..gram import linear_partial, linear_shifts
from ..linalg import blas_limits, factor_threads, recorded_ridges, ridge_name
from ..params import Interval, StrOptions
from ..progress import active_client
from ..solve import graph
from ..solve.graph import row_blocks
from ..solve.in_memory import _checked, dual_numpy, row_ranges
from ..solve.primal import primal_sums, solve_primal
from ..solve.tiled import dual_graph
from ..tuning import eigh_above, median_length_scale, rounding_floor, sample_rows
from .kernels import KERNELS, kernel_tile
from .transform import _predict_block, _predict_linear, pca, transform_inputs

__all__ = ["KernelOperator", "eigen_dual", "pca", "transform_inputs"]


def eigen_dual(X, V, tile=None, *, alpha, fit_intercept):
    """``(DualFactor, centred Beta (M, m))`` by one eigendecomposition of the centred Gram,
    ``H K H = Q diag(lam) Q^T``: ``Beta = Q (lam_+ + alpha)^-1 Q^T (V - vbar)``, the solution the
    searches score, for any ``alpha > 0`` (a Cholesky factorisation of ``H K H + alpha I`` may fail
    on the Gram's rounding). ``K = tile(X, X, True)``; ``tile=None``: the linear kernel ``X X^T``,
    whose directions with an eigenvalue within its rounding bound are left out (else they cost
    ``log10(1 / alpha)`` digits against ``Ridge(solver="svd")``; ``Beta`` there changes no
    prediction). Memory ``2 M^2``; an ``eigh`` costs about 9 Cholesky factorisations."""
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
    return X.sum(axis=0), float((X * X).sum()), X.shape[0]


def _linear_mean_diag(Xb, centred):
    """The mean diagonal of the linear kernel's Gram, centred or not, from the delayed row blocks
    ``Xb`` in one pass."""
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
        ||x_i - x_j||_2`` over a sample of at most 1000 training inputs (seed 0; after PCA if any;
        :func:`rfol_dask.heuristics.median_length_scale`), the distance of a typical pair.
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
        The model's own copy of the training inputs (``p = n``, or the PCA scores), needed to
        predict; None where the linear kernel is fitted in the primal (see ``coef_``).
    dual_coef_ : ndarray of shape (M, m) or None
        Dual coefficients ``Beta`` (``m`` output grid points); None where the linear kernel is
        fitted in the primal.
    coef_ : ndarray of shape (p, m) or None
        The linear kernel with fewer inputs ``p`` than samples ``M``: the ridge weights ``W`` of
        ``(X_c^T X_c + nugget I) W = X_c^T V_c``, solved in the primal; predictions are
        ``x W + intercept_``. None otherwise (fitted in the dual; the linear kernel with a nugget
        by :func:`eigen_dual`, which leaves out the Gram's directions of rounding).
    intercept_ : ndarray of shape (m,)
        Intercept ``c0`` of each output grid point.
    pca_mean_ : ndarray of shape (n,) or None
        Mean of the training inputs (None without ``n_components`` and ``pca_power``).
    pca_components_ : ndarray of shape (n, p) or None
        Leading principal directions of the training inputs, weighted with ``pca_power`` (None
        without ``n_components`` and ``pca_power``).
    input_name_, output_name_, sample_dim_, n_features_in_, input_shape_, output_shape_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_dims_, output_dims_, input_coords_, output_coords_, input_grid_, output_grid_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    input_periods_, output_periods_, output_attrs_, output_coord_attrs_
        As in :class:`rfol_dask.RandomFeatureOperator`.
    length_scale_ : float
        The length scale used (``length_scale``, or its median-heuristic value; 1.0 for
        ``"linear"``).
    kernel_ : str
        The kernel fitted, which ``predict`` uses (``set_params(kernel=...)`` acts at the next fit).

    Memory: the M x M Gram (blocked across workers for dask input that does not fit one) plus the
    training inputs, checked before any work; cost ``M^2 n + M^3 / 3 + 2 M^2 m``. The linear
    kernel with ``p < M``: the ``p x p`` Gram (one per worker thread) plus a row block, cost
    ``M p^2 + 2 M p m + p^3 / 3 + 2 p^2 m``; with ``p >= M`` and a nugget: the Gram and its
    eigenvectors (on one worker for dask input), cost ``M^2 p`` + an ``eigh`` + ``4 M^2 m``.
    """

    _parameter_constraints = {
        "kernel": [StrOptions(set(KERNELS))],
        "length_scale": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"median"})],
        "nugget": [Interval(numbers.Real, 0, None, closed="left")],
        "n_components": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "pca_power": [Interval(numbers.Real, None, None, closed="neither"), None],
        **OperatorEstimator._common_constraints,
    }
    _fitted_arrays = ("X_train_", "dual_coef_", "coef_", "intercept_")
    _fitted_arrays += ("pca_mean_", "pca_components_")
    _fitted_scalars = (*OperatorEstimator._fitted_scalars, "length_scale_", "kernel_")

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
        return functools.partial(kernel_tile, kernel=self.kernel_, length_scale=self.length_scale_)

    def _older_scalars(self):
        """Models saved before ``kernel_`` was kept were fitted with ``kernel``."""
        return {**super()._older_scalars(), "kernel_": self.kernel}

    def _resolve_length_scale(self, U, transform):
        """``length_scale_``: the parameter or the median heuristic on a sample of the
        (transformed) inputs; ValueError where its square is beyond float64."""
        if self.kernel == "linear":
            return 1.0
        median = self.length_scale == "median"
        if not median:
            ell = float(self.length_scale)
        else:
            ell = median_length_scale(transform(sample_rows(U, random_state=0), 0), random_state=0)
        with np.errstate(over="ignore", under="ignore"):
            if not 0 < np.float64(ell) ** 2 < np.inf:
                src = " (the median distance of the inputs)" if median else ""
                raise ValueError(
                    f"length scale {ell:.3g}{src}: its square is beyond the range of float64; "
                    "rescale the inputs (e.g. to unit spread)"
                )
        return ell

    def _primal(self, M, p):
        """Whether the fit solves in the primal: the linear kernel on ``p < M`` inputs."""
        return self.kernel == "linear" and p < M

    def _eigen_dual(self):
        """Whether the dual is solved by :func:`eigen_dual` (the linear kernel with a nugget)."""
        return self.kernel == "linear" and self.nugget > 0

    def _width(self, n):
        """The input width ``p`` the kernel sees (the PCA scores' at most ``n_components``)."""
        components = getattr(self, "pca_components_", None)
        if components is not None:
            return components.shape[1]
        return n if self.n_components is None else min(n, int(self.n_components))

    def _model_format(self):
        """Format 3 for the linear kernel's primal weights (``coef_``, no ``X_train_``)."""
        return 3 if getattr(self, "coef_", None) is not None else super()._model_format()

    def _check_memory(self, U, V, lazy, dtype, client=None):
        """ValueError when the fitted model exceeds this process's memory or the in-memory Gram
        (the primal's, also from dask) the budget; NotImplementedError for dask on a GPU."""
        if lazy:
            self._refuse_device(U)
        self._check_model_memory(U, V, lazy, dtype)
        self._check_gram_memory(U, lazy, dtype, client)

    def _check_gram_memory(self, U, lazy, dtype, client=None, budget=None):
        """The Gram's part of :meth:`_check_memory` (once the input width is known)."""
        M, p = U.shape[0], self._width(U.shape[1])
        xp = backend.namespace(U) if not lazy and backend.is_array_api(U) else None
        if self._primal(M, p):
            copies = 2 if lazy and memory.n_slots(client) > 1 else 1  # a summing worker: two
            memory.check_gram_memory(
                p, dtype, self.max_gram_bytes, client if lazy else None, solver="linear",
                peak_copies=copies, xp=xp, budget=budget,
            )  # fmt: skip
        elif not lazy:  # the linear kernel's eigen solve holds the eigenvectors beside the Gram
            self._check_dual_memory(M, dtype, xp, self._eigen_dual())

    def _check_dual_memory(self, M, dtype, xp, eigen=True):
        """The in-memory dual's ``M x M`` Gram, with its eigenvectors for an eigen solve."""
        held = {f"its {M} x {M} eigenvectors": M * M * np.dtype(dtype).itemsize} if eigen else None
        memory.check_gram_memory(M, dtype, self.max_gram_bytes, solver="kernel", xp=xp, held=held)

    def _check_model_memory(self, U, V, lazy, dtype):
        """ValueError when the fitted arrays exceed this process's available memory where they end
        up in it (a dask fit gathers them; CuPy's stay on the GPU, within its budget)."""
        if lazy or not backend.is_array_api(U):
            (M, n), m = U.shape, V.shape[1]
            size, p = np.dtype(dtype).itemsize, self._width(n)
            if self._primal(M, p):
                held, fewer = {f"the {p} x {m} weights": p * m * size}, "inputs (n_components)"
            else:  # the training inputs are the model's own copy
                held = {f"the {M} x {p} training inputs": M * p * size}
                held[f"the {M} x {m} dual coefficients"] = M * m * size
                fewer = "training samples (the model holds them), inputs (n_components)"
            if self.n_components is not None or self.pca_power is not None:
                held[f"the {n} x {p} principal directions"] = (n + 1) * p * size
            memory.check_host_memory(held, dtype, fewer=fewer)

    def _refuse_device(self, U):
        """NotImplementedError for dask input on a GPU (``device="cuda"`` or CuPy chunks)."""
        if self.device != "cpu" or backend.is_array_api(meta_from_array(U)):
            raise NotImplementedError(
                "KernelOperator fits dask input on the CPU only (its tiled Gram has no GPU path): "
                "pass device='cpu', or compute the data into memory (numpy with device='cuda', or "
                "CuPy) for the GPU fit"
            )

    def _fit_arrays(self, U, V, lazy, dtype):
        """``dual_coef_`` (M, m), ``intercept_`` (m,) and the training inputs; the linear kernel on
        fewer inputs than samples: ``coef_`` (p, m) and ``intercept_``."""
        with ridge_name("nugget"):  # the shared solvers' alpha is this model's nugget
            try:
                self._solve(U, V, lazy, dtype)
            except ValueError as exc:
                raise ValueError(re.sub(r"\balpha\b", "nugget", str(exc))) from exc

    def _solve(self, U, V, lazy, dtype):
        self.pca_mean_ = self.pca_components_ = self.coef_ = None
        if lazy:
            self._refuse_device(U)
        self._check_model_memory(U, V, lazy, dtype)  # before the PCA and median length scale
        if self.n_components is not None or self.pca_power is not None:
            xp = backend.namespace(U) if backend.is_array_api(U) else np
            self.pca_mean_, self.pca_components_ = (
                xp.astype(a, getattr(xp, dtype.name))
                for a in pca(U, self.n_components, self.pca_power)
            )
        transform = functools.partial(
            transform_inputs, mean=self.pca_mean_, components=self.pca_components_, dtype=dtype
        )
        alpha, self.kernel_ = float(self.nugget), self.kernel
        self.length_scale_ = self._resolve_length_scale(U, transform)
        if self._primal(U.shape[0], self._width(U.shape[1])):
            self.X_train_ = self.dual_coef_ = None
            self.coef_, self.intercept_ = self._solve_primal(U, V, lazy, dtype, transform, alpha)
        elif lazy:
            self._solve_lazy(U, V, dtype, transform, alpha)
        else:
            self._check_gram_memory(U, lazy, dtype)
            X = transform(U, 0)
            if X is U:  # the caller's array, maybe: kept as it is now, not as it will be
                X = backend.copy(X)
            fac, Beta = self._dual_in_memory(X, V, dtype, alpha)
            self.X_train_, self.dual_coef_, self.intercept_ = X, Beta, dual_intercept(fac, Beta)

    def _solve_lazy(self, U, V, dtype, transform, alpha):
        """The dual of dask input: the linear kernel's eigen solve in one task where a worker holds
        it, else the tiled Gram factorised (blocked where it does not fit a worker)."""
        M, client, icpt = U.shape[0], active_client(), self.fit_intercept
        m, size, eigen = V.shape[1], np.dtype(dtype).itemsize, self._eigen_dual()
        most, row = graph.MAX_TILE_BLOCKS, U.shape[1] * size
        Ub, Vb, starts, cols = row_blocks(
            U, V, self.column_block, client, max_blocks=most, row_bytes=row
        )
        # held beside the Gram: by the eigen solve the eigenvectors and data, else a row of tiles
        if eigen:
            held, what = M * (M + self._width(U.shape[1]) + m) * size, "the data"
        else:
            held, what = int(max(np.diff(starts))) * M * size, "a row of Gram tiles"
        blocked = memory.dual_plan(
            M, dtype, self.max_gram_bytes, client, held_bytes=held, summed=False, held_what=what
        ).blocked
        Xb = [dask.delayed(transform)(Ub[i], starts[i]) for i in range(len(Ub))]
        fit = functools.partial(graph.compute_fit, progress=self.progress, client=client)
        if eigen and not blocked:
            X = dask.delayed(np.concatenate)(Xb)
            Vs = dask.delayed(graph.column_slab)(0, m, dtype, *Vb)
            fac, Beta = dask.delayed(eigen_dual, nout=2)(X, Vs, alpha=alpha, fit_intercept=icpt)
            intercepts = [dask.delayed(dual_intercept)(fac, Beta)]
            X, betas, intercepts = fit(
                X, [Beta], intercepts, desc="fit (linear kernel, eigen)", alpha=alpha
            )
        else:

            def run(ridge):  # the blocked factorisation is tried again with raised ridges
                fac, betas = dual_graph(
                    Xb, Vb, starts, self._tile(), cols, alpha=ridge, fit_intercept=icpt,
                    dtype=dtype, blocked=blocked,
                )  # fmt: skip
                intercepts = [
                    dask.delayed(dual_intercept)(fac, Beta, start=c0)
                    for (c0, _), Beta in zip(cols, betas, strict=False)
                ]
                X = dask.delayed(np.concatenate)(Xb)
                return fit(X, betas, intercepts, desc="fit (kernel)", alpha=ridge, factor=fac)

            # the linear kernel's diagonal is not 1: its mean sets the raised ridges, as in memory
            mean_diag = 1.0
            if self.kernel == "linear":
                mean_diag = functools.partial(_linear_mean_diag, Xb, icpt)
            X, betas, intercepts = graph.with_ridges(run, alpha, dtype, mean_diag)
        self.X_train_ = X
        self.dual_coef_ = np.concatenate(betas, axis=1).astype(dtype, copy=False)
        self.intercept_ = np.concatenate(intercepts).astype(dtype, copy=False)

    def _dual_in_memory(self, X, V, dtype, alpha):
        """The in-memory dual: :func:`eigen_dual` for the linear kernel, else a Cholesky solve, or
        in float64 where that cannot take the nugget, :func:`eigen_dual` at the nugget itself (a
        search's refit is the model it scored)."""
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
        self._check_dual_memory(M, dtype, xp)
        return eigen_dual(X, V, self._tile(), **kw)

    def _solve_primal(self, U, V, lazy, dtype, transform, alpha):
        """The linear kernel's ridge in the primal, ``(coef (p, m), intercept (m,))``, from the
        ``p x p`` Gram summed over row blocks; the shifts are the column means in memory, those of
        the first block's rows with an exact correction for dask input (one read of the data)."""
        M, icpt = U.shape[0], self.fit_intercept
        if not lazy:
            self._check_gram_memory(U, lazy, dtype)
            X = transform(U, 0)
            shifts, sums = linear_shifts(X, V, icpt, rows=None), None
            for s, e in row_ranges(M, X.shape[1] * backend.itemsize(X.dtype)):
                sums = linear_partial(X[s:e, ...], V[s:e, ...], s, sums, shifts)
            return primal_solve(primal_factor(sums, shifts, alpha, icpt), 0, V.shape[1])
        client = active_client()
        budget = memory.memory_budget(self.max_gram_bytes, client)  # for the check and chains
        self._check_gram_memory(U, lazy, dtype, client, budget)
        Ub, Vb, starts, cols = row_blocks(U, V, self.column_block, client)
        names = graph.TaskNames()
        Xb = [
            dask.delayed(transform)(Ub[i], starts[i], dask_key_name=names("inputs", i))
            for i in range(len(Ub))
        ]
        shifts = dask.delayed(linear_shifts, nout=2)(Xb[0], Vb[0], icpt)

        def add_block(i, acc):
            return dask.delayed(linear_partial)(
                Xb[i], Vb[i], starts[i], acc, shifts, dask_key_name=names("primal-partial", i)
            )

        # a worker runs the chains its memory holds, each with its p x p and p x m sums
        p, size = self._width(U.shape[1]), np.dtype(dtype).itemsize
        per_worker = memory.gram_slots(p, dtype, with_each=p * V.shape[1] * size, budget=budget)
        coef, intercept = solve_primal(
            primal_sums(len(Ub), add_block, client, per_worker), shifts, cols, names, alpha=alpha,
            fit_intercept=icpt, client=client, progress=self.progress,
            desc="fit (linear kernel, primal)",
        )  # fmt: skip
        return coef.astype(dtype, copy=False), intercept.astype(dtype, copy=False)

    def _predict_kernel(self):
        pca_arrays = (self.pca_mean_, self.pca_components_)
        if getattr(self, "coef_", None) is not None:  # (a model saved before coef_ has none)
            return _predict_linear, (self.coef_, self.intercept_, *pca_arrays)
        arrays = (self.X_train_, self.dual_coef_, self.intercept_, *pca_arrays)
        return _predict_block, (*arrays, self._tile())
