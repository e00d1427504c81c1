"""The LTSF benchmark as a family: the ETT and ``custom`` split rules, the protocol recognised from
the file, Weather's quirks kept and reported, and the documented ``make benchmark-ltsf`` command run
with every shipped config (DLinear included) at tiny size."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from datamodules.timeseries.ltsf import (
    custom_borders,
    detect_protocol,
    ett_borders,
    n_windows,
    read_ltsf,
    split_bounds,
)
from pipelines.studies.ltsf.models import load_model_config
from posenc import PosencError
from tests.docs_commands import Command, Snippet, make_commands
from tests.helpers import shared_data, task

ROOT = Path(__file__).resolve().parents[2]
SHARED = shared_data()
WEATHER = SHARED / "weather" / "weather.csv"
ETTH1 = SHARED / "ETT" / "ETTh1.csv"


def shared(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path.name} not found at {path} (set POSENC_SHARED_DATA to the shared data folder)")
    return path


def test_protocol_is_recognised_from_the_file_name():
    assert [detect_protocol(n) for n in ("ETTh1.csv", "data/ETTm2.csv", "weather.csv", "ETT.csv")] == [
        "ett", "ett", "custom", "custom"]


def test_split_rows_of_both_rules():
    assert ett_borders(60) == (8640, 11520, 14400)  # 12 / 4 / 4 months of hours
    assert ett_borders(15) == (34560, 46080, 57600)  # ETTm: four rows an hour
    with pytest.raises(PosencError, match="x.csv: the ETT protocol needs a step that divides an hour"):
        ett_borders(10 * 60, "x.csv")
    assert custom_borders(52696) == (36887, 42157, 52696)  # Weather: 0.7 / 0.1 / 0.2 of the rows
    assert custom_borders(17420) == (12194, 13936, 17420)


@pytest.mark.parametrize("borders,lookback,horizon,split,expected", [
    ((36887, 42157, 52696), 336, 96, "test", 10539 - 96 + 1),  # Weather: every test window
    ((36887, 42157, 52696), 336, 720, "val", 5270 - 720 + 1),
    ((36887, 42157, 52696), 336, 96, "train", 36887 - 336 - 96 + 1),
    ((34560, 46080, 57600), 336, 96, "test", 11520 - 96 + 1),  # ETTm
])
def test_window_counts_of_both_rules(borders, lookback, horizon, split, expected):
    assert n_windows(split_bounds(borders[2], borders)[split], lookback, horizon) == expected


def quirky_csv(path: Path, n: int = 1000) -> Path:
    """Weather's quirks in small: CRLF endings, U+FFFD in a header name, -9999 sentinels, a repeated
    timestamp, 10-minute steps."""
    t = np.arange(n)
    frame = pd.DataFrame({"date": pd.date_range("2020-01-01 00:10", periods=n, freq="10min"),
                          "p (mbar)": 1000 + np.sin(2 * np.pi * t / 144), "PAR (\ufffdmol/m\ufffd/s)":
                          np.cos(2 * np.pi * t / 144), "OT": np.sin(2 * np.pi * t / 72) + 0.01 * t})
    frame.loc[[5, 700], "OT"] = -9999.0
    frame.loc[11, "date"] = frame.loc[10, "date"]  # as in Weather, rows are taken in file order
    frame["date"] = frame["date"].dt.strftime("%Y-%m-%d %H:%M:%S")
    path.write_bytes(frame.to_csv(index=False, lineterminator="\r\n").encode("utf-8"))
    return path


def test_weather_like_file_keeps_and_reports_its_sentinels(tmp_path):
    from pipelines.studies.ltsf.run import describe_data

    data = read_ltsf(quirky_csv(tmp_path / "station.csv"))
    assert data.protocol == "custom" and data.bounds["test"] == (800, 1000)
    assert data.columns[1] == "PAR (\ufffdmol/m\ufffd/s)" and data.sentinels == {"OT": 2}
    assert data.period == 144  # a day of 10-minute rows: seasonal naive's lag
    train = data.starts("train", 32, 8)  # windows touching row 5's sentinel are not trained on
    assert train[0] == 38 and len(train) == 700 - 8 - 38 + 1
    assert len(data.starts("val", 32, 8)) == 100 - 8 + 1  # row 700's is in val: every window scored
    line = describe_data(data)
    assert "custom protocol, 3 channels" in line and "OT: 2" in line
    assert read_ltsf(tmp_path / "station.csv", protocol="custom", borders=(600, 800, 1000)).bounds[
        "val"] == (600, 800)


def test_weather_loads_with_its_quirks():
    data = read_ltsf(shared(WEATHER))
    assert data.protocol == "custom" and data.values.shape == (52696, 21)
    assert data.bounds == {"train": (0, 36887), "val": (36887, 42157), "test": (42157, 52696)}
    assert sum("\ufffd" in c for c in data.columns) == 3
    assert data.sentinels == {"wv (m/s)": 1, "max. PAR (\ufffdmol/m\ufffd/s)": 30, "OT": 50}
    assert len(data.starts("test", 336, 96)) == 10444


def makefile_list(name: str) -> list[str]:
    """A list ``make benchmark-ltsf`` passes (``LTSF_CONFIGS``, ``LTSF_ENSEMBLE``, …), from the Makefile."""
    text = (ROOT / "Makefile").read_text()
    found = re.search(rf"^{name} \?= (.+)$", text, flags=re.M)
    assert found, f"the Makefile defines no {name}"
    return found.group(1).split()


def makefile_configs() -> list[str]:
    return makefile_list("LTSF_CONFIGS")


def shipped_configs() -> list[str]:
    """The Makefile's configs, then every other shipped model config (those with ``trainer:``)."""
    listed = makefile_configs()
    others = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "configs" / "ltsf").glob("*.yaml"))
              if "trainer" in (yaml.safe_load(p.read_text()) or {})]
    return listed + [p for p in others if p not in listed]


def documented_command(tmp_path: Path, data: Path, configs: list[str], *size: str,
                       jobs: str | None = None) -> subprocess.CompletedProcess:
    """Run what ``make benchmark-ltsf DATA=…`` runs, read from ``make -n`` (its configs, baselines,
    ensemble, choice and workers; ``configs`` and ``jobs`` set LTSF_CONFIGS and LTSF_JOBS), one epoch,
    at ``size`` (passed as ``ARGS``, which the recipe puts last, so they win)."""
    make = ("make", "benchmark-ltsf", f"DATA={data}", f"OUT={tmp_path / 'out'}",
            f"LTSF_CONFIGS={' '.join(configs)}", f"ARGS={' '.join(['--max-epochs', '1', *size])}",
            *([f"LTSF_JOBS={jobs}"] if jobs else []))
    code, runs = make_commands(Command(Snippet(ROOT / "Makefile", 0, " ".join(make), True), make, False))
    assert code == 0 and len(runs) == 1, f"make -n {' '.join(make[1:])}: exit {code}, {runs}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *runs[0][1:]], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=900)


@pytest.mark.parametrize("which", ["makefile", pytest.param("all", marks=pytest.mark.slow)])
def test_documented_command_runs_every_shipped_config(tmp_path, which):
    """The Makefile's configs in the fast suite (~30 s on an idle 2-core host); every shipped model
    config (the paper-budget ones too) in the slow one."""
    configs = makefile_configs() if which == "makefile" else shipped_configs()
    assert "configs/ltsf/dlinear.yaml" in configs
    done = documented_command(tmp_path, quirky_csv(tmp_path / "station.csv", n=1200), configs,
                              "--lookback", "64", "--horizons", "8", "--seeds", "0",
                              "--baselines", "naive", "ridge")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    names = {load_model_config(ROOT / c)["name"] for c in configs}
    ensemble = "+".join(makefile_list("LTSF_ENSEMBLE"))
    assert set(rows.model) == names | {"naive", "ridge", ensemble}
    assert rows["test/mse_scaled"].notna().all() and (rows.n_test_windows == 240 - 8 + 1).all()
    assert not list((tmp_path / "out" / "predictions").rglob("*.npy"))  # the members' forecasts deleted
    assert "sentinel -9999 values kept" in done.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert f"## Chosen on val among {', '.join(makefile_list('LTSF_CHOOSE'))}" in summary


@pytest.mark.slow
def test_workers_give_the_rows_of_one_process(tmp_path):
    """``--jobs 2`` (the Makefile's) trains each child in a worker process from its own seed: the same
    numbers as ``--jobs 1``, every row, baselines included."""
    data = quirky_csv(tmp_path / "station.csv", n=1200)
    configs = ["configs/ltsf/posenc.yaml", "configs/ltsf/forecaster_extrapolate.yaml"]
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        done = documented_command(out, data, configs, "--lookback", "64", "--horizons", "8", "16",
                                  "--seeds", "0", "1", "--baselines", "naive", "ridge", jobs=jobs)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = pd.read_csv(out / "out" / "results.csv").sort_values(["model", "horizon", "seed"])
        columns = ["model", "horizon", "seed", "test/mse_scaled", "val/mse_scaled"]
        tables.append(rows[columns].reset_index(drop=True))
    assert len(tables[0]) == 2 * 2 * 2 + 2 * 2 + 2 * 2  # configs, baselines, the ensemble
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", [ETTH1, WEATHER], ids=["ETTh1", "weather"])
def test_documented_command_on_the_real_files(tmp_path, path):
    done = documented_command(tmp_path, shared(path), makefile_configs(), "--horizons", "96", "--seeds", "0",
                              "--baselines", "naive")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(pd.read_csv(tmp_path / "out" / "results.csv")) == 1 + len(makefile_configs()) + 1  # + ensemble


def test_summary_prints_the_files_own_published_numbers():
    from pipelines.studies.ltsf.report import published_for

    assert published_for("/x/weather.csv")["PatchTST/42 (paper)"][96] == 0.152
    assert published_for("ETTh1.csv")["DLinear (paper)"][720] == 0.472
    assert published_for("ETTh2.csv") == {}  # no table the project has checked: none printed


def test_dlinear_has_no_dummy_transformer_and_old_checkpoints_load():
    import torch

    from pipelines.tasks.forecast.linear import DLinearForecaster

    model = task(DLinearForecaster, lookback=16, n_targets=2, horizon=4, plot_examples=0)
    assert not hasattr(model, "backbone") and not hasattr(model, "pe")  # a ForecastModule, no TransformerTask
    state = model.state_dict()
    assert sorted(state) == ["seasonal.bias", "seasonal.weight", "trend.bias", "trend.weight"]
    old = {**state, "backbone.norm.weight": torch.ones(2), "embed.weight": torch.zeros(2, 1)}  # dummy's
    ckpt = {"state_dict": old, "posenc_task": "ts_forecast_dlinear", "config_version": 3}
    fresh = task(DLinearForecaster, lookback=16, n_targets=2, horizon=4, plot_examples=0)
    fresh.on_load_checkpoint(ckpt)  # the checkpoint upgrade drops the dummy's weights
    fresh.load_state_dict(ckpt["state_dict"])
    x = torch.randn(3, 16, 2)
    assert torch.equal(fresh(x), model(x))


def test_weighted_ridge_equals_ridge_on_repeated_rows():
    from pipelines.tasks.forecast.baselines import LinearBaseline

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 5)), rng.normal(size=(40, 3, 1))
    w = rng.integers(1, 4, size=40)
    weighted = LinearBaseline.fit_path([2.0], x, y, weight=w)[0]
    repeated = LinearBaseline.fit_path([2.0 * w.sum() / len(x)], np.repeat(x, w, 0), np.repeat(y, w, 0))[0]
    np.testing.assert_allclose(weighted.predict(x), repeated.predict(x), rtol=1e-9, atol=1e-12)
