"""The benchmark's memory probe (``experiments.measure.PeakMemory``)."""

import time

import numpy as np
import pytest

from rfol_dask.experiments.measure import PeakMemory


@pytest.mark.slow
def test_peak_memory_sees_an_allocation_and_its_phase():
    with PeakMemory(interval=0.01, every=0.1) as pm:
        time.sleep(0.3)
        t_alloc = time.perf_counter() - pm._t0
        big = np.ones(2**25)  # 256 MiB, touched
        time.sleep(0.3)
        del big
        time.sleep(0.3)
    assert pm.increase > 200 * 2**20
    assert len(pm.timeline) >= 5 and all(
        t1 > t0 for (t0, _), (t1, _) in zip(pm.timeline, pm.timeline[1:])
    )
    before = pm.peak_between(0, t_alloc)
    assert pm.peak_between(t_alloc) - before > 200 * 2**20  # the allocation's phase holds the peak
    assert pm.peak_between(t_alloc) <= pm.peak
    assert pm.peak_between(1e9) == 0
