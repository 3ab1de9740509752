"""Is a pseudo-spectral solution resolved, in space and in time?

A pseudo-spectral solver with the 2/3 rule keeps the modes ``|k|_inf <= K``. Where the grid
resolves the solution, its spectrum has decayed by many orders before ``K``; where it does not
(a viscosity too small for the grid, a shock), the upper half of the kept band holds a visible
share of the field, and the solution carries Gibbs oscillations and aliasing errors of the same
order. :func:`spectral_tail` measures that share; :func:`check_resolved` refuses a block above
:data:`MAX_TAIL`.

Measured by ``benchmarks/spectral_tail.py`` (Burgers on 1024 and 2048 points against 8192,
Navier-Stokes on 32 / 64 / 128 points against 256; table in ``benchmarks/README.md``): tails below 1e-4 went with relative errors below 2e-8, tails of
1-2e-2 with errors of 4e-5 to 9e-4, tails of 0.09-0.23 with errors of 5-21 %.

In time, the solvers' blow-up and CFL checks do not catch every coarse step count: Burgers at
``nu = 0.01`` with 3 steps stays finite and is 1e10 times off, with 5 steps 39 % off
(``benchmarks/time_steps.py``). :func:`check_time_steps` estimates the time-stepping error by step
doubling (one sample solved again with twice the steps) and refuses a block above
:data:`MAX_STEP_ERROR`.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

#: largest accepted :func:`spectral_tail` of a generated block
MAX_TAIL = 1e-2

#: largest accepted :func:`step_error` of a generated block (relative L2); the defaults give
#: 1e-8 (Burgers) and 1e-9 (Navier-Stokes), below the models' errors by orders of magnitude
MAX_STEP_ERROR = 1e-4


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
        raise ValueError(
            f"{what} is under-resolved: the upper half of the kept modes holds {tail:.1%} of "
            f"its amplitude (at most {MAX_TAIL:.0%} is accepted); {fix}"
        )


def step_error(coarse, fine, order: int = 4) -> float:
    """Step-doubling estimate of the relative time-stepping error of ``coarse``.

    ``coarse`` and ``fine`` are the same solutions with ``n`` and ``2 n`` steps of a method of
    ``order`` ``p``: ``||coarse - fine|| / ||fine|| * 2^p / (2^p - 1)`` (Richardson; where the
    steps are too coarse for the asymptotic regime the difference itself is large, so the estimate
    still flags them). 0 for two zero fields.
    """
    coarse, fine = np.asarray(coarse, dtype=float), np.asarray(fine, dtype=float)
    diff, size = np.linalg.norm(coarse - fine), np.linalg.norm(fine)
    if not np.isfinite(diff):
        return float("inf")
    factor = 2.0**order / (2.0**order - 1.0)
    return float(factor * diff / size) if size > 0 else float(factor * diff)


def check_time_steps(coarse, solve_fine, n_steps: int, *, what: str, order: int = 4) -> None:
    """ValueError when the time-stepping error of ``coarse`` exceeds :data:`MAX_STEP_ERROR`.

    ``coarse`` is a solution (one sample) computed with ``n_steps`` steps; ``solve_fine(m)``
    computes the same sample with ``m`` steps (called once, with ``2 n_steps``: the check costs
    one sample solved at twice the steps). ``what`` names the solution. The message gives the
    estimate (:func:`step_error`) and a step count to take.
    """
    if not np.all(np.isfinite(coarse)):  # a blow-up: reported as such by the caller's checks
        return
    try:
        fine = solve_fine(2 * int(n_steps))
    except (
        FloatingPointError
    ) as exc:  # twice the steps blow up: the coarse run is no solution either
        raise ValueError(
            f"{what} with n_steps={n_steps} is not resolved in time: with twice the steps the "
            f"stepping blows up ({exc})"
        ) from exc
    err = step_error(coarse, fine, order)
    if err > MAX_STEP_ERROR:
        if err < 1e-2:  # asymptotic: the error falls as n_steps^-order
            more = int(np.ceil(1.25 * n_steps * (err / MAX_STEP_ERROR) ** (1.0 / order)))
        else:  # not yet asymptotic: the estimate says little about how many steps will do
            more = 4 * int(n_steps)
        raise ValueError(
            f"{what} with n_steps={n_steps} has a time-stepping error of about {err:.1e} (step "
            f"doubling on one sample; at most {MAX_STEP_ERROR:.0e} is accepted): increase n_steps, "
            f"e.g. n_steps={more}"
        )
