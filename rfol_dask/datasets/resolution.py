"""Is a pseudo-spectral solution resolved: in space by the share of the upper half of the kept
modes (:func:`spectral_tail`), in time by step doubling (docs/datasets.md, "Resolution")."""

from __future__ import annotations

import numpy as np
import scipy.fft

#: largest accepted :func:`spectral_tail` of a generated block
MAX_TAIL = 1e-2

#: largest accepted :func:`step_error` of a generated block (relative L2); the defaults give
#: 1e-8 (Burgers) and 1e-9 (Navier-Stokes), below the models' errors by orders of magnitude
MAX_STEP_ERROR = 1e-4


def spectral_tail(u, cutoff: int, ndim: int = 1) -> float:
    """``max_b sqrt(E_b(K/2 < |k|_inf <= K) / E_b(0 < |k|_inf <= K))`` of the periodic fields
    ``u`` (B, n) or (B, n, n) (``ndim`` grid axes), ``K = cutoff``; 0 for constant fields."""
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
    """ValueError naming ``what`` and the ``fix`` when :func:`spectral_tail` of ``u`` exceeds
    :data:`MAX_TAIL`."""
    tail = spectral_tail(u, cutoff, ndim)
    if tail > MAX_TAIL:
        raise ValueError(
            f"{what} is under-resolved: the upper half of the kept modes holds {tail:.1%} of "
            f"its amplitude (at most {MAX_TAIL:.0%} is accepted); {fix}"
        )


def step_error(coarse, fine, order: int = 4) -> float:
    """Step-doubling estimate ``||coarse - fine|| / ||fine|| 2^p / (2^p - 1)`` of the relative
    time-stepping error of ``coarse`` (``fine``: twice the steps of a method of ``order`` p)."""
    diff, size = np.linalg.norm(np.subtract(coarse, fine, dtype=float)), np.linalg.norm(fine)
    if not np.isfinite(diff):
        return float("inf")
    factor = 2.0**order / (2.0**order - 1.0)
    return float(factor * diff / size) if size > 0 else float(factor * diff)


def check_time_steps(coarse, solve_fine, n_steps: int, *, what: str, order: int = 4) -> None:
    """ValueError naming ``what`` and a step count to take when the time-stepping error of the
    one-sample solution ``coarse`` (``n_steps`` steps) exceeds :data:`MAX_STEP_ERROR`;
    ``solve_fine(m)`` solves it again with ``m`` steps."""
    if not np.all(np.isfinite(coarse)):  # a blow-up: reported as such by the caller's checks
        return
    try:
        fine = solve_fine(2 * int(n_steps))
    except FloatingPointError as exc:  # twice the steps blow up: no solution either
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
