"""The README stays short and its three Python snippets run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippets():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_is_short_with_the_set_up_commands_and_three_snippets():
    text = README.read_text()
    assert len(text) <= 6000, f"README.md has {len(text)} characters (at most 6000)"
    assert "python -m pip install . && rfol-dask quickstart" in text
    assert 'python -m pip install ".[test]" && python -m pytest -q -n 2 --dist loadfile' in text
    assert len(_snippets()) == 3
    long = [p[:60] for p in text.split("\n\n") if len(p) > 600 and not p.lstrip().startswith("-")]
    assert not long, f"paragraphs over 600 characters: {long}"


def _run(snippets, where, monkeypatch):
    monkeypatch.chdir(where)
    namespace = {"__name__": "readme"}
    for code in snippets:
        exec(compile(code, str(README), "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_readme_fit_and_tune_snippets_run(tmp_path, monkeypatch):
    fit, tune, _ = _snippets()
    ns = _run([fit, tune], tmp_path, monkeypatch)
    assert (tmp_path / "advection1_model.zarr").is_dir()
    assert ns["pred"].dims == ns["test"]["output"].dims
    assert set(ns["search"].best_params_) >= {"distribution", "gamma", "alpha"}


@pytest.mark.slow
@pytest.mark.cluster
def test_readme_cluster_snippet_runs_with_the_local_configuration(tmp_path, monkeypatch):
    fit, _, cluster = _snippets()
    assert 'start_client("local")' in cluster
    ns = _run([fit, cluster], tmp_path, monkeypatch)
    assert ns["model"].coef_.shape == (5000, 40)
    assert ns["client"].status == "closed"
