"""The default CV searches on the CPU, timed: RandomFeatureOperatorCV (n_features=1000) and
KernelOperatorCV on 2000 synthetic smooth 1-D samples (256 points in and out). One line of JSON:
the two search times and their winners. For before / after comparisons of the search code, run
alternately from two checkouts (``PYTHONPATH=<checkout> python benchmarks/search_ab.py``).
"""
import sys, time, json
import numpy as np
from rfol_dask import RandomFeatureOperatorCV
from rfol_dask.baselines import KernelOperatorCV
rng = np.random.default_rng(0)
M, n = 2000, 256
x = np.linspace(0, 1, n, endpoint=False)
c = rng.standard_normal((M, 8)) / (1 + np.arange(8))
U = sum(c[:, [k]] * np.sin(2 * np.pi * (k + 1) * x) for k in range(8))
V = np.tanh(U) + 0.3 * U ** 2
out = {}
t = time.perf_counter(); rf = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(U, V); out["rf_cv"] = time.perf_counter() - t
t = time.perf_counter(); kc = KernelOperatorCV().fit(U, V); out["kernel_cv"] = time.perf_counter() - t
out["rf_best"] = rf.best_params_; out["kernel_best"] = kc.best_params_
print(json.dumps(out))
