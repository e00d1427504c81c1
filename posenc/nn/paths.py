"""Which attention kernel a call runs: :func:`choose_path` on the scheme's metadata and the settings
(:class:`AttentionSettings`), under conditions only the call can check (asked lazily). The kernels
themselves and the per-call conditions are in :mod:`posenc.nn.attention`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from posenc.base import PosencError, SchemeMeta


@dataclass(frozen=True)
class AttentionSettings:
    """How the attention runs (not what it computes: every path gives the same result); a task's
    ``model.init_args.attention`` group.

    Attributes:
        long_threshold: lengths above this use the query-blocked paths for biased schemes.
        block_elements: bias elements (B'·H·R·Tk) per query block; sets the rows R per block.
        flex: use FlexAttention on CUDA for translation-invariant biases over more than
            ``long_threshold`` keys (:func:`choose_path`).
        toeplitz: read translation-invariant biases as a view of a distance table (CPU).
        clipped: run clipped relative schemes through the fused kernel where allowed (CPU).
        compile: run the whole encoder through ``torch.compile`` (read by
            :class:`~posenc.nn.Transformer`; inputs padded to length buckets so new lengths rarely
            recompile).
    """

    long_threshold: int = 4096
    block_elements: int = 1 << 25
    flex: bool = True
    toeplitz: bool = True
    clipped: bool = True
    compile: bool = False

    def __post_init__(self) -> None:
        for name in ("long_threshold", "block_elements"):
            if getattr(self, name) < 1:
                raise PosencError(f"attention.{name}: must be ≥ 1, got {getattr(self, name)}")




def _yes() -> bool:
    return True


def choose_path(
    meta: SchemeMeta,
    length: int,
    device: torch.device,
    settings: AttentionSettings,
    dropout: float = 0.0,
    *,
    can_flex: Callable[[], bool] = _yes,
    can_toeplitz: Callable[[], bool] = _yes,
    can_clip: Callable[[], bool] = _yes,
) -> str:
    """The attention path for a scheme's metadata at key length ``length`` on ``device``.

    FlexAttention is taken on CUDA for translation-invariant position-only biases only (it reads them
    from a distance table, :mod:`posenc.nn.flex`), over more than ``settings.long_threshold`` keys, and
    never under attention dropout (its ``score_mod`` has none). The threshold is measured: on an H200
    (bf16, forward + backward, 4 layers, d 128, 8 heads, causal) the dense bias through SDPA was faster
    up to 4,096 keys (ALiBi 8×1,024: 7.8 vs 19.0 ms; 2×4,096: 9.8 vs 27.2 ms), while at 16,384 Flex
    needed 2.9 GiB where SDPA needed 16.8 and ran T5's bias 4.2× faster (docs/performance.md).

    Args:
        can_flex: whether this call may use FlexAttention (asked only if it would otherwise).
        can_toeplitz: whether this call's input allows the Toeplitz view (asked likewise; it may
            read the positions, so a device sync is spent only where the view is in question).
        can_clip: whether this call's input allows the ``clipped`` path (asked likewise).
    """
    path = meta.attention_path  # explicit | sdpa+toeplitz | sdpa+bias | sdpa-fused
    if path == "sdpa-fused":
        return path
    if meta.clipped_relative and device.type == "cpu" and settings.clipped and not dropout and can_clip():
        return "clipped"
    distance_only = path == "sdpa+toeplitz"  # a bias of k_pos − q_pos alone: a table Flex reads
    long = length > settings.long_threshold  # below it the dense bias with SDPA is faster on a GPU
    if distance_only and long and device.type == "cuda" and settings.flex and not dropout and can_flex():
        return "flex"
    if path == "sdpa+toeplitz":
        if device.type == "cpu" and settings.toeplitz and can_toeplitz():
            return path
        path = "sdpa+bias"
    if length > settings.long_threshold:
        return "explicit-blocked" if path == "explicit" else "sdpa-blocked"
    return path
