"""Markov-chain baselines for DNA language modelling, fitted on the train region, and the callback
that logs them beside every run.

Two chains:

* :class:`MarkovModel` — one order, add-α counts (α = 1/2 is the Krichevsky–Trofimov estimator).
  Good at low orders; at high orders most contexts are unseen and it falls back to uniform.
* :class:`InterpolatedMarkov` — orders 0..K at once, each interpolated with the one below, as in
  the hierarchical Dirichlet language model (MacKay & Peto, 1995)::

      p_k(x | c) = (n(c, x) + β_k · p_{k−1}(x | c′)) / (n(c) + β_k)

  where c′ drops the oldest base of c, n counts the training bases and p_{−1} is uniform. An
  unseen context gives p_{k−1}, so high orders do not fall apart. The concentration β_k of every
  order is fitted on the training bases by leave-one-out (deleted estimation: each training base
  scored by the counts without itself, Ney et al., 1994), and :meth:`InterpolatedMarkov.select_order`
  picks the order with the lowest bits/base on held-out (validation) bases; the test region is
  never consulted. (Witten–Bell escape weights, which for a four-letter alphabet give a single
  observation half the mass, did: 2.7 bits/base at order 12 on E. coli, worse than uniform.)

Scoring can follow the model's windows (``window=L``): a base then only sees the bases of its own
window before it (order min(k, offset)), exactly the context a Transformer tested on windows of
``L + 1`` bases has — the like-for-like comparison at every test length.
"""

from __future__ import annotations

import sys

import lightning as L
import numpy as np

from datamodules.dna.fasta import N_CODE
from pipelines.tasks.base import baseline_datamodule

MAX_ORDER = 12


def _context_codes(seq: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """For each position t ≥ order: the base-4 code of seq[t-order:t] and the target seq[t],
    keeping only positions whose context and target contain no N."""
    seq = seq.astype(np.int64)
    n = len(seq) - order
    if n <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ctx = np.zeros(n, dtype=np.int64)
    bad = seq[order:] >= N_CODE
    for i in range(order):  # loop over context offsets (≤ order), vectorised over positions
        part = seq[i : i + n]
        bad |= part >= N_CODE
        ctx = ctx * 4 + np.minimum(part, 3)
    return ctx[~bad], seq[order:][~bad]


def _check_order(order: int) -> None:
    if order < 0 or order > MAX_ORDER:
        raise ValueError(f"Markov order must be in 0..{MAX_ORDER}, got {order}")


class MarkovModel:
    """Order-k Markov chain over A, C, G, T with add-α smoothing.

    Args:
        order: context length k (0 = base composition only).
        alpha: pseudo-count per (context, base); 0.5 is the KT estimator.
    """

    def __init__(self, order: int, alpha: float = 1.0) -> None:
        _check_order(order)
        self.order, self.alpha = order, alpha
        self.counts = np.zeros((4**order, 4), dtype=np.float64)

    def fit(self, segments: list[np.ndarray]) -> MarkovModel:
        for seg in segments:
            ctx, tgt = _context_codes(seg, self.order)
            np.add.at(self.counts, (ctx, tgt), 1.0)
        return self

    def bits_per_base(self, segments: list[np.ndarray]) -> float:
        """Mean −log2 p(base | context) over the scored positions of ``segments``."""
        total, count = self.bits_and_count(segments)
        return total / max(count, 1)

    def bits_and_count(self, segments: list[np.ndarray]) -> tuple[float, int]:
        """Σ −log2 p(base | context) over the scored positions of ``segments`` (no N in context or
        target) and their number."""
        probs = (self.counts + self.alpha) / (self.counts + self.alpha).sum(axis=1, keepdims=True)
        total, count = 0.0, 0
        for seg in segments:
            ctx, tgt = _context_codes(seg, self.order)
            total += float(-np.log2(probs[ctx, tgt]).sum())
            count += len(tgt)
        return total, count


def _history(seq: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes (n, order+1), run (n,)): for every position t the bases seq[t-order..t] (clipped to
    A..T, missing ones before the start as 0) and how many bases before t are valid (not N, inside
    the sequence), capped at ``order``."""
    seq = np.asarray(seq).astype(np.int64)  # (n,)
    n = len(seq)
    valid = seq < N_CODE
    # run length of valid bases ending just before t
    idx = np.arange(n)
    last_bad = np.maximum.accumulate(np.where(~valid, idx, -1))  # (n,) last N at or before t
    before = np.concatenate(([-1], last_bad[:-1]))  # last N strictly before t
    run = np.minimum(idx - before - 1, order)  # (n,)
    padded = np.concatenate((np.zeros(order, np.int64), np.minimum(seq, 3)))  # (order + n,)
    codes = np.lib.stride_tricks.sliding_window_view(padded, order + 1)  # (n, order+1)
    return codes, run


class InterpolatedMarkov:
    """Markov chains of every order 0..``max_order`` over A, C, G, T, each interpolated with the
    order below (see the module docstring).

    Counts are kept sparse (sorted keys of the seen (context, base) pairs), so order 12 costs
    memory in proportion to the training bases, not 4^12.

    Args:
        max_order: the highest context length fitted (≤ 12).
        concentration: β of every order; ``None`` (default) fits one per order by leave-one-out.
    """

    GRID = 2.0 ** np.arange(-2, 15)  # β candidates of the leave-one-out fit
    DENSE_MAX_ORDER = 9  # dense count tables up to here: 4^10 pairs, 8 MB at order 9 (4^13 = 0.5 GB at 12)

    def __init__(self, max_order: int = MAX_ORDER, concentration: float | None = None) -> None:
        _check_order(max_order)
        if concentration is not None and concentration <= 0:
            raise ValueError(f"concentration must be positive, got {concentration}")
        self.max_order, self.concentration = max_order, concentration
        self.order = max_order  # the order used by :meth:`bits_per_base` unless told otherwise
        self.tables: list[tuple[np.ndarray, ...]] = []  # per order: pair keys, pair n, ctx keys, ctx n
        self._dense: list[tuple[np.ndarray, np.ndarray]] = []  # per order ≤ DENSE_MAX_ORDER: n(c), n(c, x)
        self.betas = np.zeros(0)

    def fit(self, segments: list[np.ndarray], progress: bool | None = None) -> InterpolatedMarkov:
        """Count (context, base) pairs of every order on ``segments`` (N breaks contexts), then fit
        β per order. ``progress``: a bar on stderr (``None``: only on a terminal)."""
        from tqdm.auto import tqdm  # optional: tqdm progress bars

        self.tables, betas, loo, self._dense = [], [], np.full(0, 0.25), []
        for k in tqdm(range(self.max_order + 1), desc="Markov chain orders", unit="order",
                      disable=None if progress is None else not progress, file=sys.stderr, leave=False):
            parts = [_context_codes(seg, k) for seg in segments]
            keys = np.concatenate([c * 4 + t for c, t in parts] or [np.empty(0, np.int64)])
            pair, pair_n = np.unique(keys, return_counts=True)  # seen (context, base) pairs
            ctx, first = np.unique(pair // 4, return_index=True)  # seen contexts
            ctx_n = np.add.reduceat(pair_n, first) if len(pair) else np.empty(0, np.int64)
            self.tables.append((pair, pair_n.astype(np.float64), ctx, ctx_n.astype(np.float64)))
            parent = (np.full(len(pair), 0.25) if k == 0 else
                      loo[np.searchsorted(self.tables[k - 1][0], pair % 4**k)])  # p_{k−1} of each pair
            beta, loo = self._fit_beta(k, parent)
            betas.append(beta)
        self.betas = np.asarray(betas)
        return self

    def _fit_beta(self, k: int, parent: np.ndarray) -> tuple[float, np.ndarray]:
        """β of order k maximising the leave-one-out likelihood of the training bases, and the
        leave-one-out p_k of every seen pair (what order k + 1 interpolates with)."""
        pair, pair_n, ctx, ctx_n = self.tables[k]
        n_c = self._lookup(ctx, pair // 4, ctx_n)  # (P,) count of each pair's context
        candidates = self.GRID if self.concentration is None else [self.concentration]
        best, best_ll = float(candidates[0]), -np.inf
        for beta in candidates:
            ll = float((pair_n * np.log((pair_n - 1 + beta * parent) / (n_c - 1 + beta))).sum())
            if ll > best_ll:
                best, best_ll = float(beta), ll
        return best, (pair_n - 1 + best * parent) / (n_c - 1 + best)

    def _counts(self, k: int, ctx: np.ndarray, pair: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Training counts n(c) and n(c, x) of order k for context codes ``ctx`` and pair codes
        ``pair`` (0 where unseen). Orders ≤ :attr:`DENSE_MAX_ORDER` index a dense copy of the sparse
        table (built on first use: same values, several times faster than a sorted search)."""
        pair_keys, pair_n, ctx_keys, ctx_n = self.tables[k]
        if k > self.DENSE_MAX_ORDER:
            return self._lookup(ctx_keys, ctx, ctx_n), self._lookup(pair_keys, pair, pair_n)
        while len(self._dense) <= k:
            j = len(self._dense)
            pk, pn, ck, cn = self.tables[j]
            by_ctx, by_pair = np.zeros(4**j), np.zeros(4 ** (j + 1))  # (4^j,), (4^(j+1),)
            by_ctx[ck], by_pair[pk] = cn, pn
            self._dense.append((by_ctx, by_pair))
        by_ctx, by_pair = self._dense[k]
        return by_ctx[ctx], by_pair[pair]

    @staticmethod
    def _lookup(keys: np.ndarray, query: np.ndarray, values: np.ndarray) -> np.ndarray:
        """values[i] where keys[i] == query, else 0 (keys sorted)."""
        if len(keys) == 0:
            return np.zeros(len(query))
        i = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
        return np.where(keys[i] == query, values[i], 0.0)

    def level_probs(self, seq: np.ndarray, max_context: np.ndarray | None = None,
                    order: int | None = None) -> np.ndarray:
        """(order+1, n): row k holds p(seq[t] | up to k bases before t) of the order-k chain for
        every t; NaN where seq[t] is N. ``max_context`` (n,) caps the context of each position
        (e.g. its offset in a window); a position with fewer usable bases stops at that order."""
        order = self.max_order if order is None else order
        _check_order(order)
        if len(self.tables) <= order:
            raise ValueError(f"order {order} was not fitted (fit with max_order ≥ {order})")
        codes, run = _history(seq, order)  # (n, order+1), (n,)
        use = run if max_context is None else np.minimum(run, max_context)  # context each t may use
        target = codes[:, -1]
        prob = np.full(len(target), 0.25)
        ctx = np.zeros(len(target), dtype=np.int64)
        rows = np.empty((order + 1, len(target)))  # (K+1, n)
        for k in range(order + 1):
            if k:
                ctx = ctx + codes[:, order - k] * 4 ** (k - 1)  # add the k-th base back
            n_c, n_cx = self._counts(k, ctx, ctx * 4 + target)  # 0 for an unseen context: p_k = p_{k−1}
            beta = self.betas[k]
            prob = np.where(use >= k, (n_cx + beta * prob) / (n_c + beta), prob)  # fewer usable bases: stop
            rows[k] = prob
        return np.where(np.asarray(seq) < N_CODE, rows, np.nan)

    def position_probs(self, seq: np.ndarray, max_context: np.ndarray | None = None,
                       order: int | None = None) -> np.ndarray:
        """p(seq[t] | up to ``order`` bases before t) (n,) for every t (default: :attr:`order`)."""
        order = self.order if order is None else order
        return self.level_probs(seq, max_context, order)[order]

    def bits_per_base(self, segments: list[np.ndarray], order: int | None = None,
                      window: int | None = None) -> float:
        """Mean −log2 p over the A/C/G/T bases of ``segments`` by the order-``order`` chain (default
        :attr:`order`); with ``window`` = L, scored as a causal model tested on windows of L + 1
        bases at stride L sees them: each segment is cut into such windows, the first base of each
        segment is not scored and a base sees only the bases of its own window before it."""
        order = self.order if order is None else order
        if window is not None:
            return self.bits_by_window(segments, [window], order)[window]
        return float(self.bits_by_order(segments, order)[order])

    def bits_by_order(self, segments: list[np.ndarray], max_order: int | None = None) -> np.ndarray:
        """Bits/base (K+1,) of the chains of order 0..K (default :attr:`max_order`) in one pass, every
        base with all the bases before it in its segment (up to the order)."""
        max_order = self.max_order if max_order is None else max_order
        total, count = np.zeros(max_order + 1), 0
        for seg in segments:
            p = self.level_probs(np.asarray(seg), None, max_order)  # (K+1, n)
            ok = np.isfinite(p[0])
            total += -np.log2(p[:, ok]).sum(axis=1)
            count += int(ok.sum())
        return total / max(count, 1)

    def bits_by_window(self, segments: list[np.ndarray], windows: list[int],
                       order: int | None = None) -> dict[int, float]:
        """:meth:`bits_per_base` with ``window`` = each of ``windows`` (the same numbers), from one
        pass over the chain's levels: a base at offset c < ``order`` in its window takes level c of
        the unwindowed pass (the chain stops there, as a capped context does), every other base the
        full order."""
        order = self.order if order is None else order
        totals, counts = dict.fromkeys(windows, 0.0), dict.fromkeys(windows, 0)
        for seg in segments:
            seg = np.asarray(seg)
            levels = self.level_probs(seg, None, order)  # (K+1, n)
            t = np.arange(len(seg))  # (n,) position in the segment
            for w in windows:
                cap = np.where(t % w == 0, w, t % w)  # context bases in its window; base i·w ends window i−1
                p = levels[np.minimum(cap, order), t]  # (n,)
                p[0] = np.nan  # the first base of a segment is context only
                p[(len(seg) - 1) // w * w + 1 :] = np.nan  # past the last whole window
                ok = np.isfinite(p)
                totals[w] += float(-np.log2(p[ok]).sum())
                counts[w] += int(ok.sum())
        return {w: totals[w] / max(counts[w], 1) for w in windows}

    def select_order(self, segments: list[np.ndarray]) -> tuple[int, dict[int, float]]:
        """Choose the order on held-out ``segments`` by the one-standard-error rule (Breiman et al.,
        1984): the lowest order whose bits/base is within one standard error of the best order's
        (the error of the paired per-base difference). Plain argmin would pick among orders that
        only differ by noise (β large: they repeat the order below). The chosen order becomes
        :attr:`order`. Returns it and the bits/base of every order."""
        losses = []
        for seg in segments:
            p = self.level_probs(np.asarray(seg), None, self.max_order)  # (K+1, n)
            ok = np.isfinite(p[0])
            losses.append(-np.log2(p[:, ok]))
        loss = np.concatenate(losses, axis=1)  # (K+1, N) bits of every scored base
        means = loss.mean(axis=1)
        best = int(np.argmin(means))
        n = max(loss.shape[1], 1)
        for k in range(best + 1):
            diff = loss[k] - loss[best]  # (N,) paired per-base difference
            if diff.mean() <= diff.std() / np.sqrt(n):
                self.order = k
                break
        return self.order, {k: float(m) for k, m in enumerate(means)}


class MarkovBaselines(L.Callback):
    """After testing, log what a practitioner would use instead of the Transformer: interpolated
    Markov chains fitted on the train region, the order chosen on the validation region among
    0..``max_order``, scored on the test bases the model was tested on.

    Metrics: ``baseline/markov_order`` (the chosen order), ``baseline/markov_bits_per_base`` (the
    chosen chain on the test bases — the blocks spread over the test region that every test length
    scores, see :meth:`datamodules.DNADataModule.region_spans` — every base with its full context
    inside its block), ``baseline/markov_bits_per_base_L<n>`` for every test length n (the same chain
    on exactly the model's test windows of n tokens: a base sees only its own window, as the causal
    model does; single-base tokens only), ``baseline/markov<k>_bits_per_base`` for each of
    ``orders`` (order 0 = base composition, the trivial baseline) and
    ``baseline/markov_val_bits_by_order`` (step = order): the validation curve the order came from.

    Args:
        max_order: highest order considered (≤ 12).
        orders: fixed orders also reported (order 0 is base composition).
        progress: a progress bar on stderr while fitting (``None``: only on a terminal).
    """

    def __init__(self, max_order: int = MAX_ORDER, orders: list[int] = [0],  # noqa: B006
                 progress: bool | None = None) -> None:
        _check_order(max_order)
        if any(k < 0 or k > max_order for k in orders):
            raise ValueError(f"MarkovBaselines orders must be in 0..max_order={max_order}, got {orders}")
        self.max_order, self.orders, self.progress = max_order, list(orders), progress
        self.results: dict[str, float] = {}
        self.val_curve: dict[int, float] = {}

    def compute(self, dm, split: str = "test") -> dict[str, float]:
        """Fit, choose the order on validation and score the evaluated bases of ``split`` of datamodule
        ``dm`` (default the test bases; ``"val"``: the validation bases of
        ``eval_dataloader("val", n)``, which the order choice has seen — the whole validation region)."""
        chain = InterpolatedMarkov(self.max_order).fit(dm.region_codes("train"), self.progress)
        best, self.val_curve = chain.select_order(dm.region_codes("val"))
        test = dm.region_codes(split, dm.eval_span)  # the span the model was scored on
        fixed = chain.bits_by_order(test)
        out = {"baseline/markov_order": float(best), "baseline/markov_bits_per_base": float(fixed[best])}
        out.update({f"baseline/markov{k}_bits_per_base": float(fixed[k]) for k in self.orders})
        tok = dm.tokenizer
        if tok.k == 1 and tok.stride == 1 and getattr(dm, "next_token", False):
            by_length = chain.bits_by_window(test, list(dm.eval_lengths))
            out.update({f"baseline/markov_bits_per_base_L{n}": v for n, v in by_length.items()})
        return out

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = baseline_datamodule(trainer, "region_codes")
        if dm is None:
            return
        self.results = self.compute(dm)
        for logger in trainer.loggers:
            logger.log_metrics(self.results)
            for k, bits in self.val_curve.items():
                logger.log_metrics({"baseline/markov_val_bits_by_order": bits}, step=k)
