"""The memory checks of :class:`rfol_dask.baselines.KernelOperator`'s fit."""

from __future__ import annotations

import numpy as np

from .. import backend
from ..memory import check_gram_memory, check_host_memory, n_slots


class KernelMemory:
    """The fit's memory checks (mixed into the estimator)."""

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
