"""Reproduce the paper's tables side by side with kernel baselines run on the same data (issue 5).

A thin script over :mod:`rfol_dask.experiments` (``rfol-dask reproduce`` runs the same code) that
keeps its results in this source tree: ``benchmarks/results/reproduce[/quick]`` and the data-set
stores in ``benchmarks/results/data``. What each part does: ``rfol_dask/experiments/reproduce.py``;
the paper's figures and the quick-mode bounds: ``rfol_dask/experiments/reference.toml``.

    python benchmarks/reproduce.py all --quick            # CI check, about 2 minutes
    python benchmarks/reproduce.py all                    # the full tables
    python benchmarks/reproduce.py burgers --parts fits   # one data set, fits only
"""

import sys
from pathlib import Path

from rfol_dask.experiments.reproduce import main

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(main(default_out=str(RESULTS / "reproduce"), default_data=str(RESULTS / "data")))
