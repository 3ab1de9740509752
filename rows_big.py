import os, sys, glob, warnings
os.environ["OPENBLAS_NUM_THREADS"]="1"
import numpy as np, dask, dask.array as da
from distributed import Client, LocalCluster
from rfol_dask import RandomFeatureOperator
rng = np.random.default_rng(1)
M, n, m, N = 2200, 16, 6, 2400
U = rng.standard_normal((M, n)).cumsum(1)/4; V = np.cos(U[:, ::3] @ np.ones((6, m))/3) + 0.5
Ut = rng.standard_normal((50, n)).cumsum(1)/4
def fit(X, Y, **kw):
    return RandomFeatureOperator(n_features=N, gamma=0.05, alpha=1e-6, random_state=0, solver="dual", **kw).fit(X, Y).predict(Ut)
ref = fit(U, V)
def rel(p): return np.linalg.norm(p-ref)/np.linalg.norm(ref)
mode = sys.argv[1]
ctx = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="3GiB") if mode=="cluster" else None
cl = Client(ctx) if ctx else None
for ch in (300, 1000, 1100, 7*157):
    for feat in ("rows", "slabs"):
        with dask.config.set({"rfol_dask.device-features": feat}):
            p = fit(da.from_array(U, chunks=(ch, -1)), da.from_array(V, chunks=(ch, -1)))
        print(mode, ch, feat, f"{rel(p):.2e}", flush=True)
if cl:
    print(cl.run(lambda dask_worker: glob.glob(os.path.join(dask_worker.local_directory, "rfol-*"))))
    cl.close(); ctx.close()
