"""Soak test: randomized rounds of generate / fit / search / predict / save under injected faults.

    python benchmarks/soak.py --minutes 60 --seed 0 --out benchmarks/results/soak

Each round picks an operation and a fault from a generator seeded by ``(seed, round)``, runs it
under a timeout on a 2-worker LocalCluster started here (or as a CLI subprocess) and checks:

- results equal a fault-free reference made at the start (same data, model and seeds);
- a failure is one clear exception (a CLI prints no traceback), never a hang;
- nothing outside the round's target is created or deleted (a sentinel file beside the target,
  and the reference files are fingerprinted);
- a killed and resumed generation equals an uninterrupted one;
- the cluster is back to its workers after the round;
- the client's memory does not grow round over round (checked on the summary).

Faults: worker SIGKILL at a random moment, SIGINT / SIGKILL of a CLI subprocess, a full small
filesystem (a tmpfs, where this process may mount one), and damaged chunk files (deleted,
truncated, emptied, appended to). ``OUT.jsonl`` gets one line per round, ``OUT.md`` the summary;
``--replay K`` reruns round K of ``--seed`` alone.
"""

import argparse
import contextlib
import contextvars
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

if __name__ != "__mp_main__":  # the workers' processes import this file again: keep that cheap
    import xarray as xr
    from distributed import Client, LocalCluster

    from rfol_dask import RandomFeatureOperator, RandomFeatureOperatorCV, datasets

DATA = "advection1"  # cheap to make, 40 -> 40 points
N_SAMPLES, BLOCK, N_TRAIN = 400, 50, 300
MODEL = dict(n_features=300, gamma=0.05, alpha=1e-8, random_state=0)
SEARCH = dict(n_features=200, cv=2, random_state=0)
KINDS = ("generate", "fit", "search", "fit_cli", "predict_cli", "damage")
TIMEOUT = 300.0  # seconds for one operation: a longer one is a hang
RECOVERY = 180.0  # seconds for a killed worker to be replaced (slow on a loaded machine)


class Soak:
    """The reference results, the cluster and the checks that every round shares."""

    def __init__(self, workdir, client):
        self.dir, self.client = Path(workdir), client
        self.ref_store = self.dir / "reference" / "data.zarr"
        ds = datasets.generate(DATA, N_SAMPLES, store=self.ref_store, block_size=BLOCK, seed=1)
        self.data = ds.load()
        train = self.data.isel(sample=slice(0, N_TRAIN))
        self.model = RandomFeatureOperator(**MODEL).fit(train)
        self.pred = self.model.predict(self.data["input"])
        self.model_path = self.dir / "reference" / "model.zarr"
        self.model.save(self.model_path)
        self.search = RandomFeatureOperatorCV(**SEARCH).fit(train)
        self.fingerprint = _fingerprint(self.dir / "reference")

    def workers(self):
        return sorted(self.client.run(os.getpid).values())


def _fingerprint(folder):
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in Path(folder).rglob("*")}


def _cli(*args):
    return [sys.executable, "-m", "rfol_dask.cli", *map(str, args)]


def _run_cli(command, fault, at, timeout=TIMEOUT):
    """Run a CLI command, sending ``fault`` (a signal name or None) after ``at`` seconds."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = None
    if fault in ("SIGINT", "SIGKILL"):
        timer = threading.Timer(
            at, lambda: proc.poll() is None and proc.send_signal(getattr(signal, fault))
        )
        timer.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out, err
    finally:
        if timer is not None:
            timer.cancel()
    return proc.returncode, out, err


def _in_thread(function, timeout=TIMEOUT):
    """``(result, exception, hung)`` of ``function()`` run with a time limit."""
    box, context = {}, contextvars.copy_context()  # the thread sees the caller's client

    def target():
        try:
            box["result"] = context.run(function)
        except BaseException as exc:  # noqa: BLE001 - any failure is the outcome under test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    return box.get("result"), box.get("error"), thread.is_alive()


def _kill_worker_later(soak, at):
    pid = soak.workers()[0]
    timer = threading.Timer(at, lambda: psutil.pid_exists(pid) and os.kill(pid, signal.SIGKILL))
    timer.start()
    return timer


def _clear_cli_failure(code, err):
    """None when a failed CLI run ended as a user should see it, else what was wrong."""
    if code is None:
        return "hang: the command passed its timeout"
    if code == -signal.SIGKILL:
        return None
    if "Traceback" in err:
        last = err.strip().splitlines()[-1]
        # Ctrl-C while the interpreter still imports the CLI is Python's own, before main runs
        if last == "KeyboardInterrupt" and ", in main\n" not in err and ", in _cmd_" not in err:
            return None
        return "traceback on stderr: " + last[:200]
    return None


def _same_data(path, reference):
    got = xr.open_zarr(path).load()
    return all(np.array_equal(got[v].values, reference[v].values) for v in ("input", "output"))


@contextlib.contextmanager
def _small_disk(folder, size="200k"):
    """A tmpfs of ``size`` at ``folder`` (yields False where it cannot be mounted)."""
    folder.mkdir(parents=True, exist_ok=True)
    ok = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        yield ok
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def round_generate(soak, rng, where):
    target = where / "gen.zarr"
    fault = rng.choice(["none", "SIGINT", "SIGKILL", "full_disk"])

    def command(out):
        return _cli(
            "generate",
            DATA,
            "--samples",
            N_SAMPLES,
            "--out",
            out,
            "--seed",
            1,
            "--block-size",
            BLOCK,
            "-q",
        )

    at = float(rng.uniform(1.0, 8.0))
    problems = []
    if fault == "full_disk":
        with _small_disk(where / "disk") as mounted:
            if not mounted:
                fault = "none (no tmpfs)"
            else:
                small = where / "disk" / "gen.zarr"
                code, _, err = _run_cli(command(small), None, 0)
                if code == 0:
                    problems.append("a generation larger than its disk reported success")
                elif (why := _clear_cli_failure(code, err)) is not None:
                    problems.append(why)
                subprocess.run(["mount", "-o", "remount,size=64m", str(where / "disk")])
                code, _, err = _run_cli(command(small), None, 0)
                if code != 0:
                    problems.append(f"resume after the disk was freed failed: {err.strip()[-300:]}")
                elif not _same_data(small, soak.data):
                    problems.append("the resumed generation differs from an uninterrupted one")
        return fault, at, problems
    code, _, err = _run_cli(command(target), fault if fault != "none" else None, at)
    if code != 0 and (why := _clear_cli_failure(code, err)) is not None:
        problems.append(why)
    code, _, err = _run_cli(command(target), None, 0)  # resume (or rerun a finished store)
    if code != 0:
        problems.append(f"the rerun failed: {err.strip()[-300:]}")
    elif not _same_data(target, soak.data):
        problems.append("the resumed generation differs from an uninterrupted one")
    return fault, at, problems


def _model_problems(model, reference, what):
    scale = np.abs(reference.coef_).max()
    if not np.allclose(model.coef_, reference.coef_, rtol=1e-6, atol=1e-7 * scale):
        return [f"{what}: coefficients differ from the reference"]
    return []


def round_fit(soak, rng, where):
    fault, at = rng.choice(["none", "worker_kill"]), float(rng.uniform(0.0, 1.5))
    timer = _kill_worker_later(soak, at) if fault == "worker_kill" else None
    with soak.client.as_current():
        data = xr.open_zarr(soak.ref_store).isel(sample=slice(0, N_TRAIN))
        model, error, hung = _in_thread(lambda: RandomFeatureOperator(**MODEL).fit(data))
    if timer is not None:
        timer.join()
    if hung:
        return fault, at, ["hang: the fit passed its timeout"]
    if error is not None:
        return fault, at, [f"the fit failed: {type(error).__name__}: {error}"]
    return fault, at, _model_problems(model, soak.model, "fit")


def round_search(soak, rng, where):
    fault, at = rng.choice(["none", "worker_kill"]), float(rng.uniform(0.0, 3.0))
    timer = _kill_worker_later(soak, at) if fault == "worker_kill" else None
    with soak.client.as_current():
        data = xr.open_zarr(soak.ref_store).isel(sample=slice(0, N_TRAIN))
        search, error, hung = _in_thread(lambda: RandomFeatureOperatorCV(**SEARCH).fit(data))
    if timer is not None:
        timer.join()
    if hung:
        return fault, at, ["hang: the search passed its timeout"]
    if error is not None:
        return fault, at, [f"the search failed: {type(error).__name__}: {error}"]
    if search.best_params_ != soak.search.best_params_:
        return fault, at, [f"best_params_ {search.best_params_} != {soak.search.best_params_}"]
    return fault, at, []


def round_fit_cli(soak, rng, where):
    """``rfol-dask fit --out`` over an existing model, interrupted: old or new model, never lost."""
    target = where / "model.zarr"
    old = RandomFeatureOperator(**{**MODEL, "random_state": 1}).fit(
        soak.data.isel(sample=slice(0, N_TRAIN))
    )
    old.save(target)
    fault, at = rng.choice(["none", "SIGINT", "SIGKILL"]), float(rng.uniform(1.0, 10.0))
    command = _cli(
        "fit",
        soak.ref_store,
        "--train",
        N_TRAIN,
        "--n-features",
        MODEL["n_features"],
        "--gamma",
        MODEL["gamma"],
        "--alpha",
        MODEL["alpha"],
        "--seed",
        0,
        "--out",
        target,
        "-q",
    )
    code, _, err = _run_cli(command, fault if fault != "none" else None, at)
    problems = [] if code == 0 else [p for p in [_clear_cli_failure(code, err)] if p]
    try:
        saved = RandomFeatureOperator.load(target)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be loaded is the violation
        return fault, at, problems + [f"the model at the target cannot be loaded: {exc}"]
    pred = saved.predict(soak.data["input"].values)
    if not any(
        np.allclose(pred, p.predict(soak.data["input"].values), rtol=1e-6, atol=1e-8)
        for p in (old, soak.model)
    ):
        problems.append("the saved model is neither the old one nor the new one")
    if code == 0 and not np.allclose(pred, soak.pred.values, rtol=1e-6, atol=1e-8):
        problems.append("a finished fit saved another model than the reference")
    return fault, at, problems


def round_predict_cli(soak, rng, where):
    target = where / "pred.zarr"
    fault, at = rng.choice(["none", "SIGINT", "SIGKILL"]), float(rng.uniform(1.0, 8.0))
    command = _cli("predict", soak.model_path, soak.ref_store, "--out", target, "-q")
    code, _, err = _run_cli(command, fault if fault != "none" else None, at)
    problems = [] if code == 0 else [p for p in [_clear_cli_failure(code, err)] if p]
    code, _, err = _run_cli(command, None, 0)
    if code != 0:
        return fault, at, problems + [f"the rerun failed: {err.strip()[-300:]}"]
    got = xr.open_zarr(target)["prediction"].values
    if not np.allclose(got, soak.pred.values, rtol=1e-10, atol=1e-12):
        problems.append("the prediction store differs from the reference predictions")
    return fault, at, problems


def round_damage(soak, rng, where):
    """A damaged chunk file: the fit raises, or (if it cannot be seen) gives the reference."""
    store = where / "data.zarr"
    shutil.copytree(soak.ref_store, store)
    chunks = sorted(p for p in (store / "input" / "c").rglob("*") if p.is_file())
    victim = chunks[int(rng.integers(len(chunks)))]
    fault = rng.choice(["deleted", "truncated", "emptied", "appended"])
    if fault == "deleted":
        victim.unlink()
    elif fault == "truncated":
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    elif fault == "emptied":
        victim.write_bytes(b"")
    else:
        victim.write_bytes(victim.read_bytes() + b"\0" * 16)
    # the store's samples 0..N_TRAIN-1 are fitted: a victim past them is read by predict
    model, error, hung = _in_thread(
        lambda: RandomFeatureOperator(**MODEL).fit(
            xr.open_zarr(store).isel(sample=slice(0, N_TRAIN))
        )
    )
    if hung:
        return fault, 0.0, ["hang: the fit of a damaged store passed its timeout"]
    if error is not None:
        return fault, 0.0, [] if str(error).strip() else ["an exception without a message"]
    return fault, 0.0, _model_problems(model, soak.model, f"fit of a store with a {fault} chunk")


ROUNDS = {name: globals()[f"round_{name}"] for name in KINDS}


def one_round(soak, seed, index, kinds):
    rng = np.random.default_rng([seed, index])
    kind = str(rng.choice(kinds))
    where = soak.dir / f"round{index}"
    where.mkdir()
    sentinel = where / "sentinel.txt"
    sentinel.write_text(f"round {index}\n")
    t0 = time.perf_counter()
    fault, at, problems = ROUNDS[kind](soak, rng, where)
    seconds = time.perf_counter() - t0
    if not sentinel.exists() or sentinel.read_text() != f"round {index}\n":
        problems.append("the sentinel beside the target was changed or removed")
    if _fingerprint(soak.dir / "reference") != soak.fingerprint:
        problems.append("the reference files were changed")
    t1 = time.perf_counter()
    try:
        soak.client.wait_for_workers(2, timeout=RECOVERY)
    except TimeoutError:
        problems.append(f"the cluster did not get its 2 workers back within {RECOVERY:.0f} s")
    recovery = time.perf_counter() - t1
    shutil.rmtree(where, ignore_errors=True)
    rss = psutil.Process().memory_info().rss / 2**20
    return dict(
        round=index,
        seed=seed,
        kind=kind,
        fault=str(fault),
        at=round(at, 3),
        seconds=round(seconds, 2),
        recovery_s=round(recovery, 2),
        rss_mib=round(rss, 1),
        violations=problems,
    )


def summary(records):
    """A markdown table of rounds and violations by operation and fault."""
    rows = {}
    for r in records:
        key = (r["kind"], r["fault"])
        n, bad, secs = rows.get(key, (0, 0, 0.0))
        rows[key] = (n + 1, bad + bool(r["violations"]), secs + r["seconds"])
    lines = ["| operation | fault | rounds | with violations | mean s |", "|---|---|---|---|---|"]
    for (kind, fault), (n, bad, secs) in sorted(rows.items()):
        lines.append(f"| {kind} | {fault} | {n} | {bad} | {secs / n:.1f} |")
    rss = [r["rss_mib"] for r in records]
    quarter = max(1, len(rss) // 4)
    growth = float(np.median(rss[-quarter:]) - np.median(rss[:quarter]))
    total = sum(bool(r["violations"]) for r in records)
    lines += [
        "",
        f"{len(records)} rounds, {total} with violations; client memory "
        f"{np.median(rss[:quarter]):.0f} MiB (first quarter) -> {np.median(rss[-quarter:]):.0f} "
        f"MiB (last quarter), growth {growth:+.0f} MiB",
    ]
    return "\n".join(lines), total, growth


def _start_cluster():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    return cluster, Client(cluster, set_as_default=False)


def _stop_cluster(cluster, client):
    with contextlib.suppress(Exception):  # a cluster that lost its workers may fail to close
        client.close()
        cluster.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=None, help="wall-clock budget")
    parser.add_argument("--rounds", type=int, default=None, help="number of rounds (or --minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS), help="operations to draw from")
    parser.add_argument("--replay", type=int, default=None, help="rerun this round of --seed alone")
    parser.add_argument(
        "--max-growth-mib",
        type=float,
        default=300.0,
        help="client memory growth counted as a violation",
    )
    parser.add_argument("--out", default="soak", help="writes OUT.jsonl and OUT.md")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; choose from {list(KINDS)}")
    rounds = [args.replay] if args.replay is not None else None
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None
    if rounds is None and deadline is None:
        rounds = range(args.rounds or 5)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    with (
        tempfile.TemporaryDirectory(prefix="rfol-soak-") as workdir,
        open(out.with_suffix(".jsonl"), "w") as log,
    ):
        cluster, client = _start_cluster()
        try:
            with client.as_current():
                soak = Soak(workdir, client)
            index = 0
            while (rounds is None or index < len(rounds)) and (
                deadline is None or time.monotonic() < deadline
            ):
                number = rounds[index] if rounds is not None else index
                record = one_round(soak, args.seed, number, kinds)
                records.append(record)
                log.write(json.dumps(record) + "\n")
                log.flush()
                print(
                    f"round {number}: {record['kind']} / {record['fault']} {record['seconds']} s "
                    f"{'OK' if not record['violations'] else record['violations']}",
                    flush=True,
                )
                if any(v.startswith("hang") for v in record["violations"]):
                    break  # the process's state is unknown after a hang
                if any("workers back" in v for v in record["violations"]):
                    # reported once; the next rounds test the package on a whole cluster again
                    _stop_cluster(cluster, client)
                    cluster, client = _start_cluster()
                    soak.client = client
                index += 1
        finally:
            _stop_cluster(cluster, client)
    table, total, growth = summary(records)
    if len(records) >= 8 and growth > args.max_growth_mib:
        total += 1
        table += f"\n\nviolation: client memory grew by {growth:.0f} MiB"
    command = "python benchmarks/soak.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out.with_suffix(".md").write_text(f"`{command}`\n\n{table}\n")
    print(table)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
