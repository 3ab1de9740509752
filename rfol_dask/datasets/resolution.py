"""Is a pseudo-spectral solution resolved? The spectral tail of a periodic field.

A pseudo-spectral solver with the 2/3 rule keeps the modes ``|k|_inf <= K``. Where the grid
resolves the solution, its spectrum has decayed by many orders before ``K``; where it does not
(a viscosity too small for the grid, a shock), the upper half of the kept band holds a visible
share of the field, and the solution carries Gibbs oscillations and aliasing errors of the same
order. :func:`spectral_tail` measures that share; :func:`check_resolved` refuses a block above
:data:`MAX_TAIL`.

Measured by ``benchmarks/spectral_tail.py`` (Burgers on 1024 and 2048 points against 8192,
Navier-Stokes on 32 / 64 / 128 points against 256; table in ``benchmarks/README.md``): tails below 1e-4 went with relative errors below 2e-8, tails of
1-2e-2 with errors of 4e-5 to 9e-4, tails of 0.09-0.23 with errors of 5-21 %.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

__all__ = ["MAX_TAIL", "spectral_tail", "check_resolved"]

#: largest accepted :func:`spectral_tail` of a generated block
MAX_TAIL = 1e-2


def spectral_tail(u, cutoff: int, ndim: int = 1) -> float:
    """Largest share of the upper half of the kept band in a stack of periodic fields.

    Parameters
    ----------
    u : ndarray, shape (B, n) or (B, n, n) (``ndim`` trailing grid axes)
        Fields on uniform periodic grids.
    cutoff : int
        ``K``: the largest kept wavenumber (in max norm over the axes).
    ndim : int, default=1
        Number of trailing grid axes.

    Returns
    -------
    float
        ``max_b sqrt(E_b(K/2 < |k|_inf <= K) / E_b(0 < |k|_inf <= K))``, 0 for a constant
        field; ``E_b`` the energy of field ``b`` in the given modes. Cost: one real FFT of ``u``.
    """
    if len(u) == 0:
        return 0.0  # an empty block
    axes = tuple(range(-ndim, 0))
    power = np.abs(scipy.fft.rfftn(np.asarray(u, dtype=float), axes=axes)) ** 2
    k = np.zeros(power.shape[-ndim:])
    for a in range(ndim):
        n = u.shape[a - ndim]
        freq = np.arange(n // 2 + 1) if a == ndim - 1 else np.abs(scipy.fft.fftfreq(n, 1.0 / n))
        shape = [1] * ndim
        shape[a] = freq.size
        k = np.maximum(k, freq.reshape(shape))
    flat = power.reshape(*power.shape[:-ndim], -1)
    k = k.ravel()
    total = flat[..., (k > 0) & (k <= cutoff)].sum(-1)
    upper = flat[..., (k > cutoff / 2) & (k <= cutoff)].sum(-1)
    share = np.divide(upper, total, out=np.zeros_like(total), where=total > 0)
    return float(np.sqrt(share.max(initial=0.0)))


def check_resolved(u, cutoff: int, ndim: int, *, what: str, fix: str) -> None:
    """ValueError when :func:`spectral_tail` of ``u`` exceeds :data:`MAX_TAIL`.

    ``what`` names the field and grid (``"Burgers u(., T) on 1024 points"``), ``fix`` says what to
    raise. The message gives the measured tail.
    """
    tail = spectral_tail(u, cutoff, ndim)
    if tail > MAX_TAIL:
        raise ValueError(f"{what} is under-resolved: the upper half of the kept modes holds {tail:.1%} of "
                         f"its amplitude (at most {MAX_TAIL:.0%} is accepted); {fix}")
