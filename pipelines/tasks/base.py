"""What every task's LightningModule shares: the backbone, the encoding, the optimizer."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor

from pipelines.model.transformer import Transformer
from posenc import PosencError, PositionalEncoding, PositionOutOfRange, build_encoding

EncodingFactory = Callable[[int, int], PositionalEncoding]


class TaskModule(L.LightningModule):
    """Base LightningModule: builds the Transformer with its positional encoding.

    Hyperparameters stay primitive: the encoding is stored as its ``{class_path, init_args}``
    spec, so checkpoints load with ``torch.load(weights_only=True)`` and rebuild the same scheme.

    Args:
        d_model: model width.
        n_heads: attention heads.
        n_layers: Transformer blocks.
        pe: the positional encoding, given as a class (YAML ``class_path``/``init_args`` without
            d_model/n_heads, which come from this model); ``None`` means no encoding.
        d_ff: MLP width (default 4·d_model).
        dropout: dropout rate.
        scale_embedding: multiply token embeddings by √d_model before the encoding.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up steps before cosine decay.
    """

    causal: bool = False
    task_name: str = "task"

    def __init__(
        self,
        d_model: int = 128,
        n_heads: int = 8,
        n_layers: int = 4,
        pe: EncodingFactory | None = None,
        d_ff: int | None = None,
        dropout: float = 0.0,
        scale_embedding: bool = False,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
    ) -> None:
        super().__init__()
        self._base_hparams = {
            "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, "d_ff": d_ff,
            "dropout": dropout, "scale_embedding": scale_embedding, "lr": lr,
            "weight_decay": weight_decay, "warmup_steps": warmup_steps,
        }
        encoding = build_encoding(pe, d_model, n_heads)
        self.backbone = Transformer(d_model, n_heads, n_layers, encoding, d_ff, dropout,
                                    causal=self.causal, scale_embedding=scale_embedding)

    def _save_hparams(self, **task_hparams: Any) -> None:
        """Save all hyperparameters, the encoding as its primitive spec (call once, from the task)."""
        hp = {**self._base_hparams, **task_hparams, "pe": self.pe.spec()}
        self.save_hyperparameters(hp)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["posenc_task"] = self.task_name

    @property
    def pe(self) -> PositionalEncoding:
        return self.backbone.pe

    def predict(self, data: Any, **kwargs: Any) -> Any:
        """The task's predictions on new data as a DataFrame (see :mod:`pipelines.inference.dna`)."""
        from pipelines.inference.loading import predict

        return predict(self, data, **kwargs)

    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2 and "pe." not in n]
        rest = [p for n, p in self.named_parameters() if not (p.dim() >= 2 and "pe." not in n)]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warm = min(self.hparams.warmup_steps, total // 2)

        def schedule(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            frac = (step - warm) / max(1, total - warm)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def check_task(checkpoint: dict[str, Any], expected: str, source: str) -> None:
    """Raise a clear error when a checkpoint was trained for another task."""
    got = checkpoint.get("posenc_task")
    if got != expected:
        raise PosencError(f"{source}: checkpoint is for task {got!r}, expected {expected!r}")


def positions(length: int, device: torch.device) -> Tensor:
    """Integer positions 0..length-1 (T,), passed explicitly to the model."""
    return torch.arange(length, device=device)


__all__ = ["EncodingFactory", "PositionOutOfRange", "TaskModule", "check_task", "positions"]
