"""How the length-extrapolation sweep scores each task: one adapter per LightningModule class."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch.nn.functional as F
from torch import Tensor

from posenc import PosencError

LN2 = math.log(2.0)


class TaskAdapter:
    """How the sweep scores one task: which datamodule option sets the test lengths, how a batch is
    scored, how many positions the model sees at a length. Chosen from the module's class."""

    metric = "loss"
    higher_is_better = False
    length_key = "eval_lengths"  # datamodule argument listing the test lengths
    length_unit = "tokens"
    position_label = "position in window"
    default_datamodule = ""

    def train_length(self, dm: Any) -> int:
        raise NotImplementedError

    def n_positions(self, module: Any, length: int) -> int:
        """Number of positions the model sees for a window of ``length`` (sets RoPE scale factors)."""
        return length

    def score(self, module: Any, batch: Any) -> tuple[float, float, Tensor, Tensor]:
        """(metric numerator, denominator, per-position numerator (P,), per-position count (P,))."""
        raise NotImplementedError

    def finish(self, total: float, count: float) -> float:
        return total / count

    def baselines(self, dm: Any) -> dict[str, float]:
        """Reference values of the metric on the same test data (no model), e.g. a Markov chain."""
        return {}

    def finish_curve(self, total: Tensor, count: Tensor) -> np.ndarray:
        c = count.double().numpy()
        return np.where(c > 0, total.double().numpy() / np.where(c > 0, c, 1.0), np.nan)


class LMAdapter(TaskAdapter):
    """Causal DNA LM: bits per base; the curve is bits of the next base at each window position."""

    metric = "bits_per_base"
    length_unit = "tokens of context"
    position_label = "position in window (bits/base of the next base)"
    default_datamodule = "datamodules.DNADataModule"

    def train_length(self, dm: Any) -> int:
        return int(dm.seq_len)

    def score(self, module: Any, batch: Tensor) -> tuple[float, float, Tensor, Tensor]:
        x, y = batch[:, :-1], batch[:, 1:]  # (B, T) inputs and next-token targets
        logits = module(x)  # (B, T, V)
        nll = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")  # (B, T)
        keep = (y != module.pad_id).to(nll.dtype)  # (B, T)
        per_pos = (nll * keep).sum(0) / LN2  # (T,) bits
        return float(per_pos.sum()), float(keep.sum()), per_pos.cpu(), keep.sum(0).cpu()

    def finish(self, total: float, count: float) -> float:
        return total / count  # per_pos is already in bits

    def baselines(self, dm: Any) -> dict[str, float]:
        from pipelines.tasks.markov import MarkovModel

        train, test = dm.region_codes("train"), dm.region_codes("test", dm.eval_span)
        return {f"markov{k}": MarkovModel(k).fit(train).bits_per_base(test) for k in (0, 5)}


class MLMAdapter(LMAdapter):
    """Masked DNA LM: bits per base on the masked tokens; the curve is bits at each window position."""

    position_label = "position in window (bits/base at masked positions)"
    default_datamodule = "datamodules.MaskedDNADataModule"

    def score(self, module: Any, batch: dict[str, Tensor]) -> tuple[float, float, Tensor, Tensor]:
        from datamodules.dna.tokenize import IGNORE_INDEX

        logits = module(batch["input"])  # (B, T, V)
        target = batch["target"]  # (B, T), IGNORE_INDEX where not masked
        nll = F.cross_entropy(
            logits.transpose(1, 2).float(), target, ignore_index=IGNORE_INDEX, reduction="none"
        )  # (B, T), 0 where ignored
        keep = (target != IGNORE_INDEX).to(nll.dtype)  # (B, T)
        per_pos = (nll * keep).sum(0) / LN2 / module.bases_per_token  # (T,) bits per base
        return float(per_pos.sum()), float(keep.sum()), per_pos.cpu(), keep.sum(0).cpu()


class ForecastAdapter(TaskAdapter):
    """Forecaster: MSE in the data's units over every lookback; the curve is MSE per forecast step."""

    metric = "mse"
    length_key = "eval_lookbacks"
    length_unit = "lookback steps"
    position_label = "forecast step (MSE)"
    default_datamodule = "datamodules.TimeSeriesDataModule"

    def train_length(self, dm: Any) -> int:
        return int(dm.lookback)

    def n_positions(self, module: Any, length: int) -> int:
        return length // module.patch_len + int(module.query is not None)  # patches + forecast token

    def score(self, module: Any, batch: dict[str, Tensor]) -> tuple[float, float, Tensor, Tensor]:
        pred = module.to_original(module.predict_batch(batch), batch)  # (B, H, C)
        err = pred - module.to_original(batch["y"], batch)  # (B, H, C)
        m = batch["y_mask"].to(err.dtype)  # (B, H, C)
        per_step = ((err**2) * m).sum(dim=(0, 2)).double()  # (H,)
        count = m.sum(dim=(0, 2)).double()  # (H,)
        return float(per_step.sum()), float(count.sum()), per_step.cpu(), count.cpu()

    def baselines(self, dm: Any) -> dict[str, float]:
        from pipelines.tasks.forecast_baselines import ForecastBaselines

        found = ForecastBaselines().compute(dm)  # same test windows at every lookback
        return {name: found[f"{name}_mse"] for name in ("seasonal_naive", "linear")}


def adapter_for(module: Any) -> TaskAdapter:
    """The adapter for ``module``'s task (by class), or :class:`PosencError` for unsupported tasks."""
    from pipelines.tasks.forecast import Forecaster
    from pipelines.tasks.lm import DNALanguageModel
    from pipelines.tasks.mlm import MaskedDNAModel

    if isinstance(module, DNALanguageModel):
        return LMAdapter()
    if isinstance(module, MaskedDNAModel):
        return MLMAdapter()
    if isinstance(module, Forecaster):
        return ForecastAdapter()
    raise PosencError(
        f"length extrapolation supports the DNA LM, masked LM and forecaster, not {type(module).__name__}"
    )
