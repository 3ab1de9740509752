"""``warnings.warn(message, category, stacklevel=user_stacklevel())`` attributes a warning to the
first frame outside rfol_dask (as Python 3.12's ``skip_file_prefixes``; the package supports 3.11).
"""

from __future__ import annotations

import sys

#: plumbing between two of the package's frames (its context managers), skipped as they are
_PLUMBING = {"contextlib"}

#: modules that run the package's tasks in their threads: no user code below them
_RUNNERS = {"dask", "distributed", "concurrent", "threading", "toolz", "tlz", "dask_cuda"}


def _top(frame):  # the top-level package of the module running frame ('' where unknown)
    return str(frame.f_globals.get("__name__") or "").partition(".")[0]


def user_stacklevel():
    """The ``stacklevel`` for a ``warnings.warn`` made by the caller (in the call's arguments):
    the first frame outside rfol_dask (:mod:`contextlib` frames skipped), or, where the stack
    leaves the package into a task runner or never leaves it, its outermost frame (the task)."""
    frame, level, outermost = sys._getframe(1), 1, 1  # level 1: the function that warns
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
