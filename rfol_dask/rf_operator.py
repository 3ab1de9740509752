"""RandomFeatureOperator: the random-feature operator learner as a scikit-learn estimator."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import numbers
import time

import numpy as np
from dask.array.utils import meta_from_array

from . import backend, features, solve
from .estimator import OperatorEstimator
from .features import CENTRE_ROWS, DISTRIBUTIONS, draw_frequencies, feature_map, input_centre
from .gram import check_finite
from .memory import ROW_BLOCK_BYTES, check_gram_memory, check_host_memory
from .params import Interval, StrOptions
from .solve import fit_dask, fit_numpy
from .tuning import input_scales


def _predict_block(U, omega, b, coef, intercept, input_centre=None):
    """Predictions (k, m) for one row block ``U`` (k, n), in row chunks of bounded memory."""
    xp = backend.namespace(omega)
    # with a centre the rows are centred in their own dtype, then cast (feature_map)
    U = xp.asarray(U, dtype=omega.dtype) if input_centre is None else xp.asarray(U)
    M = U.shape[0]
    out = xp.empty((M, coef.shape[1]), dtype=omega.dtype)
    step = max(1, ROW_BLOCK_BYTES // (omega.shape[1] * backend.itemsize(omega.dtype)))
    for s in range(0, M, step):
        e = min(s + step, M)
        out[s:e, ...] = feature_map(U[s:e, ...], omega, b, input_centre=input_centre) @ coef
    out += intercept
    return out


logger = logging.getLogger("rfol_dask")


def _head_centre(U, dtype):  # the input centre of the dask U's first rows (checked finite)
    head = U[:CENTRE_ROWS].map_blocks(backend.to_numpy, meta=np.empty((0, 0), U.dtype)).compute()
    check_finite(head, 0, "U")
    return input_centre(dtype, head)


def _timed_draw(recipe):  # ``recipe()``, its time logged (debug)
    t0 = time.perf_counter()
    out = recipe()
    logger.debug("Omega drawn on the client in %.3f s", time.perf_counter() - t0)
    return out


class RandomFeatureOperator(OperatorEstimator):
    """Operator learning with random Fourier features: ``v = C^T phi(u) + c0``.

    ``phi(u) = sqrt(2/N) cos((u - c) @ Omega + b)`` with ``N = n_features`` frequencies drawn
    from ``distribution``, ``b ~ U(0, 2 pi)`` and an input centre ``c``; ``C`` solves the ridge
    problem shared by all output grid points (one factorisation for all ``m`` outputs).

    Parameters
    ----------
    n_features : int, default=1000
        Number of random features ``N``.
    distribution : {"cauchy", "gaussian", "student_t", "rational_quadratic"}, default="cauchy"
        Frequency law (:func:`rfol_dask.features.draw_frequencies`): tensor-product Cauchy
        (kernel ``exp(-gamma ||x-y||_1)``), Gaussian (``exp(-gamma ||x-y||^2)``), Student-t
        with ``nu`` degrees of freedom, or rational quadratic (``(1 + gamma ||x-y||^2 / nu)^-nu``).
    gamma : float or "median", default="median"
        Frequency scale (> 0). ``"median"``: a typical pair of training inputs has a kernel
        value of about ``exp(-1)`` (:func:`rfol_dask.tuning.median_gamma`).
    nu : float, default=None
        Degrees of freedom of ``"student_t"`` (> 0, required); shape of
        ``"rational_quadratic"`` (> 0; None: 1, the inverse quadratic kernel).
    alpha : float, default=1e-10
        Ridge parameter (>= 0). ``alpha=0`` is min-norm interpolation: the dual needs
        ``n_features >= M - 1``, the primal ``n_features <= M - 1`` (``M`` without an
        intercept), else a ValueError; ``solver="auto"`` picks the one that applies.
    pca_power : float or None, default=None
        The input metric. None: the distance of the grid values. A number ``q``: the distance
        in the inputs' principal directions, the one of singular value ``s_j`` weighted by
        ``(s_j / s_1)^q`` (:func:`rfol_dask.tuning.pca_metric`).
    fit_intercept : bool, default=True
        Centre features and outputs (an intercept per output component).
    solver : {"auto", "dual", "primal"}, default="auto"
        ``"dual"`` solves ``(A A^T + alpha I) Beta = V`` (M x M Gram), ``"primal"`` solves
        ``(A^T A + alpha I) C = A^T V`` (N x N Gram); ``"auto"`` takes the smaller Gram.
    dtype : {None, "float32", "float64"}, default=None
        Working precision; ``None`` follows the input (float32 in, float32 out).
    random_state : int, Generator or None, default=None
        Seed of ``Omega`` and ``b`` (drawn with numpy on the client; independent of chunks).
    column_block : int, default=None
        Output columns per solve task for dask input (default: spread over all worker threads).
    max_gram_bytes : int, default=None
        Memory budget of the Gram and what it holds (default: 60 % of available / worker memory).
    progress : bool, default=False
        Show a progress bar while fitting dask input.
    recovery : {"cubic", "linear", "nearest", "spectral", "rf"}, dict or 2-tuple, default="cubic"
        Recovery maps ``R_U``, ``R_V`` for ``predict`` on another grid (a dict: with options; a
        tuple: ``(R_U, R_V)``; :func:`rfol_dask.recovery.make_recovery`).
    device : {"cpu", "cuda"}, default="cpu"
        Where numpy / xarray input is computed (``"cuda"``: on the GPU with CuPy, numpy out).
        CuPy input is computed on its GPU and gives CuPy predictions and fitted arrays.

    Attributes
    ----------
    omega_ : ndarray of shape (n, N)
        The frequencies ``Omega``, in the working dtype (float32 or float64).
    b_ : ndarray of shape (N,)
        The phases of the centred inputs, ``(b + input_centre_ @ Omega) mod 2 pi``.
    input_centre_ : ndarray of shape (n,) or None
        The centre ``c``: the mean of the first 64 training samples (None: ``c = 0``).
    coef_ : ndarray of shape (N, m)
        Coefficients ``C`` (``m`` output grid points).
    intercept_ : ndarray of shape (m,)
        Intercept ``c0`` of each output grid point (zeros without ``fit_intercept``).
    solver_ : {"dual", "primal"}
        The solver used.
    gamma_ : float
        The frequency scale used (``gamma``, or its median-heuristic value).
    input_metric_ : ndarray of shape (n, r) or None
        The metric ``T`` of ``pca_power`` (None without it); not saved (``omega_`` holds it).
    n_features_in_ : int
        Input width ``n`` (grid points of one input function).
    input_shape_, output_shape_ : tuple of int
        Grid shapes of one input and one output function (``prod(output_shape_) == m``).
    input_dims_, output_dims_ : tuple of str or None
        Grid dimension names when fitted on xarray data (else None).
    input_coords_, output_coords_ : dict of str to ndarray
        Grid coordinates when fitted on xarray data (else empty).
    input_grid_, output_grid_ : tuple of ndarray or None
        The training grids (``fit(input_grid=, output_grid=)`` or coordinates; None: unknown).
    input_periods_, output_periods_ : tuple of (float or None) or None
        The period of each grid axis (None: not periodic); periodic axes wrap in ``predict``.
    output_attrs_, output_coord_attrs_ : dict
        Attributes of the training output and of its coordinates, which predictions carry.
    input_name_, output_name_ : str
        The input and output variables a Dataset or store is read by.
    sample_dim_ : str
        The sample dim of DataArrays (``fit(sample_dim=)``, default ``"sample"``).

    Notes
    -----
    Memory is checked against ``max_gram_bytes`` before ``Omega`` is drawn. On dask input
    ``A`` (M x N) is never whole: the dual sums the Gram over feature slabs on each worker, the
    primal over row blocks.
    """

    _parameter_constraints = {
        "n_features": [Interval(numbers.Integral, 1, None, closed="left")],
        "distribution": [StrOptions(set(DISTRIBUTIONS))],
        "gamma": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"median"})],
        "nu": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "pca_power": [Interval(numbers.Real, None, None, closed="neither"), None],
        "solver": [StrOptions({"auto", "dual", "primal"})],
        "random_state": ["random_state", np.random.Generator, np.random.SeedSequence],
        **OperatorEstimator._common_constraints,
    }

    def __init__(
        self,
        *,
        n_features=1000,
        distribution="cauchy",
        gamma="median",
        nu=None,
        alpha=1e-10,
        pca_power=None,
        fit_intercept=True,
        solver="auto",
        dtype=None,
        random_state=None,
        column_block=None,
        max_gram_bytes=None,
        progress=False,
        recovery="cubic",
        device="cpu",
    ):
        self.n_features = n_features
        self.distribution = distribution
        self.gamma = gamma
        self.nu = nu
        self.alpha = alpha
        self.pca_power = pca_power
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.dtype = dtype
        self.random_state = random_state
        self.column_block = column_block
        self.max_gram_bytes = max_gram_bytes
        self.progress = progress
        self.recovery = recovery
        self.device = device

    _fitted_arrays = ("omega_", "b_", "coef_", "intercept_", "input_centre_")
    _fitted_scalars = ("solver_", "gamma_", *OperatorEstimator._fitted_scalars)

    def _cast_dtype(self, data):
        """float64 numpy input on the CPU stays float64 (its rows are centred before the cast)."""
        dt = self._work_dtype(data)
        return np.dtype(np.float64) if self._device() == "cpu" and data.dtype == np.float64 else dt

    def _check_params(self):
        super()._check_params()
        if self.distribution == "student_t" and self.nu is None:
            msg = "distribution='student_t' needs the degrees of freedom: pass nu > 0, e.g. nu=3"
            raise ValueError(msg)

    def _on_gpu(self, U, lazy):
        """Whether a dask fit runs on GPUs (which only the streamed dual fits)."""
        return lazy and (self._device() != "cpu" or backend.is_array_api(meta_from_array(U)))

    def _check_memory(self, U, V, lazy, dtype, client=None):
        """ValueError before any work when a fit on ``U`` and ``V`` would not fit in memory."""
        M, n, m, N = U.shape[0], U.shape[1], V.shape[1], self.n_features
        self._check_model_memory(U, V, lazy, dtype)
        solver = solve.choose_solver(self.solver, M, N, dual_only=self._on_gpu(U, lazy))
        if lazy:
            plan = (M, n, m, N, dtype, solver, self.max_gram_bytes, client)
            solve.dask_fit_plan(*plan, self._device(), meta_from_array(U), warn=False)
            return
        xp = backend.namespace(U)
        held = solve.held_beside_gram(M, n, N, m, dtype, solver, xp)
        size = M if solver == "dual" else N
        check_gram_memory(size, dtype, self.max_gram_bytes, solver=solver, xp=xp, held=held)

    def _check_model_memory(self, U, V, lazy, dtype):
        """ValueError when the fitted model would not fit this process's available memory."""
        if lazy or not backend.is_array_api(U):
            nbytes = solve.model_bytes(U.shape[1], self.n_features, V.shape[1], dtype)
            check_host_memory(nbytes, dtype)

    def _fit_arrays(self, U, V, lazy, dtype):
        """Draw the frequencies and solve for ``coef_`` (N, m) and ``intercept_`` (m,)."""
        M, m = U.shape[0], V.shape[1]
        on_gpu = self._on_gpu(U, lazy)
        self.solver_ = solve.choose_solver(self.solver, M, self.n_features, dual_only=on_gpu)
        solve.check_min_norm(self.solver_, self.alpha, M, self.n_features, self.fit_intercept)
        # before any work (fit_dask checks a dask fit's Gram on the workers)
        (self._check_model_memory if lazy else self._check_memory)(U, V, lazy, dtype)
        seed, self.input_metric_, gamma = features.integer_seed(self.random_state), None, self.gamma
        if gamma == "median" or self.pca_power is not None:
            scales = input_scales(U, [self.distribution], self.pca_power, random_state=seed)
            self.input_metric_, gammas = scales
            gamma = gammas[self.distribution] if gamma == "median" else gamma
        self.gamma_ = float(gamma)
        law = (U.shape[1], self.n_features, self.distribution, self.gamma_, self.nu, seed)
        recipe = functools.partial(draw_frequencies, *law, dtype=dtype, metric=self.input_metric_)
        kw = dict(alpha=float(self.alpha), fit_intercept=self.fit_intercept, solver=self.solver_)
        if lazy:
            coef, intercept = self._fit_lazy(U, V, recipe, on_gpu, dtype, kw)
        else:  # numpy on the CPU, or the namespace U lives in (CuPy: its GPU)
            xp = backend.namespace(U)
            check_finite(U[: min(CENTRE_ROWS, U.shape[0]), ...], 0, "U")  # named here, not later
            centre = input_centre(dtype, U)  # numpy: folded into the phases on the host
            # drawn where U lives, block by block (CuPy: each block moved to the GPU as it comes)
            self.omega_, self.b_ = recipe(xp=xp, input_centre=centre)
            self.input_centre_ = backend.to_namespace(centre, xp)
            kw["input_centre"] = self.input_centre_
            coef, intercept = fit_numpy(U, V, self.omega_, self.b_, **kw)
            if not backend.is_fast(xp):
                self.coef_, self.intercept_ = coef, xp.reshape(intercept, (m,))
                return
        self.coef_ = coef.astype(dtype, copy=False)
        self.intercept_ = np.asarray(intercept, dtype=dtype).reshape(m)

    def _fit_lazy(self, U, V, recipe, on_gpu, dtype, kw):
        """The dask fit: ``(coef, intercept)``, with ``omega_``, ``b_`` and ``input_centre_`` set.
        On GPUs the client draws Omega during the fit, from a centre of the first rows; on the
        CPU after it, the centre made in the fit's graph."""
        centre = solve.InputCentre(_head_centre(U, dtype) if on_gpu else None)
        kw.update(column_block=self.column_block, progress=self.progress, dtype=dtype)
        kw.update(max_gram_bytes=self.max_gram_bytes, n_features=self.n_features)
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rfol-omega") as pool:
            draw = functools.partial(recipe, input_centre=centre.value)
            drawn = pool.submit(_timed_draw, draw) if on_gpu else None
            kw.update(frequencies=recipe, device=self._device(), input_centre=centre)
            coef, intercept = fit_dask(U, V, **kw)
            self.input_centre_ = centre.value
            draw = functools.partial(recipe, input_centre=centre.value)
            self.omega_, self.b_ = drawn.result() if on_gpu else _timed_draw(draw)
        return coef, intercept

    def _predict_kernel(self):
        # models saved before the centre was kept load without it: None, c = 0
        centre = getattr(self, "input_centre_", None)
        return _predict_block, (self.omega_, self.b_, self.coef_, self.intercept_, centre)
