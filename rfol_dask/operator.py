"""RandomFeatureOperator: the random-feature operator learner as a scikit-learn estimator."""

from __future__ import annotations

import numbers

import dask
import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from . import io
from . import recovery as rec
from ._version import __version__
from .features import DISTRIBUTIONS, draw_frequencies, feature_map
from .gram import check_finite
from .metrics import r2_score
from .solve import _ROW_BLOCK_BYTES, check_gram_memory, choose_solver, fit_dask, fit_numpy

__all__ = ["RandomFeatureOperator"]


def _predict_block(U, omega, b, coef, intercept):
    """Predictions for one row block ``U`` (k, n) -> (k, m), in row chunks of bounded memory."""
    U = np.asarray(U, dtype=omega.dtype)
    check_finite(U, 0, "U")
    out = np.empty((len(U), coef.shape[1]), dtype=omega.dtype)
    step = max(1, _ROW_BLOCK_BYTES // (omega.shape[1] * omega.dtype.itemsize))
    for s in range(0, len(U), step):
        out[s:s + step] = feature_map(U[s:s + step], omega, b) @ coef
    out += intercept
    return out


def _flatten(X):
    """``(M, *grid) -> (M, prod(grid))`` for numpy-like ``X``; returns ``(X2, grid or None)``.

    Array-likes of at most two dimensions (lists, sparse matrices, ...) pass through unchanged
    for scikit-learn's validation to judge.
    """
    if hasattr(X, "toarray") or not hasattr(X, "shape") or len(X.shape) <= 2:
        return X, None
    return np.reshape(np.asarray(X), (X.shape[0], -1)), tuple(X.shape[1:])


def _num_samples(X):
    shape = getattr(X, "shape", None)
    if shape is None:
        try:
            return len(X)
        except TypeError:
            return None
    return shape[0] if len(shape) else None


class RandomFeatureOperator(RegressorMixin, BaseEstimator):
    """Operator learning with random Fourier features: ``v = C^T phi(u) + c0``.

    ``phi(u) = sqrt(2/N) cos(u @ Omega + b)`` with ``N = n_features`` frequencies drawn from
    ``distribution`` and ``b ~ U(0, 2 pi)``; ``C`` solves the ridge problem shared by all
    output grid points (one factorisation for all ``m`` outputs).

    Parameters
    ----------
    n_features : int, default=1000
        Number of random features ``N``.
    distribution : {"cauchy", "gaussian", "student_t"}, default="cauchy"
        Frequency law: tensor-product Cauchy with scale ``gamma`` (kernel
        ``exp(-gamma ||x-y||_1)``), Gaussian ``N(0, 2 gamma)`` (kernel
        ``exp(-gamma ||x-y||^2)``) or multivariate Student-t with ``nu`` degrees of freedom.
    gamma : float, default=1.0
        Frequency scale (> 0).
    nu : float, default=None
        Degrees of freedom for ``distribution="student_t"`` (> 0).
    alpha : float, default=1e-10
        Ridge parameter (>= 0). ``alpha=0`` is min-norm interpolation; it needs a
        positive definite Gram.
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
        Memory budget for the Gram (default: 60 % of available / worker memory).
    progress : bool, default=False
        Show a progress bar while fitting dask input.
    recovery : {"cubic", "linear", "nearest", "spectral", "rf"}, dict or 2-tuple, default="cubic"
        Recovery maps ``R_U`` (input) and ``R_V`` (output) used when ``predict`` reads or
        writes another grid than the training one (:func:`rfol_dask.recovery.make_recovery`;
        a dict carries options, e.g. ``{"kind": "rf", "distribution": "cauchy"}``; a tuple
        gives ``(R_U, R_V)`` separately). Cubic is the default (measured most accurate on
        smooth data; see :mod:`rfol_dask.recovery`); ``"spectral"`` means periodic grids.

    Attributes
    ----------
    omega_ : ndarray (n, N) and b_ : ndarray (N,)
        The frequencies and phases.
    coef_ : ndarray (N, m)
        Coefficients ``C``.
    intercept_ : ndarray (m,)
    solver_ : str
        The solver used.
    n_features_in_ : int
        Input width ``n`` (grid points of one input function).
    input_shape_, output_shape_ : tuple
        Grid shapes of one input and one output function.
    input_dims_, output_dims_, input_coords_, output_coords_
        Grid dimension names and coordinates when fitted on xarray data (else None / {}).
    input_grid_, output_grid_ : tuple of ndarray or None
        The training grids (one coordinate array per grid axis), from ``fit(...,
        input_grid=, output_grid=)`` or from the xarray coordinates; None if unknown (then
        ``predict`` only reads and writes the training grids).

    Memory: the in-memory dual fit holds ``A`` (M x N) and the Gram (M x M); the primal
    holds the Gram (N x N) and one 128 MiB block of ``A``. On dask input ``A`` exists only
    as row blocks on the workers.
    """

    _parameter_constraints = {
        "n_features": [Interval(numbers.Integral, 1, None, closed="left")],
        "distribution": [StrOptions(set(DISTRIBUTIONS))],
        "gamma": [Interval(numbers.Real, 0, None, closed="neither")],
        "nu": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "solver": [StrOptions({"auto", "dual", "primal"})],
        "dtype": [StrOptions({"float32", "float64"}), type, None],
        "random_state": ["random_state", np.random.Generator, np.random.SeedSequence],
        "column_block": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "max_gram_bytes": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "progress": ["boolean"],
        "recovery": [StrOptions(set(rec.KINDS)), dict, tuple],
    }

    def __init__(self, *, n_features=1000, distribution="cauchy", gamma=1.0, nu=None, alpha=1e-10,
                 fit_intercept=True, solver="auto", dtype=None, random_state=None, column_block=None,
                 max_gram_bytes=None, progress=False, recovery="cubic"):
        self.n_features = n_features
        self.distribution = distribution
        self.gamma = gamma
        self.nu = nu
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.dtype = dtype
        self.random_state = random_state
        self.column_block = column_block
        self.max_gram_bytes = max_gram_bytes
        self.progress = progress
        self.recovery = recovery

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        tags.input_tags.allow_nan = False
        return tags

    # ------------------------------------------------------------------ helpers
    def _work_dtype(self, data):
        if self.dtype is not None:
            dt = np.dtype(self.dtype)
            if dt not in (np.float32, np.float64):
                raise ValueError(f"dtype must be float32 or float64, got {dt}")
            return dt
        dt = getattr(data, "dtype", None)
        return np.dtype(np.float32) if dt == np.float32 else np.dtype(np.float64)

    def _check_params(self):
        self._validate_params()
        if self.distribution == "student_t" and self.nu is None:
            raise ValueError("distribution='student_t' needs the degrees of freedom: pass nu > 0, e.g. nu=3")
        self._recovery_specs()

    def _recovery_specs(self):
        """``(R_U spec, R_V spec)`` from the ``recovery`` parameter."""
        specs = self.recovery if isinstance(self.recovery, (tuple, list)) else (self.recovery,) * 2
        if len(specs) != 2:
            raise ValueError(f"recovery must be a kind, a dict or a pair (input, output); got {self.recovery!r}")
        for spec in specs:
            kind = spec.get("kind", "cubic") if isinstance(spec, dict) else spec
            if kind not in rec.KINDS:
                raise ValueError(f"unknown recovery kind {kind!r} in recovery={self.recovery!r}; "
                                 f"choose from {rec.KINDS}")
        return tuple(specs)

    @staticmethod
    def _learn_grid(grid, operand, shape, which):
        """The training grid of one side: the explicit ``grid``, else the xarray coordinates."""
        if grid is not None:
            grid = rec.as_grid(grid, f"{which}_grid")
            if tuple(len(ax) for ax in grid) != tuple(shape):
                raise ValueError(f"{which}_grid has shape {tuple(len(ax) for ax in grid)} but the {which} "
                                 f"functions have grid shape {tuple(shape)}")
            return grid
        return RandomFeatureOperator._operand_grid(operand)

    @staticmethod
    def _operand_grid(operand):
        """The grid of an xarray operand if every grid dim has numeric increasing coordinates."""
        if operand.kind != "xarray" or not operand.dims or any(d not in operand.coords for d in operand.dims):
            return None
        try:
            return rec.as_grid({d: operand.coords[d] for d in operand.dims})
        except (TypeError, ValueError):
            return None

    def _check_lazy(self, U, V):
        """Validate dask operands from their metadata only (nothing is computed)."""
        if U.ndim != 2:
            raise ValueError("U must be 2-D (n_samples, n_points) or more; reshape a single "
                             "input function with U.reshape(1, -1)")
        V = V[:, None] if V.ndim == 1 else V
        if U.shape[0] != V.shape[0]:
            raise ValueError(f"U has {U.shape[0]} samples but V has {V.shape[0]}; they must match")
        if U.shape[0] < 1 or U.shape[1] < 1:
            raise ValueError(f"U has shape {U.shape}: need at least one sample and one point")
        for name, X in (("U", U), ("V", V)):
            if not (np.issubdtype(X.dtype, np.floating) or np.issubdtype(X.dtype, np.integer)):
                raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
        self.n_features_in_ = U.shape[1]
        return U, V

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, input_grid=None, output_grid=None):
        """Fit on input functions ``X`` (the paper's U: (M, n) or (M, *input_grid)) and output
        functions ``y`` (V: (M,), (M, m) or (M, *output_grid)); or on an xarray Dataset / Zarr
        store path with variables ``input`` and ``output`` passed as ``X`` alone.

        ``input_grid`` / ``output_grid`` (one coordinate array per grid axis, or a mapping
        dim -> coordinates) record the training grids for numpy / dask input; xarray input
        gives them through its coordinates. They let ``predict`` read and write other grids.

        numpy input is fitted in memory; dask (and dask-backed xarray) input by one dask
        graph over its sample chunks (``rfol_dask.solve.fit_dask``).
        """
        self._check_params()
        U, V = io.read_pair(X, y)
        if V is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "call fit(U, V), or fit(dataset) with variables 'input' and 'output'")
        u, v = io.as_operand(U, "U"), io.as_operand(V, "V")
        lazy = isinstance(u.data, da.Array) or isinstance(v.data, da.Array)
        if lazy:
            ud, vd = (x if isinstance(x.data, da.Array) else io.as_operand(da.asarray(np.asarray(x.data)), n)
                      for x, n in ((u, "U"), (v, "V")))
            Ud, Vd = self._check_lazy(ud.data, vd.data)
            in_shape, out_shape = ud.grid_shape, vd.grid_shape
        else:
            (Ua, in_shape), (Va, out_shape) = _flatten(u.data), _flatten(v.data)
            n_u, n_v = _num_samples(Ua), _num_samples(Va)
            if n_u is not None and n_v is not None and n_u != n_v:
                raise ValueError(f"U has {n_u} samples but V has {n_v}; they must match")
            Ua, Va = validate_data(self, Ua, Va, multi_output=True, y_numeric=True,
                                   dtype=[np.float64, np.float32], ensure_all_finite=False)
            dt = self._work_dtype(Ua)
            Ud, Vd = np.asarray(Ua, dtype=dt), np.asarray(Va, dtype=dt)
            in_shape = in_shape or (Ud.shape[1],)
            out_shape = out_shape if out_shape is not None else Vd.shape[1:]
            Vd = Vd[:, None] if Vd.ndim == 1 else Vd
        self.input_shape_, self.output_shape_ = tuple(in_shape), tuple(out_shape)
        self.input_dims_, self.input_coords_ = u.dims, u.coords
        self.output_dims_, self.output_coords_ = v.dims, v.coords
        self.input_grid_ = self._learn_grid(input_grid, u, self.input_shape_, "input")
        self.output_grid_ = self._learn_grid(output_grid, v, self.output_shape_, "output")

        dt = self._work_dtype(Ud)
        M, m = Ud.shape[0], Vd.shape[1]
        self.solver_ = choose_solver(self.solver, M, self.n_features)
        self.omega_, self.b_ = draw_frequencies(Ud.shape[1], self.n_features, self.distribution, self.gamma,
                                                self.nu, self.random_state, dtype=dt)
        if lazy:
            coef, intercept = fit_dask(Ud, Vd, self.omega_, self.b_, alpha=float(self.alpha),
                                       fit_intercept=self.fit_intercept, solver=self.solver_,
                                       column_block=self.column_block, progress=self.progress,
                                       max_gram_bytes=self.max_gram_bytes)
        else:
            check_gram_memory(M if self.solver_ == "dual" else self.n_features, dt, self.max_gram_bytes)
            coef, intercept = fit_numpy(Ud, Vd, self.omega_, self.b_, alpha=float(self.alpha),
                                        fit_intercept=self.fit_intercept, solver=self.solver_)
        self.coef_ = coef.astype(dt, copy=False)
        self.intercept_ = np.asarray(intercept, dtype=dt).reshape(m)
        return self

    # ------------------------------------------------------------------ predict
    def _check_width(self, n, shape):
        if n != self.n_features_in_:
            raise ValueError(
                f"X has {n} features, but {type(self).__name__} is expecting {self.n_features_in_} "
                f"features as input (input grid {tuple(shape)} vs the training grid {self.input_shape_})")

    def predict(self, X, *, input_grid=None, output_grid=None):
        """Predict output functions for inputs ``X`` (M, *grid); returns (M, *output grid)
        in the caller's kind.

        numpy in, numpy out; dask or dask-backed xarray in, lazy out (chunks follow ``U``);
        xarray predictions carry the sample coordinate and the output grid coordinates.

        Inputs on another grid of the training domain (xarray coordinates differing from
        the training ones, or ``input_grid=`` for numpy / dask) are first resampled to the
        training grid through ``R_U``; ``output_grid=`` returns the prediction on that grid
        through ``R_V`` (default: the training output grid). Grids of another dimension, or
        outside the training domain, raise ValueError. Extra memory: the resampled inputs
        and outputs of one block.
        """
        check_is_fitted(self)
        U = X
        if isinstance(U, (str, bytes)) or hasattr(U, "data_vars"):
            U, _ = io.read_pair(U)
        u = io.as_operand(U, "U")
        u = self._to_training_grid(U, u, input_grid)
        if isinstance(u.data, da.Array):
            X = u.data
            if X.ndim != 2:
                raise ValueError(f"U must be at least 2-D (n_samples, ...), got shape {X.shape}")
            self._check_width(X.shape[1], U.shape[1:])
            X = X.rechunk({1: -1})
            params = dask.delayed((self.omega_, self.b_, self.coef_, self.intercept_), pure=True, traverse=False)
            Y = da.map_blocks(lambda blk, p: _predict_block(blk, *p), X, params,
                              chunks=(X.chunks[0], (self.coef_.shape[1],)), dtype=self.omega_.dtype)
        else:
            raw, _ = _flatten(np.asarray(u.data) if u.kind == "xarray" else u.data)
            X = validate_data(self, raw, reset=False, dtype=[np.float64, np.float32], ensure_all_finite=False)
            Y = _predict_block(X, self.omega_, self.b_, self.coef_, self.intercept_)
        shape, dims, coords = self.output_shape_, self.output_dims_, self.output_coords_
        grid = getattr(self, "output_grid_", None)
        if output_grid is not None:
            grid_new = self._check_grid(output_grid, grid, "output")
            if not rec.same_grid(grid_new, grid):
                R_V = rec.make_recovery(self._recovery_specs()[1], grid)
                grid_new = R_V.check_grid(grid_new, "output_grid", "the training output grid")
                Y = R_V.resample(Y.reshape((Y.shape[0], *shape)), grid_new)
                shape, grid = Y.shape[1:], grid_new
                Y = Y.reshape((Y.shape[0], -1))
        if grid is not None and (not coords or output_grid is not None):
            dims = dims or tuple(f"dim_{k}" for k in range(len(grid)))
            coords = dict(zip(dims, grid))
        return io.wrap_like(Y, u, shape, dims, coords, name="prediction")

    def _check_grid(self, grid, trained, which):
        """``grid`` as axes; ValueError if the model has no grid there or the dimension differs."""
        grid = rec.as_grid(grid, f"{which}_grid")
        if trained is None:
            raise ValueError(
                f"the model was fitted without {which} grid coordinates, so it cannot use another {which} grid: "
                f"fit on xarray data with coordinates or pass fit(..., {which}_grid=...)")
        if len(grid) != len(trained):
            raise ValueError(f"{which}_grid has {len(grid)} axes but the model was trained on a "
                             f"{len(trained)}-D {which} grid of shape {tuple(len(a) for a in trained)}")
        return grid

    def _to_training_grid(self, U, u, input_grid):
        """The operand ``u`` resampled through ``R_U`` to the training input grid if its grid
        (``input_grid`` or the xarray coordinates) differs from it."""
        grid = rec.as_grid(input_grid, "input_grid") if input_grid is not None else self._operand_grid(u)
        trained = getattr(self, "input_grid_", None)
        if grid is None or rec.same_grid(grid, trained):
            return u
        if input_grid is None and trained is None:
            return u  # xarray coordinates but a model without grid: positional, as before
        grid = self._check_grid(grid, trained, "input")
        R_U = rec.make_recovery(self._recovery_specs()[0], grid)
        domain = rec.grid_domain(trained, R_U.periodic)
        for k, (x, y, (lo, hi), (c_lo, c_hi)) in enumerate(zip(trained, grid, domain, R_U.domain())):
            tol, step = 1e-6 * (hi - lo), (hi - lo) / max(len(x) - 1, 1)
            if x[0] < c_lo - tol or x[-1] > c_hi + tol:
                raise ValueError(
                    f"input_grid spans [{c_lo:g}, {c_hi:g}] along axis {k} but the model was trained on "
                    f"[{lo:g}, {hi:g}]: the input must cover the training domain (no extrapolation)")
            if y[0] < lo - step or y[-1] > hi + step:
                raise ValueError(f"input_grid spans [{y[0]:g}, {y[-1]:g}] along axis {k}, outside the training "
                                 f"domain [{lo:g}, {hi:g}]")
        data = U.data if u.kind == "xarray" else U
        data = data if isinstance(data, da.Array) else np.asarray(data)
        shape = tuple(len(ax) for ax in grid)
        if data.ndim < 1 or int(np.prod(data.shape[1:])) != int(np.prod(shape)):
            raise ValueError(f"X has shape {tuple(data.shape)} but input_grid has shape {shape}")
        resampled = R_U.resample(data.reshape((data.shape[0], *shape)), trained)
        new = io.as_operand(resampled, "U")
        return io.Operand(new.data, new.grid_shape, u.kind, u.dims, u.coords, u.sample)

    def score(self, X, y=None, sample_weight=None):
        """R^2 of ``predict(X)`` against ``y``, averaged uniformly over output grid points
        (``X`` may also be a Dataset / store path holding both)."""
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported")
        U, V = io.read_pair(X, y)
        pred = self.predict(U)
        return r2_score(V, pred)

    # ------------------------------------------------------------------ persistence
    def save(self, path):
        """Save the fitted model to a Zarr store (parameters, Omega, b, C, intercept, grids).

        The write goes to a temporary store renamed into place: an interrupted save leaves
        the previous model at ``path`` readable.
        """
        check_is_fitted(self)
        params = {k: v for k, v in self.get_params().items() if k != "random_state"}
        params["dtype"] = None if params["dtype"] is None else np.dtype(params["dtype"]).name
        rs = self.random_state
        attrs = {
            "params": params,
            "random_state": rs if isinstance(rs, (int, type(None))) else repr(rs),
            "solver_": self.solver_,
            "n_features_in_": int(self.n_features_in_),
            "input_shape_": list(self.input_shape_),
            "output_shape_": list(self.output_shape_),
            "input_dims_": None if self.input_dims_ is None else list(self.input_dims_),
            "output_dims_": None if self.output_dims_ is None else list(self.output_dims_),
            "version": __version__,
        }
        arrays = {"omega": self.omega_, "b": self.b_, "coef": self.coef_, "intercept": self.intercept_}
        for which, coords in (("input", self.input_coords_), ("output", self.output_coords_)):
            for dim, values in coords.items():
                arrays[f"coord_{which}_{dim}"] = np.asarray(values)
        for which in ("input", "output"):
            grid = getattr(self, f"{which}_grid_", None)
            attrs[f"{which}_grid_ndim"] = None if grid is None else len(grid)
            for k, ax in enumerate(grid or ()):
                arrays[f"grid_{which}_{k}"] = ax
        io.save_model(path, arrays, attrs)
        return path

    @classmethod
    def load(cls, path):
        """Load a model written by :meth:`save`."""
        arrays, attrs = io.load_model(path)
        rs = attrs["random_state"]
        params = dict(attrs["params"])
        if isinstance(params.get("recovery"), list):
            params["recovery"] = tuple(params["recovery"])
        model = cls(**params, random_state=rs if isinstance(rs, (int, type(None))) else None)
        model.omega_, model.b_ = arrays["omega"], arrays["b"]
        model.coef_, model.intercept_ = arrays["coef"], arrays["intercept"]
        model.solver_ = attrs["solver_"]
        model.n_features_in_ = attrs["n_features_in_"]
        model.input_shape_ = tuple(attrs["input_shape_"])
        model.output_shape_ = tuple(attrs["output_shape_"])
        for which in ("input", "output"):
            dims = attrs[f"{which}_dims_"]
            setattr(model, f"{which}_dims_", None if dims is None else tuple(dims))
            setattr(model, f"{which}_coords_",
                    {d: arrays[f"coord_{which}_{d}"] for d in (dims or []) if f"coord_{which}_{d}" in arrays})
            ndim = attrs.get(f"{which}_grid_ndim")
            setattr(model, f"{which}_grid_",
                    None if ndim is None else tuple(arrays[f"grid_{which}_{k}"] for k in range(ndim)))
        return model
