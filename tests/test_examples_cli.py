"""The command line as a new user runs it: the quickstart, generate, fit, tune."""

import subprocess
import sys
from pathlib import Path

import pytest

from rfol_dask import datasets

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.cluster
def test_cli_quickstart(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rfol_dask.cli",
            "quickstart",
            "--out",
            str(tmp_path / "qs"),
            "--train",
            "400",
            "--test",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "tuned: " in res.stdout and "(search + refit)" in res.stdout  # the search's choice
    error = res.stdout.split("relative L2 test error: ")[1].split()[0]
    assert float(error) < 1e-3
    assert (tmp_path / "qs" / "quickstart.png").stat().st_size > 10_000
    assert (tmp_path / "qs" / "model.zarr").is_dir()
    # another seed in the same folder (in this process): its own store beside the first, kept
    from rfol_dask.cli import main

    again = ["--train", "40", "--test", "10", "--seed", "1", "--workers", "1"]
    assert main(["quickstart", "--out", str(tmp_path / "qs"), *again]) == 0
    assert datasets.open(tmp_path / "qs" / "advection1_seed1.zarr").attrs["seed"] == 1
    assert datasets.open(tmp_path / "qs" / "advection1.zarr").sizes["sample"] == 600


@pytest.mark.slow
def test_cli_datasets_and_generate_errors(tmp_path):
    from rfol_dask.cli import main

    assert main(["datasets"]) == 0
    assert main(["generate", "nope", "--samples", "3", "--out", str(tmp_path / "x.zarr")]) == 2
    assert (
        main(
            [
                "generate",
                "advection1",
                "--samples",
                "6",
                "--out",
                str(tmp_path / "a.zarr"),
                "--param",
                "t_index=5",
            ]
        )
        == 0
    )
    assert (
        main(["generate", "advection2", "--samples", "6", "--out", str(tmp_path / "a.zarr")]) == 2
    )
    assert (
        main(
            [
                "generate",
                "advection2",
                "--samples",
                "6",
                "--out",
                str(tmp_path / "a.zarr"),
                "--overwrite",
            ]
        )
        == 0
    )


@pytest.mark.slow
@pytest.mark.cluster
def test_cli_fit_with_cluster_config_and_save(tmp_path):
    from rfol_dask import RandomFeatureOperator
    from rfol_dask.cli import main

    store, model = str(tmp_path / "a.zarr"), str(tmp_path / "m.zarr")
    assert main(["generate", "advection2", "--samples", "300", "--out", store]) == 0
    cfg = tmp_path / "local.yaml"
    cfg.write_text("kind: local\nblas_threads: 1\noptions: {n_workers: 1, threads_per_worker: 1}\n")
    args = [
        "fit",
        store,
        "--train",
        "200",
        "--n-features",
        "1500",
        "--gamma",
        "1e-4",
        "--alpha",
        "1e-10",
        "--cluster",
        str(cfg),
        "--out",
        model,
    ]
    assert main(args) == 0  # (--report: test_cli_fit_report_without_cluster)
    assert RandomFeatureOperator.load(model).coef_.shape == (1500, 40)
    assert main(["fit", store, "--train", "999"]) == 2


@pytest.mark.slow
@pytest.mark.cluster
def test_cli_generate_on_a_cluster_configuration(tmp_path, capfd, monkeypatch):
    """`generate --cluster`: the dashboard link and the progress on stderr; stdout: the result."""
    from rfol_dask.cli import main

    cfg = tmp_path / "one.yaml"
    cfg.write_text("kind: local\nblas_threads: 1\noptions: {n_workers: 1, threads_per_worker: 1}\n")
    monkeypatch.chdir(tmp_path)
    args = ["generate", "advection1", "--samples", "40", "--out", str(tmp_path / "a.zarr")]
    assert main([*args, "--cluster", str(cfg)]) == 0
    out, err = capfd.readouterr()  # the file descriptors: the worker process's output too
    assert len(out.splitlines()) == 1 and out.startswith("advection1: 40 samples"), out
    assert "dask dashboard: http://" in err and "100% Completed" in err
    assert (
        main(
            [
                "generate",
                "advection1",
                "--samples",
                "4",
                "--out",
                str(tmp_path / "b.zarr"),
                "--cluster",
                "no-such-cluster",
            ]
        )
        == 2
    )
    with pytest.raises(SystemExit) as info:  # argparse: --workers starts a LocalCluster
        main(["generate", "advection1", "--samples", "4", "--out", str(tmp_path / "b.zarr"),
              "--cluster", str(cfg), "--workers", "2"])  # fmt: skip
    assert info.value.code == 2


@pytest.mark.slow
@pytest.mark.cluster  # the performance report needs a distributed client: fit starts one
def test_cli_fit_report_without_cluster(tmp_path, capsys):
    pytest.importorskip("bokeh")
    from rfol_dask.cli import main

    store = str(tmp_path / "a.zarr")
    assert main(["generate", "advection2", "--samples", "120", "--out", store]) == 0
    assert (
        main(
            [
                "fit",
                store,
                "--train",
                "100",
                "--n-features",
                "300",
                "--gamma",
                "1e-4",
                "--report",
                str(tmp_path / "report.html"),
            ]
        )
        == 0
    )
    assert "Dask Performance Report" in (tmp_path / "report.html").read_text()
    out, err = capsys.readouterr()
    assert "dask dashboard:" in err and "dask dashboard" not in out and "fit: N=300" in out


@pytest.mark.slow
def test_cli_fit_gamma_defaults_to_the_median_heuristic_and_tune_searches(tmp_path, capsys):
    from rfol_dask import RandomFeatureOperator
    from rfol_dask.cli import main
    from rfol_dask.tuning import median_gamma

    store = str(tmp_path / "b.zarr")
    assert main(["generate", "advection2", "--samples", "150", "--out", store]) == 0
    capsys.readouterr()
    # the default gamma is the median heuristic of the training inputs (the value is printed)
    assert (
        main(
            [
                "fit",
                store,
                "--train",
                "120",
                "--n-features",
                "300",
                "--out",
                str(tmp_path / "m.zarr"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    model = RandomFeatureOperator.load(str(tmp_path / "m.zarr"))
    from rfol_dask.io import open_dataset

    U = open_dataset(store)["input"].values[:120].reshape(120, -1)
    assert model.gamma_ == pytest.approx(median_gamma(U, "cauchy", random_state=0))
    assert f"gamma {model.gamma_:.4g}" in out and model.alpha == 1e-10
    default_err = float(out.split("remaining samples: ")[1].split()[0])
    # --gamma takes a number too
    assert main(["fit", store, "--train", "120", "--n-features", "300", "--gamma", "2e-5"]) == 0
    assert "gamma 2e-05" in capsys.readouterr().out
    # --tune: the search's choice and its validation error are printed, and it beats the default
    assert main(["fit", store, "--train", "120", "--n-features", "300", "--tune"]) == 0
    out = capsys.readouterr().out
    assert "search: " in out and "validation relative L2 error" in out and "(search + refit)" in out
    tuned_err = float(out.split("remaining samples: ")[1].split()[0])
    assert tuned_err < default_err
    # --tune searches the library's default laws; --distribution narrows it to one
    from rfol_dask.cli import _fit_model, build_parser
    from rfol_dask.rf_operator_cv import DEFAULT_LAWS

    assert (
        tuple(_fit_model(build_parser().parse_args(["fit", store, "--tune"])).distributions)
        == DEFAULT_LAWS
    )
    one = _fit_model(
        build_parser().parse_args(["fit", store, "--tune", "--distribution", "gaussian"])
    )
    assert tuple(one.distributions) == ("gaussian",)
    # wrong values: a usage error (exit 2) that names the fix
    with pytest.raises(SystemExit) as exc:  # argparse: exit status 2
        main(["fit", store, "--train", "120", "--gamma", "abc"])
    assert exc.value.code == 2
    for bad in (
        ["--gamma", "-1"],  # the estimator's error, one line
        ["--tune", "--gamma", "1e-4"],
        ["--tune", "--alpha", "1e-8"],
        ["--max-features", "600"],
    ):
        assert main(["fit", store, "--train", "120", *bad]) == 2
    err = capsys.readouterr().err
    assert "gamma" in err and "Traceback" not in err
    assert "leave out --gamma and --alpha" in err and "add --tune" in err
    for tune in ([], ["--tune"]):  # the estimators' message
        assert main(["fit", store, "--train", "120", "--distribution", "student_t", *tune]) == 2
        assert "e.g. nu=3" in capsys.readouterr().err
    # --tune --max-features: the search grows N and the printed N is the chosen one
    assert (
        main(
            [
                "fit",
                store,
                "--train",
                "120",
                "--n-features",
                "128",
                "--tune",
                "--max-features",
                "1024",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    chosen = int(out.split("best ")[1].split("n_features ")[1].split(";")[0].split(",")[0])
    assert chosen in (128, 256, 512, 1024) and f"N={chosen} " in out.split("fit: ")[1]
