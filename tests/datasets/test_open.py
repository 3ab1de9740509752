"""``rfol_dask.datasets.open`` is the public name of ``open_dataset`` without hiding the builtin."""

import rfol_dask.datasets as datasets_package


def test_open_is_open_dataset_and_the_builtin_stays_visible():
    assert datasets_package.open is datasets_package.open_dataset
    # not a global of the package (it would shadow the builtin ``open`` there) nor star-exported
    assert "open" not in vars(datasets_package) and "open" not in datasets_package.__all__
    namespace = {}
    exec("from rfol_dask.datasets import *", namespace)
    assert "open" not in namespace
