"""Causal (next-base) DNA language model reporting bits per base."""

from __future__ import annotations

import math
import sys
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from pipelines.tasks.base import TaskAdapter, log_by_length, positions
from pipelines.tasks.distributed import EpochMeans, sum_tables, union
from pipelines.tasks.dna.base import DNATask
from pipelines.tasks.dna.markov import MarkovBaselines, MarkovModel
from pipelines.tasks.dna.predict import predict_lm
from pipelines.tasks.dna.whole_window import log_run_lengths
from pipelines.tracking.store import mlflow_loggers
from posenc import PosencError, PositionOutOfRange
from posenc.positions import RandomizedPositions

LN2 = math.log(2.0)


class LMAdapter(TaskAdapter):
    """Causal DNA LM in the length sweep: bits per base; the curve is bits of the next base at each
    window position; baselines are Markov chains fitted on the train region."""

    metric = "bits_per_base"
    length_unit = "tokens of context"
    position_label = "position in window (bits/base of the next base)"
    splits = ("test", "val")  # genome datamodules: eval_dataloader("val", n); baselines on region_codes

    scores_windows = True  # bits add up over windows: the sweep sums them per block of the split

    def score_windows(self, module: Any, batch: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Bits (B,) and scored targets (B,) per window (float64; targets equal to the pad token are
        not scored), and per position (T,), of whole windows (B, T + 1): every prediction sees all
        the tokens before it (never sliding chunks)."""
        x, y = batch[:, :-1], batch[:, 1:]  # (B, T) inputs and next-token targets
        logits = module(x, positions(x.shape[1], x.device))  # (B, T, V); explicit positions: one pass
        nll = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")  # (B, T)
        keep = (y != module.pad_id).double()  # (B, T)
        bits = nll.double() * keep / LN2  # (B, T)
        return bits.sum(1).cpu(), keep.sum(1).cpu(), bits.sum(0).cpu(), keep.sum(0).cpu()

    def baselines(self, dm: Any, split: str = "test") -> dict[str, float]:
        """Order 0 and the best interpolated chain (fitted on train, order chosen on the validation
        region, as ``make train`` logs it) on the evaluated bases of ``split``, and that chain on the
        windows of every length n (``markov_best_L<n>``: a base sees only its own window, as the model
        does). With ``split="val"`` the chain's order was chosen on a region holding those very bases,
        so it is slightly favoured there (no model choice is made on it)."""

        found = MarkovBaselines(progress=False).compute(dm, split)
        prefix = "baseline/markov_bits_per_base_L"
        return {"markov0": found["baseline/markov0_bits_per_base"],
                "markov_best": found["baseline/markov_bits_per_base"],
                **{f"markov_best_L{k[len(prefix):]}": v for k, v in found.items() if k.startswith(prefix)}}

    trivial_name = "order-0 Markov"  # base composition of the train region

    def trivial_baseline(self, dm: Any, split: str = "test") -> float:
        """Order-0 Markov fitted on the train region, on the bases of ``split`` every length scores
        (:meth:`trivial_blocks` summed: the target bases of the windows, not the context-only first
        base of each span; N bases are not scored)."""
        if hasattr(dm, "reference"):  # a synthetic process knows its own (datamodules.synthetic)
            return float(dm.reference(int(dm.seq_len))["trivial"])
        blocks = self.trivial_blocks(dm, split)
        if blocks is None:  # a datamodule without blocks: every base of the evaluated span

            scored = dm.region_codes(split, dm.eval_span)
            return MarkovModel(0).fit(dm.region_codes("train")).bits_per_base(scored)
        return float(blocks[:, 0].sum() / max(blocks[:, 1].sum(), 1.0))

    def trivial_blocks(self, dm: Any, split: str = "test") -> np.ndarray | None:
        """Order-0 Markov (fitted on train): (bits, bases) per bootstrap block of ``split``
        (``dm.block_codes``), over exactly the bases the windows' targets cover."""
        if hasattr(dm, "reference") or not hasattr(dm, "block_codes"):
            return None

        chain = MarkovModel(0).fit(dm.region_codes("train"))
        return np.array([chain.bits_and_count(segments) for segments in dm.block_codes(split)],
                        dtype=np.float64).reshape(-1, 2)  # (K, 2)


class DNALanguageModel(DNATask):
    """Next-base prediction over windows of a genome; metric: bits per base.

    The test loaders (one per evaluation length, all over the same test bases, see
    :meth:`datamodules.DNADataModule.test_dataloader`) give the per-length extrapolation check.
    Every length is scored on **whole windows** (each prediction sees every token of its window
    before it, at positions 0..n−1): ``test/bits_per_base_whole_L<n>``, also logged as
    ``test/bits_per_base_L<n>`` (the same number, the older name), as
    ``test/bits_per_base_by_length`` (step = n) and, at the shortest length, ``test/bits_per_base``.
    Lengths the scheme does not define (learned PE past ``max_len``) are recorded as undefined.

    Sliding-window inference (an option, never the extrapolation score): with ``context`` = C, a
    window longer than C tokens can be scored (in eval mode) as overlapping chunks of C tokens at
    stride S: the first chunk predicts its C tokens, every later one only its last S, so each
    prediction after the first chunk sees between C − S and C tokens of context — never more than
    the model may have been trained on. Chunks are batched (cost ≈ C / S forwards per token).
    :class:`SelectContext` chooses C on validation windows. When C is set the test also logs
    ``test/bits_per_base_sliding_L<n>`` at every length (equal to the whole-window score where
    n ≤ C). :meth:`forward` without positions (prediction) uses the sliding chunks.

    Args:
        vocab_size: token vocabulary (linked from the datamodule).
        pad_id: padding token id; targets equal to it are not scored.
        context: most tokens one prediction sees at inference (``None``: the whole window).
        context_stride: S, tokens predicted per chunk after the first (default C // 2).
        train_positions: randomized positions (:class:`posenc.positions.RandomizedPositions`, e.g.
            ``{max_position: 8192}``): each training window sits at a sorted random sample of distinct
            positions from [0, max_position); outside training, windows sit where its ``eval`` says
            (default: sampled the same way from a fixed seed, as Ruoss et al. test). ``None``: 0..T−1.
        **kwargs: backbone and optimiser arguments of :class:`~pipelines.tasks.base.TaskModule`.
    """

    causal = True
    task_name = "dna_lm"
    adapter = LMAdapter()
    predictor = staticmethod(predict_lm)
    default_datamodule = "datamodules.DNADataModule"

    def __init__(self, vocab_size: int = 6, pad_id: int = 5, context: int | None = None,
                 context_stride: int | None = None, train_positions: RandomizedPositions | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.embedding = self.embed_tokens(vocab_size)
        self.head = nn.Linear(self.d_model, vocab_size)
        self.pad_id = pad_id
        self.set_context(context, context_stride)
        self.train_positions = RandomizedPositions.coerce(train_positions)
        if self.train_positions is not None:
            self.train_positions = self.train_positions.resolved()  # the seed is saved, not re-drawn
            self.train_positions.check(self.pe)
        saved = None if self.train_positions is None else self.train_positions.as_dict()
        self._save_hparams(vocab_size=vocab_size, pad_id=pad_id, context=context,
                           context_stride=context_stride, train_positions=saved)
        self._test_sums: dict[int, list[float]] = {}
        self._sliding_sums: dict[int, list[float]] = {}
        self._undefined: set[int] = set()  # whole windows
        self._sliding_undefined: set[int] = set()
        self._val = EpochMeans()  # Σ bits / Σ bases over every rank's shard (exact under DDP)

    def set_context(self, context: int | None, stride: int | None = None) -> None:
        """Set the inference context C (``None``: whole windows) and the chunk stride S (C // 2)."""
        if context is not None and context < 2:
            raise PosencError(f"model.context must be at least 2 tokens (or null), got {context}")
        stride = None if context is None else (stride or max(1, context // 2))
        if stride is not None and not 1 <= stride <= context:
            raise PosencError(f"model.context_stride must be in 1..context={context}, got {stride}")
        self.context, self.context_stride = context, stride

    def forward(self, tokens: Tensor, pos: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) for tokens (B, T) at positions ``pos`` (default 0..T-1); in eval mode
        a window longer than :attr:`context` is scored in chunks (see the class docstring)."""
        T = tokens.shape[1]
        if pos is None and self.context is not None and T > self.context and not self.training:
            return self._chunked(tokens)
        pos = self._default_positions(tokens) if pos is None else pos
        h = self.backbone(self.embedding(tokens), pos, self.padding(tokens))  # (B, T, D)
        return self.head(h)

    def _default_positions(self, tokens: Tensor) -> Tensor:
        """Positions (T,) of windows (B, T) given without any: 0..T−1, or under randomized positions
        outside training what :meth:`RandomizedPositions.evaluate` gives."""
        T = tokens.shape[1]
        if self.train_positions is None or self.training:
            return positions(T, tokens.device)
        return self.train_positions.evaluate(T, tokens.device)

    def _chunked(self, tokens: Tensor) -> Tensor:
        """Sliding-window logits (B, T, V): chunk j ends at e_j = C + j·S (the last at T) and
        predicts tokens [e_{j−1}, e_j) from the C tokens before e_j."""
        B, T = tokens.shape
        C, S = self.context, self.context_stride
        ends = list(range(C, T, S)) + [T]  # chunk ends
        starts = [e - C for e in ends]
        chunks = torch.stack([tokens[:, a : a + C] for a in starts], dim=1).flatten(0, 1)  # (B·J, C)
        logits = self(chunks, positions(C, tokens.device)).unflatten(0, (B, len(ends)))  # (B, J, C, V)
        parts = [logits[:, 0]]  # (B, C, V): the first chunk predicts all of its tokens
        for j in range(1, len(ends)):
            parts.append(logits[:, j, C - (ends[j] - ends[j - 1]) :])  # (B, e_j − e_{j−1}, V)
        return torch.cat(parts, dim=1)  # (B, T, V)

    def _nll(self, window: Tensor, pos: Tensor | None = None, sliding: bool = False) -> tuple[Tensor, Tensor]:
        """Summed next-base NLL (nats) and number of scored targets for windows (B, T+1): the whole
        window in one pass at positions ``pos`` of the T inputs (default :meth:`_default_positions`),
        or with ``sliding`` (eval mode) as :meth:`forward` chunks it."""
        x, y = window[:, :-1], window[:, 1:]
        if sliding:
            logits = self(x)  # (B, T, V)
        else:
            logits = self(x, self._default_positions(x) if pos is None else pos)  # (B, T, V)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none")
        keep = (y.flatten() != self.pad_id).float()
        return (nll * keep).sum(), keep.sum()

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        total, count = self._nll(batch, self.training_positions(batch, batch_idx))
        loss = total / count.clamp(min=1)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/bits_per_base", loss / LN2)
        return loss

    def training_positions(self, batch: Tensor, batch_idx: int = 0) -> Tensor:
        """Positions of the inputs of training windows ``batch`` (B, T+1): 0..T−1 (T,), or under
        randomized positions one sample per window (B, T), drawn from (seed, step, batch, rank)."""
        B, T = batch.shape[0], batch.shape[1] - 1
        if self.train_positions is None:
            return positions(T, batch.device)
        key = (self.global_step, batch_idx, self.global_rank)
        return self.train_positions.train(T, B, *key, device=batch.device)

    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        total, count = self._nll(batch)
        self._val.add("val/bits_per_base", total / LN2, count)

    def on_validation_epoch_end(self) -> None:
        self._val.log(self, prog_bar=True)

    # ------------------------------------------------------------------ per-length test
    def on_test_epoch_start(self) -> None:
        self._test_sums, self._sliding_sums, self._undefined, self._sliding_undefined = {}, {}, set(), set()

    def test_step(self, batch: Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        length = batch.shape[1] - 1
        whole = self._test_nll(batch, length, sliding=False)
        slide = self._test_nll(batch, length, sliding=True) if self.sliding_differs(length) else whole
        for table, found in ((self._test_sums, whole), (self._sliding_sums, slide)):
            if found is not None:
                acc = table.setdefault(length, [0.0, 0.0])
                acc[0] += float(found[0])
                acc[1] += float(found[1])

    def _test_nll(self, batch: Tensor, length: int, sliding: bool) -> tuple[Tensor, Tensor] | None:
        """:meth:`_nll`, or ``None`` once positions of ``length`` proved undefined (a learned table
        shorter than the window is undefined on whole windows yet defined in sliding chunks)."""
        undefined = self._sliding_undefined if sliding else self._undefined
        if length in undefined:
            return None
        try:
            return self._nll(batch, sliding=sliding)
        except PositionOutOfRange:
            undefined.add(length)
            return None

    def sliding_differs(self, length: int) -> bool:
        """Whether sliding-window inference scores windows of ``length`` tokens differently."""
        return self.context is not None and length > self.context

    def on_test_epoch_end(self) -> None:
        self._test_sums = sum_tables(self._test_sums)  # every rank's shard (DDP): sums, then ratios
        self._sliding_sums = sum_tables(self._sliding_sums)
        self._undefined, self._sliding_undefined = union(self._undefined), union(self._sliding_undefined)
        results = self.length_results()
        if not results or self.logger is None:
            return
        log_by_length(self.logger, {n: {"bits_per_base": v} for n, v in results.items()}, self._undefined)
        metrics = {"test/bits_per_base": results[min(results)],
                   **{f"test/bits_per_base_whole_L{n}": v for n, v in results.items()}}
        if self.context is not None:  # sliding inference configured or chosen: labelled as such
            metrics.update({f"test/bits_per_base_sliding_L{n}": v for n, v in self.sliding_results().items()})
        self.logger.log_metrics(metrics)

    def on_test_end(self) -> None:
        """The whole-window table beside the chain on the same windows, printed, and its figure logged to
        the run (:func:`~pipelines.tasks.dna.whole_window.log_run_lengths`; the chain's scores are
        logged by :class:`MarkovBaselines`, whose hook runs first)."""
        train_length = getattr(self.trainer.datamodule, "seq_len", None)
        for logger in mlflow_loggers(self.trainer) if train_length and self.trainer.is_global_zero else []:
            table = log_run_lengths(logger.experiment, logger.run_id, train_length, self.backbone.window)
            if table:
                print(table, file=sys.stderr)

    def length_results(self) -> dict[int, float]:
        """Whole-window bits/base per test length from the last test epoch (undefined lengths omitted)."""
        return {n: s / c / LN2 for n, (s, c) in self._test_sums.items() if c > 0}

    def sliding_results(self) -> dict[int, float]:
        """Sliding-window bits/base per test length (= whole where the window fits the context)."""
        return {n: s / c / LN2 for n, (s, c) in self._sliding_sums.items() if c > 0}

    @property
    def undefined_lengths(self) -> list[int]:
        """Lengths whose whole windows the encoding does not define (last test epoch)."""
        return sorted(self._undefined)



class SelectContext(L.Callback):
    """Before testing, choose the causal LM's sliding-window inference context
    (:meth:`DNALanguageModel.set_context`) on the **validation** split — an option: the test scores
    whole windows regardless and adds ``test/bits_per_base_sliding_L<n>`` when a context is chosen.
    Every candidate scores validation windows as long as the longest test length, and the lowest
    bits/base wins (ties: the earlier candidate); a candidate the
    encoding does not define (positions past a learned table) is skipped. The test split is not
    consulted. Logged: ``inference/context`` (param; ``full`` = whole windows) and
    ``val/bits_per_base_context_<c>`` per candidate.

    Args:
        factors: candidate contexts as multiples of the training length; ``null`` = whole windows.
    """

    def __init__(self, factors: list[float | None] = [None, 1.0, 2.0]) -> None:  # noqa: B006
        if not factors or any(f is not None and f <= 0 for f in factors):
            raise PosencError(f"SelectContext factors must be positive numbers or null, got {factors}")
        self.factors = list(factors)
        self.scores: dict[int | None, float] = {}
        self.chosen: int | None = None

    def candidates(self, train_length: int, longest: int) -> list[int | None]:
        out: list[int | None] = []
        for f in self.factors:
            c = None if f is None or round(f * train_length) >= longest else max(2, round(f * train_length))
            if c not in out:
                out.append(c)
        return out

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if not isinstance(pl_module, DNALanguageModel) or not hasattr(dm, "eval_dataloader"):
            return
        longest = max(dm.eval_lengths)
        if longest <= dm.seq_len:
            return
        try:
            loader = dm.eval_dataloader("val", longest)
        except PosencError as exc:  # a validation region shorter than the longest test window
            rank_zero_warn(f"SelectContext: no validation window of {longest} tokens ({exc}); "
                           "testing with the model's context as configured")
            return
        pl_module.eval()
        self.scores = {}
        for c in self.candidates(dm.seq_len, longest):
            pl_module.set_context(c)
            try:
                self.scores[c] = validation_bits(pl_module, loader)
            except PositionOutOfRange:  # e.g. a learned table as long as the training windows
                continue
        if not self.scores:
            pl_module.set_context(None)
            return
        self.chosen = min(self.scores, key=self.scores.get)
        pl_module.set_context(self.chosen)
        pl_module.hparams["context"] = self.chosen
        for logger in trainer.loggers:
            logger.log_hyperparams({"inference/context": "full" if self.chosen is None else self.chosen})
            logger.log_metrics({f"val/bits_per_base_context_{'full' if c is None else c}_L{longest}": v
                                for c, v in self.scores.items()})


@torch.no_grad()
def validation_bits(module: DNALanguageModel, loader: Any) -> float:
    """Bits/base of ``module`` (as it is set now) over the windows of ``loader``."""
    total = count = 0.0
    for batch in loader:
        s, c = module._nll(batch.to(module.device), sliding=True)
        total, count = total + float(s), count + float(c)
    return total / max(count, 1.0) / LN2
