"""Causal (next-base) DNA language model reporting bits per base."""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from pipelines.inference.dna import predict_lm
from pipelines.tasks.base import TaskAdapter, positions
from pipelines.tasks.dna import DNATask
from posenc import PositionOutOfRange

LN2 = math.log(2.0)


class LMAdapter(TaskAdapter):
    """Causal DNA LM in the length sweep: bits per base; the curve is bits of the next base at each
    window position; baselines are Markov chains fitted on the train region."""

    metric = "bits_per_base"
    length_unit = "tokens of context"
    position_label = "position in window (bits/base of the next base)"

    def train_length(self, dm: Any) -> int:
        return int(dm.seq_len)

    def score(self, module: Any, batch: Tensor) -> tuple[float, float, Tensor, Tensor]:
        x, y = batch[:, :-1], batch[:, 1:]  # (B, T) inputs and next-token targets
        logits = module(x)  # (B, T, V)
        nll = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")  # (B, T)
        keep = (y != module.pad_id).to(nll.dtype)  # (B, T)
        per_pos = (nll * keep).sum(0) / LN2  # (T,) bits
        return float(per_pos.sum()), float(keep.sum()), per_pos.cpu(), keep.sum(0).cpu()

    def baselines(self, dm: Any) -> dict[str, float]:
        from pipelines.tasks.markov import MarkovModel

        train, test = dm.region_codes("train"), dm.region_codes("test", dm.eval_span)
        return {f"markov{k}": MarkovModel(k).fit(train).bits_per_base(test) for k in (0, 5)}

    trivial_name = "order-0 Markov"  # base composition of the train region

    def trivial_baseline(self, dm: Any) -> float:
        from pipelines.tasks.markov import MarkovModel

        test = dm.region_codes("test", dm.eval_span)
        return MarkovModel(0).fit(dm.region_codes("train")).bits_per_base(test)


class DNALanguageModel(DNATask):
    """Next-base prediction over windows of a genome; metric: bits per base.

    The test loaders (one per evaluation length) give the per-length extrapolation check:
    bits/base at each length is logged as ``test/bits_per_base_by_length`` with step = length.
    Lengths the scheme does not define (learned PE past ``max_len``) are recorded as undefined.

    Args:
        vocab_size: token vocabulary (linked from the datamodule).
        pad_id: padding token id; targets equal to it are not scored.
        **kwargs: backbone and optimiser arguments of :class:`~pipelines.tasks.base.TaskModule`.
    """

    causal = True
    task_name = "dna_lm"
    adapter = LMAdapter()
    predictor = staticmethod(predict_lm)
    default_datamodule = "datamodules.DNADataModule"

    def __init__(self, vocab_size: int = 6, pad_id: int = 5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.embedding = self.embed_tokens(vocab_size)
        self.head = nn.Linear(self.d_model, vocab_size)
        self.pad_id = pad_id
        self._save_hparams(vocab_size=vocab_size, pad_id=pad_id)
        self._test_sums: dict[int, list[float]] = {}
        self._undefined: set[int] = set()

    def forward(self, tokens: Tensor, pos: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) for tokens (B, T) at positions ``pos`` (default 0..T-1)."""
        pos = positions(tokens.shape[1], tokens.device) if pos is None else pos
        h = self.backbone(self.embedding(tokens), pos, self.padding(tokens))  # (B, T, D)
        return self.head(h)

    def _nll(self, window: Tensor) -> tuple[Tensor, Tensor]:
        """Summed next-base NLL (nats) and number of scored targets for windows (B, T+1)."""
        x, y = window[:, :-1], window[:, 1:]
        logits = self(x)  # (B, T, V)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none")
        keep = (y.flatten() != self.pad_id).float()
        return (nll * keep).sum(), keep.sum()

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        total, count = self._nll(batch)
        loss = total / count.clamp(min=1)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/bits_per_base", loss / LN2)
        return loss

    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        total, count = self._nll(batch)
        self.log("val/bits_per_base", total / count / LN2, prog_bar=True,
                 reduce_fx="mean", batch_size=int(count))

    # ------------------------------------------------------------------ per-length test
    def on_test_epoch_start(self) -> None:
        self._test_sums, self._undefined = {}, set()

    def test_step(self, batch: Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        length = batch.shape[1] - 1
        if length in self._undefined:
            return
        try:
            total, count = self._nll(batch)
        except PositionOutOfRange:
            self._undefined.add(length)
            return
        acc = self._test_sums.setdefault(length, [0.0, 0.0])
        acc[0] += float(total)
        acc[1] += float(count)

    def on_test_epoch_end(self) -> None:
        results = self.length_results()
        if not results:
            return
        if self.logger is not None:
            self.logger.log_metrics({"test/bits_per_base": results[min(results)]})
            for length, bpb in sorted(results.items()):
                self.logger.log_metrics({"test/bits_per_base_by_length": bpb}, step=length)
                self.logger.log_metrics({f"test/bits_per_base_L{length}": bpb})
            if self._undefined and hasattr(self.logger, "experiment"):
                undefined = ",".join(str(n) for n in sorted(self._undefined))
                self.logger.log_hyperparams({"extrapolation/undefined_lengths": undefined})

    def length_results(self) -> dict[int, float]:
        """Bits/base per test length from the last test epoch (undefined lengths omitted)."""
        return {n: s / c / LN2 for n, (s, c) in self._test_sums.items() if c > 0}

    @property
    def undefined_lengths(self) -> list[int]:
        return sorted(self._undefined)

