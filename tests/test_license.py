"""The LICENSE file is the license pyproject declares."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_license_file_matches_pyproject():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    declared = declared["text"] if isinstance(declared, dict) else declared
    assert declared == "BSD-3-Clause"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "rfol_dask developers" in text
    assert (
        "Neither the name of the copyright holder nor the names of its" in text
    )  # the third clause
    assert "AS IS" in text and "GPL" not in text
