"""The passes over feature slabs that score :class:`rfol_dask.RandomFeatureOperatorCV`: a stage's
validation errors (every gamma of a law in one pass per split) and the growth stage's (running
sums advanced from one ``N`` checkpoint to the next)."""

from __future__ import annotations

import functools
import sys

import dask
import numpy as np

from .backend import take_rows
from .features import draw_frequencies
from .placement import pinned, worker_addresses
from .progress import compute
from .selection import arrange_rows
from .solve.graph import after as _after  # after: a parameter name here
from .solve.graph import tree_sum
from .tuning import (
    add_validation,
    floored_path_errors,
    frequency_scale,
    path_method,
    slab_bounds,
    sum_validation,
    validation_grams,
    validation_slab,
)

#: while N grows, a gamma whose best validation error at a checkpoint exceeds the best one seen
#: there (by any gamma) by more than this fraction is dropped
GROWTH_PRUNE = 0.25
#: the fine and growth stages solve the alphas within this many grid steps of the best one so far
#: (widened while the best sits on the window's edge) where one Cholesky per alpha beats an ``eigh``
WINDOW_HALF_WIDTH = 1


class FeaturePasses:
    """The slab passes of the random-feature search (mixed into its estimator)."""

    def _frequencies(self, law, N):
        args = (self.n_features_in_, N, law, 1.0, self.nu, self._seed)
        return functools.partial(draw_frequencies, *args, metric=self.input_metric_)

    def _path_args(self, center):  # of _path_errors after the outputs
        a = self._st["alpha_path"]
        return self._alphas(), self.fit_intercept, a, center, WINDOW_HALF_WIDTH, self._eps

    def _gram_group(self, M_t, M_v, n_segments, client, summed=0):
        """How many gammas' Gram pairs (``n_segments`` each) one pass may hold: half the search's
        budget over ``8 (M_t + M_v) M_t n_segments`` bytes, at least one; with ``summed`` pairs more
        a gamma while a worker sums, all within the whole budget."""
        per, budget = 8.0 * (M_t + M_v) * M_t, self._search_budget(client).bytes
        group = 0.5 * budget // (per * n_segments)
        if summed:
            group = min(group, budget // (per * (n_segments + summed)))
        return max(1, int(group))

    def _search_memory(self, M_t, M_v):
        """Beside a training Gram (one gamma per pass): the cross-Gram, the other nested ``N``'s
        Gram pairs, the solve's copy of a Gram and two ``M x slab`` buffers."""
        Ns, M = self._n_list(), M_t + M_v
        width = max(f1 - f0 for f0, f1 in slab_bounds(Ns[-1], M, Ns))
        cross = f"{len(Ns)} cross-Grams of {M_v} x {M_t}"
        held = {cross if len(Ns) > 1 else f"the {M_v} x {M_t} cross-Gram": 8 * len(Ns) * M_v * M_t}
        if len(Ns) > 1:
            held[f"the Grams of {len(Ns) - 1} more n_features"] = 8 * (len(Ns) - 1) * M_t * M_t
        held["the solve's copy of a Gram"] = 8 * M_t * M_t
        held[f"two {M} x {width} feature slabs"] = 2 * 8 * M * width
        return held

    def _stage_errors(
        self, X, Y, train, valid, client, law, mults, Ns, alpha_center=None, after=None
    ):
        """Validation errors of one split, then each Gram's rounding floor: (len(mults), len(Ns),
        n_alpha + 1), or delayed; on a cluster the first Grams wait for ``after`` (the split
        before's errors): else every split's Grams were held at once."""
        N, M_t, M_v = Ns[-1], len(train), len(valid)
        freq, args = self._frequencies(law, N), self._path_args(alpha_center)
        scales = [frequency_scale(law, m * self.median_scales_[law]) for m in mults]
        group = self._gram_group(M_t, M_v, len(Ns), client)
        groups = [scales[g0 : g0 + group] for g0 in range(0, len(scales), group)]
        slabs = slab_bounds(N, M_t + M_v, Ns)
        if client is not None:
            opts = dict(n_train=M_t, frequencies=freq, n_features=N, segments=Ns)
            return self._cluster_stage_errors(
                X, Y, train, valid, client, groups, slabs, opts, args, after
            )
        Xa, Yt, Yv = arrange_rows(X, train, valid), take_rows(Y, train), take_rows(Y, valid)
        out = []
        for sc in groups:
            acc = None
            for f0, f1 in slabs:
                acc = validation_slab(acc, Xa, M_t, freq, N, f0, f1, sc, Ns, self.fit_intercept)
            Ks, Gs = range(len(sc)), range(len(Ns))
            out += [[_path_errors(acc, k, Ns, g, Yt, Yv, *args) for g in Gs] for k in Ks]
        return np.asarray(out)

    def _cluster_stage_errors(self, X, Y, train, valid, client, groups, slabs, opts, args, last):
        """:meth:`_stage_errors` on a cluster: delayed, each group's sums on the first worker."""
        workers, Ns = worker_addresses(client), opts["segments"]
        Xa = dask.delayed(arrange_rows)(X, train, valid)
        Yt, Yv = dask.delayed(take_rows)(Y, train), dask.delayed(take_rows)(Y, valid)
        out, summed = [], None
        for sc in groups:
            kw = dict(X=Xa, scales=sc, fit_intercept=self.fit_intercept, **opts)
            step = functools.partial(dask.delayed(validation_slab), **kw)
            # one group's Grams at a time on the first worker, and one solve at a time (each solve
            # uses every core and a copy of a Gram): each waits for the task before it; the other
            # workers start a group once the group before is summed (else each held every group's):
            # they wait for a token made beside that sum (waiting for the sum itself fetched a copy)
            gates = [last] + [last if summed is None else summed] * (len(workers) - 1)
            ends, where = _chains([None] * len(workers), workers, slabs, step, gates)
            total = tree_sum(ends, dask.delayed(add_validation), where)  # ends on the first worker
            with pinned(where[0]):  # where the total is: a solve elsewhere fetched a copy of it
                summed = dask.delayed(_after)(None, total)
                for k in range(len(sc)):
                    out.append([])
                    for g in range(len(Ns)):
                        last = dask.delayed(_path_errors)(
                            dask.delayed(_after)(total, last), k, Ns, g, Yt, Yv, *args
                        )
                        out[-1].append(last)
        return dask.delayed(np.asarray)(out)

    def _grow(self, X, Y, splits, client, law, N0, mults, rules, centers):
        """Growth rows of the multiples ``mults`` of ``law`` from ``N0`` features, one pass over
        nested slabs; a multiple drops out as :meth:`_keep` says. ``rules[k]``: (the records it
        updates, the record it is held to), a record mapping N to the best error there;
        ``centers[k]``: the alpha index its first window is centred on."""
        N_max = int(self.max_features)
        checkpoints = growth_checkpoints(N0, N_max)
        scales = [frequency_scale(law, m * self.median_scales_[law]) for m in mults]
        freq, centers = self._frequencies(law, N_max), list(centers)
        state = []  # per split: inputs arranged, training and validation outputs, accumulators
        for tr, va in splits:
            parts = [(arrange_rows, X, tr, va), (take_rows, Y, tr), (take_rows, Y, va)]
            if client is None:
                data = [f(*a) for f, *a in parts]
            else:
                data = client.persist([dask.delayed(f)(*a) for f, *a in parts])
            state.append([*data, [None] * len(worker_addresses(client))])
        slabs = slab_bounds(N_max, len(splits[0][0]) + len(splits[0][1]), checkpoints)
        out, previous, done = [], np.full(len(scales), np.inf), 0
        for Nk in checkpoints:
            new, done = [(f0, f1) for f0, f1 in slabs if done <= f0 and f1 <= Nk], Nk
            errs = self._checkpoint(splits, state, new, Nk, freq, scales, centers, client)
            errs, floors = errs[:, :-1], errs[:, -1]  # (scales, alphas, splits), (scales, splits)
            n_rows = len(splits[0][0])
            out += self._rows(errs[:, None], floors[:, None], law, mults, [Nk], n_rows, "growth")
            mean = np.mean(errs, axis=-1)
            mean = np.where(np.isnan(mean), np.inf, mean)  # NaN: an alpha left unsolved
            best_k = mean.min(axis=1)
            keep = self._keep(law, Nk, mults, rules, best_k, previous)
            if len(keep) == 0:
                break
            centers, previous = [int(np.argmin(mean[k])) for k in keep], best_k[keep]
            mults, rules = [mults[k] for k in keep], [rules[k] for k in keep]
            if len(keep) < len(scales):  # the dropped gammas' sums are freed
                scales = [scales[k] for k in keep]
                for st in state:
                    st[3] = [a if a is None else _select(a, keep, client) for a in st[3]]
        return out

    def _keep(self, law, Nk, mults, rules, best_k, previous):
        """The multiples that grow on from ``Nk``: those that gained ``growth_tol`` over the
        previous checkpoint and are within :data:`GROWTH_PRUNE` of their record (updated here)."""
        for (updates, _), e in zip(rules, best_k, strict=False):
            for record in updates:
                record[Nk] = min(record.get(Nk, np.inf), e)
        held = np.array([rule[1][Nk] for rule in rules])
        for m, e, h in zip(mults, best_k, held, strict=False) if self.progress else ():
            print(
                f"selection (growth): {law}, gamma = {m:.3g} x median, N = {Nk}: best "
                f"validation error {e:.4g} (its record at this N: {h:.4g})",
                file=sys.stderr,
                flush=True,
            )
        return np.flatnonzero(
            (best_k < previous * (1.0 - self._st["growth_tol"]))
            & (best_k <= held * (1.0 + GROWTH_PRUNE))
        )

    def _checkpoint(self, splits, state, new, Nk, freq, scales, centers, client):
        """The running sums of every split advanced over the ``new`` slabs and the errors at ``Nk``
        features, then each Gram's floor: (scales, alphas + 1, splits). On a cluster the sums stay
        on their workers; a split's sums start once the split before is scored."""
        N_max = freq.args[1]
        errs = []
        for (tr, _va), st in zip(splits, state, strict=False):
            Xa, Yt, Yv, accs = st
            opts = dict(X=Xa, n_train=len(tr), frequencies=freq, n_features=N_max, scales=scales)
            opts.update(segments=[N_max], fit_intercept=self.fit_intercept)
            # the running sums carry sqrt(2 / N_max): segments (Nk, N_max) rescale them to Nk
            args = [(k, (Nk, N_max), 0, Yt, Yv, *self._path_args(c)) for k, c in enumerate(centers)]
            if client is None:
                acc = accs[0]
                for f0, f1 in new:
                    acc = validation_slab(acc, f0=f0, f1=f1, **opts)
                st[3] = [acc]
                errs.append([_path_errors(acc, *a) for a in args])
                continue
            workers = worker_addresses(client)
            step = functools.partial(dask.delayed(validation_slab), **opts)
            accs, where = _chains(accs, workers, new, step)
            accs = client.persist(accs)
            st[3] = accs + [None] * (len(workers) - len(accs))
            last = errs[-1][-1] if errs else None
            total = accs[0]
            if len(accs) > 1:
                first = functools.partial(_gated_sum, gate=last)
                total = tree_sum(accs, dask.delayed(add_validation), where, first=first)
            row = []
            with pinned(where[0]):  # where the total is: one solve at a time
                for a in args:
                    last = dask.delayed(_path_errors)(dask.delayed(_after)(total, last), *a)
                    row.append(last)
            errs.append(row)
        if client is not None:
            desc = f"selection (growth, N = {Nk})"
            (errs,) = compute(errs, client=client, progress=self.progress, desc=desc)
        return np.moveaxis(np.asarray(errs, dtype=float), 0, -1)


def growth_checkpoints(N0, N_max):
    """The ``n_features`` the growth stage scores from ``N0``: ``N0, 2 N0, 4 N0, ...`` and
    ``N_max``."""
    return sorted({*(N0 * 2**k for k in range(int(np.log2(N_max / N0)) + 1)), N_max})


def _chains(accs, workers, slabs, step, gates=None):
    """Per worker, its accumulator (None: none yet) advanced by the delayed ``step(acc, f0=, f1=)``
    over its share of ``slabs``; the accumulators and their workers. ``gates``: per worker, a task
    a chain starting without an accumulator waits for."""
    groups = np.array_split(np.arange(len(slabs)), len(workers))
    out, where = [], []
    for w, acc, gate, idx in zip(
        workers, accs, gates or [None] * len(workers), groups, strict=False
    ):
        with pinned(w):
            for i in idx:
                if acc is None and gate is not None:
                    acc = dask.delayed(_after)(None, gate)
                acc = step(acc, f0=slabs[i][0], f1=slabs[i][1])
        if acc is not None:
            out.append(acc)
            where.append(w)
    return out, where


def _gated_sum(a, b, gate=None):
    """The delayed sum of ``a`` and ``b`` (a new one), once ``gate`` (or None) is done."""
    return dask.delayed(sum_validation)(a if gate is None else dask.delayed(_after)(a, gate), b)


def _select(acc, keep, client=None):
    """The accumulator of the scales ``keep`` only (persisted where ``acc`` is)."""
    if client is not None:
        return client.persist(dask.delayed(_select)(acc, keep))
    return [acc[k] for k in keep]


def _path_errors(
    acc, k, segments, g, Vt, Vv, alphas, fit_intercept, method, center=None, half_width=2, eps=None
):
    """Validation errors of scale ``k`` and ``segments[g]`` features, then the alphas' rounding
    floor of that model's Gram (:func:`rfol_dask.tuning.floored_path_errors`): (n_alpha + 1,)."""
    # the Cholesky paths solve in the accumulator's own Gram and leave it as it was: no M_t^2 copy
    in_place = path_method(len(alphas), Vt.shape[0], method, center, half_width) != "eigh"
    G, K, factor, A = validation_grams(acc, k, segments, g, not in_place, Vt.shape[0])
    a, kw = np.asarray(alphas) / factor, dict(eps=eps, design=A)
    errs = floored_path_errors(G, K, Vt, Vv, a, fit_intercept, method, center, half_width, **kw)
    errs[-1] *= factor  # the floor in the alphas' units
    return errs
