"""The synthetic and order datamodules' typed groups: every flat argument of before maps to one group
field by name, and the flat form (a config, a checkpoint's saved settings) still builds the datamodule."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from datamodules.synthetic.datamodule import SyntheticLMDataModule, SyntheticMotifDataModule
from pipelines.studies.claims.order_data import OrderDataModule
from pipelines.tasks.upgrade.checkpoint import upgrade_checkpoint
from pipelines.tasks.upgrade.legacy import legacy_keys, translate_args
from posenc import PosencError
from tests.helpers import flat_dm, nest, workdir_with_store

#: the flat arguments each took before its groups (commit a7bea3c)
BEFORE = {
    SyntheticLMDataModule: "task vocab distance period period2 noise seq_len eval_lengths batch_size "
                           "samples_per_epoch eval_tokens seed helical_period",
    SyntheticMotifDataModule: "motif_a motif_b distance negative label_noise marker_motifs train_region "
                              "test_region seq_len eval_lengths batch_size samples_per_epoch eval_samples "
                              "seed",
    OrderDataModule: "fasta kmer kmers seq_len batch_size samples_per_epoch eval_samples split cache_dir "
                     "seed",
}


@pytest.mark.parametrize("cls", list(BEFORE), ids=lambda c: c.__name__)
def test_every_flat_argument_of_before_has_one_group_field(cls):
    table = legacy_keys(cls)
    assert set(BEFORE[cls].split()) <= set(table)
    for key, target in table.items():
        group, field = target.split(".")
        assert field == key and field in {f.name for f in fields(cls.config_groups[group])}


def test_flat_and_grouped_settings_draw_the_same_windows():
    flat = {"task": "periodic", "vocab": 6, "period": 5, "seq_len": 20, "eval_lengths": [20, 40],
            "eval_tokens": 400, "batch_size": 4, "samples_per_epoch": 8, "seed": 2}
    a = flat_dm(SyntheticLMDataModule, **flat)
    b = SyntheticLMDataModule(**nest(SyntheticLMDataModule, {
        "process": {"task": "periodic", "vocab": 6, "period": 5},
        "windows": {"seq_len": 20, "eval_lengths": [20, 40], "eval_tokens": 400},
        "loader": {"batch_size": 4, "samples_per_epoch": 8, "seed": 2}}))
    assert a.hparams == b.hparams
    assert torch.equal(next(iter(a.train_dataloader())), next(iter(b.train_dataloader())))
    assert torch.equal(next(iter(a.test_dataloader()[1])), next(iter(b.test_dataloader()[1])))


def test_a_flat_order_config_is_grouped_where_it_comes_in():
    """The order datamodule lives beside its study (``pipelines.studies.claims``): the command line's
    translation finds it there too."""
    args = ["fit", "--data=pipelines.studies.claims.order_data.OrderDataModule", "--data.init_args.kmer=3",
            "--data.init_args.split=[0.6,0.2,0.2]", "--data.init_args.samples_per_epoch=64"]
    assert translate_args(args)[2:] == ["--data.init_args.pair.kmer=3",
                                        "--data.init_args.regions.split=[0.6,0.2,0.2]",
                                        "--data.init_args.loader.samples_per_epoch=64"]


def test_the_order_task_tests_at_every_length_asked(tmp_path):
    with workdir_with_store(tmp_path):
        dm = flat_dm(OrderDataModule, seq_len=16, eval_lengths=[16, 32], batch_size=8, samples_per_epoch=16,
                     eval_samples=8)
    assert [next(iter(t))["tokens"].shape for t in dm.test_dataloader()] == [(8, 16), (8, 32)]
    with pytest.raises(PosencError, match="data.init_args.windows.eval_lengths: must start at"):
        flat_dm(OrderDataModule, seq_len=16, eval_lengths=[32])


def test_a_checkpoint_of_version_4_with_flat_synthetic_settings_is_grouped():
    flat = {"_class_path": "datamodules.synthetic.datamodule.SyntheticLMDataModule", "task": "copy",
            "distance": 3, "seq_len": 16, "batch_size": 8, "samples_per_epoch": 16, "seed": 1}
    ckpt = upgrade_checkpoint({"posenc_task": "dna_lm", "config_version": 4, "hyper_parameters": {},
                               "datamodule_hyper_parameters": flat}, "x.ckpt")
    saved = ckpt["datamodule_hyper_parameters"]
    assert saved["process"] == {"task": "copy", "distance": 3} and saved["windows"] == {"seq_len": 16}
    assert saved["loader"] == {"batch_size": 8, "samples_per_epoch": 16, "seed": 1}
    dm = SyntheticLMDataModule(**nest(SyntheticLMDataModule, saved))
    assert (dm.distance, dm.seq_len, dm.batch_size, dm.seed) == (3, 16, 8, 1)
