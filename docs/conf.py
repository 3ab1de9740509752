"""Sphinx configuration of the rfol_dask documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (install ``.[docs]``).
"""

import os
import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

import rfol_dask  # noqa: E402

project = "rfol_dask"
author = "The rfol_dask developers"
copyright = "2026, The rfol_dask developers"
release = rfol_dask.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb"]
templates_path = ["_templates"]

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_default_options = {"inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# Intersphinx links to the libraries users know. Offline (no DNS, e.g. a build machine without
# network) an unreachable inventory is a Sphinx warning, which -W turns into a failure: keep only
# the inventories whose host answers, so the build stays green offline and links when online.
# RFOL_DOCS_INTERSPHINX=0 leaves them all out, =1 keeps them all.
_INVENTORIES = {
    "python": "https://docs.python.org/3/",
    "numpy": "https://numpy.org/doc/stable/",
    "scipy": "https://docs.scipy.org/doc/scipy/",
    "dask": "https://docs.dask.org/en/stable/",
    "distributed": "https://distributed.dask.org/en/stable/",
    "xarray": "https://docs.xarray.dev/en/stable/",
    "zarr": "https://zarr.readthedocs.io/en/stable/",
    "sklearn": "https://scikit-learn.org/stable/",
}


def _reachable(url, timeout=3.0):
    try:
        socket.create_connection((urlparse(url).hostname, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


_want = os.environ.get("RFOL_DOCS_INTERSPHINX", "auto")
intersphinx_mapping = {
    name: (url, None)
    for name, url in _INVENTORIES.items()
    if _want == "1" or (_want == "auto" and _reachable(url))
}
intersphinx_timeout = 10

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples" / "gallery"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",  # plot_*.py run at build time; the SLURM walk-through does not
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
}

html_theme = "pydata_sphinx_theme"
html_title = f"rfol_dask {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "header_links_before_dropdown": 8,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"index": [], "changelog": [], "contributing": []}


_LONE_STAR = re.compile(r"(?<=, )\*(?=\w)")  # the unpacking star of a shape: (M, *grid)


def _escape_unpacking_stars(app, what, name, obj, options, lines):
    """Shapes such as ``(M, *input_grid)`` in docstrings are not reST emphasis: escape the star."""
    lines[:] = [_LONE_STAR.sub(r"\\*", line) for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _escape_unpacking_stars)
