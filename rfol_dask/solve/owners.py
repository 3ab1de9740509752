"""Owner tags: names that say which process made them, so that what a killed process left can
be told from what a running one uses (the feature caches of :mod:`rfol_dask.solve.streamed`)."""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["owned_tag", "tag_owner", "process_alive"]


def owned_tag(length=32):
    """A fresh ``<host>.<pid>.<hex>`` tag (``length`` hex digits)."""
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:length]}"


def tag_owner(tag):
    """``(host, pid)`` of a tag made by :func:`owned_tag`, or None for any other text."""
    try:
        host, pid, digits = tag.rsplit(".", 2)
        int(digits, 16)
        return (host, int(pid)) if host else None
    except ValueError:
        return None


def process_alive(host, pid):
    """Whether process ``pid`` on ``host`` may still run (another host: assumed alive; a zombie,
    which holds its pid under a parent that does not reap it, is not)."""
    import psutil

    if host != socket.gethostname():
        return True
    try:
        return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, TypeError, ValueError):
        return True
