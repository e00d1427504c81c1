"""Claim 10 probed on one trained model per scheme (no seed sweep): relative encodings are shift
invariant, absolute ones are not (positions offset by 10⁴).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pipelines.eval.extrapolation import adapter_for
from pipelines.eval.splits import length_loaders
from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.claims.context import Child
from pipelines.studies.tables import md_table
from posenc import PositionOutOfRange

LN2 = math.log(2.0)


def test_batches(t, length: int, max_batches: int | None) -> Iterator[Tensor]:
    """The LM's test windows (B, length + 1) at ``length``, at most ``max_batches`` batches."""
    adapter = adapter_for(t.module)
    for _n, loader in length_loaders(t.datamodule, adapter, [length]):
        for i, batch in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                return
            yield batch


# ----------------------------------------------------------------------------- claim 10
@torch.no_grad()
def bits_with_offset(model: Any, batches: list[Tensor], offset: int) -> float:
    """Bits/base of the windows with positions offset..offset+T−1 (NaN when undefined there)."""
    total = count = 0.0
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]
        pos = torch.arange(x.shape[1], dtype=torch.float64 if offset > 2**24 else torch.long) + offset
        try:
            logits = model(x, pos)  # (B, T, V)
        except PositionOutOfRange:
            return math.nan
        total += float(F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="sum"))
        count += y.numel()
    return total / count / LN2


class ShiftInvariance(Experiment):
    """Args: task, schemes (``{label: scheme}``, or ``{label: {scheme, overrides}}`` for a training
    with overrides over the task), relative (labels expected invariant), offset, seed (a pilot's
    ``--seeds`` replace it by their first), batches."""

    power_exempt = "an exact identity (relative schemes: 0 change, not an estimate)"
    claim = (
        "Relative encodings are shift invariant while absolute ones are not — learned relative biases "
        "included, which source 003 calls robust to shifts: the same windows at positions offset by 10⁴ "
        "score the same bits/base (within 1e-4) for the relative schemes only."
    )

    def __init__(
        self,
        task: str,
        schemes: dict[str, Any],
        relative: list[str],
        offset: int = 10_000,
        seed: int = 0,
        batches: int | None = None,
        tolerance: float = 1e-4,
    ) -> None:
        self.task, self.schemes, self.relative, self.offset = task, schemes, list(relative), offset
        self.seed, self.batches, self.tolerance = seed, batches, tolerance

    def child(self, ctx, label: str) -> Child:
        """The training of scheme ``label``."""
        given, seed = self.schemes[label], ctx.seeds([self.seed])[0]
        if isinstance(given, dict) and "scheme" in given:
            return Child(self.task, given["scheme"], seed, label, given.get("overrides"))
        return Child(self.task, given, seed, label)

    def children(self, ctx) -> list[Child]:
        return [self.child(ctx, label) for label in self.schemes]

    def run(self, ctx) -> ClaimResult:
        rows, deltas = [], {}
        for label in self.schemes:
            t = ctx.fit(self.child(ctx, label))
            batches = list(test_batches(t, int(t.datamodule.seq_len), ctx.max_batches(self.batches)))
            at0, shifted = (
                bits_with_offset(t.module, batches, 0),
                bits_with_offset(t.module, batches, self.offset),
            )
            deltas[label] = abs(shifted - at0) if math.isfinite(shifted) else math.inf
            rows.append(
                [
                    label,
                    f"{at0:.5f}",
                    "undefined" if not math.isfinite(shifted) else f"{shifted:.5f}",
                    "undefined" if not math.isfinite(shifted) else f"{deltas[label]:.2g}",
                ]
            )
        invariant = all(deltas[r] < self.tolerance for r in self.relative)
        others = [k for k in deltas if k not in self.relative]
        change = all(deltas[k] >= self.tolerance for k in others)
        holds = "yes" if invariant and change else "partly" if invariant or change else "no"
        measured = f"|Δ bits/base| at offset {self.offset:,}: " + "; ".join(
            f"{k} {'undefined' if math.isinf(v) else f'{v:.2g}'}" for k, v in deltas.items()
        )
        seed = ctx.seeds([self.seed])[0]
        return ClaimResult(
            setup=f"trained DNA LMs (seed {seed}), the same test windows at positions 0..L0−1 and "
            f"{self.offset}..{self.offset}+L0−1",
            measured=measured,
            holds=holds,
            rule=f"yes if {', '.join(self.relative)} change by < {self.tolerance:g} and every other "
                f"scheme by more "
            "(or is undefined there); partly if only one side holds",
            details=md_table(["scheme", "bits/base at 0", f"at +{self.offset:,}", "|Δ|"], rows),
            metrics={f"{k}_abs_delta": (v if math.isfinite(v) else -1.0) for k, v in deltas.items()},
        )
