import numpy as _np
from . import ndarray
def default_rng(seed=None):
    raise NotImplementedError("fake")
