"""Timing and memory of one fit + predict."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import tracemalloc

import psutil

from ..metrics import relative_l2_error


class PeakMemory:
    """Peak resident memory of this process and its children (LocalCluster workers), sampled every
    ``interval`` s while the ``with`` block runs: ``peak`` and ``increase`` (over the entry's), in
    bytes; with ``every`` (s), ``timeline`` holds ``(seconds since entry, peak since the previous
    entry)`` pairs about that far apart (the peak of a phase: :meth:`peak_between`)."""

    def __init__(self, interval: float = 0.005, every: float | None = None):
        self.interval, self.every, self.peak, self.timeline = interval, every, 0, []

    def _rss(self) -> int:
        total = (proc := psutil.Process()).memory_info().rss  # this process
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # ended meanwhile
                total += child.memory_info().rss
        return total

    def _run(self):
        window, last = 0, self._t0
        while not self._stop.wait(self.interval):
            rss = self._rss()
            self.peak, window = max(self.peak, rss), max(window, rss)
            now = time.perf_counter()
            if self.every is not None and now - last >= self.every:
                self.timeline.append((now - self._t0, window))
                window, last = 0, now

    def peak_between(self, t0: float, t1: float = float("inf")) -> int:
        """The peak (bytes) of the ``timeline`` entries in ``[t0, t1)`` s since entry (0: none)."""
        return max((rss for t, rss in self.timeline if t0 <= t < t1), default=0)

    def __enter__(self):
        self.base = self.peak = self._rss()
        self._t0, self._stop = time.perf_counter(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())
        self.increase = self.peak - self.base


def run_method(model, U, V, Ut, Vt, repeats: int = 1):
    """Fit ``model`` on ``U`` (M, n) / ``V`` (M, m), predict ``Ut`` (M_test, n), ``repeats`` times:
    ``(row, prediction (M_test, m))``; ``row``: ``error`` (relative L2 against ``Vt``), ``fit_s``
    and ``predict_s`` (medians), ``peak_mib`` (tracemalloc's peak during fit + predict: numpy
    arrays, not BLAS workspaces) and ``rss_mib`` (growth of the resident memory: a lower bound)."""
    fits, preds = [], []
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with PeakMemory() as pm:
            for _ in range(repeats):
                t0 = time.perf_counter()
                model.fit(U, V)
                t1 = time.perf_counter()
                pred = model.predict(Ut)
                fits.append(t1 - t0)
                preds.append(time.perf_counter() - t1)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    row = dict(error=relative_l2_error(Vt, pred), fit_s=statistics.median(fits))
    row.update(predict_s=statistics.median(preds), peak_mib=peak / 2**20)
    return dict(row, rss_mib=pm.increase / 2**20), pred
