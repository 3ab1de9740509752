"""
Tune gamma, alpha and N; the error-vs-N curve
=============================================

:class:`~rfol_dask.RandomFeatureOperatorCV` searches the feature law, ``gamma`` (multiples of
the median heuristic) and ``alpha`` on a validation split of the training samples. Then
:func:`rfol_dask.curves.error_curves` shows what more features buy with the chosen settings:
one fit grown block by block per seed, scored at every doubling of ``N``.
"""

import matplotlib.pyplot as plt
from matplotlib.ticker import NullLocator

from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, curves, datasets
from rfol_dask.metrics import relative_l2_error

ds = datasets.generate("advection3", 700, seed=0)  # 200 grid points, a thresholded field
U, V = ds["input"], ds["output"]
train_U, train_V, test_U, test_V = U[:500], V[:500], U[500:], V[500:]

# %%
# The search. ``cv_results_`` has a row per candidate (stage, law, gamma, alpha, N, error).
search = RandomFeatureOperatorCV(n_features=1000, random_state=0).fit(train_U, train_V)
p = search.best_params_
print(p, f"validation error {-search.best_score_:.3f}")
print(search.cv_results_.to_dataframe().sort_values("mean_relative_l2").head())

# %%
# Against the defaults (Cauchy law, median gamma, ``alpha=1e-10``) on the held-out samples.
default = RandomFeatureOperator(n_features=1000, random_state=0).fit(train_U, train_V)
print(f"default: {float(relative_l2_error(test_V, default.predict(test_U))):.3f}")
print(f"tuned:   {float(relative_l2_error(test_V, search.predict(test_U))):.3f}")

# %%
# The error-vs-N curve of the chosen settings. The curve is judged on a split of the training
# samples, never on the test samples, so that it can still guide the choice of ``N``.
c = curves.error_curves(
    train_U[:400].values,
    train_V[:400].values,
    train_U[400:].values,
    train_V[400:].values,
    curves.doubling(125, 4000),
    seeds=range(3),
    distribution=p["distribution"],
    gamma=p["gamma"],
    alpha=p["alpha"],
)
curve = curves.curve_dataset(c)
print(curve)

fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
curve.error.plot.line(ax=left, x="n_features", xscale="log", yscale="log", add_legend=False)
left.axvline(400, color="0.6", linestyle=":", label="N = M")
left.legend()
curve.fit_time.median("seed").plot(ax=right, x="n_features", xscale="log", yscale="log")
right.set_title("median fit time")
for ax in (left, right):
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(curve.n_features.values, [str(n) for n in curve.n_features.values])
fig.suptitle(f"Advection III, tuned {p['distribution']} features, one curve per seed")
fig.tight_layout()
