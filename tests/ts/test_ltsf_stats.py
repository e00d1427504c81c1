"""The Holt-Winters ETS baseline (pipelines.studies.ltsf.stats): its recursions against statsmodels'
own forecasts, rolling origin without refit, and its wiring into the LTSF benchmark."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from datamodules.timeseries.ltsf import scale_protocol, scaled_errors
from pipelines.studies.ltsf import stats as ltsf_stats
from pipelines.studies.ltsf.models import missing_package
from tests.helpers import ROOT, migrated_store, runs

needs_statsmodels = pytest.mark.skipif(missing_package("statsmodels") is not None,
                                       reason="statsmodels is not installed (the optional ltsf extra)")


def seasonal_series(n: int = 600, c: int = 2, seed: int = 0) -> np.ndarray:
    """(n, c) float64: a daily cycle, a drifting level and noise, different per channel."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    cycle = np.sin(2 * np.pi * t / 24) * (1 + np.arange(c)) + 0.3 * np.cos(2 * np.pi * t / 12)
    return cycle + 0.002 * t * (1 - np.arange(c)) + np.cumsum(rng.normal(0, 0.05, (n, c)), axis=0) + \
        rng.normal(0, 0.1, (n, c))


def hourly_csv(path, n: int = 14400) -> object:
    """:func:`seasonal_series` (n rows) as an hourly CSV file with columns date, a, b."""
    frame = pd.DataFrame(seasonal_series(n), columns=["a", "b"])
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S"))
    frame.to_csv(path, index=False)
    return path


def small_protocol() -> object:
    """:func:`seasonal_series` under the protocol's arithmetic with borders 600 / 800 / 1000."""
    return scale_protocol(seasonal_series(1000), ["a", "b"], borders=(600, 800, 1000))


def benchmark_runs(tmp_path) -> tuple[object, list]:
    """(the benchmark's parent run, its children) in tmp_path's store."""
    _, every = runs(tmp_path)
    parent = [r for r in every if r.data.tags.get("posenc.ltsf") == "parent"]
    assert len(parent) == 1
    return parent[0], [r for r in every if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]


def textbook(fit: object, steps: int, phi: float) -> np.ndarray:
    """statsmodels' forecast of ``steps`` from a fitted ``ExponentialSmoothing``, with the steps that
    are a multiple of the period 24 put back to Hyndman & Athanasopoulos' l_T + φ_h·b_T + s_T from its
    own final states: 0.15.0 uses s_(T−24) there (statsmodels issue 9538, fixed upstream after 0.15.0)."""
    out = np.array(fit.forecast(steps), dtype=np.float64)
    h = np.arange(1, steps + 1)
    every = h % 24 == 0
    trend = 0.0 if fit.trend is None else fit.trend[-1]
    out[every] = fit.level[-1] + np.cumsum(phi**h)[every] * trend + fit.season[-1]
    return out


def statsmodels_fit(y: np.ndarray, model: ltsf_stats.HoltWinters, c: int, form: str) -> object:
    """statsmodels' ``ExponentialSmoothing`` over ``y`` with channel c's fixed parameters (no fitting)."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    trend, damped = ltsf_stats.FORMS[form]
    init = {"initial_level": model.level0[c], "initial_seasonal": model.season0[:, c]}
    params = {"smoothing_level": model.alpha[c], "smoothing_seasonal": model.gamma[c]}
    if trend:
        init["initial_trend"] = model.trend0[c]
        params["smoothing_trend"] = model.beta[c]
    if damped:
        params["damping_trend"] = model.phi[c]
    es = ExponentialSmoothing(y, trend=trend, damped_trend=damped, seasonal="add", seasonal_periods=24,
                              initialization_method="known", **init)
    return es.fit(**params, optimized=False)


def with_smoothing(model: ltsf_stats.HoltWinters, form: str) -> ltsf_stats.HoltWinters:
    """``model`` with every smoothing parameter well inside (0, 1): the season and trend move (the
    least-squares fits of the test series keep γ at 0, which would leave the seasonal update untested)."""
    trend, damped = ltsf_stats.FORMS[form]
    c = len(model.alpha)
    alpha, beta, gamma, phi = 0.4, 0.2 if trend else 0.0, 0.3, 0.9 if damped else 1.0
    return ltsf_stats.HoltWinters(*(np.full(c, v) for v in (alpha, beta, gamma, phi)), model.level0,
                                  model.trend0, model.season0)


@needs_statsmodels
@pytest.mark.parametrize("form", list(ltsf_stats.FORMS))
def test_recursion_equals_statsmodels_at_the_train_end_and_a_later_origin(form):
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    values, n_train, steps = seasonal_series(), 400, 60
    fitted, converged = ltsf_stats.fit(values[:n_train], form)
    assert all(converged) and fitted.season0.shape == (24, 2)
    trend, damped = ltsf_stats.FORMS[form]
    origins = np.array([n_train, 517])
    for model in (fitted, with_smoothing(fitted, form)):
        ours = ltsf_stats.forecast(model, ltsf_stats.states(model, values), origins, steps)  # (2, steps, 2)
        for c in range(2):
            if model is fitted:  # statsmodels' own fit of the train rows and its forecast
                own = ExponentialSmoothing(values[:n_train, c], trend=trend, damped_trend=damped,
                                           seasonal="add", seasonal_periods=24,
                                           initialization_method="estimated").fit()
                expected = textbook(own, steps, model.phi[c])
                np.testing.assert_allclose(ours[0, :, c], expected, rtol=0, atol=1e-8)
            for i, t in enumerate(origins):  # the same fixed parameters, statsmodels run over rows [0, t)
                expected = textbook(statsmodels_fit(values[:t, c], model, c, form), steps, model.phi[c])
                np.testing.assert_allclose(ours[i, :, c], expected, rtol=0, atol=1e-8)
        assert not np.allclose(ours[0], ours[1])  # the later origin's state moved on
    moved = statsmodels_fit(values[:n_train, 0], with_smoothing(fitted, form), 0, form)
    assert abs(textbook(moved, 24, 1.0)[-1] - moved.forecast(24)[-1]) > 1e-3  # the correction is exercised


@needs_statsmodels
def test_pick_takes_each_channels_parameters_from_its_form():
    values = seasonal_series()[:400]
    damped, _ = ltsf_stats.fit(values, "damped")
    level, _ = ltsf_stats.fit(values, "level")
    mixed = damped.pick([level], np.array([1, 0]))
    assert (mixed.alpha[0], mixed.alpha[1]) == (level.alpha[0], damped.alpha[1])
    assert mixed.phi[0] == 1.0 and mixed.phi[1] == damped.phi[1] and mixed.trend0[0] == 0.0
    np.testing.assert_array_equal(mixed.season0[:, 0], level.season0[:, 0])
    np.testing.assert_array_equal(mixed.season0[:, 1], damped.season0[:, 1])


@needs_statsmodels
def test_ets_scores_the_windows_the_other_baselines_score():
    from pipelines.studies.ltsf.run import baseline_runner, parse_args, row_for

    data = small_protocol()
    args = parse_args(["--data", "x.csv", "--out", "o", "--lookback", "48", "--horizons", "8"])
    rows = {name: row_for((name, 8, 0, None), baseline_runner(name)(data, 48, 8, 0), data, args)
            for name in ("naive", "ridge", "ets")}
    assert rows["ets"]["n_test_windows"] == rows["naive"]["n_test_windows"] == 200 - 8 + 1
    assert rows["ets"]["n_test_windows"] == rows["ridge"]["n_test_windows"]
    assert all(np.isfinite(rows["ets"][k]) for k in ("test/mse_scaled", "test/mae_scaled", "val/mse_scaled"))
    assert "forms=a:" in rows["ets"]["chosen"] and "refit=none (rolling origin)" in rows["ets"]["chosen"]


@needs_statsmodels
def test_ets_beats_seasonal_naive_on_a_noisy_daily_cycle():
    from pipelines.studies.ltsf.models import seasonal_naive_run

    data = small_protocol()
    truth = data.windows("test", 48, 12)[1]
    ets = ltsf_stats.ets_run(data, 48, 12, seed=0)
    naive = seasonal_naive_run(data, 48, 12, seed=0)
    assert ets.pred.shape == truth.shape
    assert scaled_errors(ets.pred, truth)["mse_scaled"] < scaled_errors(naive.pred, truth)["mse_scaled"]


SMALL_RUN = ("--lookback", "32", "--horizons", "8", "--seeds", "0")


def test_absent_statsmodels_makes_the_runner_a_reason(monkeypatch):
    from pipelines.studies.ltsf.run import baseline_runner

    assert baseline_runner("ets") is ltsf_stats.ets_run or missing_package("statsmodels") is not None
    monkeypatch.setitem(sys.modules, "statsmodels", None)  # `import statsmodels` raises ImportError
    assert missing_package("statsmodels") is not None
    assert baseline_runner("ets") == "statsmodels is not installed (pip install -e '.[ltsf]')"


@pytest.mark.slow
def test_absent_statsmodels_is_skipped_with_a_logged_reason(tmp_path, monkeypatch, capsys):
    from pipelines.studies.ltsf.run import run

    monkeypatch.setitem(sys.modules, "statsmodels", None)  # `import statsmodels` raises ImportError
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{migrated_store(tmp_path / 'mlflow.db')}")
    data = hourly_csv(tmp_path / "tiny.csv")
    run(["--data", str(data), *SMALL_RUN, "--baselines", "naive", "ets", "--configs",
         "--out", str(tmp_path / "out")])
    reason = "statsmodels is not installed (pip install -e '.[ltsf]')"
    assert f"skipped ets: {reason}" in capsys.readouterr().err.splitlines()
    assert list(pd.read_csv(tmp_path / "out" / "results.csv").model) == ["naive"]
    assert f"- ets: {reason}" in (tmp_path / "out" / "summary.md").read_text()
    parent, children = benchmark_runs(tmp_path)
    assert parent.data.tags["posenc.ltsf.skipped.ets"] == reason and len(children) == 1


@needs_statsmodels
@pytest.mark.slow
def test_benchmark_command_runs_ets_beside_the_baselines(tmp_path):
    data = hourly_csv(tmp_path / "tiny.csv")
    cmd = [sys.executable, "-m", "pipelines.studies.ltsf", "--data", str(data), *SMALL_RUN,
           "--baselines", "naive", "ridge", "ets", "--configs", "--out", str(tmp_path / "out")]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "out" / "results.csv").set_index("model")
    assert list(rows.index) == ["naive", "ridge", "ets"] and (rows.n_test_windows == 2880 - 8 + 1).all()
    assert rows.loc["ets", "test/mse_scaled"] < rows.loc["naive", "test/mse_scaled"]  # noise, not a new cycle
    _, children = benchmark_runs(tmp_path)
    ets = next(c for c in children if c.data.tags["posenc.ltsf.model"] == "ets")
    assert ets.data.metrics["test/mse_scaled"] == rows.loc["ets", "test/mse_scaled"]
    assert ets.data.tags["posenc.ltsf.chosen"].startswith("period=24; forms=a:")


@needs_statsmodels
def test_ets_season_is_a_day_in_the_files_rows_as_seasonal_naives_lag():
    data = small_protocol()
    data.period = 12  # e.g. a day of two-hour rows; Weather's is 144 (ten minutes)
    assert ltsf_stats.ets_run(data, 48, 8, seed=0).params["period"] == 12


@needs_statsmodels
def test_ets_fits_each_files_train_rows_once_for_every_horizon(monkeypatch):
    calls = []
    real = ltsf_stats.fit
    monkeypatch.setattr(ltsf_stats, "fit", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    monkeypatch.setattr(ltsf_stats, "_FITTED", {})
    data = small_protocol()
    first = ltsf_stats.ets_run(data, 48, 8, seed=0)
    again = ltsf_stats.ets_run(data, 48, 12, seed=0)  # another horizon: the same fits
    assert sorted(calls) == sorted(ltsf_stats.FORMS)  # each form fitted once, for both horizons
    assert first.pred.shape[1:] == (8, 2) and again.pred.shape[1:] == (12, 2)
    data.values[:10] += 1.0  # other train rows: fitted anew
    ltsf_stats.ets_run(data, 48, 8, seed=0)
    assert len(calls) == 2 * len(ltsf_stats.FORMS)
