"""Callbacks that put reference numbers beside every run."""

from __future__ import annotations

import lightning as L

from pipelines.baselines import MarkovModel


class MarkovBaselines(L.Callback):
    """After testing, log the bits/base of order-k Markov chains fitted on the train region and
    scored on the test region, so a run says whether the Transformer learned anything.

    Args:
        orders: Markov orders to fit (0 = base composition).
    """

    def __init__(self, orders: list[int] = [0, 5]) -> None:  # noqa: B006 - jsonargparse default
        self.orders = list(orders)
        self.results: dict[int, float] = {}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if dm is None or not hasattr(dm, "region_codes"):
            return
        train = dm.region_codes("train")
        test = dm.region_codes("test", dm.eval_span)  # the span the model was tested on
        for k in self.orders:
            self.results[k] = MarkovModel(k).fit(train).bits_per_base(test)
        for logger in trainer.loggers:
            logger.log_metrics({f"baseline/markov{k}_bits_per_base": v for k, v in self.results.items()})
