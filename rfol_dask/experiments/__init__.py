"""The paper's experiments (``reproduce``: ``rfol-dask reproduce``), figures and bounds from
``reference.toml``. Names are imported on first use: the command line's parser imports no data."""

from importlib import import_module

_WHERE = {  # module: the names it gives
    "data": "SharedCluster load_split load_subset arrays grid",
    "selection": "median_length_scale select_nugget",
    "measure": "PeakMemory run_method",
    "runners": "make_models run_fits run_equal_time run_curves run",
    "report": "render",
    "reference": "METHODS TUNED PARTS reference_data sizes quick_train quick_bound paper_error",
    "reproduce": "reproduce main",
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names.split()}
__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
