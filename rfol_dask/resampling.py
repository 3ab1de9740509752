"""How an operator learner knows its grids and reads and writes others through the recovery maps
``R_U`` / ``R_V`` of its ``recovery`` parameter."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import dask.array as da
import numpy as np
import xarray as xr

from . import backend, io, persistence
from . import recovery as rec
from .exceptions import DataWarning
from .stacklevel import user_stacklevel


class ResamplingMixin:
    """Recovery-map helpers of the operator learners."""

    def _knows_grid(self, which):
        """Whether the ``which`` grid has dims or coordinates (else data are read by position)."""
        return any(getattr(self, f"{which}_{k}_", None) is not None for k in ("dims", "grid"))

    def _learn_grids(self, u, v, V, in_shape, out_shape, input_grid, output_grid, periods):
        """The fitted shapes, dims, coordinates, attributes, grids and periods of both sides."""
        self.input_shape_, self.output_shape_ = tuple(in_shape), tuple(out_shape)
        self.input_coords_, self.output_coords_ = u.coords, v.coords
        self.output_attrs_, self.output_coord_attrs_ = persistence.attrs_of(V, v.dims)
        self.input_grid_ = io.learn_grid(input_grid, u, self.input_shape_, "input")
        self.output_grid_ = io.learn_grid(output_grid, v, self.output_shape_, "output")
        in_dims = io.grid_dims(u, input_grid, self.input_grid_)
        out_dims = io.grid_dims(v, output_grid, self.output_grid_)
        # arrays with grid mappings: the keys name the dims, so a later grid mapping is read by name
        self.input_dims_ = u.dims or (in_dims if isinstance(input_grid, Mapping) else None)
        self.output_dims_ = v.dims or (out_dims if isinstance(output_grid, Mapping) else None)
        if isinstance(periods, Mapping) and (set(periods) - set(in_dims) - set(out_dims)):
            raise ValueError(
                f"periods names dims {sorted(set(periods) - set(in_dims) - set(out_dims))} that "
                f"are not grid dims of the data (input {in_dims}, output {out_dims}; arrays name "
                "them by the keys of input_grid= / output_grid= mappings, else dim_0, dim_1, ...)"
            )
        self.input_periods_ = io.learn_periods(periods, u, self.input_grid_, "input", in_dims)
        self.output_periods_ = io.learn_periods(periods, v, self.output_grid_, "output", out_dims)

    def _recovery_specs(self):
        """``(R_U spec, R_V spec)`` from the ``recovery`` parameter."""
        specs = self.recovery if isinstance(self.recovery, (tuple, list)) else (self.recovery,) * 2
        if len(specs) != 2:
            raise ValueError(
                f"recovery must be a kind, a dict or a pair (input, output); got {self.recovery!r}"
            )
        return tuple(specs)

    def _check_recovery(self):
        """Validate the ``recovery`` parameter at ``fit``: kinds and options."""
        for spec in self._recovery_specs():
            try:  # the kind, and the names and values of its options
                rec.make_recovery(spec, np.arange(4.0))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"invalid recovery={self.recovery!r}: {exc}") from exc
            seed = spec.get("random_state", 0) if isinstance(spec, Mapping) else 0
            if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
                raise ValueError(
                    f"recovery 'rf' needs an int random_state, got {seed!r}: the map is built "
                    "again for each new grid and must draw the same features every time"
                )

    def _recovery(self, which, grid):
        """The ``which`` recovery map of ``grid``; a DataWarning where a spectral map reads an axis
        of no known period as periodic."""
        periods = getattr(self, f"{which}_periods_", None)
        R = rec.make_recovery(self._recovery_specs()[which == "output"], grid, periods=periods)
        if R.kind == "spectral":
            dims = getattr(self, f"{which}_dims_", None) or [f"dim_{k}" for k in range(R.ndim)]
            guessed = [
                f"{d} (period {rec.uniform_period(x):g})"
                for d, x, P in zip(dims, R.grid_in, R.periods, strict=True)
                if P is None and x.size > 1
            ]
            if guessed:
                warnings.warn(
                    f"recovery 'spectral' reads the {which} axes {', '.join(guessed)} as periodic, "
                    "but the model knows no period for them; for data that are not periodic use "
                    "recovery='cubic', for periodic data give the period (fit(periods={dim: P}) "
                    "or a 'period' attribute on the coordinate)",
                    DataWarning,
                    stacklevel=user_stacklevel(),
                )
        return R

    def _output_on_grid(self, Y, u, output_grid, grid_new):
        """Predictions ``Y`` (M, m) resampled to ``output_grid`` if given, in the kind of ``u``."""
        if backend.is_array_api(Y):  # the recovery maps resample on the host
            xp = backend.namespace(Y)
            if output_grid is None:
                Y = xp.reshape(Y, (Y.shape[0], *self.output_shape_))
                return self._output_on_host(Y, u, None, None) if u.kind == "xarray" else Y
            out = self._output_on_host(backend.to_numpy(Y), u, output_grid, grid_new)
            if isinstance(out, xr.DataArray):
                return out.copy(data=backend.to_namespace(out.data, xp))
            return backend.to_namespace(out, xp)
        return self._output_on_host(Y, u, output_grid, grid_new)

    def _output_on_host(self, Y, u, output_grid, grid_new):
        """:meth:`_output_on_grid` of numpy or dask ``Y`` (CuPy values pass through, unwrapped)."""
        shape, dims, coords = self.output_shape_, self.output_dims_, self.output_coords_
        grid = getattr(self, "output_grid_", None)
        if grid_new is not None:
            R_V = self._recovery("output", grid)
            grid_new = R_V.check_grid(grid_new, "output_grid", "the training output grid")
            Y = R_V.resample(Y.reshape((Y.shape[0], *shape)), grid_new)
            shape, grid = Y.shape[1:], grid_new
            Y = Y.reshape((Y.shape[0], -1))
        if grid is not None and (not coords or output_grid is not None):
            dims = dims or tuple(f"dim_{k}" for k in range(len(grid)))
            coords = dict(zip(dims, grid, strict=True))
        pred = io.wrap_like(Y, u, shape, dims, coords, name="prediction")
        if isinstance(pred, xr.DataArray):
            pred.attrs.update(getattr(self, "output_attrs_", {}))
            for dim, attrs in getattr(self, "output_coord_attrs_", {}).items():
                if dim in pred.coords:
                    pred[dim].attrs.update(attrs)
        return pred

    def _new_output_grid(self, output_grid):
        """``output_grid`` as axes where given and not the training output grid, else None."""
        if output_grid is None:
            return None
        grid = getattr(self, "output_grid_", None)
        grid_new = self._check_grid(output_grid, grid, "output")
        return None if rec.same_grid(grid_new, grid) else grid_new

    def _named_axes(self, grid, which):
        """A ``{dim: coords}`` grid as axes in the order of the model's dims; others as they are."""
        dims = getattr(self, f"{which}_dims_", None)
        if not isinstance(grid, Mapping) or dims is None:
            return grid  # a model fitted on arrays knows no names: the mapping's order
        unknown, missing = [d for d in grid if d not in dims], [d for d in dims if d not in grid]
        if unknown or missing:
            raise ValueError(
                f"{which}_grid names dims {list(grid)} but the model's {which} grid has dims "
                f"{list(dims)} (unknown {unknown}, missing {missing})"
            )
        return [grid[d] for d in dims]

    def _check_grid(self, grid, trained, which):
        """``grid`` as axes; ValueError if the model has no grid there or the dimension differs."""
        grid = rec.as_grid(self._named_axes(grid, which), f"{which}_grid")
        if trained is None:
            raise ValueError(
                f"the model was fitted without {which} grid coordinates, so it cannot use another "
                f"{which} grid: fit on xarray data with coordinates or pass fit({which}_grid=...)"
            )
        if len(grid) != len(trained):
            raise ValueError(
                f"{which}_grid has {len(grid)} axes but the model was trained on a "
                f"{len(trained)}-D {which} grid of shape {tuple(len(a) for a in trained)}"
            )
        return grid

    def _to_training_grid(self, U, u, input_grid):
        """The operand ``u`` resampled through ``R_U`` to the training input grid if needed."""
        grid = own = io.operand_grid(u)  # a DataArray's coordinates
        if input_grid is not None:
            grid = rec.as_grid(self._named_axes(input_grid, "input"), "input_grid")
        if input_grid is not None and own is not None and not rec.same_grid(grid, own):
            raise ValueError(
                "input_grid differs from X's own coordinates, which give its grid: drop input_grid "
                "(or X's coordinates, X.drop_vars(...), to read X on input_grid)"
            )
        trained = getattr(self, "input_grid_", None)
        if grid is None or rec.same_grid(grid, trained):
            return u
        if input_grid is None and trained is None:
            return u  # xarray coordinates but a model without grid: positional, as before
        grid = self._check_grid(grid, trained, "input")
        source = "input_grid" if input_grid is not None else "X's coordinates"
        rec.as_periods(getattr(self, "input_periods_", None), grid, name=source)
        R_U = self._recovery("input", grid)
        self._check_domain(trained, grid, R_U, source)
        data = u.data if u.kind == "xarray" else U  # u: the grid dims in increasing order
        xp = backend.namespace(data) if backend.is_array_api(data) else None  # CuPy: on the host
        if not isinstance(data, da.Array):
            data = backend.to_numpy(data) if xp is not None else np.asarray(data)
        shape = tuple(len(ax) for ax in grid)
        wrong = data.ndim > 2 and tuple(data.shape[1:]) != shape  # flat rows: in grid order
        if data.ndim < 1 or int(np.prod(data.shape[1:])) != int(np.prod(shape)) or wrong:
            raise ValueError(f"X has shape {tuple(data.shape)} but input_grid has shape {shape}")
        resampled = R_U.resample(data.reshape((data.shape[0], *shape)), trained)
        resampled = resampled if xp is None else backend.to_namespace(resampled, xp)
        new = io.as_operand(resampled, "U")
        return io.Operand(new.data, new.grid_shape, u.kind, u.dims, u.coords, u.sample)

    def _check_domain(self, trained, grid, R_U, source):
        """ValueError where the input ``grid`` misses part of the ``trained`` domain or strays."""
        domain = rec.grid_domain(trained, R_U.periodic)
        for k, (x, y, (lo, hi), (c_lo, c_hi), P) in enumerate(
            zip(trained, grid, domain, R_U.domain(), R_U.periods, strict=True)
        ):
            if P is not None:  # periodic: any grid around the period covers the training one
                _check_period_covered(x, y, P, k, source)
                continue
            tol, step = rec.tolerance(x), (hi - lo) / max(len(x) - 1, 1)
            if x[0] < c_lo - tol or x[-1] > c_hi + tol:
                known = (getattr(self, "input_periods_", None) or [None] * len(trained))[k]
                hint = ""
                if known is not None:
                    hint = f"; the axis has period {known:g}, but recovery {R_U.kind!r} does not"
                    hint += " wrap periodic axes: use 'cubic' or 'spectral'"
                raise ValueError(
                    f"{source} span [{c_lo:.10g}, {c_hi:.10g}] along axis {k} but the model was "
                    f"trained on [{lo:.10g}, {hi:.10g}]: the input must cover the training domain "
                    f"(no extrapolation){hint}"
                )
            if y[0] < lo - step or y[-1] > hi + step:
                raise ValueError(
                    f"{source} span [{y[0]:.10g}, {y[-1]:.10g}] along axis {k}, outside the "
                    f"training domain [{lo:.10g}, {hi:.10g}]"
                )


#: the widest gap a periodic input grid may leave, in its median spacings (or the training grid's)
MAX_PERIODIC_GAP = 4.0


def _check_period_covered(trained, grid, period, axis, source="input_grid"):
    """ValueError when ``grid`` leaves a gap in the ``period`` wider than :data:`MAX_PERIODIC_GAP`
    median spacings and the ``trained`` grid's widest."""

    def gaps(x):
        x = np.sort(np.mod(np.asarray(x, dtype=float) - x[0], period))
        return np.diff(np.append(x, period)), x

    if len(grid) < 2 <= len(trained):
        raise ValueError(
            f"{source} has one point on the periodic axis {axis} (period {period:g}): the input "
            f"must sample the whole period (the model was trained on {len(trained)} points)"
        )
    g, pts = gaps(grid)
    widest = int(np.argmax(g))
    if len(grid) < 2 or g[widest] <= max(MAX_PERIODIC_GAP * np.median(g), gaps(trained)[0].max()):
        return
    start = grid[0] + pts[widest]
    raise ValueError(
        f"{source} leaves a gap of {g[widest]:g} in the period {period:g} of axis {axis} (from "
        f"{start:g} to {start + g[widest]:g}, {g[widest] / np.median(g):.0f} x its median "
        "spacing): the input must sample the whole period; the recovery map would fill the gap by "
        "interpolating across it"
    )
