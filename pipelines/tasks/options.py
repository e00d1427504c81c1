"""The model's typed option groups that are read from a config (``model.init_args.<group>``).

``attention`` (:class:`AttentionOptions`) says how the backbone's attention runs: which kernels it may
use and whether the encoder is compiled. None of it changes what the model computes, so it is not part
of a checkpoint's identity: a checkpoint saved before the group existed loads with the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from posenc import PosencError


@dataclass(frozen=True)
class AttentionOptions:
    """How the attention runs (``model.init_args.attention``; see :mod:`posenc.nn.attention`).

    Attributes:
        compile: run the encoder through ``torch.compile`` (inputs padded to length buckets so new
            lengths rarely recompile).
        flex: FlexAttention for position-only biases on CUDA.
        toeplitz: on CPU, read translation-invariant biases as a strided view of one distance table.
        clipped: on CPU, run clipped relative schemes (Shaw) through the fused kernel beyond the clip.
        long_threshold: lengths above this use the query-blocked kernels for biased schemes.
        block_elements: bias elements per query block on the blocked kernels (memory per block).
    """

    compile: bool = False
    flex: bool = True
    toeplitz: bool = True
    clipped: bool = True
    long_threshold: int = 4096
    block_elements: int = 1 << 25

    def __post_init__(self) -> None:
        for name in ("long_threshold", "block_elements"):
            if getattr(self, name) < 1:
                raise PosencError(f"model.attention.{name} must be ≥ 1, got {getattr(self, name)}")

    @classmethod
    def of(cls, value: AttentionOptions | Mapping[str, Any] | None) -> AttentionOptions:
        """The options from themselves, a mapping (saved hyperparameters) or ``None`` (defaults); an
        unknown key is one line naming it."""
        if value is None or isinstance(value, cls):
            return value or cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise PosencError(f"model.attention: unknown key {unknown[0]!r} "
                              f"(known: {', '.join(sorted(known))})")
        return cls(**value)
