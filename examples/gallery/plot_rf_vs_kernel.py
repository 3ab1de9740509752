"""
Random features against the exact kernel at equal fit time
==========================================================

Both models tuned on the same validation split: :class:`~rfol_dask.RandomFeatureOperatorCV`
for the random features, :class:`~rfol_dask.baselines.KernelOperatorCV` for exact kernel
ridge regression (RBF, Matern 5/2, inverse quadratic). Then the random-feature model is refitted
at growing ``N`` and its test error plotted against its fit time, beside the exact kernel's.
"""

import time

import matplotlib.pyplot as plt

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, datasets
from rfol_dask.baselines import KernelOperator, KernelOperatorCV
from rfol_dask.metrics import relative_l2_error

ds = datasets.generate("advection3", 800, seed=0)
U, V = ds["input"].values, ds["output"].values
train_U, train_V, test_U, test_V = U[:600], V[:600], U[600:], V[600:]

rf = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(train_U, train_V)
kernel = KernelOperatorCV().fit(train_U, train_V)
print("random features:", rf.best_params_)
print("exact kernel:   ", kernel.best_params_)


def timed(model, repeats=2):
    """The best of ``repeats`` fit times (a fair time on a busy machine) and the test error."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.fit(train_U, train_V)
        times.append(time.perf_counter() - t0)
    return min(times), relative_l2_error(test_V, model.predict(test_U))


# %%
# Refit each at the chosen settings and time it.
params = {k: v for k, v in rf.best_params_.items() if k != "n_features"}
n_features = (250, 500, 1000, 2000, 4000)
rf_points = [
    timed(RandomFeatureOperator(n_features=N, random_state=0, **params)) for N in n_features
]
kernel_time, kernel_error = timed(KernelOperator(**kernel.best_params_))
print(f"exact kernel: {kernel_error:.3f} in {kernel_time:.2f} s")

# %%
fig, ax = plt.subplots(figsize=(6, 4))
times, errors = zip(*rf_points, strict=True)
ax.plot(times, errors, "o-", label="random features")
for N, t, e in zip(n_features, times, errors, strict=True):
    ax.annotate(f"N = {N}", (t, e), textcoords="offset points", xytext=(6, 4), fontsize="small")
ax.plot([kernel_time], [kernel_error], "s", color="C3", markersize=9, label="exact kernel")
ax.set_xlabel("fit time [s]")
ax.set_ylabel("relative L2 test error")
ax.set_title("Advection III, 600 training samples")
ax.legend()
fig.tight_layout()
