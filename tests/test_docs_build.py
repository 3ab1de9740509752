"""The documentation builds with no warnings (``-W``): a broken page, reference or gallery
example fails here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about a minute of CPU; far more on a busy machine
def test_docs_build_without_warnings(tmp_path):
    for module in ("sphinx", "pydata_sphinx_theme", "numpydoc", "sphinx_gallery", "myst_parser"):
        pytest.importorskip(module, reason='install the docs extra: pip install ".[docs]"')
    env = dict(os.environ, RFOL_DOCS_INTERSPHINX="0", MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html"]
    command += ["-d", str(tmp_path / "doctrees"), "docs", str(tmp_path / "html")]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert (tmp_path / "html" / "api.html").is_file()
    assert (tmp_path / "html" / "auto_examples" / "plot_quickstart.html").is_file()
