"""Randomized positions for training (Ruoss et al., 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers").

A model trained on windows of T tokens at positions 0..T−1 meets positions T, T + 1, … (and
distances ≥ T) for the first time when it is tested longer. Randomized positions instead give the
T tokens of each training window a sorted uniform random sample of T *distinct* integers from
[0, L_max), with L_max at least the longest test length: every position and distance the test
will use is seen in training, while the window stays short. The order of the tokens is kept (the
sample is sorted), only the gaps between neighbours vary.

Evaluation follows the paper's code (google-deepmind/randomized_positional_encodings, whose model
draws its positions in every forward and whose length sweep feeds it a fixed-seed key): a test
window of length M ≤ L_max also sits at a sorted random subset of [0, L_max), here one fixed-seed
draw per length shared by its windows; a window of L_max tokens (or more) gets 0..M − 1.
:attr:`RandomizedPositions.eval` = ``"contiguous"`` tests at 0..M − 1 at every length instead.
Training draws one sample per window (the paper's code shares one per batch).

Positions stay explicit tensors (``posenc`` never infers them from a length): :func:`sample_positions`
returns them, and the caller passes them to the model like any others.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.base import PosencError, PositionalEncoding

__all__ = ["RandomizedPositions", "mixed_seed", "sample_positions"]


def sample_positions(length: int, max_position: int, batch: int | None = None,
                     generator: torch.Generator | None = None,
                     device: torch.device | str | None = None) -> Tensor:
    """A sorted uniform random sample of ``length`` distinct integers from [0, ``max_position``).

    Every subset of ``length`` positions is equally likely (the ``length`` largest of
    ``max_position`` i.i.d. uniform keys mark a uniform random subset). The draw is made on the CPU
    with ``generator``, so the same seed gives the same positions on every device; cost
    O(batch · max_position).

    Args:
        length: T, the number of positions (1 ≤ T ≤ ``max_position``).
        max_position: L_max, one past the largest position that may be drawn.
        batch: B for one independent sample per row, shape (B, T); ``None``: one sample, shape (T,).
        generator: a CPU generator (``None``: torch's default one).
        device: where the positions are returned.

    Returns:
        int64 positions, strictly increasing along the last dimension.
    """
    if not 1 <= length <= max_position:
        raise PosencError(f"cannot sample {length} distinct positions from [0, {max_position}): "
                          f"need 1 <= length <= max_position")
    rows = 1 if batch is None else batch
    if rows < 1:
        raise PosencError(f"batch must be >= 1 (or None), got {batch}")
    keys = torch.rand(rows, max_position, generator=generator)  # (B, L_max) i.i.d. uniform
    pos = keys.topk(length, dim=-1, sorted=False).indices.sort(dim=-1).values  # (B, T)
    pos = pos if batch is not None else pos[0]  # (B, T) or (T,)
    return pos.to(device) if device is not None else pos


def mixed_seed(*parts: int) -> int:
    """A 63-bit seed from integers (a base seed, a step, a rank…): stable across processes and runs."""
    digest = hashlib.blake2b(":".join(str(int(p)) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@dataclass(frozen=True)
class RandomizedPositions:
    """Training (and by default test) positions drawn from a longer range than the window.

    Attributes:
        max_position: L_max: positions are drawn from [0, L_max); at least the longest test length
            (e.g. 64 × the training length).
        eval: positions outside training: ``"sampled"`` (the paper's protocol: a sorted random
            subset of [0, L_max) from a fixed seed per length; windows of L_max tokens or more get
            0..M − 1) or ``"contiguous"`` (always 0..M − 1).
        seed: base seed of the draws; ``None``: the run's torch seed (``seed_everything``), fixed
            when the model is built.
    """

    max_position: int
    eval: Literal["sampled", "contiguous"] = "sampled"
    seed: int | None = None

    def __post_init__(self) -> None:
        mp = self.max_position
        if not isinstance(mp, int) or isinstance(mp, bool) or mp < 2:
            raise PosencError(f"train_positions.max_position must be an integer >= 2, got {mp!r}")
        if self.eval not in ("sampled", "contiguous"):
            raise PosencError(f"train_positions.eval must be 'sampled' or 'contiguous', got {self.eval!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise PosencError(f"train_positions.seed must be an integer or null, got {self.seed!r}")

    @classmethod
    def coerce(cls, value: RandomizedPositions | dict[str, Any] | None) -> RandomizedPositions | None:
        """``value`` as a :class:`RandomizedPositions` (a dict is what a checkpoint stores)."""
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise PosencError(f"train_positions must be a mapping like {{max_position: 8192}}, got {value!r}")
        unknown = set(value) - {"max_position", "eval", "seed"}
        if unknown or "max_position" not in value:
            raise PosencError(f"train_positions takes max_position (required), eval and seed; got "
                              f"{sorted(value)}")
        return cls(**value)

    def resolved(self) -> RandomizedPositions:
        """This setting with ``seed`` fixed (the run's torch seed when it is ``None``)."""
        if self.seed is not None:
            return self
        return RandomizedPositions(self.max_position, self.eval, torch.initial_seed() & (2**63 - 1))

    def check(self, pe: PositionalEncoding) -> None:
        """Raise :class:`PosencError` when ``pe`` does not define every position in [0, L_max)
        (a learned table shorter than L_max): one line naming both."""
        if pe.max_len is not None and pe.max_len < self.max_position:
            name, last = type(pe).__name__, pe.max_len - 1
            raise PosencError(f"train_positions.max_position={self.max_position} needs positions up to "
                              f"{self.max_position - 1}, but {name} defines only 0..{last} "
                              f"(max_len={pe.max_len}): lower max_position or use a scheme defined there")

    def as_dict(self) -> dict[str, Any]:
        """Primitive form (checkpoint hyperparameters)."""
        return asdict(self)

    def train(self, length: int, batch: int, *key: int, device: torch.device | str | None = None) -> Tensor:
        """(B, T) training positions, each row its own sample, a function of (seed, ``*key``) alone:
        a task passes e.g. (step, batch index, rank), so a resumed run draws what it would have."""
        g = torch.Generator().manual_seed(mixed_seed(self._seed(), *key))
        return sample_positions(length, self.max_position, batch, g, device)

    def evaluate(self, length: int, device: torch.device | str | None = None) -> Tensor:
        """(T,) positions outside training (see :attr:`eval`): one draw per length, the same for every
        call, so test scores are reproducible; shared by the windows of a batch, so a biased scheme's
        mask is one (H, T, T) tensor (or a Toeplitz view, for 0..T−1), not one per window."""
        if self.eval == "contiguous" or length >= self.max_position:
            return torch.arange(length, device=device)  # (T,)
        g = torch.Generator().manual_seed(mixed_seed(self._seed(), -1, length))
        return sample_positions(length, self.max_position, None, g, device)  # (T,)

    def _seed(self) -> int:
        return self.seed if self.seed is not None else torch.initial_seed()
