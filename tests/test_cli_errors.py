"""Bad command lines get a clear error (exit status 2, no traceback); the user's files stay."""

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rfol_dask import RandomFeatureOperator, __version__, datasets
from rfol_dask.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _run(args, capsys):
    code = main(args)
    return code, capsys.readouterr().err


def test_version(capsys):  # in this process: `python -m rfol_dask.cli` runs in the quickstart test
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"rfol-dask {__version__}"


@pytest.mark.parametrize(
    "value, says",
    [
        ("0", "must be at least 2, got 0"),
        ("-4", "must be at least 2, got -4"),
        ("abc", "must be an integer, got 'abc'"),
        ("2.5", "must be an integer, got 2.5"),
    ],
)
def test_generate_bad_grid_size_names_the_parameter(tmp_path, capsys, value, says):
    out = tmp_path / "a.zarr"
    code, err = _run(
        [
            "generate",
            "advection1",
            "--samples",
            "4",
            "--param",
            f"n_points={value}",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 2
    assert f"parameter 'n_points' of data set 'advection1' {says}" in err
    assert not out.exists()


def test_generate_refuses_a_parameter_given_twice_with_two_values(tmp_path, capsys):
    """The last of two ``--param`` values won, silently (a data set of another grid than one of the
    two asked for); the same value twice is harmless."""
    out = tmp_path / "a.zarr"
    code, err = _run(
        [
            "generate",
            "advection1",
            "--samples",
            "2",
            "--param",
            "n_points=10",
            "--param",
            "n_points=20",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 2 and "--param n_points is given twice with two values: give it once" in err
    assert not out.exists()
    code, _ = _run(
        [
            "generate",
            "advection1",
            "--samples",
            "2",
            "--param",
            "n_points=10",
            "--param",
            "n_points=10",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0 and datasets.open_dataset(out).sizes["x"] == 10


def test_generate_bad_float_parameter_names_it(tmp_path, capsys):
    code, err = _run(
        [
            "generate",
            "burgers",
            "--samples",
            "2",
            "--param",
            "nu=fast",
            "--out",
            str(tmp_path / "b"),
        ],
        capsys,
    )
    assert code == 2 and "parameter 'nu' of data set 'burgers' must be a number, got 'fast'" in err


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "d.zarr"
    datasets.generate("advection2", 30, store=path)
    return path


def test_fit_of_a_model_larger_than_this_machine_is_one_line(store, capsys):
    # 10^12 features: one line, not numpy's MemoryError traceback
    code, err = _run(["fit", str(store), "--train", "20", "--n-features", str(10**12)], capsys)
    assert code == 2 and "Traceback" not in err
    assert "the fitted model needs" in err and "use fewer features (n_features)" in err


def test_fit_on_a_saved_model_says_it_is_a_model_and_what_to_pass(store, tmp_path, capsys):
    # it said "cannot be read as an xarray data set ... dimension_names"
    assert (
        _run(
            [
                "fit",
                str(store),
                "--train",
                "20",
                "--n-features",
                "20",
                "--out",
                str(tmp_path / "m.zarr"),
            ],
            capsys,
        )[0]
        == 0
    )
    code, err = _run(["fit", str(tmp_path / "m.zarr"), "--n-features", "20"], capsys)
    assert code == 2 and "Traceback" not in err and "dimension_names" not in err
    assert (
        f"{tmp_path / 'm.zarr'} is a saved model, not a data set: load it with "
        "RandomFeatureOperator.load to predict with it"
    ) in err


@pytest.mark.slow
def test_fit_out_refuses_a_file_and_the_data_set_itself(store, tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text("keep")
    code, err = _run(["fit", str(store), "--n-features", "20", "--out", str(plain)], capsys)
    assert (
        code == 2
        and "exists and is a file, not an rfol_dask model" in err
        and "Traceback" not in err
    )
    assert plain.read_text() == "keep"
    code, err = _run(["fit", str(store), "--n-features", "20", "--out", str(store)], capsys)
    assert code == 2 and "exists and is an rfol_dask data set, not an rfol_dask model" in err
    assert datasets.open(store)["input"].shape == (30, 40)  # the training data survive
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    code, err = _run(["fit", str(store), "--n-features", "20", "--out", str(mine)], capsys)
    assert code == 2 and "holding other files" in err and (mine / "notes.txt").read_text() == "mine"
    # a model is replaced, as before
    model = tmp_path / "m.zarr"
    assert (
        main(["fit", str(store), "--train", "20", "--n-features", "20", "--out", str(model)]) == 0
    )
    assert (
        main(["fit", str(store), "--train", "20", "--n-features", "30", "--out", str(model)]) == 0
    )
    from rfol_dask import RandomFeatureOperator

    assert RandomFeatureOperator.load(model).coef_.shape == (30, 40)


def test_fit_device_defaults_to_the_cluster_kind_and_cuda_without_cupy_says_what_to_install(
    store, capsys
):
    import argparse
    import importlib.util

    from rfol_dask.cli import _device

    def args(**kw):
        return argparse.Namespace(**{"device": None, "cluster": None, **kw})

    assert _device(args()) == "cpu" and _device(args(cluster="local")) == "cpu"
    assert (
        _device(args(cluster="local-cuda")) == "cuda"
        and _device(args(cluster="slurm-gpu")) == "cuda"
    )
    assert (
        _device(args(cluster="slurm")) == "cpu"
        and _device(args(cluster="local-cuda", device="cpu")) == "cpu"
    )
    if importlib.util.find_spec("cupy") is None:
        code, err = _run(
            ["fit", str(store), "--train", "20", "--n-features", "20", "--device", "cuda"], capsys
        )
        assert code == 2 and "pip install 'rfol-dask[gpu]'" in err and "Traceback" not in err


def test_fit_pca_power_fits_in_the_input_metric(store, capsys, tmp_path):
    from rfol_dask import RandomFeatureOperator

    code = main(
        [
            "fit",
            str(store),
            "--train",
            "20",
            "--n-features",
            "40",
            "--pca-power",
            "1",
            "--out",
            str(tmp_path / "m.zarr"),
        ]
    )
    assert code == 0 and "relative L2 error on the 10 remaining samples" in capsys.readouterr().out
    assert RandomFeatureOperator.load(tmp_path / "m.zarr").pca_power == 1.0


def test_fit_pca_power_list_needs_tune(store, capsys):
    code, err = _run(
        ["fit", str(store), "--train", "20", "--n-features", "40", "--pca-power", "none,1"], capsys
    )
    assert code == 2 and "a list of --pca-power are searched: add --tune" in err
    with pytest.raises(SystemExit):
        main(["fit", str(store), "--pca-power", "smooth"])
    assert "argument --pca-power: invalid" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["generate", "advection1", "--samples", "4", "--out", "x.zarr", "--workers", "0"],
        ["generate", "advection1", "--samples", "4", "--out", "x.zarr", "--workers", "-1"],
        ["quickstart", "--workers", "0"],
        ["quickstart", "--train", "-5"],
        ["quickstart", "--test", "0"],
        ["fit", "d.zarr", "--train", "0"],
    ],
)
def test_counts_below_one_are_refused_by_the_parser(args, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2 and "expected a whole number >= 1" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_fit_checks_report_and_out_paths_and_the_sample_dim_before_fitting(store, tmp_path, capsys):
    folder, plain = tmp_path / "adir", tmp_path / "afile"
    folder.mkdir()
    plain.write_text("x")
    code, err = _run(
        [
            "fit",
            str(store),
            "--train",
            "20",
            "--n-features",
            "20",
            "--report",
            str(folder),
            "--out",
            str(tmp_path / "m.zarr"),
        ],
        capsys,
    )
    assert code == 2 and "give an HTML file in an existing folder, outside Zarr stores" in err
    code, err = _run(
        ["fit", str(store), "--train", "20", "--n-features", "20", "--out", str(plain / "m.zarr")],
        capsys,
    )
    assert code == 2 and "is a file, not a directory" in err
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile"]
    import numpy as np
    import xarray as xr

    xr.Dataset(
        {"input": (("s", "x"), np.ones((4, 3))), "output": (("s", "y"), np.ones((4, 2)))}
    ).to_zarr(tmp_path / "nosample.zarr")
    code, err = _run(["fit", str(tmp_path / "nosample.zarr"), "--n-features", "20"], capsys)
    assert code == 2 and "'sample'" in err and "Traceback" not in err


@pytest.mark.slow
def test_sigterm_during_a_fit_removes_its_feature_cache(tmp_path):
    import time

    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(0)
    xr.Dataset(
        {
            "input": (("sample", "x"), rng.standard_normal((600, 64))),
            "output": (("sample", "x"), rng.standard_normal((600, 64))),
        }
    ).chunk({"sample": 100}).to_zarr(tmp_path / "d.zarr")
    cache = tmp_path / "tmp"
    cache.mkdir()
    env = dict(os.environ, TMPDIR=str(cache), PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rfol_dask.cli",
            "fit",
            str(tmp_path / "d.zarr"),
            "--n-features",
            "60000",
            "--gamma",
            "0.1",
            "--solver",
            "dual",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not any(p.name.startswith("rfol-") for p in cache.iterdir()) and proc.poll() is None:
        assert time.monotonic() < deadline, "the fit made no feature cache"
        time.sleep(0.02)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + 15, err.decode()[-2000:]
    assert [p.name for p in cache.iterdir() if p.name.startswith("rfol-")] == []


@pytest.mark.parametrize("exit_by", ["raise SystemExit(143)", "return 130"])
@pytest.mark.parametrize("state", ["orphan", "held lock"])
@pytest.mark.slow
def test_an_interrupt_that_leaves_a_pool_thread_stuck_does_not_hang_the_exit(exit_by, state):
    # An interrupt raised in the main thread can leave a pool's worker that the interpreter's exit
    # joins for ever (the rare hang of the SIGTERM test above): started inside ThreadPoolExecutor's
    # t.start() and so off concurrent.futures' exit list, or waiting for the pool's semaphore lock
    # that the main thread held when the interrupt came (a `with` block interrupted between
    # acquiring and entering). The states are made here directly.
    stuck = {
        "orphan": """
            pool.submit(int).result()
            for t in list(pool._threads):
                cft._threads_queues.pop(t)""",
        "held lock": """
            go = threading.Event()
            pool.submit(go.wait)
            pool._idle_semaphore._cond.acquire()
            go.set()
            time.sleep(0.3)  # the task is done; its worker waits for the lock""",
    }[state]
    script = textwrap.dedent(f"""
        import concurrent.futures.thread as cft
        import threading
        import time
        from concurrent.futures import ThreadPoolExecutor
        from rfol_dask import cli

        pool = ThreadPoolExecutor(2)
        def interrupted(argv=None):{stuck}
            {exit_by}
        cli.main = interrupted
        print("printed before the exit")
        cli.run()
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == (143 if "143" in exit_by else 130), proc.stderr
    assert proc.stdout == "printed before the exit\n"


def test_generate_refuses_a_dangling_link_and_a_path_under_a_file(tmp_path, capsys):
    os.symlink(tmp_path / "nowhere", tmp_path / "link")
    (tmp_path / "afile").write_text("keep")
    code, err = _run(
        ["generate", "advection1", "--samples", "4", "--out", str(tmp_path / "link")], capsys
    )
    assert code == 2 and "symbolic link to a missing target" in err
    code, err = _run(
        ["generate", "advection1", "--samples", "4", "--out", str(tmp_path / "afile" / "d.zarr")],
        capsys,
    )
    assert code == 2 and "afile is a file, not a directory" in err
    assert (
        sorted(os.listdir(tmp_path)) == ["afile", "link"]
        and (tmp_path / "afile").read_text() == "keep"
    )


@pytest.mark.parametrize(
    "args, says",
    [(["--grow-to", "0"], "grow_to must be"), (["--workers", "-1"], "workers must be")],
)
def test_reproduce_refuses_bad_options_before_making_folders(
    tmp_path, monkeypatch, capsys, args, says
):
    monkeypatch.chdir(tmp_path)
    code, err = _run(
        ["reproduce", "advection1", "--quick", "--out", str(tmp_path / "X"), *args], capsys
    )
    assert code == 2 and says in err
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_cluster_that_cannot_submit_jobs_is_one_line_not_a_hang(tmp_path, monkeypatch, capsys):
    pytest.importorskip("dask_jobqueue")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert (
        main(
            [
                "generate",
                "advection1",
                "--samples",
                "4",
                "--out",
                str(tmp_path / "a.zarr"),
                "--cluster",
                "slurm",
            ]
        )
        == 2
    )
    assert "'sbatch' is not on PATH" in capsys.readouterr().err


def test_ctrl_c_is_one_line_with_the_resume_hint(tmp_path, monkeypatch, capsys):
    from rfol_dask import datasets

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "generate", interrupted)
    assert (
        main(["generate", "advection1", "--samples", "4", "--out", str(tmp_path / "a.zarr")]) == 130
    )
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == "rfol-dask generate: interrupted; rerun the same command to resume"
    )


def test_fit_without_train_says_nothing_is_tested(store, capsys):
    assert main(["fit", str(store), "--n-features", "20"]) == 0  # no --train: every sample trains
    assert "no test: all samples trained" in capsys.readouterr().out


@pytest.mark.cluster
@pytest.mark.slow
def test_fit_report_replaces_only_reports_and_writes_nothing_inside_stores(
    store, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("bokeh")
    import distributed

    notes, meta = tmp_path / "notes.txt", store / "zarr.json"
    notes.write_text("important notes")
    before = meta.read_bytes()
    for path, says in (
        (notes, "exists and is not a performance report"),
        (meta, "outside Zarr stores and --out"),
        (store / "input" / "r.html", "outside Zarr stores and --out"),
        (tmp_path / "m.zarr" / "r.html", "outside Zarr stores and --out"),
    ):
        (tmp_path / "m.zarr").mkdir(exist_ok=True)
        fit = ["fit", str(store), "--n-features", "20", "--report", str(path)]
        code, err = _run([*fit, "--out", str(tmp_path / "m.zarr")], capsys)
        assert code == 2 and says in err, err
    assert notes.read_text() == "important notes" and meta.read_bytes() == before

    class Report:  # dask's performance_report without a cluster: it writes its HTML at exit
        def __init__(self, filename):
            self.filename = filename

        def __enter__(self):
            pass

        def __exit__(self, *exc):
            Path(self.filename).write_text("<title>Dask Performance Report</title>new")

    monkeypatch.setattr(distributed, "performance_report", Report)
    report = tmp_path / "r.html"
    report.write_text("<title>Dask Performance Report</title>old")
    fit = ["fit", str(store), "--train", "20", "--n-features", "20", "--report", str(report)]
    assert main([*fit, "--cluster", "local"]) == 0 and "new" in report.read_text()


@pytest.mark.skipif(
    "sample_dim" not in inspect.signature(RandomFeatureOperator.fit).parameters,
    reason="needs fit(..., input=, output=, sample_dim=) of the estimators (issue 37)",
)
def test_fit_names_the_variables_a_store_lacks_and_takes_its_names(tmp_path, capsys):
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(0)
    xr.Dataset(
        {"u": (("case", "x"), rng.random((30, 3))), "v": (("case", "x"), rng.random((30, 3)))}
    ).to_zarr(tmp_path / "uv.zarr")
    code, err = _run(["fit", str(tmp_path / "uv.zarr"), "--n-features", "20"], capsys)
    assert code == 2 and "Traceback" not in err and "'input'" in err
    named = ["--input", "u", "--output", "v", "--sample-dim", "case", "--train", "25"]
    model = tmp_path / "m.zarr"
    code, err = _run(["fit", str(tmp_path / "uv.zarr"), "--n-features", "20", *named,
                      "--out", str(model)], capsys)  # fmt: skip
    assert code == 0, err
    code, err = _run(["predict", str(model), str(tmp_path / "uv.zarr"), "--samples", "25:",
                      "--out", str(tmp_path / "p.zarr")], capsys)  # fmt: skip
    assert code == 0, err  # the model remembers the names


def test_fit_device_cuda_where_cupy_finds_no_gpu_is_one_line(store, capsys, monkeypatch):
    """CuPy installed but no GPU visible (no driver, CUDA_VISIBLE_DEVICES empty): the CLI printed
    the RuntimeError's traceback; now the one-line error that says what to check."""
    import sys

    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fakecupy"))
    try:
        import cupy

        def no_driver():
            raise cupy.cuda.runtime.CUDARuntimeError(
                "cudaErrorNoDevice: no CUDA-capable device is detected"
            )

        fit = ["fit", str(store), "--train", "20", "--n-features", "20", "--device", "cuda"]
        monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", no_driver)
        code, err = _run(fit, capsys)
        assert (
            code == 2 and "needs a CUDA GPU, but CuPy finds none" in err and "Traceback" not in err
        )
        monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", lambda: 0)
        code, err = _run(fit, capsys)
        assert code == 2 and "CUDA_VISIBLE_DEVICES" in err and "Traceback" not in err
    finally:  # the fake CuPy leaves with the test: later ones find none
        for name in set(sys.modules) - before:
            if name.split(".")[0] == "cupy":
                del sys.modules[name]


@pytest.mark.slow
def test_the_package_s_warnings_print_as_one_line_naming_the_command():
    """A warning of the CLI printed as ``/.../bin/rfol-dask:8: DataWarning: ...`` followed by the
    line ``sys.exit(run())``; now ``rfol-dask COMMAND: warning (Category): message``. Others keep
    Python's format."""
    import subprocess
    import sys

    script = (
        "import warnings; from rfol_dask import cli; from rfol_dask.exceptions import DataWarning\n"
        "def datasets(args):\n"
        "    warnings.warn('the grid does not increase', DataWarning)\n"
        "    warnings.warn('from elsewhere', FutureWarning)\n"
        "    return 0\n"
        "cli._cmd_datasets = datasets\n"
        "raise SystemExit(cli.main(['datasets']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "rfol-dask datasets: warning (DataWarning): the grid does not increase" in lines, (
        done.stderr
    )
    assert any("FutureWarning: from elsewhere" in line for line in lines), done.stderr


def test_generate_on_a_full_disk_is_one_line_and_resumes(tmp_path, capsys):
    """A disk that fills up mid-generation: one line naming the cause, then a rerun resumes."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=120k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        args = ["generate", "advection1", "--samples", "400", "--block-size", "50"]
        code, err = _run([*args, "--out", str(disk / "d.zarr"), "-q"], capsys)
        assert code == 2 and "No space left on device" in err and "Traceback" not in err
        assert "rerun the same command to resume" in err
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        code, err = _run([*args, "--out", str(disk / "d.zarr"), "-q"], capsys)
        assert code == 0, err
        assert datasets.open(disk / "d.zarr").sizes["sample"] == 400
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_ctrl_c_before_the_command_starts_is_one_line():
    """A Ctrl-C while the arguments are parsed (before main's handler): exit 130, no traceback."""
    code = (
        "import rfol_dask.cli as cli\n"
        "def parser():\n"
        "    raise KeyboardInterrupt\n"
        "cli.build_parser = parser\n"
        "cli.run(['datasets'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 130 and out.stderr == "rfol-dask: interrupted\n", out.stderr
