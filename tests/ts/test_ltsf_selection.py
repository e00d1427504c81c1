"""The LTSF benchmark's val readings: how a trained model's gain over its warm start spreads over val's
time (block_gain), the early-stopping val loader's stride, the ridge penalty grid."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.timeseries.ltsf import scaled_errors
from posenc import PosencError
from tests.helpers import small_csv, small_protocol


def test_block_gain_tells_a_gain_everywhere_from_one_on_a_few_weeks():
    from pipelines.studies.ltsf.fit import block_gain

    rng = np.random.default_rng(0)
    start = 1.0 + 0.05 * rng.random(1000)  # the warm start's per-window MSE, in time order
    steady = start * 0.98 * (1 + 0.005 * rng.standard_normal(1000))  # 2 % better everywhere
    gain = block_gain(start, steady, 10)
    assert gain.n == 10 and gain.lo > 0 and gain.mean == pytest.approx(-np.log(0.98), abs=2e-3)
    lucky = start.copy()
    lucky[:100] *= 0.5  # much better on one tenth of val, a little worse on the rest
    lucky[100:] *= 1.01
    assert np.mean(lucky) < np.mean(start)  # it wins the val average …
    assert block_gain(start, lucky, 10).lo < 0  # … but its gain is not called
    assert block_gain(steady, start, 10).hi < 0  # the sign: log(reference / candidate)


def test_block_gain_is_scale_free_so_one_stormy_block_does_not_decide():
    from pipelines.studies.ltsf.fit import block_gain

    start = np.ones(1000)
    start[300:400] = 50.0  # a stormy stretch: its MSE is 50 times the rest
    better = start * 0.95
    better[300:400] = 50.0 * 1.1  # 5 % better everywhere but the storm, 10 % worse there
    assert np.mean(better) > np.mean(start)  # the storm decides the val average …
    assert block_gain(start, better, 10).lo > 0  # … not the blocks' ratios (9 of 10 better)


def test_block_gain_refuses_errors_of_different_windows():
    from pipelines.studies.ltsf.fit import block_gain

    with pytest.raises(ValueError, match="one shape"):
        block_gain(np.ones(10), np.ones(9))


def test_val_stride_thins_the_early_stopping_loader_only(tmp_path):
    from datamodules.timeseries.config import LTSFSplit, LTSFWindows, Source
    from datamodules.timeseries.ltsf_data import LTSFDataModule

    source, split = Source(path=str(small_csv(tmp_path / "small.csv")), time_col="date"), LTSFSplit(
        borders=(600, 800, 1000))
    every = LTSFDataModule(source, split, LTSFWindows(lookback=48, horizon=8))
    thin = LTSFDataModule(source, split, LTSFWindows(lookback=48, horizon=8, val_stride=4))
    n = len(every.data.starts("val", 48, 8))
    assert len(every.val_dataloader().dataset) == n
    ds = thin.val_dataloader().dataset
    assert len(ds) == -(-n // 4)  # every 4th window, the first included, spread over all of val
    np.testing.assert_array_equal(ds.starts, every.data.starts("val", 48, 8)[::4])
    assert len(thin.eval_dataloader("test").dataset) == len(every.eval_dataloader("test").dataset)
    with pytest.raises(PosencError, match="val_stride"):
        LTSFWindows(lookback=48, horizon=8, val_stride=0)


def test_ridge_baseline_chooses_its_penalty_on_val_from_the_wide_grid():
    from pipelines.studies.ltsf.models import LTSF_ALPHA_BOUNDS, LTSF_ALPHAS, ridge_run
    from pipelines.tasks.forecast.baselines import RIDGE_ALPHAS, ridge_on_val

    assert LTSF_ALPHAS[0] == min(RIDGE_ALPHAS) and LTSF_ALPHAS[-1] == 1e6
    assert all(b == pytest.approx(10 * a) for a, b in zip(LTSF_ALPHAS, LTSF_ALPHAS[1:], strict=False))
    data = small_protocol()
    ridge = ridge_run(data, 48, 8, seed=0)
    assert LTSF_ALPHA_BOUNDS[0] <= ridge.params["alpha"] <= LTSF_ALPHA_BOUNDS[1]
    x, y = data.windows("train", 48, 8)
    rows = (x[:, :, 0], y[:, :, :1])
    fit, alpha = ridge_on_val(rows, lambda f: -f.alpha, alphas=(1e4, 1e5))  # the grid given is the one tried
    assert alpha == 1e5 and fit.alpha == 1e5
    fit, alpha = ridge_on_val(rows, lambda f: -f.alpha, alphas=(1e4, 1e5), bounds=(1e4, 1e5))
    assert alpha == 1e5  # bounds at the grid's ends: nothing past them
    assert scaled_errors(ridge.pred, data.windows("test", 48, 8)[1])["mse_scaled"] < 1e-3


@pytest.mark.parametrize("target", [1e-3, 0.1, 1e3, 1e6, 1e8, 1e12])
def test_the_penalty_grid_grows_past_the_edge_val_picks_until_it_picks_inside(target):
    """Val error |log10 α − log10 target|: an interior target is the grid's own choice (nothing else
    tried), one past an edge is reached a decade at a time, one past the bounds stops at the bound."""
    from pipelines.studies.ltsf.models import LTSF_ALPHA_BOUNDS, LTSF_ALPHAS
    from pipelines.tasks.forecast.baselines import LinearBaseline, ridge_on_val

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 12)), rng.normal(size=(200, 3, 1))
    tried = []

    def val_error(fit):
        tried.append(fit.alpha)
        return abs(np.log10(fit.alpha) - np.log10(target))

    fit, alpha = ridge_on_val((x, y), val_error, alphas=LTSF_ALPHAS, bounds=LTSF_ALPHA_BOUNDS)
    lo, hi = LTSF_ALPHA_BOUNDS
    assert alpha == pytest.approx(min(max(target, lo), hi), rel=1e-9)
    inside = LTSF_ALPHAS[0] < target < LTSF_ALPHAS[-1]
    assert len(tried) == len(LTSF_ALPHAS) if inside else len(tried) > len(LTSF_ALPHAS)
    assert all(lo * (1 - 1e-9) <= a <= hi * (1 + 1e-9) for a in tried)
    np.testing.assert_allclose(fit.coef, LinearBaseline(alpha).fit(x, y).coef, rtol=1e-10)
