"""The typed settings of the synthetic datamodules (:mod:`datamodules.synthetic.datamodule`), one group each.

In a config they sit under ``data.init_args``, beside the shared ``loader`` group of
:mod:`datamodules.config`::

    data:
      class_path: datamodules.synthetic.datamodule.SyntheticLMDataModule
      init_args:
        process: {task: copy, vocab: 16, distance: 3, noise: 0.1}
        windows: {seq_len: 32, eval_lengths: [32, 64, 128, 256], eval_tokens: 8192}
        loader: {batch_size: 32, samples_per_epoch: 4800}

Every field keeps the name it had as a flat argument (``data.init_args.distance`` is now
``data.init_args.process.distance``), so :mod:`pipelines.tasks.upgrade.legacy` translates old configs by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from datamodules.config import at_least, one_of
from posenc import PosencError

LM_TASKS = ("copy", "periodic", "two_periods", "helical")


def check_lengths(seq_len: int, eval_lengths: list[int] | None) -> list[int]:
    """The test lengths: ``eval_lengths`` (starting at ``seq_len``, increasing), default ``[seq_len]``."""
    lengths = [int(n) for n in (eval_lengths or [seq_len])]
    if lengths[0] != seq_len or any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)):
        raise PosencError(f"data.init_args.windows.eval_lengths: must start at windows.seq_len={seq_len} and "
                          f"increase, got {lengths}")
    return lengths


@dataclass(frozen=True)
class LMProcess:
    """The token process of :class:`~datamodules.synthetic.datamodule.SyntheticLMDataModule`.

    Attributes:
        task: ``copy`` (token t repeats token t − ``distance``), ``periodic`` (period ``period``),
            ``two_periods`` (tokens a·√V + b, ``a`` of period ``period``, ``b`` of period ``period2``)
            or ``helical`` (bases with AA/TT at ~``helical_period``-bp crests; V = 4).
        vocab: tokens of the process (the model's vocabulary adds one unused PAD id); a square for
            ``two_periods`` (√V symbols per component).
        distance: the retrieval distance d (copy).
        period: the period p (periodic; the first component's for two_periods).
        period2: the second component's period (two_periods).
        noise: probability that a token is re-drawn uniformly.
        helical_period: the planted helical period in bases (helical).
    """

    task: str = "copy"
    vocab: int = 16
    distance: int = 32
    period: int = 12
    period2: int | None = None
    noise: float = 0.1
    helical_period: float = 10.5

    def __post_init__(self) -> None:
        one_of("process", "task", self.task, LM_TASKS)
        if self.task == "helical" and self.vocab != 4:
            raise PosencError(f"data.init_args.process.task 'helical' is DNA-like: process.vocab must be 4, "
                              f"got {self.vocab}")
        root = math.isqrt(self.vocab) if self.vocab > 0 else 0
        if self.task == "two_periods" and (root**2 != self.vocab or self.period2 is None or self.period2 < 1):
            raise PosencError(f"data.init_args.process.task 'two_periods' needs a square process.vocab and "
                              f"process.period2 >= 1, got vocab={self.vocab}, period2={self.period2}")
        if not 0.0 <= self.noise < 1.0 or self.vocab < 2:
            raise PosencError(f"data.init_args.process.noise must be in [0, 1) and process.vocab >= 2, got "
                              f"{self.noise}, {self.vocab}")


@dataclass(frozen=True)
class LMWindows:
    """The windows of the synthetic LM, counted in targets.

    Attributes:
        seq_len: training window L0 (targets per window).
        eval_lengths: test lengths, the first = ``seq_len`` (e.g. up to 8·L0); default ``[seq_len]``.
        eval_tokens: test (and validation) tokens per length, tiled from windows of the longest length.
    """

    seq_len: int = 64
    eval_lengths: list[int] | None = None
    eval_tokens: int = 16384

    def __post_init__(self) -> None:
        at_least("windows", seq_len=(self.seq_len, 1), eval_tokens=(self.eval_tokens, 1))
        check_lengths(self.seq_len, self.eval_lengths)


@dataclass(frozen=True)
class Motifs:
    """The motif-spacing task of :class:`~datamodules.synthetic.datamodule.SyntheticMotifDataModule`.

    Attributes:
        motif_a, motif_b: the two motifs (strings over ACGT).
        distance: the spacing (bases between A's end and B's start) that makes label 1.
        negative: ``spacing`` (label 0 = another spacing) or ``order`` (label 0 = B before A).
        label_noise: probability that a label is flipped (optimal accuracy = 1 − label_noise).
        marker_motifs: plant two tokens of their own (ids 4 and 5, outside ACGT) instead of
            ``motif_a``/``motif_b``: the spacing is then the only thing to learn (no motif to detect).
        train_region, test_region: where the pair may start in training / test windows, as a
            fraction [lo, hi] of the possible starts (e.g. [0, 0.5] and [0.5, 1]: tested only at
            positions never trained; validation windows place it anywhere).
    """

    motif_a: str = "ACGTTG"
    motif_b: str = "GATCCA"
    distance: int = 8
    negative: str = "spacing"
    label_noise: float = 0.0
    marker_motifs: bool = False
    train_region: tuple[float, float] = (0.0, 1.0)
    test_region: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self) -> None:
        for name in ("motif_a", "motif_b"):
            text = getattr(self, name)
            if not text or set(text) - set("ACGT"):
                raise PosencError(f"data.init_args.motifs.{name} must be a non-empty string of A, C, G, T, "
                                  f"got {text!r}")
        one_of("motifs", "negative", self.negative, ("spacing", "order"))
        if not 0.0 <= self.label_noise < 0.5:
            raise PosencError(f"data.init_args.motifs.label_noise must be in [0, 0.5), got "
                              f"{self.label_noise}")
        for name in ("train_region", "test_region"):
            region(getattr(self, name), name)


def region(value: object, name: str) -> tuple[float, float]:
    """``[lo, hi]`` with 0 ≤ lo ≤ hi ≤ 1 as a tuple (one line naming ``motifs.<name>`` otherwise)."""
    try:
        lo, hi = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        lo, hi = 1.0, 0.0
    if not 0.0 <= lo <= hi <= 1.0:
        raise PosencError(f"data.init_args.motifs.{name} must be [lo, hi] with 0 <= lo <= hi <= 1, "
                          f"got {value!r}")
    return lo, hi


@dataclass(frozen=True)
class SampleWindows:
    """Windows of a classification task drawn one by one: training length, test lengths and how many.

    Attributes:
        seq_len: training window (bases or tokens).
        eval_lengths: test windows, the first = ``seq_len``; default ``[seq_len]``.
        eval_samples: val and test windows each (per test length).
    """

    seq_len: int = 64
    eval_lengths: list[int] | None = None
    eval_samples: int = 1024

    def __post_init__(self) -> None:
        at_least("windows", seq_len=(self.seq_len, 2), eval_samples=(self.eval_samples, 1))
        check_lengths(self.seq_len, self.eval_lengths)
