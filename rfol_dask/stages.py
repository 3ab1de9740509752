"""The staged search of :class:`rfol_dask.selection.SelectionCV` (successive halving): a coarse
stage over the whole grid on a subsample of rows and features, a fine one on half of the rows
and features around the best families' coarse winners, then the fine winner at full size; and
its results rows."""

from __future__ import annotations

import numbers
import sys
import time
import warnings

import dask
import numpy as np

from .exceptions import DataWarning
from .features import FREQUENCY_BLOCK
from .progress import compute
from .stacklevel import user_stacklevel
from .tuning import nonzero_rows

#: the fine stage scores up to this many steps of ``refine`` beyond a winner on its family's edge
FINE_EXTEND = 2
#: a family after the coarse stage's best joins the fine stage only when its coarse best error is
#: within this factor of the best one's (a tie at the coarse stage's resolution)
FINALIST_TIE = 1.02
#: the final stage also scores the fine winner's narrower neighbour when, on the fine rows, its
#: error was within this factor of the winner's (on the eight benchmark sets it won at full size
#: where that gap was 1.000-1.027 and lost where it was 1.020-1.160)
NARROWER_TIE = 1.05
#: the coarse stage keeps at least this many training rows (all if there are fewer)
MIN_COARSE_ROWS = 200


def _score(row):
    """The ranking key of a results row (a NaN score ranks last)."""
    score = row["mean_test_score"]
    return -np.inf if np.isnan(score) else score


def _rank(rows):
    """Set ``rank_test_score`` of every results row, within its stage (1 = best)."""
    for stage in {r["stage"] for r in rows}:
        part = [r for r in rows if r["stage"] == stage]
        order = np.argsort([-_score(r) for r in part], kind="stable")
        for rank, k in enumerate(order, start=1):
            part[k]["rank_test_score"] = rank


def best_row(rows):
    """The best results row (NaN scores rank last)."""
    return max(rows, key=_score)


def final_best(rows):
    """The best results row of the last stage in ``rows``."""
    return best_row([r for r in rows if r["stage"] == rows[-1]["stage"]])


def grid_step(values, default=None):
    """The mean ratio between neighbours of the sorted positive ``values`` (a geometric grid's
    factor), or ``default`` for fewer than two."""
    values = np.unique(np.asarray(values, dtype=float))
    return float(values[-1] / values[0]) ** (1 / (len(values) - 1)) if len(values) > 1 else default


def beyond_edge(rows, step, n):
    """``n`` scale multiples ``step`` apart beyond the edge of ``rows`` (one family) where the best
    sits, or None if it is inside."""
    tried = sorted({r["scale_multiple"] for r in rows})
    best = best_row(rows)["scale_multiple"]
    if len(tried) < 2 or tried[0] < best < tried[-1]:
        return None
    sign = -1 if best == tried[0] else 1
    return best * step ** (sign * np.arange(1, n + 1))


def _split_rows(rows, M, which):
    """A user's cv split rows (a boolean mask or integer indices in ``[0, M)``) as indices."""
    rows = np.asarray(rows)
    if rows.dtype == bool:
        if rows.shape != (M,):
            raise ValueError(
                f"a cv split's {which} mask has shape {rows.shape}, expected ({M},) for {M} samples"
            )
        return np.flatnonzero(rows)
    if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
        raise ValueError(
            f"a cv split's {which} rows must be a 1-D array of integer indices or a boolean mask, "
            f"got shape {rows.shape} and dtype {rows.dtype}"
        )
    if rows.size and (rows.min() < 0 or rows.max() >= M):
        raise ValueError(
            f"a cv split's {which} rows hold indices outside [0, {M}) (from {rows.min()} to "
            f"{rows.max()}) for {M} training samples"
        )
    return rows.astype(np.intp)


class StagedSearch:
    """The stages of the search (mixed into :class:`rfol_dask.selection.SelectionCV`)."""

    def _seed_search(self):  # the seed of the subsampled rows
        self._seed = 0

    def _extend(self, X, Y, splits, client, rows):  # rows of stages after the search's last
        return []

    def _family_multiples(self, family, mults):
        return mults

    def _n_list(self):
        return [None]

    def _alpha_index(self, alpha):
        """Index of the grid alpha nearest ``alpha`` (in log)."""
        return int(np.argmin(np.abs(np.log(self._alphas()) - np.log(alpha))))

    def _stage(self, X, Y, splits, client, family, scales, Ns, rows_used, name, alpha_center=None):
        """Results rows of one family over ``scales`` x ``Ns`` x alphas (only around the index
        ``alpha_center`` where cheaper)."""
        scales = self._family_multiples(family, scales)
        t0 = time.perf_counter()
        errs = []
        # on a cluster each split's Grams wait for the one before: one split's at a time
        for tr, va in splits:
            after = errs[-1] if client is not None and errs else None
            args = (X, Y, tr, va, client, family, scales, Ns, alpha_center)
            errs.append(self._stage_errors(*args, after=after))
        if client is not None:
            desc = f"selection ({name}, {family})"
            (errs,) = compute(errs, client=client, progress=self.progress, desc=desc)
        elif self.progress:  # computed here, stage by stage: one line each on stderr
            sys.stderr.write(
                f"selection ({name}, {family}): {len(scales)} scales x {len(Ns)} N x "
                f"{len(self._alphas())} alphas on {len(splits)} split(s) in "
                f"{time.perf_counter() - t0:.2f} s\n"
            )
        # (scales, Ns, alphas + the floor, splits)
        errs = np.stack([np.asarray(e) for e in errs], axis=-1)
        return self._rows(errs[:, :, :-1], errs[:, :, -1], family, scales, Ns, rows_used, name)

    def _rows(self, errs, floors, family, scales, Ns, rows_used, name):
        """Results rows of the errors ``errs`` (scales, Ns, alphas, splits) of Grams with rounding
        floors ``floors`` (scales, Ns, splits; a row's ``<alpha>_floor``: the largest)."""
        out = []
        for i, mult in enumerate(scales):
            for j, N in enumerate(Ns):
                for a, alpha in enumerate(self._alphas()):
                    e = errs[i, j, a]
                    with np.errstate(invalid="ignore"):  # an inf error (failed solve): NaN spread
                        spread = float(np.std(e))
                    row = {
                        "stage": name,
                        "family": family,
                        "scale_multiple": float(mult),
                        self._param_name: float(mult * self.median_scales_[family]),
                        "n_features": int(N) if N is not None else -1,
                        self._alpha_name: float(alpha),
                        f"{self._alpha_name}_floor": float(np.max(floors[i, j])),
                        "n_train_rows": int(rows_used),
                        "mean_relative_l2": float(np.mean(e)),
                        "mean_test_score": -float(np.mean(e)),
                        "std_test_score": spread,
                    }
                    row.update({f"split{k}_test_score": -float(v) for k, v in enumerate(e)})
                    out.append(row)
        return out

    def _search(self, X, Y, splits, client):
        """Rows of the whole search: coarse (:meth:`_coarse`), fine (extended beyond an edge winner
        up to :data:`FINE_EXTEND` steps), then final at full size (:meth:`_final`)."""
        families, mults = self._families(), np.asarray(self._multiples(), dtype=float)
        Ns, refine = self._n_list(), self._st["refine"]
        n_train = min(len(tr) for tr, _ in splits)
        frac = self._st["coarse"]
        n_coarse, Nc = self._n_rows(n_train, frac), self._n_features(Ns, frac)
        coarse = n_coarse < n_train or Nc[0] not in (None, Ns[-1])
        coarse = coarse and len(families) * len(mults) > len(refine)
        rows, plan = [], [(fam, mults, None) for fam in families]
        if coarse:
            rows, plan = self._coarse(X, Y, splits, client, families, mults, Nc, n_coarse)
        name = "fine" if coarse else "full"
        fine_step = grid_step(refine)
        fine = coarse and self._st["fine"] is not None
        n_fine = max(n_coarse, self._n_rows(n_train, self._st["fine"])) if fine else n_train
        sub = splits if n_fine >= n_train else self._subsample(splits, n_fine)
        Nf = self._n_features(Ns, self._st["fine"]) if fine and len(Ns) == 1 else Ns
        for fam, scales, center in plan:
            rows += self._stage(X, Y, sub, client, fam, scales, Nf, len(sub[0][0]), name, center)
        for _ in range(FINE_EXTEND if coarse and fine_step else 0):
            best = best_row([r for r in rows if r["stage"] == name])
            mine = [r for r in rows if r["family"] == best["family"] and r["stage"] == name]
            new = beyond_edge(mine, fine_step, 1)
            if new is None:
                break
            fam, center = best["family"], self._alpha_index(best[self._alpha_name])
            rows += self._stage(X, Y, sub, client, fam, new, Nf, len(sub[0][0]), name, center)
        if sub is not splits or Nf != Ns:
            rows += self._final(X, Y, splits, client, rows, name, fine_step, Ns)
        return rows

    def _coarse(self, X, Y, splits, client, families, mults, Nc, n_coarse):
        """The coarse stage's rows (the whole grid on ``n_coarse`` rows, extended beyond an edge
        best) and the fine stage's plan: the finalists' best scale times ``refine``, best alpha."""
        sub, rows = self._subsample(splits, n_coarse), []
        for fam in families:
            rows += self._stage(X, Y, sub, client, fam, mults, Nc, len(sub[0][0]), "coarse")
        step = grid_step(mults, 4.0)
        for fam in families:
            for _ in range(3):
                new = beyond_edge([r for r in rows if r["family"] == fam], step, 2)
                if new is None:
                    break
                rows += self._stage(X, Y, sub, client, fam, new, Nc, len(sub[0][0]), "coarse")
        leaders = {}
        for r in sorted(rows, key=_score, reverse=True):
            leaders.setdefault(r["family"], r)
        first = -_score(next(iter(leaders.values())))
        refine = np.asarray(self._st["refine"], dtype=float)
        plan = [
            (fam, r["scale_multiple"] * refine, self._alpha_index(r[self._alpha_name]))
            for k, (fam, r) in enumerate(list(leaders.items())[: self._st.get("finalists", 1)])
            if k == 0 or -_score(r) <= FINALIST_TIE * first
        ]
        return rows, plan

    def _final(self, X, Y, splits, client, rows, name, fine_step, Ns):
        """The final stage's rows: the fine winner at full size, and one refine step narrower where
        that was within :data:`NARROWER_TIE` of it (fewer rows favour wider kernels)."""
        best = best_row([r for r in rows if r["stage"] == name])
        finals = [best["scale_multiple"]]
        if fine_step:
            narrow = best["scale_multiple"] * fine_step**self._narrower
            there = [r for r in rows if r["stage"] == name and r["family"] == best["family"]]
            there = [r for r in there if np.isclose(r["scale_multiple"], narrow)]
            if not there or -_score(best_row(there)) <= NARROWER_TIE * -_score(best):
                finals.append(narrow)
        center = self._alpha_index(best[self._alpha_name])
        return self._stage(
            X, Y, splits, client, best["family"], finals, Ns, len(splits[0][0]), "final", center
        )

    def _n_features(self, Ns, frac):
        """A stage's features: ``frac`` of the largest of ``Ns`` (at least 256); None: all."""
        if Ns == [None] or frac is None:
            return [None]
        return [min(Ns[-1], max(FREQUENCY_BLOCK, int(frac * Ns[-1])))]

    def _n_rows(self, n_train, frac):
        """Training rows of a stage on ``frac`` of ``n_train`` (None: all), at least 200."""
        return n_train if frac is None else min(n_train, max(MIN_COARSE_ROWS, int(frac * n_train)))

    def _subsample(self, splits, n_rows):
        """The splits cut to ``n_rows`` training rows each, the validation rows in proportion."""
        rng, sub = np.random.default_rng(self._seed), []
        for tr, va in splits:
            k = min(len(tr), n_rows)
            k_va = max(1, round(len(va) * k / len(tr)))
            sub.append([np.sort(rng.choice(x, n, replace=False)) for x, n in ((tr, k), (va, k_va))])
        return sub

    def _splits(self, M):
        """``[(train rows, validation rows)]`` of the M training samples by ``cv``; ValueError for
        none or one with fewer than 2 training or no validation rows."""
        from sklearn.model_selection import KFold

        if self.cv is None:
            n_valid = max(1, int(round(0.2 * M)))
            splits = [(np.arange(M - n_valid), np.arange(M - n_valid, M))]
        elif isinstance(self.cv, numbers.Integral):
            splits = list(KFold(int(self.cv)).split(np.zeros((M, 1))))
        elif hasattr(self.cv, "split"):
            splits = list(self.cv.split(np.zeros((M, 1))))
        else:  # an iterable of (train, validation) index arrays or boolean masks
            splits = [
                (_split_rows(tr, M, "training"), _split_rows(va, M, "validation"))
                for tr, va in self.cv
            ]
        if not splits:
            raise ValueError(
                "cv gave no splits (a generator is used up by one fit): pass a list of (train, "
                "validation) index pairs or a splitter such as KFold(5)"
            )
        for k, (tr, va) in enumerate(splits):
            if len(tr) < 2 or len(va) < 1:
                raise ValueError(
                    f"{type(self).__name__} needs at least 2 training and 1 validation sample per "
                    f"split; split {k} has {len(tr)} / {len(va)} of n_samples = {M}: pass more "
                    "samples or another cv"
                )
        return [(np.asarray(tr), np.asarray(va)) for tr, va in splits]

    def _scored_splits(self, splits, Y, client):
        """The splits whose validation outputs are not all zero (the relative error is undefined on
        the others: left out with a warning); ValueError when none is left."""
        if client is None:
            nonzero = nonzero_rows(Y)
        else:
            nonzero = client.compute(dask.delayed(nonzero_rows)(Y)).result()
        dropped = [k for k, (_, va) in enumerate(splits) if not nonzero[va].any()]
        if len(dropped) == len(splits):
            raise ValueError(
                f"every validation output of the {len(splits)} split(s) is identically zero: the "
                "relative L2 error is undefined; pass a cv whose validation rows hold nonzero "
                "outputs, e.g. KFold(5, shuffle=True, random_state=0)"
            )
        if dropped:
            warnings.warn(
                f"cv split(s) {', '.join(map(str, dropped))} of {len(splits)} have only "
                "identically zero validation outputs (relative L2 error undefined): left out of "
                "the search; KFold(5, shuffle=True, random_state=0) scores every one",
                DataWarning,
                stacklevel=user_stacklevel(),
            )
        return [split for k, split in enumerate(splits) if k not in dropped]
