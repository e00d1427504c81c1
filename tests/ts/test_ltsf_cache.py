"""The LTSF file parsed once: the cache keyed by the file's content (datamodules.timeseries.ltsf.load_ltsf)
that the benchmark's parent fills and its runs load, and the LTSF datamodule's typed groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from datamodules.timeseries import ltsf
from datamodules.timeseries.config import LTSFSplit, LTSFWindows, Source
from datamodules.timeseries.ltsf import load_ltsf, read_ltsf
from posenc import PosencError
from tests.helpers import nest, small_csv, workdir_with_store

BORDERS = (600, 800, 1000)


def sentinel_csv(path):
    """:func:`small_csv` with one -9999 value in the train rows (kept, counted, its windows left out)."""
    frame = pd.read_csv(small_csv(path))
    frame.loc[100, "c1"] = -9999.0
    frame.to_csv(path, index=False)
    return path


def assert_same(a, b) -> None:
    assert a.values.dtype == b.values.dtype and np.array_equal(a.values, b.values)  # to the bit
    assert (a.bounds, a.columns, a.source, a.protocol, a.sentinels, a.period) == (
        b.bounds, b.columns, b.source, b.protocol, b.sentinels, b.period)
    np.testing.assert_array_equal(a.sentinel_rows, b.sentinel_rows)
    for k in ("mean_", "scale_", "var_"):
        np.testing.assert_array_equal(getattr(a.scaler, k), getattr(b.scaler, k))
    np.testing.assert_array_equal(a.starts("train", 48, 8), b.starts("train", 48, 8))


def test_the_cached_series_is_the_parsed_one_to_the_bit_and_is_not_parsed_again(tmp_path, monkeypatch):
    path, cache = sentinel_csv(tmp_path / "s.csv"), tmp_path / "cache"
    fresh = read_ltsf(path, borders=BORDERS)
    first = load_ltsf(path, borders=BORDERS, cache_dir=cache)
    assert len(list(cache.glob("ltsf-*.npz"))) == 1 and first.sentinels == {"c1": 1}
    monkeypatch.setattr(ltsf, "read_ltsf", lambda *a, **k: pytest.fail("parsed again"))
    again = load_ltsf(path, borders=BORDERS, cache_dir=cache)
    assert_same(again, fresh)
    assert_same(first, fresh)


def test_an_edited_file_or_other_settings_get_an_entry_of_their_own(tmp_path):
    path, cache = small_csv(tmp_path / "s.csv"), tmp_path / "cache"
    before = load_ltsf(path, borders=BORDERS, cache_dir=cache)
    load_ltsf(path, borders=(500, 800, 1000), cache_dir=cache)
    assert len(list(cache.glob("ltsf-*.npz"))) == 2
    frame = pd.read_csv(path)
    frame.loc[0, "c0"] += 1.0  # same name, same size class, other bytes
    frame.to_csv(path, index=False)
    after = load_ltsf(path, borders=BORDERS, cache_dir=cache)
    assert len(list(cache.glob("ltsf-*.npz"))) == 3
    assert not np.array_equal(after.values, before.values)
    assert_same(after, read_ltsf(path, borders=BORDERS))


def test_a_damaged_entry_is_parsed_again_and_rewritten(tmp_path):
    path, cache = small_csv(tmp_path / "s.csv"), tmp_path / "cache"
    load_ltsf(path, borders=BORDERS, cache_dir=cache)
    entry = next(cache.glob("ltsf-*.npz"))
    entry.write_bytes(b"not an npz")
    assert_same(load_ltsf(path, borders=BORDERS, cache_dir=cache), read_ltsf(path, borders=BORDERS))
    assert np.load(entry, allow_pickle=False)["values"].shape == (1000, 2)


def test_the_datamodule_loads_from_the_cache_its_parent_filled(tmp_path, monkeypatch):
    from datamodules.timeseries import ltsf_data

    path, cache = small_csv(tmp_path / "s.csv"), tmp_path / "cache"
    load_ltsf(path, borders=BORDERS, protocol="custom", cache_dir=cache)  # the parent
    monkeypatch.setattr(ltsf, "read_ltsf", lambda *a, **k: pytest.fail("a child parsed the file"))
    dm = ltsf_data.LTSFDataModule(Source(path=str(path), time_col="date"),
                                  LTSFSplit(protocol="custom", borders=BORDERS, cache_dir=str(cache)),
                                  LTSFWindows(lookback=48, horizon=8))
    assert dm.data.n_channels == 2 and len(dm.val_dataloader().dataset) == len(dm.data.starts("val", 48, 8))


def test_flat_settings_of_before_build_the_grouped_datamodule(tmp_path):
    """The flat form (``path``, ``lookback``, ``batch_size``…), as saved hyperparameters and as a config
    through the CLI, builds the datamodule the groups build; ``time_col`` keeps its default ``date``."""
    from datamodules.timeseries.ltsf_data import LTSFDataModule
    from pipelines.cli import make_cli

    path = str(small_csv(tmp_path / "s.csv"))
    flat = {"path": path, "lookback": 48, "horizon": 8, "borders": list(BORDERS), "batch_size": 16,
            "samples_per_epoch": 64, "val_stride": 2, "seed": 3}
    from_hparams = LTSFDataModule(**nest(LTSFDataModule, flat))
    config = tmp_path / "flat.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"class_path": "pipelines.tasks.forecast_linear.DLinearForecaster",
                  "init_args": {"kernel_size": 5}},
        "data": {"class_path": "datamodules.timeseries.ltsf_data.LTSFDataModule", "init_args": flat}}))
    with workdir_with_store(tmp_path):
        from_config = make_cli(["--config", str(config), "--trainer.logger=false"], run=False).datamodule
    for dm in (from_hparams, from_config):
        assert dm.hparams["source"]["time_col"] == "date" and tuple(dm.hparams["split"]["borders"]) == BORDERS
        assert (dm.lookback, dm.horizon, dm.val_stride, dm.batch_size, dm.seed) == (48, 8, 2, 16, 3)
        assert len(dm.val_dataloader().dataset) == -(-len(dm.data.starts("val", 48, 8)) // 2)


@pytest.mark.parametrize(("settings", "message"), [
    ({"covariate_cols": ["c1"]}, "data.init_args.source: the LTSF protocol reads no covariate_cols"),
    ({"path": None}, "data.init_args.source: the LTSF protocol needs the file"),
    ({"protocol": "monthly"}, "data.init_args.split.protocol: must be one of ett, custom"),
    ({"val_stride": 0}, "data.init_args.windows.val_stride: must be ≥ 1, got 0"),
])
def test_a_bad_ltsf_setting_is_one_line_naming_its_key(tmp_path, settings, message):
    from datamodules.timeseries.ltsf_data import LTSFDataModule

    flat = {"path": str(small_csv(tmp_path / "s.csv")), "borders": BORDERS, "lookback": 48, "horizon": 8}
    with pytest.raises(PosencError, match=message) as info:
        LTSFDataModule(**nest(LTSFDataModule, {**flat, **settings}))
    assert "\n" not in str(info.value)


def test_a_model_config_of_before_is_read_in_todays_spelling(tmp_path):
    """A benchmark model config written before the family folders and the groups (old class paths, flat
    ``data.init_args``) loads as today's: its classes at their new homes, its loader grouped."""
    from pipelines.studies.ltsf.fit import cli_config
    from pipelines.studies.ltsf.models import PROTOCOL, load_model_config

    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({
        "model": {"class_path": "pipelines.tasks.forecast_patchtst.PatchTSTForecaster",
                  "init_args": {"linear_path": True}},
        "data": {"init_args": {"batch_size": 16, "val_stride": 2}},
        "trainer": {"callbacks": [{"class_path": "pipelines.studies.ltsf_fit.LTSFProtocol",
                                   "init_args": {"name": "old"}}]}}))
    config = load_model_config(old)
    assert config["name"] == "old"
    assert config["model"]["class_path"] == "pipelines.tasks.forecast.patchtst.PatchTSTForecaster"
    cli = cli_config(config, "x.csv", 32, 8)
    assert cli["data"]["init_args"]["loader"]["batch_size"] == 16
    assert cli["data"]["init_args"]["windows"] == {"val_stride": 2, "lookback": 32, "horizon": 8}
    assert [c["class_path"] for c in cli["trainer"]["callbacks"]][-1] == PROTOCOL
