"""How the sequence classifier reads a crop: a convolutional stem, the crop's positions, and the pooling
of per-token class logits into the crop's logits (``model.init_args.readout``).

The classifier scores every token (a linear head on the encoder output, (B, T, C)) and pools those
scores with weights over the crop's tokens: uniform (``pool: mean``, the mean of the token logits, which
equals the head of the mean-pooled states), or a learned prior over the crop's positions (``pool:
tokens``: softmax of one learned logit per training position, so the model learns *where* in a crop the
evidence sits, e.g. at a promoter's start). The pooling is linear, so a crop's two-class logit is exactly
the weighted sum of its per-token logits: a whole genome window read once gives, at every base, the
score the classifier would give to a crop anchored there (``SequenceClassifier.token_logits``).

Positions are passed to the encoder explicitly. ``positions: index`` numbers a crop's tokens 0..T−1;
``positions: centre`` numbers them relative to the centre of the crop's sequence (its non-padding
tokens), shifted so that a training-length crop keeps 0..L−1: a crop twice as long keeps its centre at
position L//2 and reaches out to −L/2 … 3L/2, so the centre, where a labelled site sits, has the
position it had in training at every length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc import PosencError

Pool = Literal["mean", "tokens"]
GAIN = 20.0  # PositionPrior: logits per unit of its parameter
Positions = Literal["index", "centre"]


@dataclass(frozen=True)
class Readout:
    """How the classifier reads a crop (``model.init_args.readout``).

    Attributes:
        stem: width (tokens, odd) of a convolution over the token embeddings before the encoder: motif
            detectors whose spacing the attention then relates; 0: none.
        pool: ``mean`` (uniform over the non-padding tokens) or ``tokens`` (a learned prior over the
            training crop's positions; tokens outside them get no weight).
        positions: ``index`` (0..T−1) or ``centre`` (relative to the sequence's centre, a
            training-length crop at 0..L−1).
        label_smoothing: label smoothing of the training cross-entropy.
    """

    stem: int = 0
    pool: Pool = "mean"
    positions: Positions = "index"
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        if self.stem < 0 or (self.stem and self.stem % 2 == 0):
            raise PosencError(f"model.init_args.readout.stem: must be 0 or an odd width ≥ 1, got {self.stem}")
        for name, value, allowed in (("pool", self.pool, ("mean", "tokens")),
                                     ("positions", self.positions, ("index", "centre"))):
            if value not in allowed:
                raise PosencError(f"model.init_args.readout.{name}: must be one of {', '.join(allowed)}, "
                                  f"got {value!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise PosencError(f"model.init_args.readout.label_smoothing: must be in [0, 1), "
                              f"got {self.label_smoothing}")


class ConvStem(nn.Module):
    """x + GELU(Conv1d(x)) over the token embeddings, padding tokens zeroed first (zero beyond the ends,
    so the stem is translation-equivariant and reads a long window as it reads its crops).

    Args:
        d_model: embedding width D (in and out).
        width: kernel width in tokens (odd).
    """

    def __init__(self, d_model: int, width: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, width, padding=width // 2)

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        """``x`` (B, T, D), ``keep`` (B, T) bool (False at padding) → (B, T, D)."""
        x = x * keep.unsqueeze(-1).to(x.dtype)  # (B, T, D)
        y = self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, D, T) → (B, T, D)
        return x + F.gelu(y)


class PositionPrior(nn.Module):
    """One learned logit per training position 0..L−1; a crop's pooling weights are their softmax over
    its tokens (positions outside 0..L−1 and padding get weight 0).

    The logits are ``gain · θ``: Adam moves each θ by about the learning rate per step whatever its
    gradient, so without a gain the prior would stay near uniform over a short run (measured: the
    largest weight of an 81-position prior 0.014 after 12 epochs, against 0.012 uniform).

    Args:
        length: L, the training crop length in tokens.
        gain: the factor between θ and the logits.
    """

    def __init__(self, length: int, gain: float = GAIN) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.zeros(length))
        self.gain = gain

    @property
    def logits(self) -> Tensor:
        """The prior's logits (L,)."""
        return self.gain * self.theta

    def forward(self, pos: Tensor, keep: Tensor) -> Tensor:
        """Weights (B, T) summing to 1 over each row's weighted tokens (0 where none is), for positions
        ``pos`` (T,) or (B, T) and ``keep`` (B, T)."""
        L = self.logits.shape[0]
        inside = (pos >= 0) & (pos < L)  # (T,) or (B, T)
        scores = self.logits[pos.long().clamp(0, L - 1)].masked_fill(~inside, float("-inf"))
        scores = scores.expand(keep.shape).masked_fill(~keep, float("-inf"))  # (B, T)
        return torch.nan_to_num(scores.softmax(-1), nan=0.0)


def mean_weights(keep: Tensor) -> Tensor:
    """Uniform weights (B, T) over the non-padding tokens ``keep`` (B, T)."""
    w = keep.to(torch.get_default_dtype())
    return w / w.sum(-1, keepdim=True).clamp(min=1.0)


def crop_positions(tokens: Tensor, pad_id: int, mode: Positions, length: int | None) -> Tensor:
    """Positions of a crop's tokens (B, T): (T,) indices, or with ``mode="centre"`` (T,) or (B, T)
    positions relative to each row's sequence centre (its non-padding tokens, which come first), plus
    ``length // 2`` so that a full crop of the training length ``length`` sits at 0..length−1."""
    T = tokens.shape[1]
    index = torch.arange(T, device=tokens.device)  # (T,)
    if mode == "index":
        return index
    if length is None:
        raise PosencError("model.init_args.readout.positions: 'centre' needs model.init_args.seq_len "
                          "(linked from data.init_args.windows.seq_len)")
    n = (tokens != pad_id).sum(-1)  # (B,) sequence tokens per row
    if bool((n == T).all()):
        return index - T // 2 + length // 2  # (T,)
    return index.unsqueeze(0) - (n // 2).unsqueeze(1) + length // 2  # (B, T)
