"""Where the package's warnings point: the user's code, not the package's.

``warnings.warn(message, category, stacklevel=user_stacklevel())`` attributes a warning to the
first frame outside rfol_dask, the line of the user's code that called into the package
(``model.fit(X, y)``), however deep inside the package the warning is raised and by whichever
path it got there (a fixed ``stacklevel`` fits one call path only: the float32 jitter warning
of a default fit pointed at ``rfol_dask/backend.py``). Python 3.12's
``warnings.warn(skip_file_prefixes=...)`` does the same; the package supports 3.11.

No package imports: the bottom module, :mod:`rfol_dask.linalg`, may use it.
"""

from __future__ import annotations

import sys

__all__ = ["user_stacklevel", "in_package"]

#: Plumbing between two of the package's frames (a context manager of the package, left by its
#: ``with`` block), skipped as the package's frames are.
_PLUMBING = frozenset({"contextlib"})

#: Top-level modules that run the package's own tasks in their threads (a dask task, a thread of
#: a pool): a stack that leaves the package into one of them has no user code on it.
_RUNNERS = frozenset(
    {"dask", "distributed", "concurrent", "threading", "toolz", "tlz", "dask_cuda"}
)


def _top(frame):
    """The top-level package of the module running ``frame`` ('' where unknown)."""
    return str(frame.f_globals.get("__name__") or "").partition(".")[0]


def in_package(frame):
    """Whether ``frame`` runs code of a module of rfol_dask."""
    return _top(frame) == "rfol_dask"


def user_stacklevel():
    """The ``stacklevel`` for a ``warnings.warn`` made by the function calling this one (call it
    in that ``warn`` call's arguments) that points at the first frame outside rfol_dask.

    Frames of :mod:`contextlib` between the package's frames are skipped too. Where the stack
    leaves the package into a task runner (a dask scheduler thread, a ``concurrent.futures``
    pool: the warning is raised in one of the package's tasks, with no user code on this
    thread's stack), or never leaves it, the level is that of the outermost frame of the
    package, the task itself. Level 1 (the function itself) where that function is not the
    package's."""
    frame, level = sys._getframe(1), 1  # level 1: the function that warns
    outermost = level
    while frame is not None:
        top = _top(frame)
        if top == "rfol_dask":
            outermost = level
        elif top not in _PLUMBING:
            break
        frame, level = frame.f_back, level + 1
    if frame is None or _top(frame) in _RUNNERS:
        return outermost
    return level
