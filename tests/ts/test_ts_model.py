"""The forecaster's pieces: patching, RevIN, channel modes, loss masks, periods, baselines, lookbacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.timeseries.datamodule import TimeSeriesDataModule
from pipelines.eval.extrapolation import evaluate
from pipelines.tasks.base import log_by_length
from pipelines.tasks.forecast.baselines import (
    ForecastBaselines,
    LinearBaseline,
    masked_errors,
    seasonal_naive,
)
from pipelines.tasks.forecast.layers import RevIN, patch_positions, patchify, with_periods
from pipelines.tasks.forecast.metrics import (
    ForecastErrors,
    forecast_figure,
    lookback_table,
)
from pipelines.tasks.forecast.model import Forecaster
from posenc import PeriodicRoPE, PosencError
from tests.helpers import dm_kwargs, task

TINY = dict(d_model=16, n_heads=2, n_layers=2)


def tiny(**kw) -> Forecaster:
    torch.manual_seed(0)
    return task(Forecaster, **{**TINY, "pe": {"class_path": "posenc.RoPE"}, **kw})


def test_patchify_groups_consecutive_steps():
    x = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(2, 8, 3)  # (B, L, F)
    p = patchify(x, 4)
    assert p.shape == (2, 2, 12)  # (B, L/P, P·F)
    torch.testing.assert_close(p[1, 1], x[1, 4:8].reshape(-1))  # step-major inside a token
    with pytest.raises(PosencError, match="lookback 8 is not a multiple of patch_len=3"):
        patchify(x, 3)


def test_patch_positions_are_patch_indices_or_scaled_times():
    idx = torch.arange(12).expand(2, 12)
    assert patch_positions(idx, 4).tolist() == [[0, 1, 2], [0, 1, 2]]
    t = torch.tensor([[0.0, 1, 2, 5, 6, 7, 8, 9]])  # irregular: a 3-step gap after t = 2
    torch.testing.assert_close(patch_positions(t, 2), torch.tensor([[0.0, 1.0, 3.0, 4.0]]))  # start / P


@pytest.mark.parametrize(("channel_independent", "patch_len", "head"),
                         [(True, 1, "query"), (True, 4, "last"), (False, 4, "mean"), (False, 2, "query")])
def test_forward_shapes_and_token_positions(channel_independent, patch_len, head):
    model = tiny(n_targets=3, n_covariates=2, horizon=5, patch_len=patch_len,
                 channel_independent=channel_independent, head=head)
    seen = {}
    model.backbone.register_forward_hook(lambda m, args, out: seen.update(x=args[0], pos=args[1]))
    x, cov = torch.randn(4, 16, 3), torch.randn(4, 16, 2)
    y = model(x, cov, torch.arange(16))
    assert y.shape == (4, 5, 3)
    n_tok = 16 // patch_len + (head == "query")
    assert seen["x"].shape == ((12 if channel_independent else 4), n_tok, 16)  # (B·C or B, tokens, D)
    assert seen["pos"].tolist() == list(range(n_tok))  # patch index; the query token sits right after
    assert model.embed.in_features == patch_len * ((1 if channel_independent else 3) + 2)


@pytest.mark.parametrize("pe", ["posenc.RoPE", "posenc.ALiBi", "posenc.Sinusoidal"])
def test_time_positions_match_step_indices_on_a_regular_series(pe):
    model = tiny(n_targets=1, horizon=3, patch_len=4, pe={"class_path": pe}).eval()
    x = torch.randn(2, 16, 1)
    torch.testing.assert_close(model(x, pos=torch.arange(16.0)), model(x, pos=torch.arange(16)),
                               rtol=1e-5, atol=1e-5)


def test_channel_independent_forecasts_each_channel_alone():
    model = tiny(n_targets=2, horizon=4, patch_len=2).eval()
    x = torch.randn(1, 8, 2)
    other = x.clone()
    other[..., 1] += torch.randn(1, 8)  # change channel 1 only
    torch.testing.assert_close(model(x)[..., 0], model(other)[..., 0])


def test_revin_round_trip_and_shift_invariance():
    rev = RevIN(2)
    with torch.no_grad():
        rev.weight.fill_(1.7)
        rev.bias.fill_(-0.3)
    x = torch.randn(3, 10, 2, dtype=torch.float64)
    z, mu, sd = rev.normalize(x)
    torch.testing.assert_close(rev.denormalize(z[:, :4], mu, sd), x[:, :4], rtol=1e-5, atol=1e-5)
    model = tiny(n_targets=1, horizon=3, patch_len=2).eval()
    x = torch.randn(2, 8, 1)
    torch.testing.assert_close(model(x + 100.0), model(x) + 100.0, rtol=1e-4, atol=1e-3)


def test_loss_ignores_targets_outside_the_loss_mask():
    model = tiny(horizon=4, patch_len=2).eval()
    batch = {"x": torch.randn(2, 8, 1), "cov": torch.zeros(2, 8, 0), "pos": torch.arange(8).expand(2, 8),
             "y": torch.randn(2, 4, 1), "loss_mask": torch.ones(2, 4, 1, dtype=torch.bool)}
    batch["loss_mask"][0, 1:3] = False  # filled targets
    before = model.training_step(batch, 0)
    batch["y"][0, 1:3] = 1e6
    torch.testing.assert_close(model.training_step(batch, 0), before)


def test_periods_reach_periodic_rope_and_are_refused_elsewhere():
    pe = {"class_path": "posenc.PeriodicRoPE", "init_args": {"periods": [3.0]}}
    model = tiny(pe=pe, pe_periods=[6.0, 24.0])
    assert isinstance(model.pe, PeriodicRoPE) and model.pe.periods == [6.0, 24.0]
    assert model.hparams["pe"]["init_args"]["periods"] == [6.0, 24.0]  # checkpoints rebuild the same pins
    factory = with_periods(lambda d, h, **kw: PeriodicRoPE(d, h, **kw), [4.0])
    assert factory(16, 2).periods == [4.0]
    with pytest.raises(PosencError, match="takes no 'periods' argument"):
        with_periods(lambda d, h, **kw: __import__("posenc").RoPE(d, h, **kw), [4.0])(16, 2)
    with pytest.raises(PosencError, match="data.periods is set"):
        with_periods(None, [4.0])


# ------------------------------------------------------------------------------ baselines
def test_seasonal_naive_is_exact_on_a_pure_sine():
    t = np.arange(500)
    values = np.sin(2 * np.pi * t / 48)[:, None]
    starts = np.arange(100, 400, 7)
    for horizon in (12, 48, 100):  # shorter than, equal to and longer than a period
        pred = seasonal_naive(values, starts, horizon, 48)
        truth = values[starts[:, None] + np.arange(horizon)]
        np.testing.assert_allclose(pred, truth, atol=1e-12)
        past_only = values.copy()
        past_only[starts[0]:] = np.nan  # nothing at or after the forecast start may be used
        assert np.isfinite(seasonal_naive(past_only, starts[:1], horizon, 48)).all()
    with pytest.raises(PosencError, match="reaches before the start"):
        seasonal_naive(values, np.array([10]), 4, 48)


def test_linear_baseline_matches_the_oracle_on_a_linear_recurrence():
    rng = np.random.default_rng(0)
    v = np.zeros(3000)
    for i in range(2, len(v)):
        v[i] = 1.6 * v[i - 1] - 0.9 * v[i - 2] + rng.normal()
    starts = np.arange(10, len(v) - 3)
    x = v[starts[:, None] + np.arange(-10, 0)][..., None]  # (n, 10, 1)
    y = v[starts[:, None] + np.arange(3)][..., None]  # (n, 3, 1)
    oracle = np.zeros_like(y[..., 0])
    a, b = x[:, -1, 0], x[:, -2, 0]
    for h in range(3):  # iterate the true recurrence without noise
        oracle[:, h] = 1.6 * a - 0.9 * b
        a, b = oracle[:, h], a
    lin = LinearBaseline(alpha=1e-6).fit(x[:2000], y[:2000])
    ones = np.ones_like(y[2000:], dtype=bool)
    got = masked_errors(lin.predict(x[2000:]), y[2000:], ones)["mse"]
    best = masked_errors(oracle[2000:, :, None], y[2000:], ones)["mse"]
    assert got < 1.05 * best and best < 0.3 * y.var()  # multi-step noise floor ≈ 0.21 var


def test_masked_errors_skip_unobserved_targets():
    pred, truth = np.zeros((1, 3, 1)), np.array([[[1.0], [100.0], [-2.0]]])
    mask = np.array([[[True], [False], [True]]])
    assert masked_errors(pred, truth, mask) == {"mse": 2.5, "mae": 1.5}


def test_baselines_use_given_windows_and_estimate_the_period(series_csv):
    dm = TimeSeriesDataModule(**dm_kwargs(series_csv))
    cb = ForecastBaselines(season_period=None)
    assert cb.period(dm) == 24
    every = cb.compute(dm)
    some = cb.compute(dm, dm.starts["test"][:5])
    assert every["n_windows"] == len(dm.starts["test"]) and some["n_windows"] == 5
    assert some["seasonal_naive_mse"] != every["seasonal_naive_mse"]
    assert every["linear_mse"] < every["seasonal_naive_mse"] < 2.0  # noise 0.1, amplitude 3


# ------------------------------------------------------------------------------ lookbacks
def test_forecast_errors_accumulate_per_horizon_step():
    acc = ForecastErrors(2)
    pred, truth = torch.zeros(2, 2, 1), torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]]])
    acc.add(pred, truth, torch.tensor([[[True], [True]], [[True], [False]]]))
    np.testing.assert_allclose(acc.by_horizon()["mse"], [5.0, 4.0])
    assert acc.mse == pytest.approx(14 / 3) and acc.mae == pytest.approx(2.0)


def test_the_length_sweep_marks_lookbacks_a_learned_table_cannot_hold_undefined(series_csv):
    dm = TimeSeriesDataModule(**dm_kwargs(series_csv, eval_stride=8))
    learned = tiny(horizon=6, patch_len=4, n_covariates=1, pe={"class_path": "posenc.Learned",
                                                                "init_args": {"max_len": 16}})
    res = evaluate(learned, dm, lengths=[24, 48, 96])
    assert res.lengths == [24, 48, 96]
    assert res.undefined() == [96]  # 12 + 1 tokens fit in 16 positions, 24 + 1 do not


def test_lookback_metrics_are_logged_with_step_equal_to_lookback():
    class Recorder:
        def __init__(self):
            self.metrics, self.params = [], {}

        def log_metrics(self, metrics, step=None):
            self.metrics.append((step, dict(metrics)))

        def log_hyperparams(self, params):
            self.params.update(params)

    acc = ForecastErrors(1)
    acc.add(torch.zeros(1, 1, 1), torch.full((1, 1, 1), 2.0), torch.ones(1, 1, 1, dtype=torch.bool))
    rec = Recorder()
    errors = {"mse": acc.mse, "mae": acc.mae}
    log_by_length(rec, {96: errors, 48: errors}, [192], axis="lookback")
    curve = [(step, m["test/mse_by_lookback"]) for step, m in rec.metrics if "test/mse_by_lookback" in m]
    assert curve == [(48, 4.0), (96, 4.0)]
    assert {"test/mse_L48", "test/mae_L96"} <= {k for _, m in rec.metrics for k in m}
    assert rec.params == {"extrapolation/undefined_lookbacks": "192"}
    assert lookback_table({48: acc, 192: None}) == "lookback,mse,mae,defined\n48,4,2,true\n192,,,false\n"


def test_forecast_figure_draws_the_seasonal_naive_from_each_lookback():
    """The dashed line repeats the lookback one period back; a period longer than it draws nothing."""
    rng = np.random.default_rng(0)
    ex = {"x": rng.normal(size=(12, 2)), "y": rng.normal(size=(5, 2)), "pred": rng.normal(size=(5, 2)),
          "mask": np.ones((5, 2), bool), "title": "w"}
    fig = forecast_figure([ex], horizon=5, lookback=12, channel=1, period=4)
    (naive,) = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("seasonal naive")]
    expected = [ex["x"][8 + h % 4, 1] for h in range(5)]  # x[L + h − 4·ceil((h + 1)/4)]
    np.testing.assert_allclose(naive.get_ydata(), expected)
    labels = {line.get_label() for line in forecast_figure([ex], 5, 12, period=13).axes[0].get_lines()}
    assert not any(label.startswith("seasonal naive") for label in labels)


def test_time_blocks_cut_the_test_windows_in_time_order_and_sum_to_the_sweep_metric(series_csv):
    from pipelines.eval.extrapolation import adapter_for, score_loader

    dm = TimeSeriesDataModule(**dm_kwargs(series_csv, eval_stride=8, time_block=3))
    n = len(dm.starts["test"])
    ids = dm.dataset("test").window_blocks
    assert ids.tolist() == [i // 3 for i in range(n)] and dm.dataset("train").window_blocks is None
    model = tiny(horizon=6, patch_len=4, n_covariates=1).eval()
    adapter = adapter_for(model)
    loader = torch.utils.data.DataLoader(dm.dataset("test"), batch_size=5)  # batches cut across blocks
    with torch.no_grad():
        r = score_loader(model, adapter, "trained", 24, loader)
        per_window = torch.cat([adapter.score_windows(model, b)[0] for b in loader]).numpy()
    assert r.blocks.shape == (-(-n // 3), 2) and r.blocks[:, 1].sum() == n * 6
    ids = np.arange(n) // 3  # contiguous blocks of 3 windows, the last one the remainder
    np.testing.assert_allclose(r.blocks[:, 0], np.bincount(ids, per_window), rtol=1e-9)
    assert r.metric == pytest.approx(r.blocks[:, 0].sum() / r.blocks[:, 1].sum(), rel=1e-9)
    with pytest.raises(PosencError, match="time_block"):
        TimeSeriesDataModule(**dm_kwargs(series_csv, time_block=0))
