"""Typed, grouped settings: the flat → group table of the datamodules (datamodules.legacy), and the
model's ``attention`` group (kernels, ``compile``) reachable from a config and in effect."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from datamodules.legacy import legacy_keys, translate_args
from datamodules.timeseries.config import Seasonality, Windows
from datamodules.timeseries.datamodule import TimeSeriesDataModule
from posenc import PosencError
from posenc.nn import AttentionSettings
from posenc.nn.attention import AttentionCall, route
from tests.helpers import flatten, nest, task, tiny_setup, workdir_with_store


def test_the_table_sends_every_flat_argument_of_before_to_one_group_field():
    """The 29 flat arguments of TimeSeriesDataModule (commit abe6580) each map to one field, by name;
    so does every field added since (windows.time_block, issue 39), which the table derives by name."""
    before = ("path time_col target_cols covariate_cols future_cols future_calendar select time_format "
              "duplicates timezone calendar nan_policy train_on_filled fill_gaps split lookback horizon "
              "stride eval_stride eval_lookbacks context_from_previous positions patch_len batch_size "
              "samples_per_epoch num_workers seed periods n_periods").split()
    table = legacy_keys(TimeSeriesDataModule)
    assert sorted(table) == sorted([*before, "time_block"])
    for key, target in table.items():
        group, field = target.split(".")
        assert field == key and field in {f.name for f in fields(TimeSeriesDataModule.config_groups[group])}
    assert all(len(fields(dc)) <= 10 for dc in TimeSeriesDataModule.config_groups.values())  # windows: 10


def test_nest_builds_the_groups_and_a_flat_key_beats_its_group():
    got = nest(TimeSeriesDataModule, {"_class_path": "x", "windows": {"lookback": 48, "horizon": 4},
                                      "lookback": 96, "calendar": "auto", "seed": 2})
    assert got["windows"] == Windows(lookback=96, horizon=4)
    assert got["seasonality"] == Seasonality(calendar="auto") and got["loader"].seed == 2
    assert "_class_path" not in got
    assert flatten(got, TimeSeriesDataModule)["lookback"] == 96  # and back to one flat view
    with pytest.raises(PosencError, match="data.init_args.windows.lookbak: unknown key"):
        nest(TimeSeriesDataModule, {"windows": {"lookbak": 3}})


@pytest.mark.parametrize(("settings", "message"), [
    ({"lookback": 0}, "data.init_args.windows.lookback: must be ≥ 1, got 0"),
    ({"lookback": 10, "patch_len": 4}, "multiples of data.init_args.windows.patch_len=4, got 10"),
    ({"nan_policy": "mask", "train_on_filled": True}, "data.init_args.cleaning.train_on_filled needs"),
    ({"duplicates": "drop"}, "data.init_args.cleaning.duplicates: must be one of error, first, last, mean, "
                             "got 'drop'"),
    ({"calendar": "hourly"}, "data.init_args.seasonality.calendar: must be a list of"),
    ({"batch_size": 0}, "data.init_args.loader.batch_size: must be ≥ 1, got 0"),
])
def test_a_bad_setting_is_one_line_naming_its_key(settings, message):
    with pytest.raises(PosencError, match=message) as info:
        nest(TimeSeriesDataModule, settings)
    assert "\n" not in str(info.value)


def test_the_genome_table_and_what_is_left_alone(tmp_path):
    """The DNA datamodules' flat keys go to their groups (the class read from the config); grouped
    arguments, keys of no group (``mask_prob``) and datamodules from elsewhere are left alone."""
    dna = ["--config", str(tiny_setup(tmp_path)), "--data.init_args.seq_len=64", "--data.seed=1",
           "--data.init_args.mask_prob=0.2", "--data.init_args.regions.gap=5"]
    got = translate_args(dna)
    assert got[2:] == ["--data.init_args.windows.seq_len=64", "--data.init_args.loader.seed=1",
                       "--data.init_args.mask_prob=0.2", "--data.init_args.regions.gap=5"]
    assert "seq_len: 32" in got[1] and "windows:" in got[1]  # the flat config, as a grouped YAML string
    # a dotted null would reach a dataclass field as the string 'None' (jsonargparse): sent as a mapping
    null = translate_args([*dna[:2], "--data.cache_dir=null"])[2]
    assert null == '--data.init_args.genome={"cache_dir": null}'
    other = ["--data=pipelines.studies.claims.order_data.OrderDataModule", "--data.init_args.seq_len=8"]
    assert translate_args(other) == other
    grouped = ["--data=datamodules.TimeSeriesDataModule", "--data.init_args.windows.lookback=48"]
    assert translate_args(grouped) == grouped


def test_attention_options_from_a_config_reach_the_attention(tmp_path):
    """``model.init_args.attention`` in a YAML layer: parsed into the group, saved in the hyperparameters,
    and in effect: the encoder is marked for ``torch.compile`` and ALiBi on CPU leaves the Toeplitz view
    for the dense bias."""
    from pipelines.cli import make_cli
    from pipelines.tasks.dna.lm import DNALanguageModel

    config = tiny_setup(tmp_path)
    layer = tmp_path / "attention.yaml"
    layer.write_text("model:\n  init_args:\n    pe: {class_path: posenc.ALiBi}\n"
                     "    attention:\n      compile: true\n      toeplitz: false  # the dense bias instead\n")
    base = ["--config", str(config), "--trainer.logger=false"]
    with workdir_with_store(tmp_path):
        model = make_cli([*base, "--config", str(layer)], run=False).model
    plain = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe={"class_path": "posenc.ALiBi"})
    x = torch.zeros(1, 8, 16)
    pos = torch.arange(8)

    def path(m) -> str:
        attn = m.backbone.blocks[0].attn
        return route(AttentionCall(pos, attn.pe, settings=attn.settings), 8, x.device)

    assert (plain.backbone.use_compile, path(plain)) == (False, "sdpa+toeplitz")
    assert (model.backbone.use_compile, path(model)) == (True, "sdpa+bias")
    assert model.hparams["attention"] == {**vars(AttentionSettings()), "compile": True, "toeplitz": False}
    rebuilt = type(model)(**model.hparams)  # as a checkpoint is loaded: the group from its mapping
    assert rebuilt.backbone.use_compile and not rebuilt.backbone.blocks[0].attn.settings.toeplitz


def test_a_checkpoint_without_the_attention_group_gets_the_defaults():
    from pipelines.tasks.dna.lm import DNALanguageModel

    old = {"d_model": 16, "n_heads": 2, "n_layers": 1, "pe": {"class_path": "posenc.RoPE"}}  # no group
    model = task(DNALanguageModel, **old)
    assert model.hparams["attention"] == vars(AttentionSettings()) and not model.backbone.use_compile
    with pytest.raises(PosencError, match="model.init_args.attention.kernel: unknown key"):
        task(DNALanguageModel, **old, attention={"kernel": "flex"})


# ------------------------------------------------------------------- the classification datamodule
CLASSIFY_BEFORE = ("fasta labels class_fastas seq_len batch_size split eval_lengths kmer kmer_stride rc_prob "
                   "iupac cache_dir demo_min_distance num_workers seed").split()  # flat arguments (97b0e01)


def _labelled(tmp_path) -> dict:
    """A FASTA of 20 short records, its labels file, and flat ClassificationDataModule settings over them."""
    from tests.helpers import random_bases, write_fasta

    fasta = write_fasta(tmp_path / "seqs.fa", {f"s{i}": random_bases(20 + i, i) for i in range(20)})
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'ab'[i % 2]}\n" for i in range(20)))
    return {"fasta": str(fasta), "labels": str(tmp_path / "labels.csv"), "seq_len": 8, "batch_size": 4,
            "split": [0.6, 0.2, 0.2], "eval_lengths": [8, 16], "kmer": 2, "kmer_stride": 2,
            "cache_dir": str(tmp_path / "cache"), "seed": 3}


def test_the_classification_table_sends_every_flat_argument_of_before_to_one_group_field():
    from datamodules.dna.classify import ClassificationDataModule

    table = legacy_keys(ClassificationDataModule)
    assert set(table) - set(CLASSIFY_BEFORE) == {"skip_short_records", "samples_per_epoch",  # shared groups
                                                 "folds", "fold", "val_fraction"}  # newer than the groups
    assert set(CLASSIFY_BEFORE) <= set(table)
    assert table["fasta"] == "genome.fasta" and table["labels"] == "samples.labels"
    assert table["seq_len"] == "windows.seq_len" and table["seed"] == "loader.seed"


def test_a_flat_classification_config_and_flat_saved_hparams_build_the_same_datamodule(tmp_path):
    """The flat form of before, as a config file through the CLI and as saved hyperparameters (what a
    checkpoint from before holds), builds the datamodule the grouped form builds: same settings, same
    split, same batches."""
    import json

    import yaml

    from datamodules.dna.classify import ClassificationDataModule
    from pipelines.cli import make_cli
    from tests.helpers import workdir_with_store

    flat = _labelled(tmp_path)
    config = tmp_path / "flat.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"class_path": "pipelines.SequenceClassifier",
                  "init_args": {"d_model": 16, "n_heads": 2, "n_layers": 2}},
        "data": {"class_path": "datamodules.ClassificationDataModule", "init_args": flat}}))
    with workdir_with_store(tmp_path):
        from_config = make_cli(["--config", str(config), "--trainer.logger=false"], run=False).datamodule
    saved = {"_class_path": "datamodules.ClassificationDataModule", **flat, "class_fastas": None,
             "rc_prob": 0.0, "iupac": "N", "demo_min_distance": 100, "num_workers": 0}
    from_hparams = ClassificationDataModule(**nest(ClassificationDataModule, saved))
    grouped = ClassificationDataModule(**nest(ClassificationDataModule, dict(from_config.hparams)))
    for dm in (from_config, from_hparams):
        assert dm.hparams["windows"] == grouped.hparams["windows"] == {
            "seq_len": 8, "eval_lengths": [8, 16], "kmer": 2, "kmer_stride": 2, "rc_prob": 0.0}
        assert [json.dumps(dm.hparams[k]) for k in ("genome", "samples", "loader")] == [  # tuples as lists
            json.dumps(grouped.hparams[k]) for k in ("genome", "samples", "loader")]
        assert [s.names for s in dm.sets.values()] == [s.names for s in grouped.sets.values()]
        assert torch.equal(next(iter(dm.test_dataloader()[1]))["tokens"],
                           next(iter(grouped.test_dataloader()[1]))["tokens"])
    assert from_hparams.seed == 3 and from_hparams.eval_lengths == [8, 16] and from_hparams.tokenizer.k == 2


@pytest.mark.parametrize(("settings", "message"), [
    ({"seq_len": 0}, "data.init_args.windows.seq_len: must be ≥ 1, got 0"),
    ({"eval_lengths": [16, 8]}, "data.init_args.windows.eval_lengths: must be a non-empty increasing list"),
    ({"demo_min_distance": -1}, "data.init_args.samples.demo_min_distance: must be ≥ 0, got -1"),
    ({"skip_short_records": True}, "data.init_args.genome.skip_short_records: does not apply"),
    ({"fasta": None}, "labels.csv: a labels file needs data.init_args.genome.fasta"),
])
def test_a_bad_classification_setting_is_one_line_naming_its_key(tmp_path, settings, message):
    from datamodules.dna.classify import ClassificationDataModule

    with pytest.raises(PosencError, match=message) as info:
        ClassificationDataModule(**nest(ClassificationDataModule, {**_labelled(tmp_path), **settings}))
    assert "\n" not in str(info.value)
