import numpy as _np

from . import _fn

__all__ = []
for _name in (
    "fft",
    "ifft",
    "fft2",
    "ifft2",
    "rfft",
    "irfft",
    "fftn",
    "ifftn",
    "rfftn",
    "irfftn",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
    "hfft",
    "ihfft",
    "rfft2",
    "irfft2",
):
    globals()[_name] = _fn(_name, getattr(_np.fft, _name))
    __all__.append(_name)
