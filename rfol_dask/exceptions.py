"""The errors and warnings of rfol_dask, in one place (as ``sklearn.exceptions``).

Every warning the package gives is a :class:`RfolDaskWarning`, and also the one standard category
it always had (``UserWarning`` or ``RuntimeWarning``; the base itself is neither, so a filter on
one of them acts as before). The package's warnings point at the user's
line that called into it (:mod:`rfol_dask.stacklevel`), so a filter by module does not find
them; filter by category instead::

    warnings.filterwarnings("ignore", category=rfol_dask.exceptions.RfolDaskWarning)   # all of them
    warnings.filterwarnings("error", category=rfol_dask.exceptions.MemoryPlanWarning)  # one kind

The errors are also importable from the modules that raise them. Apart from scikit-learn's
metric warning, no imports: the bottom module, :mod:`rfol_dask.linalg`, may use it.
"""

from __future__ import annotations

from sklearn.exceptions import UndefinedMetricWarning as _SklearnUndefinedMetric

__all__ = [
    "RfolDaskWarning",
    "MemoryPlanWarning",
    "ClusterWarning",
    "SettingWarning",
    "DataWarning",
    "SelectionWarning",
    "ModelFileWarning",
    "RidgeRaised",
    "UndefinedMetricWarning",
    "ComplexDataError",
    "NoWorkersError",
    "WorkersKilledError",
    "ClusterStartError",
    "BlockedFactorError",
    "ForeignModelError",
    "NoDeviceError",
]


class RfolDaskWarning(Warning):
    """The base of every warning rfol_dask gives."""


class MemoryPlanWarning(RfolDaskWarning, RuntimeWarning):
    """A fit's memory plan changed: the dual's Gram does not fit one worker, so it is factorised
    blocked, across the workers."""


class ClusterWarning(RfolDaskWarning, RuntimeWarning):
    """A cluster that may leave work behind: a batch job that may have been queued, a cluster that
    did not close."""


class SettingWarning(RfolDaskWarning, UserWarning):
    """A setting of the user's that defeats a safeguard: a ``max_gram_bytes`` beyond what the
    hardware holds, a cluster configuration that oversubscribes its nodes' cores."""


class DataWarning(RfolDaskWarning, UserWarning):
    """Data read in a way the user should know of (labels out of order, axes guessed periodic,
    cross-validation splits left out)."""


class SelectionWarning(RfolDaskWarning, UserWarning):
    """A search whose winner may not be what the user wants (at the edge of a grid they gave)."""


class ModelFileWarning(RfolDaskWarning, UserWarning):
    """A saved model loaded other than as it was saved (an older format, another device, the
    previous model after an interrupted save)."""


class RidgeRaised(RfolDaskWarning, RuntimeWarning):
    """A factorisation that needed a larger ridge than asked for; ``alpha`` is the ridge asked
    for, ``ridge`` the one used (a search records it instead of warning:
    :class:`rfol_dask.selection.SelectionCV`)."""

    def __init__(self, message, alpha=None, ridge=None):
        super().__init__(message)
        self.alpha, self.ridge = alpha, ridge


class UndefinedMetricWarning(RfolDaskWarning, _SklearnUndefinedMetric):
    """A score that is not defined for its input (scikit-learn's warning of the same name)."""


class ComplexDataError(TypeError, ValueError):
    """Complex input: a TypeError (as the dask path raises for any dtype that is not real) and
    the ValueError scikit-learn's estimator checks expect."""


class NoWorkersError(RuntimeError):
    """The client's cluster has no workers to place a fit's tasks on (none arrived in the wait
    of :func:`rfol_dask.placement.worker_addresses`)."""


class WorkersKilledError(RuntimeError):
    """A task killed the workers it ran on (dask's KilledWorker), usually by running out of
    memory: the message names the task and the workers' memory limits."""


class ClusterStartError(RuntimeError):
    """A cluster that could not be started (its jobs cannot be submitted, no Kubernetes cluster
    can be reached, no MPI scheduler appeared); the CLI prints it as one line."""


class BlockedFactorError(ValueError):
    """The blocked Cholesky factorisation of a fit graph failed
    (:func:`rfol_dask.solve.graph.compute_fit`)."""


class ForeignModelError(ValueError):
    """A saved model of another estimator class than the one loading it (the class it records, or
    for a model saved before the class was recorded, parameters the class does not take): another
    class may load it (:func:`rfol_dask.persistence.restore_estimator`)."""


class NoDeviceError(RuntimeError):
    """``device="cuda"`` where CuPy is installed but finds no GPU (no driver, none visible):
    :func:`rfol_dask.backend.device_namespace`."""
