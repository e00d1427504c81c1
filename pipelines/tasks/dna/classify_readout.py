"""How the sequence classifier reads a crop: a convolutional stem, the crop's positions, and the pooling
of per-token class logits into the crop's logits (``model.init_args.readout``).

The classifier scores every token (a linear head on the encoder output, (B, T, C)) and pools those
scores with weights over the crop's tokens: uniform (``pool: mean``, the mean of the token logits, which
equals the head of the mean-pooled states), or a learned prior over the crop's positions (``pool:
tokens``: softmax of one learned logit per training position, so the model learns *where* in a crop the
evidence sits, e.g. at a promoter's start). The pooling is linear, so a crop's two-class logit is exactly
the weighted sum of its per-token logits: a whole genome window read once gives, at every base, the
score the classifier would give to a crop anchored there (``SequenceClassifier.token_logits``).

A long record can be read as fewer tokens (``max_tokens``): the stem then steps ``s`` bases at a time
(``s`` the smallest stride that leaves at most ``max_tokens`` tokens of the training crop), the encoder
attends over the stem's tokens at the positions of their centre bases, and every base gets the logit of
the token centred nearest it, so the per-base contract above still holds exactly. A k-mer composition
channel (``composition``) adds to every base's embedding the mean of learned k-mer vectors over the
training-length stretch centred on it: what a k-mer logistic regression reads, beside the positions.

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
        max_tokens: most tokens the encoder reads of a training crop: a crop longer than this is read
            with a strided stem (stride ``ceil(seq_len / max_tokens)``); 0: one token per base.
        composition: k of a k-mer composition channel (single-base tokens): each base's embedding
            gets the mean of learned k-mer vectors over the training-length stretch centred on it;
            0: none.
    """

    stem: int = 0
    pool: Pool = "mean"
    positions: Positions = "index"
    label_smoothing: float = 0.0
    max_tokens: int = 0
    composition: int = 0

    def __post_init__(self) -> None:
        if self.stem < 0 or (self.stem and self.stem % 2 == 0):
            raise PosencError(f"model.init_args.readout.stem: must be 0 or an odd width ≥ 1, got {self.stem}")
        for name, value, allowed in (("pool", self.pool, ("mean", "tokens")),
                                     ("positions", self.positions, ("index", "centre"))):
            if value not in allowed:
                raise PosencError(f"model.init_args.readout.{name}: must be one of {', '.join(allowed)}, "
                                  f"got {value!r}")
        if self.max_tokens < 0 or (self.max_tokens and not self.stem):
            raise PosencError(f"model.init_args.readout.max_tokens: must be 0, or ≥ 1 with a stem (the "
                              f"stem strides), got {self.max_tokens} with stem {self.stem}")
        if not 0 <= self.composition <= 6:
            raise PosencError(f"model.init_args.readout.composition: must be a k-mer length 0..6, "
                              f"got {self.composition}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise PosencError(f"model.init_args.readout.label_smoothing: must be in [0, 1), "
                              f"got {self.label_smoothing}")


class ConvStem(nn.Module):
    """x + GELU(Conv1d(x)) over the token embeddings, padding tokens zeroed first (zero beyond the ends,
    so the stem is translation-equivariant and reads a long window as it reads its crops). With a
    stride ``s``, output token j is centred on base ``j·s`` (its residual is that base's embedding).

    Args:
        d_model: embedding width D (in and out).
        width: kernel width in tokens (odd).
        stride: bases per output token.
    """

    def __init__(self, d_model: int, width: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, width, stride=stride, padding=width // 2)
        self.stride = stride

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        """``x`` (B, T, D), ``keep`` (B, T) bool (False at padding) → (B, ceil(T / stride), D)."""
        x = x * keep.unsqueeze(-1).to(x.dtype)  # (B, T, D)
        y = self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, D, T') → (B, T', D)
        return x[:, :: self.stride] + F.gelu(y)


def nearest_token(n_bases: int, stride: int, device: torch.device) -> Tensor:
    """For each of ``n_bases`` bases, the strided token (centred on base ``j·stride``) nearest it (n,)."""
    n_tokens = -(-n_bases // stride)
    return ((torch.arange(n_bases, device=device) + stride // 2) // stride).clamp(max=n_tokens - 1)


class Composition(nn.Module):
    """A k-mer composition channel: each base's k-mer (the k bases starting there; none where one is
    not A/C/G/T) has a learned vector, and each base gets the mean of those vectors over the ``length``
    bases centred on it (the k-mers inside the sequence only), as a k-mer logistic regression reads a
    record's composition. Translation-equivariant: a long window reads each base's own stretch.

    Args:
        d_model: vector width D.
        k: k-mer length (single-base tokens: ids 0–3 are A, C, G, T).
        length: the stretch, in bases (the training crop length).
    """

    def __init__(self, d_model: int, k: int, length: int) -> None:
        super().__init__()
        self.k, self.length = k, length
        self.vectors = nn.Embedding(4**k, d_model)
        nn.init.normal_(self.vectors.weight, std=0.02)

    def forward(self, tokens: Tensor) -> Tensor:
        """Tokens (B, T) → composition vectors (B, T, D)."""
        B, T = tokens.shape
        ids, valid = torch.zeros_like(tokens), torch.ones_like(tokens, dtype=torch.bool)
        for i in range(self.k):  # the k-mer starting at each base, base-4 (A0 C1 G2 T3)
            nxt = F.pad(tokens[:, i:], (0, i), value=4)  # (B, T): base t + i, past the end "N"
            valid &= nxt < 4
            ids = ids * 4 + nxt.clamp(max=3)
        v = self.vectors(ids) * valid.unsqueeze(-1).to(self.vectors.weight.dtype)  # (B, T, D)
        zero = v.new_zeros(B, 1, v.shape[-1])
        sums = torch.cat([zero, v.cumsum(1)], 1)  # (B, T + 1, D)
        counts = torch.cat([valid.new_zeros(B, 1, dtype=torch.long), valid.long().cumsum(1)], 1)  # (B, T+1)
        start = torch.arange(T, device=tokens.device) - self.length // 2  # (T,) each stretch's first base
        lo, hi = start.clamp(0, T), (start + self.length).clamp(0, T)  # (T,), (T,)
        n = (counts[:, hi] - counts[:, lo]).clamp(min=1).unsqueeze(-1).to(v.dtype)  # (B, T, 1)
        return (sums[:, hi] - sums[:, lo]) / n  # (B, T, D)


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
