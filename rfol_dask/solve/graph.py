"""Pieces shared by the dask fit graphs: row and column blocks, named tasks, chains of
in-place sums with a tree over the chains, and the ``compute`` of a fit."""

from __future__ import annotations

import uuid

import dask
import numpy as np

from ..backend import is_array_api, to_numpy
from ..exceptions import BlockedFactorError
from ..factor import used_ridge
from ..features import CENTRE_ROWS, FREQUENCY_BLOCK, input_centre
from ..gram import check_finite
from ..linalg import first_ridge, warn_ridge
from ..memory import n_slots
from ..placement import pinned
from ..progress import compute


class TaskNames:
    """Key names of one fit's tasks: ``names("gram-slab", 3)`` is ``"gram-slab-<token>-3"``."""

    def __init__(self):
        self.token = uuid.uuid4().hex

    def __call__(self, name, *index):
        return "-".join([name, self.token, *map(str, index)])


class InputCentre:
    """The input centre of a dask fit, made in its graph (:meth:`attach`), left in ``value``."""

    def __init__(self, value=None):
        self.task, self.value = None, value

    def attach(self, Ub, starts, dtype, names):
        """The task ``input-centre`` on the first row blocks of ``Ub`` (or the given ``value``)."""
        if self.value is not None:
            self.task = dask.delayed(self.value, pure=True, traverse=False)
        else:
            k, name = max(1, int(np.searchsorted(starts, CENTRE_ROWS))), names("input-centre")
            self.task = dask.delayed(_checked_centre)(
                dtype, starts[:k], *Ub[:k], dask_key_name=name
            )

    @staticmethod
    def kwargs(centre):  # the keyword arguments of the tasks that make features
        return {} if centre is None else {"input_centre": centre.task}


def _checked_centre(dtype, starts, *blocks):
    """:func:`rfol_dask.features.input_centre` of the row blocks, checked for NaN / Inf."""
    for B, start in zip(blocks, starts, strict=False):
        check_finite(B if is_array_api(B) else np.asarray(B), int(start), "U")
    return input_centre(dtype, *blocks)


#: the tiled duals take at most this many row blocks (``nb^2`` tiles): finer chunks are merged
MAX_TILE_BLOCKS = 32
#: a merged row block's rows take at most this many bytes (``row_bytes`` each: features or inputs)
MERGED_BLOCK_BYTES = 256 * 2**20


def feature_slabs(M, N, n_groups, itemsize, slab_bytes):
    """Column ranges ``(f0, f1)`` of ``A`` in ``n_groups`` groups, slabs of <= ``slab_bytes``."""
    B = FREQUENCY_BLOCK
    width = max(1, int(slab_bytes // (M * itemsize)))
    width -= width % B if width > B else 0
    n_blocks = -(-N // B)
    if n_blocks >= n_groups:
        bounds = [min(N, (n_blocks * g // n_groups) * B) for g in range(n_groups + 1)]
    else:
        bounds = [N * g // n_groups for g in range(n_groups + 1)]
    groups = [(g0, g1) for g0, g1 in zip(bounds, bounds[1:], strict=False) if g1 > g0]
    return [[(f, min(f + width, g1)) for f in range(g0, g1, width)] for g0, g1 in groups]


def row_blocks(U, V, column_block=None, client=None, max_blocks=None, row_bytes=None):
    """Delayed row blocks of ``U`` and ``V`` (chunks merged to ``max_blocks``), offsets, columns."""
    if max_blocks is not None and len(U.chunks[0]) > max_blocks:
        rows = -(-U.shape[0] // max_blocks)
        if row_bytes:
            rows = min(rows, max(1, MERGED_BLOCK_BYTES // int(row_bytes)))
        if rows > max(U.chunks[0]):  # only ever merged, never cut
            U = U.rechunk({0: rows})
    U = U.rechunk({1: -1})
    V = V.rechunk({0: U.chunks[0], 1: -1})
    starts, m = np.concatenate([[0], np.cumsum(U.chunks[0])]).astype(int), V.shape[1]
    column_block = column_block or max(1, -(-m // n_slots(client)))
    Ub, Vb = U.to_delayed().ravel(), V.to_delayed().ravel()
    Ub = [dask.delayed(_after_v_check)(u, v, s) for u, v, s in zip(Ub, Vb, starts, strict=False)]
    return Ub, Vb, starts, [(s, min(s + column_block, m)) for s in range(0, m, column_block)]


def _after_v_check(U, V, start):
    """The block ``U`` once the same rows of ``V`` are checked."""
    check_finite(V if is_array_api(V) else np.asarray(V), start, "V")  # CuPy: checked on its GPU
    return U


def tree_sum(parts, combine, workers=None, first=None):
    """Pairwise ``combine`` of ``parts``, each where its left part is (``first``: at level one)."""
    parts = list(parts)
    places = list(workers) if workers is not None else [None] * len(parts)
    kept = [first is not None] * len(parts)
    step = combine if first is None else first
    while len(parts) > 1:
        summed, still = [], []
        for k in range(0, len(parts), 2):
            if k + 1 < len(parts):
                right = parts[k + 1]
                if kept[k + 1]:
                    with pinned(places[k + 1]):
                        right = dask.delayed(after)(right)  # fetched by one sum, then freed
                with pinned(places[k]):
                    summed.append(step(parts[k], right))
                still.append(False)
            else:
                summed.append(parts[k])
                still.append(kept[k])
        parts, places, kept, step = summed, places[::2], still, combine
    return parts[0]


def after(value, *_):
    """``value``, once the tasks given after it are done (orders tasks)."""
    return value


def chained_sum(n_blocks, slots, add_block, combine):
    """``acc = add_block(i, acc)`` in at most ``len(slots)`` pinned chains, then tree-summed."""
    n_chains, mine = min(len(slots), n_blocks), {}  # mine: worker -> its chains' ends
    for c in range(n_chains):
        acc = None
        with pinned(slots[c]):
            for i in range(c, n_blocks, n_chains):
                acc = add_block(i, acc)
        mine.setdefault(slots[c], []).append(acc)  # the workers in the order of slots
    per_worker = [tree_sum(parts, combine, [w] * len(parts)) for w, parts in mine.items()]
    return tree_sum(per_worker, combine, list(mine))


def block_vsum(V, start):
    """Column sums (m,) of the checked output block ``V`` (k, m) starting at ``start``."""
    check_finite(V := np.asarray(V), start, "V")
    return V.sum(axis=0)


def column_slab(start, stop, dtype, *blocks):
    """Columns ``start:stop`` of the row blocks, checked and stacked Fortran-ordered."""
    rows = np.cumsum([0, *map(len, blocks)]).tolist()
    out = np.empty((rows[-1], stop - start), dtype=dtype, order="F")
    for B, r in zip(blocks, rows, strict=False):
        out[r : r + len(B)] = to_numpy(B)[:, start:stop]  # CuPy blocks: copied to the host
        check_finite(out[r : r + len(B)], r, "V")  # after the cast, which may overflow
    return out


class Columns:
    """The coefficients (N, m) and intercepts (m,) of a fit, filled by column blocks ``cols``."""

    def __init__(self, cols):
        self.cols, self.coef, self.intercept = cols, None, None

    def put(self, k, coef=None, intercept=None):
        for name, X in (("coef", coef), ("intercept", intercept)):
            if X is not None:
                if getattr(self, name) is None:
                    setattr(self, name, np.empty((*X.shape[:-1], self.cols[-1][1]), X.dtype))
                getattr(self, name)[..., slice(*self.cols[k])] = X


def compute_fit(*tasks, progress, client, desc, alpha, consume=None, centre=None, factor=None):
    """``progress.compute`` of a fit graph; the ``centre`` filled, a raised ridge warned."""
    extras = {} if centre is None else {"centre": centre.task}
    if factor is not None:
        extras["ridge"] = dask.delayed(used_ridge)(factor)
    n, names, got, results = len(tasks), list(extras), {}, [None] * len(tasks)

    def take(i, result):
        if i >= n:
            got[names[i - n]] = result
        elif consume is not None:
            consume(i, result)
        else:
            results[i] = result

    kw = dict(progress=progress, client=client, desc=desc, consume=take)
    try:
        compute(*tasks, *extras.values(), **kw)
    except np.linalg.LinAlgError as exc:  # raised by the blocked Cholesky
        raise BlockedFactorError(
            f"the blocked Cholesky factorisation failed ({exc}): the Gram plus alpha={alpha:g} "
            "is not numerically positive definite; pass a larger alpha"
        ) from exc
    if centre is not None:
        centre.value = got["centre"]
    if got.get("ridge") is not None and got["ridge"][0] != alpha:
        warn_ridge(alpha, *got["ridge"])
    return tuple(results)


def with_ridges(run, alpha, dtype, mean_diag=1.0):
    """``run(ridge)`` for the ridges of the jitter policy until its factorisation succeeds."""

    def attempt(ridge, again):
        try:
            return (run(ridge),)  # wrapped: any result of run counts, None too
        except BlockedFactorError:
            return None

    return first_ridge(attempt, alpha, mean_diag, dtype)[0][0]
