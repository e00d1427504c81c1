"""Rotary settings in the flat spelling of before :class:`posenc.RopeScaling` (``scaling: yarn``,
``scale_factor``, ``train_len``, β, ``truncate``) still load: configs and their command-line overrides
(translated before parsing), and checkpoints (upgraded where they are read), computing what they did."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import yaml

from pipelines import DNALanguageModel, load_model
from pipelines.inference.loading import read_checkpoint
from pipelines.tasks.options import Net
from pipelines.tasks.upgrade.legacy import translate_cli
from pipelines.tasks.upgrade.legacy_rope import scaling_args, upgrade_rope_specs
from posenc import PeriodicRoPE, PosencError, RoPE, RopeScaling, build_encoding
from posenc.rope_scaling import as_scaling
from tests.helpers import run_cli_in, tiny_setup, write_fasta

#: flat init args of before → today's ``scaling`` (what the old code read of them, nothing else)
CASES = [
    ({"scaling": "none", "scale_factor": 1.0, "train_len": None, "beta_fast": 32.0, "beta_slow": 1.0,
      "truncate": True}, None),  # every RoPE checkpoint of before spells plain RoPE so
    ({"scaling": "yarn", "scale_factor": 8.0, "train_len": 128, "beta_fast": 16.0, "beta_slow": 2.0,
      "truncate": False},
     {"type": "yarn", "factor": 8.0, "train_len": 128, "beta_fast": 16.0, "beta_slow": 2.0,
      "truncate": False}),
    ({"scaling": "linear", "scale_factor": 4.0, "train_len": 512, "beta_fast": 32.0},  # ignored before
     {"type": "linear", "factor": 4.0}),
    ({"scaling": "yarn_paper", "scale_factor": 2.0, "train_len": 64, "truncate": False},
     {"type": "yarn_paper", "factor": 2.0, "train_len": 64}),
    ({"scaling": "dynamic_ntk", "train_len": 128}, {"type": "dynamic_ntk", "factor": 1.0, "train_len": 128}),
]


@pytest.mark.parametrize(("old", "new"), CASES)
def test_flat_arguments_become_one_scaling_value_that_computes_the_same(old, new):
    args = {"base": 500.0, "layout": "half", **old}
    got = scaling_args(args)
    assert got == {"base": 500.0, "layout": "half", "scaling": new}
    assert scaling_args(got) == got  # today's spelling is left alone
    pe = RoPE(32, 2, **got)
    assert pe.scaling == as_scaling(new)
    q = torch.randn(1, 2, 50, 16, dtype=torch.float64)
    pos = torch.arange(50, dtype=torch.float64) * 7
    ref = RoPE(32, 2, base=500.0, layout="half", scaling=new)
    torch.testing.assert_close(pe.rotate(q, q, pos, pos), ref.rotate(q, q, pos, pos), rtol=0, atol=0)


def test_a_setting_refused_before_is_refused_still():
    with pytest.raises(PosencError, match="'none' does not read factor"):
        RoPE(16, 2, **scaling_args({"scaling": "none", "scale_factor": 2.0}))


def test_rotary_specs_are_found_anywhere_in_a_document_and_nothing_else_changes():
    child = {"class_path": "posenc.PeriodicRoPE",
             "init_args": {"periods": [3.0], "scaling": "linear", "scale_factor": 2.0}}
    doc = {"model": {"init_args": {"pe": {"class_path": "posenc.Compose", "init_args": {"schemes": [
        child, {"class_path": "posenc.GaussianRBF", "init_args": {"train_len": 64}}]}}}}}
    schemes = upgrade_rope_specs(doc)["model"]["init_args"]["pe"]["init_args"]["schemes"]
    assert schemes[0]["init_args"] == {"periods": [3.0], "scaling": {"type": "linear", "factor": 2.0}}
    assert schemes[1] == {"class_path": "posenc.GaussianRBF", "init_args": {"train_len": 64}}  # not rotary
    pe = build_encoding(schemes[0], 16, 2)
    assert isinstance(pe, PeriodicRoPE) and pe.scaling == RopeScaling("linear", factor=2.0)


def test_old_config_and_flat_overrides_parse_to_the_value(tmp_path, capsys):
    """A config of before (the old configs/posenc/rope_yarn.yaml) and flat overrides on the command line,
    through the real CLI's parser: the overrides land in the value's fields (instantiating the scheme from
    today's configs is tests/posenc/test_scheme_configs.py's)."""
    tiny_setup(tmp_path)
    old = {"model": {"init_args": {"pe": {"class_path": "posenc.RoPE", "init_args": {
        "base": 10000.0, "layout": "interleaved", "scaling": "yarn", "scale_factor": 8.0, "train_len": 128,
        "beta_fast": 32.0, "beta_slow": 1.0}}}}}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    flat = ["--model.init_args.pe.init_args.scale_factor=4", "--model.init_args.pe.init_args.beta_slow=2"]
    args = ["--config", str(tmp_path / "tiny.yaml"), "--config", str(tmp_path / "old.yaml"), *flat]
    assert translate_cli(args)[-2:] == ["--model.init_args.pe.init_args.scaling.factor=4",
                                        "--model.init_args.pe.init_args.scaling.beta_slow=2"]
    code, _ = run_cli_in(tmp_path, ["fit", *args, "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["pe"]["init_args"]["scaling"]
    assert code == 0
    assert RopeScaling(**printed) == RopeScaling("yarn", factor=4.0, train_len=128, beta_slow=2.0)


def test_a_yarn_checkpoint_of_before_loads_and_predicts_as_the_new(tmp_path):
    """A checkpoint written today, then rewritten as the code before the value wrote it (flat rotary
    arguments, ``config_version`` 4): upgraded where it is read, it predicts the same."""
    torch.manual_seed(0)
    scaling = {"type": "yarn", "factor": 4.0, "train_len": 32, "beta_fast": 8.0, "truncate": False}
    model = DNALanguageModel(vocab_size=6, pad_id=5, net=Net(d_model=16, n_heads=2, n_layers=2),
                             pe={"class_path": "posenc.RoPE", "init_args": {"scaling": scaling}})
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
            "posenc_inference": {"data": {"kmer": 1, "kmer_stride": 1, "seq_len": 32}}}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "new.ckpt")
    flat = {"base": 10000.0, "layout": "interleaved", "scaling": "yarn", "scale_factor": 4.0, "train_len": 32,
            "beta_fast": 8.0, "beta_slow": 1.0, "truncate": False}
    hp = {**ckpt["hyper_parameters"], "pe": {"class_path": "posenc.RoPE", "init_args": flat}}
    torch.save({**ckpt, "hyper_parameters": hp, "config_version": 4}, tmp_path / "old.ckpt")
    upgraded = read_checkpoint(tmp_path / "old.ckpt")["hyper_parameters"]["pe"]["init_args"]["scaling"]
    assert upgraded == {**scaling, "beta_slow": 1.0}
    fasta = write_fasta(tmp_path / "in.fa", n=300)
    got = load_model(tmp_path / "old.ckpt", "cpu")
    assert got.pe.scaling == RopeScaling(**scaling) and got.pe.attention_factor() > 1.0
    pd.testing.assert_frame_equal(got.predict(fasta), load_model(tmp_path / "new.ckpt", "cpu").predict(fasta))
