"""What every forecaster shares, whatever its network: :class:`ForecastModule`.

It owns the data links (target, covariate and known-future widths, lookback, horizon), RevIN, the
training loss, the validation and test metrics (original units, every test lookback), the predictor,
and the linear path (:class:`~pipelines.tasks.forecast.blend.LinearPath`): its fit, its one key
(``model.init_args.output.linear_path``) and the one rule for what validation decides. The networks
are its subclasses: the Transformer over patches (:class:`~pipelines.tasks.forecast.model.Forecaster`,
and its PatchTST layout) and DLinear's two linear maps
(:class:`~pipelines.tasks.forecast.linear.DLinearForecaster`).

**What validation decides.** Every forecaster is checkpointed and early-stopped on ``val/loss``. With
a linear path, validation also scores the forecast at each of the model's :attr:`~ForecastModule.
blend_weights` of its network on top of the path and keeps the best (ties → the smaller weight): the
checkpoint holds that weight (the Forecaster: every weight of
:data:`~pipelines.tasks.forecast.blend.BLEND_GRID`). With one weight there is nothing to choose
(PatchTST's: 1; the LTSF protocol then chooses between its warm start and the trained model, on val).
The test split plays no part in any of it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

from torch import Tensor

from datamodules.config import as_group
from pipelines.tasks.base import TaskAdapter, TaskModule, log_by_length
from pipelines.tasks.distributed import EpochMeans
from pipelines.tasks.forecast.baselines import RIDGE_ALPHAS, ForecastBaselines, seasonal_naive_errors
from pipelines.tasks.forecast.blend import BLEND_GRID, LinearPath, blend_tag
from pipelines.tasks.forecast.layers import RevIN
from pipelines.tasks.forecast.metrics import (
    ForecastErrors,
    ForecastReport,
    log_test_metrics,
    merge_ranks,
    to_original,
)
from pipelines.tasks.forecast.predict import describe_series, example_table, predict_forecast
from pipelines.tasks.options import ForecastOutput, SeriesInput
from pipelines.tasks.upgrade.checkpoint import upgrade_checkpoint
from posenc import PosencError, PositionOutOfRange


class ForecastAdapter(TaskAdapter):
    """A forecaster in the length sweep: MSE in the data's units over every lookback; the curve is
    MSE per forecast step; baselines are seasonal naive and ridge on the same windows."""

    metric = "mse"
    length_key = "eval_lookbacks"
    length_unit = "lookback steps"
    position_label = "forecast step (MSE)"

    def train_length(self, dm: Any) -> int:
        return int(dm.lookback)

    def n_positions(self, module: Any, length: int) -> int:
        return module.n_positions(length)

    scores_windows = True  # squared errors add up over windows: per time block where the data has blocks

    def score_windows(self, module: Any, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Squared-error sums and scored targets per window (B,) and per forecast step (H,), in the
        data's units."""
        err = to_original(module.predict_batch(batch), batch) - to_original(batch["y"], batch)  # (B, H, C)
        m = batch["y_mask"].to(err.dtype)  # (B, H, C)
        sq = ((err**2) * m).double()  # (B, H, C)
        mm = m.double()  # (B, H, C)
        per_window = sq.sum(dim=(1, 2)).cpu(), mm.sum(dim=(1, 2)).cpu()  # (B,), (B,)
        return (*per_window, sq.sum(dim=(0, 2)).cpu(), mm.sum(dim=(0, 2)).cpu())  # + (H,), (H,)

    def baselines(self, dm: Any, split: str = "test") -> dict[str, float]:
        found = ForecastBaselines().compute(dm)  # same test windows at every lookback
        return {name: found[f"{name}_mse"] for name in ("seasonal_naive", "linear")}

    trivial_name = "seasonal naive"

    def trivial_baseline(self, dm: Any, split: str = "test") -> float:
        """MSE of the seasonal-naive forecast on the test windows (period as :class:`ForecastBaselines`)."""
        test = dm.windows("test")  # the same forecast windows at every lookback
        return seasonal_naive_errors(dm, test, ForecastBaselines().period(dm))["mse"]


class ForecastModule(TaskModule):
    """A forecaster of the next ``horizon`` steps from a lookback window (see the module docstring).

    A subclass builds its network, calls :meth:`add_series_layers` once, and defines ``forward(x, cov,
    pos, fut)`` → (B, H, C) in scaled units; with a linear path and several :attr:`blend_weights`, also
    :meth:`forecast_parts`.

    Metrics are on the original scale (the scaler inverted; in the series' own units, squared for
    MSE): ``test/mse``, ``test/mae`` (also as ``test/mse_original``, ``test/mae_original``, beside
    ``test/mse_scaled``, ``test/mae_scaled`` after the training-split scaler) at the training
    lookback, per horizon step (``test/mse_by_horizon`` with step = h and a ``horizon_metrics.csv``
    artifact), and at every test lookback (``test/mse_by_lookback`` with step = lookback,
    ``test/mse_L{lookback}``); lookbacks the model does not define are recorded as undefined. Its
    :class:`ForecastReport` callback logs the tables and a figure of a few test forecasts
    (``forecast.png``) to MLflow.

    Args:
        n_targets: target channels C (linked from the datamodule).
        n_covariates: covariate + calendar features per step K (linked).
        n_future: known-future inputs per horizon step F (linked; 0: none).
        lookback: the training lookback L (linked; needed by a linear path and a fixed-width network).
        horizon: forecast steps H (linked).
        series: how the series are read: channel-independent or multivariate, RevIN
            (:class:`~pipelines.tasks.options.SeriesInput`).
        output: the head, the training loss (``mse`` or ``mae`` on the scaled targets), the linear path
            (a fixed ridge from the lookback to the horizon, the network's output layer starting at
            zero and trained on its residual; :mod:`pipelines.tasks.forecast.blend`) and the test
            windows drawn in ``forecast.png`` (:class:`~pipelines.tasks.options.ForecastOutput`).
        **kwargs: the network's settings and the groups of :class:`~pipelines.tasks.base.TaskModule`.
    """

    adapter = ForecastAdapter()
    predictor = staticmethod(predict_forecast)
    default_datamodule = "datamodules.TimeSeriesDataModule"
    predict_input: ClassVar[str] = "table"
    config_groups: ClassVar[dict[str, type]] = {**TaskModule.config_groups, "series": SeriesInput,
                                                "output": ForecastOutput}
    #: the weights of the network on top of the linear path that validation chooses among (one rule:
    #: the best on the validation windows; one weight: nothing to choose)
    blend_weights: ClassVar[tuple[float, ...]] = BLEND_GRID
    #: the linear path's layout: one map per window (lookback, covariates, known future → every target)
    #: or one map shared by the channels (each channel's lookback → its horizon)
    linear_per_channel: ClassVar[bool] = False
    patch_len: int = 1  # steps per token (1: a network without patches)

    def __init__(
        self,
        n_targets: int = 1,
        n_covariates: int = 0,
        n_future: int = 0,
        lookback: int | None = None,
        horizon: int = 48,
        series: SeriesInput = SeriesInput(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        output: ForecastOutput = ForecastOutput(),  # noqa: B008
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        series, output = as_group(SeriesInput, series, "series"), as_group(ForecastOutput, output, "output")
        for name, v in (("n_targets", n_targets), ("horizon", horizon)):
            if v < 1:
                raise PosencError(f"model.init_args.{name}: must be ≥ 1, got {v}")
        self.n_targets, self.n_covariates, self.horizon = n_targets, n_covariates, horizon
        self.n_future, self.lookback = n_future, lookback
        self.channel_independent = series.channel_independent
        self.head_kind, self.loss_kind, self.plot_examples = output.head, output.loss, output.plot_examples
        self._series, self._linear_wanted = series, output.linear_path
        self._forecast_hparams = {"n_targets": n_targets, "n_covariates": n_covariates, "n_future": n_future,
                                  "lookback": lookback, "horizon": horizon, "series": asdict(series),
                                  "output": asdict(output)}
        self._reset_test_state()
        self._val = EpochMeans()  # exact over every rank's shard under DDP

    def add_series_layers(self) -> None:
        """RevIN (``series.revin``) and the linear path (``output.linear_path``, in this model's layout:
        :attr:`linear_per_channel`). The network's constructor calls this once, where its checkpoints
        hold them among its own layers (the order the optimiser and gradient clipping see them in)."""
        s = self._series
        self.revin = RevIN(self.n_targets, affine=s.revin_affine) if s.revin else None
        self.linear = self._linear_path(self._linear_wanted)

    def _linear_path(self, wanted: bool) -> LinearPath | None:
        """The linear path in this model's layout (:attr:`linear_per_channel`); ``None`` when not wanted."""
        if not wanted:
            return None
        if self.lookback is None:
            raise PosencError("model.init_args.output.linear_path needs model.init_args.lookback (linked "
                              "from data.init_args.windows.lookback)")
        return LinearPath(self.lookback, self.n_targets, self.n_covariates, self.horizon, self.n_future,
                          self.linear_per_channel)

    # ------------------------------------------------------------------ the linear path
    @property
    def normalised_path(self) -> bool:
        """Whether the linear path reads the RevIN-normalised lookback (RLinear) rather than the raw one."""
        return False

    def setup(self, stage: str) -> None:
        """Before training: the linear path's ridge (:meth:`fit_linear_path`) unless already fitted."""
        if stage == "fit" and self.linear is not None and not self.linear.fitted:
            self.fit_linear_path()

    def fit_linear_path(self, data: Any = None, alphas: tuple[float, ...] = RIDGE_ALPHAS,
                        bounds: tuple[float, float] | None = None) -> float:
        """Fit the linear path in closed form before training; its ridge penalty is returned.

        Args:
            data: the windows: an :class:`~datamodules.timeseries.ltsf.LTSFData`, or a datamodule
                (default: the trainer's).
            alphas: the penalties tried on the validation windows (per-channel path).
            bounds: how far past the ends of ``alphas`` validation may take the penalty.

        A per-channel path is ridge on every training window (:meth:`LinearPath.fit_windows`,
        RevIN-normalised when :attr:`normalised_path`); the multivariate path is the same-inputs ridge
        of the run's :class:`ForecastBaselines` (its settings, or the defaults), so that the path is
        exactly ``baseline/linear``.
        """
        if self.linear is None:
            raise PosencError("this model has no linear path (model.init_args.output.linear_path: false)")
        trainer = self._trainer
        data = data if data is not None else getattr(trainer, "datamodule", None)
        if not self.linear_per_channel:
            self.linear.fit_for(trainer, data, future=bool(self.n_future))
            return float(self.linear.alpha)
        data = getattr(data, "data", data)  # an LTSFDataModule's protocol data
        if not hasattr(data, "starts"):
            raise PosencError("a per-channel linear path is fitted on the LTSF protocol's windows "
                              "(data: datamodules.timeseries.ltsf_data.LTSFDataModule)")
        train, val = (data.windows(split, self.lookback, self.horizon) for split in ("train", "val"))
        return self.linear.fit_windows(train, val, normalised=self.normalised_path, alphas=alphas,
                                       bounds=bounds)

    def forecast_parts(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The linear path's forecast and the network's (both (B, H, C), scaled), whose sum at weight w is
        the forecast validation scores at w."""
        raise NotImplementedError(f"{type(self).__name__} forecasts at one weight of its network")

    # ------------------------------------------------------------------ training and validation
    def n_positions(self, lookback: int) -> int:
        """Positions the network sees for a lookback (RoPE scale factors in the length sweep)."""
        return lookback // self.patch_len

    def predict_batch(self, batch: dict[str, Tensor]) -> Tensor:
        return self(batch["x"], batch["cov"], batch["pos"], batch.get("fut"))

    def _loss(self, pred: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        err = (pred - y).abs() if self.loss_kind == "mae" else (pred - y) ** 2
        m = mask.to(err.dtype)
        return (err * m).sum() / m.sum().clamp(min=1.0)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._loss(self.predict_batch(batch), batch["y"], batch["loss_mask"])
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["x"].shape[0])
        return loss

    @property
    def chooses_blend(self) -> bool:
        """Whether validation chooses the network's weight on top of the linear path (the one rule)."""
        return self.linear is not None and len(self.blend_weights) > 1

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Validation loss, MSE and MAE (original units); with a weight to choose, at every one of
        :attr:`blend_weights` (``val/mse@0.3``…)."""
        if not self.chooses_blend:
            candidates = [("", self.predict_batch(batch))]
        else:
            lin, out = self.forecast_parts(batch)
            candidates = [(blend_tag(w), lin + w * out) for w in self.blend_weights]
        mask = batch["y_mask"]
        m = mask.to(batch["y"].dtype)
        n = m.sum()  # observed targets: the denominator of every val metric (Σ over batches and ranks)
        for tag, pred in candidates:
            err = to_original(pred, batch) - to_original(batch["y"], batch)
            self._val.add(f"val/loss{tag}", self._loss(pred, batch["y"], mask) * n, n)
            self._val.add(f"val/mse{tag}", ((err**2) * m).sum(), n)
            self._val.add(f"val/mae{tag}", (err.abs() * m).sum(), n)

    def on_validation_epoch_end(self) -> None:
        """Log the epoch's means (reduced over ranks); with a weight to choose, first set it to the best
        on these windows (:meth:`LinearPath.choose`)."""
        values = self._val.compute()
        if self.chooses_blend:
            values = self.linear.choose(values)
        for name, value in values.items():  # already equal on every rank: `max` keeps them as they are
            self.log(name, value, sync_dist=True, reduce_fx="max", prog_bar=name == "val/loss")

    # ------------------------------------------------------------------ test at every lookback
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Lightning's own reading of a checkpoint (``ckpt_path``): upgraded as :func:`read_checkpoint`
        upgrades it (weight names of before, PatchTST's linear path of before)."""
        checkpoint.update(upgrade_checkpoint(checkpoint, "checkpoint"))

    def configure_callbacks(self) -> list:
        return [ForecastReport(self.plot_examples)]

    def describe_data(self, dm: Any) -> dict[str, Any]:
        return describe_series(dm) if dm is not None and hasattr(dm, "series") else {}

    def input_example(self, dm: Any) -> Any:
        return example_table(self, dm)

    def _reset_test_state(self) -> None:
        self.test_errors: dict[int, ForecastErrors | None] = {}
        self.scaled_errors = ForecastErrors(self.horizon)  # at the training lookback, in scaled units
        self.scored_starts: list[int] = []  # first target rows scored at the training lookback

    def on_test_start(self) -> None:
        """Say (console line, MLflow tags) what validation chose for the linear path, and why."""
        if self.chooses_blend:
            self.linear.announce(self.trainer)

    def on_test_epoch_start(self) -> None:
        self._reset_test_state()

    def train_lookback(self) -> int | None:
        """The datamodule's training lookback while attached to a trainer, else ``None``."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        return getattr(dm, "lookback", None) or self.lookback

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> dict | None:
        """Accumulate errors at this batch's lookback; returns the forecast in the data's units."""
        lookback = batch["x"].shape[1]
        if lookback in self.test_errors and self.test_errors[lookback] is None:
            return None  # undefined at this length
        try:
            pred = self.predict_batch(batch)
        except PositionOutOfRange:
            self.test_errors[lookback] = None
            return None
        pred_o, y_o = to_original(pred, batch), to_original(batch["y"], batch)
        self.test_errors.setdefault(lookback, ForecastErrors(self.horizon)).add(pred_o, y_o, batch["y_mask"])
        if lookback == (self.train_lookback() or lookback):
            self.scored_starts.extend(batch["start"].tolist())
            self.scaled_errors.add(pred, batch["y"], batch["y_mask"])
        return {"pred": pred_o, "truth": y_o}

    def on_test_epoch_end(self) -> None:
        self.test_errors, self.scored_starts = merge_ranks(self.test_errors, self.scored_starts)  # DDP
        self.scaled_errors = merge_ranks({0: self.scaled_errors}, [])[0][0]
        defined = {n: e for n, e in self.test_errors.items() if e is not None}
        if defined:
            log_test_metrics(self, defined[self.main_lookback()], self.scaled_errors)
            if self.logger is not None:
                log_by_length(self.logger, {n: {"mse": e.mse, "mae": e.mae} for n, e in defined.items()},
                              [n for n, e in self.test_errors.items() if e is None], axis="lookback")

    def main_lookback(self) -> int:
        """The lookback the headline metrics are at: the training one if scored, else the shortest."""
        defined = [n for n, e in self.test_errors.items() if e is not None]
        main = self.train_lookback()
        return main if main in defined else min(defined)


__all__ = ["ForecastAdapter", "ForecastModule"]
