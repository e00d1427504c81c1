"""Exact cross-rank reductions of validation and test metrics under DDP.

Each rank scores its own shard of the evaluation windows (:class:`datamodules.sampling.ShardSampler`:
disjoint, nothing repeated). A metric that is a ratio — bits per base, a mean loss, an MSE — is then
exact only if the *numerators and denominators* are summed over ranks before dividing. Lightning's
``self.log(..., sync_dist=True)`` does not quite do this: it averages each rank's weighted sum and
each rank's count, and on gloo the averaged count is an integer tensor, truncated (an odd total
count is off by ½). The helpers here gather Python floats from every rank (``all_gather_object``,
rank order, float64 sums), so every rank ends with the same, exact value. Without a process group
(one process) they are the identity.

torchmetrics objects (the DNA tasks' per-length collections) need none of this: their states are
sums that torchmetrics itself reduces across ranks in ``compute()``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

K = TypeVar("K", bound=Hashable)


def world_size() -> int:
    """Processes in the default group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a single process.
    Every rank must call it (a collective)."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def sum_tables(table: dict[K, Sequence[float]]) -> dict[K, list[float]]:
    """Element-wise sums over ranks of per-key vectors of floats (keys: the union over ranks)."""
    parts = gather({k: [float(x) for x in v] for k, v in table.items()})
    out: dict[K, list[float]] = {}
    for part in parts:  # rank order: the same float64 additions on every rank
        for key, values in part.items():
            acc = out.setdefault(key, [0.0] * len(values))
            out[key] = [a + b for a, b in zip(acc, values, strict=True)]
    return out


def union(items: set[K]) -> set[K]:
    """The union over ranks of a set."""
    return set().union(*gather(set(items)))


class EpochMeans:
    """Ratio metrics ``Σ numerator / Σ denominator`` accumulated per batch and reduced across ranks.

    ``add`` keeps device tensors (no host sync per batch); :meth:`compute` (a collective: every rank
    calls it once per epoch) returns ``{name: value}``, identical on every rank, and resets.
    """

    def __init__(self) -> None:
        self._sums: dict[str, list[Tensor | float]] = {}

    def add(self, name: str, total: Tensor | float, count: Tensor | float) -> None:
        """Add one batch: the metric's numerator ``total`` and its denominator ``count``."""
        acc = self._sums.setdefault(name, [0.0, 0.0])
        acc[0] = acc[0] + _detached(total)
        acc[1] = acc[1] + _detached(count)

    def compute(self) -> dict[str, float]:
        sums = sum_tables({k: [float(t), float(c)] for k, (t, c) in self._sums.items()})
        self._sums = {}
        return {k: t / c for k, (t, c) in sorted(sums.items()) if c > 0}

    def log(self, module: Any, prog_bar: bool | Collection[str] = False) -> dict[str, float]:
        """:meth:`compute`, then ``module.log`` each value (on the progress bar: all, or those named).

        The values are already reduced and equal on every rank; ``sync_dist`` with ``max`` keeps
        them as they are while telling Lightning they are synchronised (no "use sync_dist" warning).
        """
        values = self.compute()
        for name, value in values.items():
            bar = prog_bar if isinstance(prog_bar, bool) else name in prog_bar
            module.log(name, value, sync_dist=True, reduce_fx="max", prog_bar=bar)
        return values


def end_process_group() -> None:
    """Destroy the default process group if one is up (Lightning keeps it after fit/test): a gloo
    group still alive at interpreter exit aborts the process ("terminate called without an active
    exception"). Call it once a run is over, on every rank."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _detached(x: Tensor | float) -> Tensor | float:
    if not isinstance(x, Tensor):
        return float(x)
    return x.detach().to(torch.float32 if x.device.type == "mps" else torch.float64)  # MPS: no float64


__all__ = ["EpochMeans", "end_process_group", "gather", "sum_tables", "union", "world_size"]
