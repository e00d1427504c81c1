"""Every scheme config layered on ts_forecast.yaml through the real CLI (instantiated, one forward on a
test batch), and the periodic-RoPE config's calendar cycles. Apart from tests/ts/test_ts_cli.py so
that pytest-xdist's file-by-file scheduling can put the two on different workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers import seasonal_frame, ts_cli_args, write_csv

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "configs" / "ts_forecast.yaml"
PERIODIC = ROOT / "configs" / "ts_forecast_periodic_rope.yaml"
SCHEMES = sorted((ROOT / "configs" / "posenc").glob("*.yaml"))


def instantiate(tmp: Path, *configs: Path, extra: tuple[str, ...] = ()):
    from pipelines.cli import make_cli

    csv = tmp / "load.csv"
    if not csv.exists():
        write_csv(csv, seasonal_frame())
    args = [a for c in configs for a in ("--config", str(c))]
    return make_cli([*args, *ts_cli_args(csv), "--trainer.logger=false",
                     "--trainer.enable_progress_bar=false", *extra], run=False)


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda p: p.stem)
def test_every_scheme_config_layers_on_ts_forecast(tmp_path, scheme):
    cli = instantiate(tmp_path, TS, scheme)
    model, dm = cli.model, cli.datamodule
    assert model.pe.spec()["class_path"] == yaml.safe_load(scheme.read_text())["model"]["init_args"]["pe"][
        "class_path"]
    batch = next(iter(dm.test_dataloader()[0]))
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model.predict_batch(batch)).all()


def test_periodic_rope_config_pins_the_calendar_cycles():
    from datamodules import TimeSeriesDataModule
    from tests.helpers import flatten

    doc, base = yaml.safe_load(PERIODIC.read_text()), yaml.safe_load(TS.read_text())
    data = flatten(doc["data"]["init_args"], TimeSeriesDataModule)
    assert data["periods"] == "calendar"  # 48 and 336 steps on half-hourly vic_elec, 24 and 168 hourly
    assert doc["model"]["init_args"]["pe"]["class_path"] == "posenc.PeriodicRoPE"
    # the rest is the default config: only the encoding, the periods and the patch length differ
    for key in ("periods", "patch_len"):
        data.pop(key)
    base_data = flatten(base["data"]["init_args"], TimeSeriesDataModule)
    base_data.pop("patch_len"), base_data.pop("periods")
    assert data == base_data
    doc["model"]["init_args"].pop("pe"), base["model"]["init_args"].pop("pe")
    assert doc["model"] == base["model"] and doc["trainer"] == base["trainer"]


def test_periodic_rope_config_instantiates_with_token_periods(tmp_path):
    cli = instantiate(tmp_path, PERIODIC, extra=("--data.patch_len=4",))  # hourly toy data: calendar cycles
    assert cli.datamodule.periods == [24.0, 168.0] and cli.model.pe.periods == [6.0, 42.0]
    cli = instantiate(tmp_path, PERIODIC, extra=("--data.patch_len=4", "--data.periods=[24,96]"))
    assert cli.model.pe.periods == [6.0, 24.0]  # steps ÷ patch_len: positions count patches
    cli = instantiate(tmp_path, PERIODIC, extra=("--data.patch_len=2", "--data.periods=estimate",
                                                 "--data.lookback=96", "--data.eval_lookbacks=[96]"))
    assert cli.datamodule.periods == [24.0, 96.0] and cli.model.pe.periods == [12.0, 48.0]
