"""The CLI shows the package's log (logger ``rfol_dask``) on stderr: INFO by default, ``--quiet``
warnings and errors only, ``--verbose`` debug too; the logger is as it was after each command."""

import logging

import pytest

from rfol_dask import datasets
from rfol_dask.cli import main


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("clilog") / "d.zarr"
    datasets.generate("advection2", 30, store=path)
    return path


def _logger_state():
    logger = logging.getLogger("rfol_dask")
    return logger.level, list(logger.handlers), logger.propagate


@pytest.mark.parametrize("flag", [None, "--quiet", "-q", "--verbose"])
@pytest.mark.slow
def test_the_mpi_scheduler_file_wait_is_on_stderr_unless_quiet(store, tmp_path, capsys, flag):
    config = tmp_path / "mpi.yaml"
    scheduler_file = tmp_path / "scheduler.json"
    config.write_text(f"kind: mpi\nscheduler_file: {scheduler_file}\nscheduler_timeout: 0.2\n")
    before = _logger_state()
    code = main(["fit", str(store), "--cluster", str(config), *([flag] if flag else [])])
    out, err = capsys.readouterr()
    assert code == 2 and f"no scheduler file {scheduler_file} after 0.2 s" in err and out == ""
    waiting = (
        f"rfol-dask: waiting up to 0.2 s for the MPI job to write its scheduler file "
        f"{scheduler_file}\n"
    )
    assert (waiting in err) == (flag not in ("--quiet", "-q"))
    assert _logger_state() == before  # level, handlers and propagation as they were


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["datasets", "--quiet", "--verbose"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_plain_fit_logs_nothing_verbose_the_debug_timings_quiet_not_even_progress(store, capsys):
    args = ["fit", str(store), "--train", "20", "--n-features", "20"]
    assert main(args) == 0
    plain = capsys.readouterr()
    logged = [line for line in plain.err.splitlines() if line.startswith("rfol-dask:")]
    assert "fit: N=20" in plain.out and logged == [
        "rfol-dask: running on dask's threads in this process; --workers K or --cluster NAME: "
        "a cluster"
    ]
    assert "Completed" in plain.err  # dask's progress bar
    assert main([*args, "--verbose"]) == 0
    verbose = capsys.readouterr()
    assert "rfol-dask: Omega drawn on the client in" in verbose.err
    assert main([*args, "-q"]) == 0
    quiet = capsys.readouterr()
    assert [line.split(":")[0] for line in quiet.out.splitlines()] == [
        line.split(":")[0] for line in plain.out.splitlines()
    ]  # the same results (their times aside)
    assert quiet.err == ""


@pytest.mark.cluster
@pytest.mark.slow
def test_fit_on_a_cluster_says_its_dashboard_once(store, tmp_path, capsys):
    config = tmp_path / "one.yaml"
    config.write_text("kind: local\nblas_threads: 1\noptions: {n_workers: 1, processes: false}\n")
    assert (
        main(["fit", str(store), "--train", "20", "--n-features", "20", "--cluster", str(config)])
        == 0
    )
    err = capsys.readouterr().err
    logged = [line for line in err.splitlines() if line.startswith("rfol-dask:")]
    assert len(logged) == 1 and logged[0].startswith("rfol-dask: dask dashboard: "), err
    fit = ["fit", str(store), "--train", "20", "--n-features", "20", "--cluster", str(config)]
    assert main([*fit, "-v"]) == 0  # the cluster's debug line shows the link: not again
    assert capsys.readouterr().err.count("http") == 1
    assert main([*fit, "-q"]) == 0
    assert capsys.readouterr().err == ""
