"""Per-length test evaluation shared by the DNA tasks (masked LM, segmentation, classification).

Each test loader serves one evaluation length. A task keeps one torchmetrics collection per length;
a length whose positions the encoding does not define (:class:`PositionOutOfRange`) is recorded as
undefined. At the end every metric ``m`` is logged as ``test/m_by_length`` (step = length) and
``test/m_L<length>``, and ``test/m`` at the training length (the shortest), like the causal LM.
Vector metrics (per-class F1) become one metric per class: ``m_<class>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.aggregation import MeanMetric

from pipelines.tasks.base import log_by_length
from pipelines.tasks.distributed import EpochMeans, union
from pipelines.tasks.dna.base import DNATask
from posenc import PositionOutOfRange

LN2 = 0.6931471805599453


class NatsToBits(MeanMetric):
    """Weighted mean of per-token NLL in nats, computed as bits per base (÷ ln2 ÷ bases/token)."""

    def __init__(self, bases_per_token: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bases_per_token = bases_per_token

    def compute(self) -> Tensor:
        return super().compute() / LN2 / self.bases_per_token


def flatten(values: dict[str, Tensor], class_names: list[str] | None) -> dict[str, float]:
    """Scalars as they are; a vector metric ``m`` as ``m_<class>`` per class."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if value.dim() == 0:
            out[key] = float(value)
        else:
            names = class_names or [str(i) for i in range(len(value))]
            out.update({f"{key}_{n}": float(v) for n, v in zip(names, value.tolist(), strict=True)})
    return out


class PerLengthTest(DNATask):
    """A DNA task whose test pass keeps one metric collection per evaluation length.

    Subclasses implement :meth:`make_metrics` (a fresh ``MetricCollection``), optionally
    :meth:`update_metrics`, and call :meth:`update_length` from ``test_step``.
    """

    class_names: list[str] | None = None

    def make_metrics(self) -> MetricCollection:
        raise NotImplementedError

    def update_metrics(self, metrics: MetricCollection, *args: Tensor) -> None:
        """Feed one batch's outputs to ``metrics`` (override when metrics take different inputs)."""
        metrics.update(*args)

    def on_test_epoch_start(self) -> None:
        self._by_length: dict[int, MetricCollection] = {}
        self._undefined: set[int] = set()
        self._results: dict[int, dict[str, float]] = {}

    def update_length(self, length: int, compute: Callable[[], tuple]) -> None:
        """Update the metrics of ``length`` with ``compute()``'s outputs (skipped if undefined)."""
        if length in self._undefined:
            return
        try:
            args = compute()
        except PositionOutOfRange:
            self._undefined.add(length)
            return
        if length not in self._by_length:
            self._by_length[length] = self.make_metrics().to(self.device)
        self.update_metrics(self._by_length[length], *args)

    def on_test_epoch_end(self) -> None:
        self._undefined = union(self._undefined)  # torchmetrics' compute() sums the ranks' states
        by_length = sorted(self._by_length.items())
        self._results = {n: flatten(m.compute(), self.class_names) for n, m in by_length}
        if not self._results or self.logger is None:
            return
        self.logger.log_metrics({f"test/{k}": v for k, v in self._results[min(self._results)].items()})
        log_by_length(self.logger, self._results, self._undefined)

    def length_results(self) -> dict[int, dict[str, float]]:
        """``{length: {metric: value}}`` from the last test epoch (undefined lengths omitted)."""
        return dict(getattr(self, "_results", {}))

    @property
    def undefined_lengths(self) -> list[int]:
        return sorted(getattr(self, "_undefined", set()))

    def log_collection(self, prefix: str, metrics: MetricCollection, **kwargs: Any) -> dict[str, float]:
        """Compute, log (``prefix/name``) and reset a collection; returns the flattened values.

        Under DDP ``compute()`` has already reduced every rank's states (sums, or all predictions
        for AUROC), so the values are equal on every rank: ``max`` only marks them synchronised.
        Any :attr:`val_means` added during the epoch are logged too.
        """
        values = flatten(metrics.compute(), self.class_names)
        metrics.reset()
        for key, value in values.items():
            self.log(f"{prefix}/{key}", value, sync_dist=True, reduce_fx="max", **kwargs)
        return {**values, **self.val_means.log(self)}

    @property
    def val_means(self) -> EpochMeans:
        """Ratio metrics of the epoch outside the collection (``val/loss``), exact under DDP."""
        if "_val_means" not in self.__dict__:
            self.__dict__["_val_means"] = EpochMeans()
        return self.__dict__["_val_means"]


def token_positions(tokens: Tensor) -> Tensor:
    """Token indices 0..T-1 (T,) — k-mer tokens sit at their token index, not their base offset."""
    return torch.arange(tokens.shape[1], device=tokens.device)
