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
import numpy as np
from dask.array.utils import meta_from_array

from .. import backend
from ..estimator import OperatorEstimator
from ..factor import dual_intercept, primal_factor, primal_solve
from ..gram import linear_partial, linear_shifts
from ..linalg import recorded_ridges, ridge_name
from ..memory import check_gram_memory, dual_plan, gram_slots, memory_budget
from ..params import Interval, StrOptions
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
from ..tuning import median_length_scale, sample_rows
from .eigen import _linear_mean_diag, eigen_dual
from .kernel_memory import KernelMemory
from .kernels import KERNELS, kernel_tile
from .transform import _predict_block, _predict_linear, pca, transform_inputs

__all__ = ["KernelOperator", "eigen_dual", "pca", "transform_inputs"]


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


class KernelOperator(KernelMemory, OperatorEstimator):
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
    input_name_, output_name_ : str
        The input and output variables a Dataset or store is read by (``fit(input=,
        output=)``, or the DataArrays' own names; default ``"input"``, ``"output"``).
    sample_dim_ : str
        The sample dim of DataArrays (``fit(sample_dim=)``, default ``"sample"``).
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
        return functools.partial(
            kernel_tile, kernel=self.kernel_, length_scale=float(self.length_scale_)
        )

    def _older_scalars(self):
        """Models saved before ``kernel_`` was kept were fitted with the kernel of their
        parameters."""
        return {**super()._older_scalars(), "kernel_": self.kernel}

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
        # before any work (the PCA, the median length scale)
        self._check_model_memory(U, V, lazy, dtype)
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
            if X is U:  # the caller's array, maybe: kept as it is now, not as it will be
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
        # Gram; the chain that assembles it a row of tiles (tiled.dual_graph): one Gram more with
        # one row block
        if eigen:
            held, what = M * (M + self._width(U.shape[1]) + m) * size, "the data"
        else:
            held, what = int(max(np.diff(starts))) * M * size, "a row of Gram tiles"
        # the Gram is assembled on one worker (or in the eigen solve's task): no sum of Grams
        blocked = dual_plan(
            M, dtype, self.max_gram_bytes, client, held_bytes=held, summed=False, held_what=what
        ).blocked
        Xb = [dask.delayed(transform)(Ub[i], starts[i]) for i in range(len(Ub))]
        fit = functools.partial(compute_fit, progress=self.progress, client=client)
        if eigen and not blocked:
            # the in-memory solve, in one task: the other dual too makes its Gram on one worker
            X = dask.delayed(np.concatenate)(Xb)
            Vs = dask.delayed(column_slab)(0, m, dtype, *Vb)
            fac, Beta = dask.delayed(eigen_dual, nout=2)(
                X, Vs, alpha=alpha, fit_intercept=self.fit_intercept
            )
            intercepts = [dask.delayed(dual_intercept)(fac, Beta)]
            X, betas, intercepts = fit(
                X, [Beta], intercepts, desc="fit (linear kernel, eigen)", alpha=alpha
            )
        else:

            def run(ridge):  # the blocked factorisation is tried again with raised ridges
                fac, betas = dual_graph(
                    Xb, Vb, starts, self._tile(), cols, alpha=ridge,
                    fit_intercept=self.fit_intercept, dtype=dtype, blocked=blocked,
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
                mean_diag = functools.partial(_linear_mean_diag, Xb, self.fit_intercept)
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
        if self.device != "cpu" or backend.is_array_api(meta_from_array(U)):
            raise NotImplementedError(
                "KernelOperator fits dask input on the CPU only (its tiled Gram has no GPU path): "
                "pass device='cpu', or compute the data into memory (numpy with device='cuda', or "
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
        # asked once, for the check and the chains
        budget = memory_budget(self.max_gram_bytes, client)
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

        # a worker runs the chains its memory holds, each with its p x p and p x m sums
        p = self._width(U.shape[1])
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
