"""
A fit on SLURM, step by step
============================

This page is not run when the documentation is built: it needs a SLURM cluster. Run it on a
login node, in the environment the jobs will use (``python -m pip install ".[hpc]"``).

The steps: pick a shipped configuration, adapt it to your site, look at the job script it
would submit, start the cluster and its client, generate or open the data, fit, save, close.
"""

# %%
# 1. The shipped configurations. ``slurm`` runs four 32-core nodes with four worker processes
#    each; ``slurm-dual`` one worker per node (for large dual fits, whose Gram a worker holds);
#    ``slurm-gpu`` one worker per GPU.
from rfol_dask import RandomFeatureOperator, datasets
from rfol_dask.cluster import close_client, job_script, shipped_configs, start_client
from rfol_dask.metrics import relative_l2_error

print(shipped_configs())

# %%
# 2. Adapt it: copy the file next to your work, and set your queue (partition), account, node
#    size, walltime and the prologue that activates your environment. A configuration is a YAML
#    file whose ``options`` are the keywords of ``dask_jobqueue.SLURMCluster``::
#
#       cp $(python -c "import rfol_dask; print(rfol_dask.__path__[0])")/clusters/slurm.yaml \
#          my-slurm.yaml
#
# Give ``walltime`` the time of the whole run, from the first job's start to the model saved,
# with room to spare: a job that reaches its walltime takes its worker with it, and a fit whose
# workers all end waits 300 s for new ones (``distributed.scheduler.no-workers-timeout``), then
# fails with ``NoWorkersError``. Time a small fit on the same jobs and scale up from it.
#
# ``job_script`` shows what one job would run, without submitting anything: check the
# ``#SBATCH`` lines, the modules and the worker command before you queue jobs.
config = "my-slurm.yaml"  # or "slurm" for the shipped file as it is
print(job_script(config))

# %%
# 3. Start the cluster. This submits ``scale`` jobs and waits for the first worker; while the
#    jobs wait in the queue, a line a minute is logged (logger ``rfol_dask``), so a queued job
#    is told from a hang. The dashboard link is ``client.dashboard_link``.
client = start_client(config)
print(client.dashboard_link)

# %%
# 4. Data: generate a data set on the cluster straight into a Zarr store on a shared file
#    system (rerun the same call after an interruption: it resumes), or open your own store.
try:
    ds = datasets.generate("navier_stokes_high", 20000, store="/scratch/me/ns_high.zarr")
    train, test = ds.isel(sample=slice(0, 18000)), ds.isel(sample=slice(18000, None))

    # %%
    # 5. Fit. Inside the client the fit runs on the cluster: each worker forms slabs of
    #    features from the chunks it reads and sums its own Gram; the Grams are summed, factored
    #    once and solved there. The model (frequencies and coefficients) comes back to this
    #    process, which must have room for it (the fit is refused before any work otherwise).
    model = RandomFeatureOperator(n_features=20000, random_state=0).fit(
        train["input"], train["output"]
    )
    model.save("/scratch/me/ns_high_model.zarr")

    # %%
    # 6. Predict and score on the cluster; predictions are lazy until computed or written
    #    (``rfol_dask.predictions.write_predictions(pred, "pred.zarr")``).
    pred = model.predict(test["input"])
    print(float(relative_l2_error(test["output"], pred)))
finally:
    # %%
    # 7. Close the client and cancel the jobs (this is what leaving ``with start_client(...)``
    #    would do too).
    close_client(client)

# %%
# The same from the command line, where the CLI starts and closes the cluster::
#
#    rfol-dask generate navier_stokes_high --samples 20000 --out ns_high.zarr --cluster slurm
#    rfol-dask fit ns_high.zarr --train 18000 --n-features 20000 --cluster slurm-dual \
#        --out ns_high_model.zarr
