"""The errors and warnings of rfol_dask (as ``sklearn.exceptions``). Every warning is a
:class:`RfolDaskWarning` and a ``UserWarning`` or ``RuntimeWarning``; it points at the user's line
that called into the package, so filter them by category, not by module::

    warnings.filterwarnings("ignore", category=rfol_dask.exceptions.RfolDaskWarning)
"""

from __future__ import annotations

from sklearn.exceptions import UndefinedMetricWarning as _SklearnUndefinedMetric

__all__ = """RfolDaskWarning MemoryPlanWarning ClusterWarning SettingWarning DataWarning
SelectionWarning ModelFileWarning RidgeRaised UndefinedMetricWarning ComplexDataError NoWorkersError
WorkersKilledError ClusterStartError BlockedFactorError ForeignModelError NoDeviceError""".split()


class RfolDaskWarning(Warning):
    """The base of every warning rfol_dask gives."""


class MemoryPlanWarning(RfolDaskWarning, RuntimeWarning):
    """The dual's Gram does not fit one worker: it is factorised blocked, across the workers."""


class ClusterWarning(RfolDaskWarning, RuntimeWarning):
    """A cluster that may leave work behind (jobs that may be queued, a cluster not closed)."""


class SettingWarning(RfolDaskWarning, UserWarning):
    """A setting that defeats a safeguard (a ``max_gram_bytes`` beyond the hardware)."""


class DataWarning(RfolDaskWarning, UserWarning):
    """Data read in a way the user should know of (labels out of order, axes guessed periodic)."""


class SelectionWarning(RfolDaskWarning, UserWarning):
    """A search whose winner may not be what the user wants (at the edge of a grid they gave)."""


class ModelFileWarning(RfolDaskWarning, UserWarning):
    """A saved model loaded other than as it was saved (older format, another device, ...)."""


class RidgeRaised(RfolDaskWarning, RuntimeWarning):
    """A factorisation that needed a larger ridge, ``ridge``, than the ``alpha`` asked for."""

    def __init__(self, message, alpha=None, ridge=None):
        super().__init__(message)
        self.alpha, self.ridge = alpha, ridge


class UndefinedMetricWarning(RfolDaskWarning, _SklearnUndefinedMetric):
    """A score that is not defined for its input (scikit-learn's warning of the same name)."""


class ComplexDataError(TypeError, ValueError):
    """Complex input: a TypeError (as dask raises) and the ValueError scikit-learn expects."""


class NoWorkersError(RuntimeError):
    """The client's cluster has no workers: none arrived, or all ended during a computation."""


class WorkersKilledError(RuntimeError):
    """A task killed the workers it ran on (dask's KilledWorker), usually out of memory."""


class ClusterStartError(RuntimeError):
    """A cluster that could not be started (jobs not submitted, no Kubernetes cluster, ...)."""


class BlockedFactorError(ValueError):
    """The blocked Cholesky factorisation of a fit graph failed."""


class ForeignModelError(ValueError):
    """A saved model of another estimator class than the one loading it."""


class NoDeviceError(RuntimeError):
    """``device="cuda"`` where CuPy finds no GPU (no driver, none visible)."""
