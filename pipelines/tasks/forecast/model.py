"""Transformer forecaster over (patched) lookback windows, with any positional encoding."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from datamodules.config import as_group
from pipelines.tasks.base import TaskAdapter, TaskModule, log_by_length
from pipelines.tasks.distributed import EpochMeans
from pipelines.tasks.forecast.baselines import ForecastBaselines, seasonal_naive_errors
from pipelines.tasks.forecast.blend import BLEND_GRID, LinearPath, blend_tag
from pipelines.tasks.forecast.layers import (  # noqa: F401 - patchify … with_periods re-exported
    ForecastTokens,
    RevIN,
    patch_positions,
    patchify,
    with_periods,
)
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
    """Forecaster in the length sweep: MSE in the data's units over every lookback; the curve is
    MSE per forecast step; baselines are seasonal naive and ridge on the same windows."""

    metric = "mse"
    length_key = "eval_lookbacks"
    length_unit = "lookback steps"
    position_label = "forecast step (MSE)"

    def train_length(self, dm: Any) -> int:
        return int(dm.lookback)

    def n_positions(self, module: Any, length: int) -> int:
        return length // module.patch_len + module.n_extra_tokens  # patches + forecast tokens

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


class Forecaster(TaskModule):
    """Forecast the next ``horizon`` steps from a lookback window with a non-causal Transformer.

    Each token is a patch of ``patch_len`` steps (one step when 1) linearly embedded; the encoding
    (any posenc scheme) gets the patch positions. With ``channel_independent`` every target channel
    is its own sequence (PatchTST-style, weights shared; covariates and calendar features are
    appended to every channel's steps); otherwise one token holds all channels.

    Head (works for any lookback, so longer lookbacks can be evaluated with the same weights; see
    :class:`~pipelines.tasks.forecast.layers.ForecastTokens`): ``horizon`` appends one token per
    horizon patch at the positions after the lookback, each carrying that patch's known-future
    inputs, and reads each patch's forecast from its own token; ``query`` appends one learned
    forecast token and maps its output to the whole horizon; ``last`` reads the last lookback
    token; ``mean`` mean-pools all tokens.

    Known-future inputs (``fut``, (B, H, F): the horizon's calendar features and the datamodule's
    ``future_cols``) enter when ``n_future`` > 0 (linked from the datamodule).

    Metrics are on the original scale (the scaler inverted; in the series' own units, squared for
    MSE): ``test/mse``, ``test/mae`` (also as ``test/mse_original``, ``test/mae_original``, beside
    ``test/mse_scaled``, ``test/mae_scaled`` after the training-split scaler) at the training
    lookback, per horizon step (``test/mse_by_horizon`` with step = h and a
    ``horizon_metrics.csv`` artifact), and at every test lookback (``test/mse_by_lookback`` with
    step = lookback, ``test/mse_L{lookback}``); lookbacks the scheme does not define (learned PE
    past ``max_len``) are recorded as undefined. Its :class:`ForecastReport` callback logs the
    tables and a figure of a few test forecasts (``forecast.png``) to MLflow.

    Args:
        n_targets: target channels C (linked from the datamodule).
        n_covariates: covariate + calendar features per step (linked).
        horizon: forecast steps H (linked).
        patch_len: steps per token P (linked).
        series: how the series are read: channel-independent or multivariate tokens, RevIN
            (:class:`~pipelines.tasks.options.SeriesInput`).
        output: the head (``horizon``, ``query``, ``last`` or ``mean``, see above), the training loss
            (``mse`` or ``mae`` on the scaled targets), the linear path (the Transformer, its output
            layer starting at zero and trained on the residual, added to a fixed copy of the
            same-inputs ridge with its weight chosen on the validation windows — the ridge alone when
            it does not help (logged); see :mod:`pipelines.tasks.forecast.blend`; needs
            ``lookback``) and the test windows drawn in ``forecast.png``
            (:class:`~pipelines.tasks.options.ForecastOutput`).
        n_future: known-future inputs per horizon step F (linked; 0: none).
        lookback: the training lookback L (linked; recorded: the network itself takes any L).
        pe_periods: periods in token positions given to the encoding's ``periods`` argument
            (linked from ``data.pe_periods``, i.e. ``data.periods`` in steps ÷ ``patch_len``;
            ``None`` keeps the encoding's own config).
        **kwargs: the encoding and the groups of :class:`~pipelines.tasks.base.TaskModule` (``net``,
            ``optim``, ``attention``).
    """

    causal = False
    task_name = "ts_forecast"
    #: before ForecastTokens the query token was ``query`` and the output layer ``head``
    old_weights = {"query": "head.query", "head.weight": "head.out.weight", "head.bias": "head.out.bias"}
    adapter = ForecastAdapter()
    predictor = staticmethod(predict_forecast)
    default_datamodule = "datamodules.TimeSeriesDataModule"
    predict_input: ClassVar[str] = "table"
    #: the Transformer part's weight on top of the linear path chosen on the validation windows
    blend_on_val: ClassVar[bool] = True

    config_groups: ClassVar[dict[str, type]] = {**TaskModule.config_groups, "series": SeriesInput,
                                                "output": ForecastOutput}

    def __init__(
        self,
        n_targets: int = 1,
        n_covariates: int = 0,
        n_future: int = 0,
        lookback: int | None = None,
        horizon: int = 48,
        patch_len: int = 1,
        pe_periods: list[float] | None = None,
        series: SeriesInput = SeriesInput(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        output: ForecastOutput = ForecastOutput(),  # noqa: B008
        **kwargs: Any,
    ) -> None:
        series, output = as_group(SeriesInput, series, "series"), as_group(ForecastOutput, output, "output")
        if pe_periods is not None:
            kwargs["pe"] = with_periods(kwargs.get("pe"), pe_periods)
        super().__init__(**kwargs)
        for name, v in (("n_targets", n_targets), ("horizon", horizon), ("patch_len", patch_len)):
            if v < 1:
                raise PosencError(f"model.init_args.{name}: must be ≥ 1, got {v}")
        d_model = self.d_model
        self.n_targets, self.n_covariates, self.horizon = n_targets, n_covariates, horizon
        self.n_future, self.lookback = n_future, lookback
        self.patch_len, self.channel_independent = patch_len, series.channel_independent
        self.head_kind, self.loss_kind, self.plot_examples = output.head, output.loss, output.plot_examples
        per_seq = 1 if series.channel_independent else n_targets
        self.n_inputs = patch_len * (per_seq + n_covariates)  # token width
        if self.has_backbone:  # the token embedding and the head belong to the Transformer
            self.embed = nn.Linear(self.n_inputs, d_model)
            self.head = ForecastTokens(output.head, d_model, horizon, patch_len, per_seq, n_future)
        self.revin = RevIN(n_targets, affine=series.revin_affine) if series.revin else None
        self.linear = self._linear_path(output.linear_path, lookback, n_future)
        self._save_hparams(
            n_targets=n_targets, n_covariates=n_covariates, n_future=n_future, lookback=lookback,
            horizon=horizon, patch_len=patch_len, pe_periods=pe_periods, series=asdict(series),
            output=asdict(output),
        )
        self._reset_test_state()
        self._val = EpochMeans()  # exact over every rank's shard under DDP

    def _linear_path(self, wanted: bool, lookback: int | None, n_future: int,
                     per_channel: bool = False) -> LinearPath | None:
        """The ridge path (``linear_path``), the Transformer's output layer zeroed so training starts
        from the ridge; ``None`` when not wanted."""
        if not wanted:
            return None
        if lookback is None:
            raise PosencError("model.init_args.output.linear_path needs model.init_args.lookback (linked "
                              "from data.init_args.windows.lookback)")
        nn.init.zeros_(self.head.out.weight)
        nn.init.zeros_(self.head.out.bias)
        return LinearPath(lookback, self.n_targets, self.n_covariates, self.horizon, n_future, per_channel)

    def setup(self, stage: str) -> None:
        """Before training: the linear path's coefficients from the same-inputs ridge (fitted as the
        run's :class:`ForecastBaselines` callback fits it, or with its defaults)."""
        if stage == "fit" and self.linear is not None and not self.linear.fitted:
            self.fit_linear_path()

    def fit_linear_path(self) -> None:
        """The linear path's ridge, fitted on the trainer's datamodule as ``baseline/linear`` is."""
        self.linear.fit_for(self.trainer, future=bool(self.n_future))

    # ------------------------------------------------------------------ model
    @property
    def n_extra_tokens(self) -> int:
        """Tokens appended after the lookback's: 1 (``query``), ⌈H/P⌉ (``horizon``), 0 otherwise."""
        return self.head.n_tokens

    def forward(self, x: Tensor, cov: Tensor | None = None, pos: Tensor | None = None,
                fut: Tensor | None = None) -> Tensor:
        """Forecast (B, H, C) in scaled units from lookback targets ``x`` (B, L, C), covariates
        ``cov`` (B, L, K), step positions ``pos`` (B, L) or (L,) (default 0..L-1) and known-future
        inputs ``fut`` (B, H, F) (required when ``n_future`` > 0). With the linear path: the ridge
        plus the Transformer at weight 1 in training, at the weight validation chose in eval mode."""
        cov, fut = self._check_inputs(x, cov, fut)
        out = self._transformer(x, cov, pos, fut)
        if self.linear is None:
            return out
        return self.linear(x, cov, fut) + (1.0 if self.training else self.linear.blend) * out

    def forecast_parts(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The linear path's forecast and the Transformer's (both (B, H, C), scaled) for ``batch``."""
        cov, fut = self._check_inputs(batch["x"], batch["cov"], batch.get("fut"))
        return self.linear(batch["x"], cov, fut), self._transformer(batch["x"], cov, batch["pos"], fut)

    def _transformer(self, x: Tensor, cov: Tensor, pos: Tensor | None, fut: Tensor) -> Tensor:
        """The Transformer's forecast (B, H, C); with the linear path, the residual added to it
        (RevIN then restores the window's scale but not its mean)."""
        b, n, c = x.shape
        pos = torch.arange(n, device=x.device) if pos is None else pos
        pos = pos.expand(b, n) if pos.dim() == 1 else pos
        if self.revin is not None:
            x, mu, sd = self.revin.normalize(x)
        if self.channel_independent:
            seq = x.permute(0, 2, 1).reshape(b * c, n, 1)  # (B·C, L, 1)
            cov = cov.repeat_interleave(c, dim=0)  # (B·C, L, K)
            fut = fut.repeat_interleave(c, dim=0)  # (B·C, H, F)
            pos = pos.repeat_interleave(c, dim=0)  # (B·C, L)
        else:
            seq = x  # (B, L, C)
        tokens = self.embed(patchify(torch.cat((seq, cov), dim=-1), self.patch_len))  # (B', N, D)
        tok_pos = patch_positions(pos, self.patch_len)  # (B', N)
        extra = self.head.tokens(tokens.shape[0], fut)  # (B', M, D) or None
        if extra is not None:
            tokens = torch.cat((tokens, extra), dim=1)  # (B', N + M, D)
            tok_pos = torch.cat((tok_pos, self.head.positions(tok_pos, pos)), dim=1)  # (B', N + M)
        if not tok_pos.is_floating_point() and bool((tok_pos == tok_pos[:1]).all()):
            tok_pos = tok_pos[0]  # shared positions as (T,): cheaper for every scheme
        out = self.head.read(self.backbone(tokens, tok_pos), fut)  # (B', H, C')
        if self.channel_independent:
            y = out.reshape(b, c, self.horizon).permute(0, 2, 1)  # (B, H, C)
        else:
            y = out  # (B, H, C)
        if self.revin is not None:
            y = self.revin.denormalize(y, mu if self.linear is None else torch.zeros_like(mu), sd)
        return y

    def _check_inputs(self, x: Tensor, cov: Tensor | None, fut: Tensor | None) -> tuple[Tensor, Tensor]:
        """Covariates (B, L, K) and known-future inputs (B, H, F), empty when absent; clear errors
        when their widths differ from the model's."""
        b, n, c = x.shape
        if c != self.n_targets:
            raise PosencError(f"the model was built for {self.n_targets} target channel(s), got {c}")
        cov = x.new_zeros(b, n, 0) if cov is None else cov
        if cov.shape[-1] != self.n_covariates:
            raise PosencError(f"the model was built for {self.n_covariates} covariate(s), "
                              f"got {cov.shape[-1]}")
        fut = x.new_zeros(b, self.horizon, 0) if fut is None and not self.n_future else fut
        if fut is None or fut.shape[-1] != self.n_future or fut.shape[1] != self.horizon:
            got = "none" if fut is None else f"{tuple(fut.shape[1:])}"
            raise PosencError(f"the model was built for {self.n_future} known-future input(s) over "
                              f"{self.horizon} steps, got {got}")
        return cov, fut

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

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Validation loss, MSE and MAE (original units); with the linear path, at every weight of
        the Transformer part in :data:`BLEND_GRID` (``val/mse@0.3``…)."""
        if self.linear is None or not self.blend_on_val:
            candidates = [("", self.predict_batch(batch))]
        else:
            lin, out = self.forecast_parts(batch)
            candidates = [(blend_tag(w), lin + w * out) for w in BLEND_GRID]
        mask = batch["y_mask"]
        m = mask.to(batch["y"].dtype)
        n = m.sum()  # observed targets: the denominator of every val metric (Σ over batches and ranks)
        for tag, pred in candidates:
            err = to_original(pred, batch) - to_original(batch["y"], batch)
            self._val.add(f"val/loss{tag}", self._loss(pred, batch["y"], mask) * n, n)
            self._val.add(f"val/mse{tag}", ((err**2) * m).sum(), n)
            self._val.add(f"val/mae{tag}", (err.abs() * m).sum(), n)

    def on_validation_epoch_end(self) -> None:
        """Log the epoch's means (reduced over ranks); with the linear path, first set the
        Transformer's weight to the best on these windows (:meth:`LinearPath.choose`)."""
        values = self._val.compute()
        if self.linear is not None and self.blend_on_val:
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
        if self.linear is not None and self.blend_on_val:
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
