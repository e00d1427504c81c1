"""Every configs/posenc/*.yaml layers onto configs/dna_lm.yaml through the real CLI, and the
metadata table the README shows is generated from the classes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

import posenc
from pipelines.cli import PosencCLI
from posenc.base import public_class_path
from tests.helpers import ROOT, write_fasta

SCHEME_YAMLS = sorted((ROOT / "configs" / "posenc").glob("*.yaml"))


@pytest.fixture(scope="module")
def fasta(tmp_path_factory) -> Path:
    """A small synthetic genome (40 kb), so the DNA datamodule instantiates without the real one."""
    return write_fasta(tmp_path_factory.mktemp("genome") / "toy.fa", n=40_000)


def cli_model(config: Path, fasta: Path) -> L.LightningModule:
    args = ["--config", str(ROOT / "configs" / "dna_lm.yaml"), "--config", str(config),
            "--trainer.logger=false", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false",
            "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1",
            f"--data.fasta={fasta}", "--data.cache_dir=null", "--data.eval_lengths=[128,256,512,1024]"]
    cli = PosencCLI(L.LightningModule, L.LightningDataModule, subclass_mode_model=True,
                    subclass_mode_data=True, save_config_callback=None, run=False,
                    auto_configure_optimizers=False, args=args)
    return cli.model


@pytest.mark.parametrize("config", SCHEME_YAMLS, ids=lambda p: p.stem)
def test_scheme_yaml_composes_with_dna_lm(config, fasta):
    model = cli_model(config, fasta)
    doc = yaml.safe_load(config.read_text())["model"]["init_args"]
    spec = doc["pe"]
    assert model.pe.spec()["class_path"] == spec["class_path"]
    for key, value in (spec.get("init_args") or {}).items():
        got = model.pe.spec()["init_args"][key]
        if isinstance(value, dict):  # a typed value (RoPE's scaling) saves every field: the given ones hold
            got = {k: got[k] for k in value}
        if key != "schemes":  # Compose lists its children's full specs
            assert got == value, key
    for group in set(doc) - {"pe"}:  # model options set next to the scheme (net: scale_embedding, dropout)
        assert {k: model.hparams[group][k] for k in doc[group]} == doc[group], group
    tokens = torch.randint(0, 4, (2, 24))
    assert torch.isfinite(model(tokens)).all()


def test_model_options_reach_the_backbone(fasta):
    model = cli_model(ROOT / "configs" / "posenc" / "sinusoidal_concat.yaml", fasta)
    assert model.backbone.scale == pytest.approx(4.0)  # √16
    assert model.backbone.drop.p == 0.1
    assert model.pe.proj is not None and model.pe.proj.in_features == 16 + 32


def test_scheme_table_lists_every_scheme_with_its_metadata():
    rows = [r for r in posenc.scheme_table().splitlines() if r.startswith("| `")]
    assert len(rows) == len(posenc.all_schemes())
    by_name = {r.split("`")[1]: [c.strip() for c in r.split("|")[1:-1]] for r in rows}
    for cls in posenc.all_schemes():
        row = by_name[public_class_path(cls)]
        if cls is posenc.Compose:
            continue
        assert row[1] == (", ".join(cls.meta.acts_on) or "nothing (NoPE)")
        assert row[2].startswith("yes" if cls.meta.extrapolates else "no")
        assert row[4] == cls.meta.attention_path
    assert by_name["posenc.ALiBi"][5].startswith("Train Short, Test Long")
    assert by_name["posenc.ShawRelative"][4] == "explicit"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["periodic_rope", "alibi", "conv_pe"])
def test_fast_dev_run_fit(tmp_path, fasta, name):
    """One real ``fit`` (one batch) per scheme family, MLflow in a sqlite store under tmp_path."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    cmd = [sys.executable, "-m", "pipelines.train", "fit", "--config", str(ROOT / "configs" / "dna_lm.yaml"),
           "--config", str(ROOT / "configs" / "posenc" / f"{name}.yaml"), "--trainer.fast_dev_run=true",
           "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1",
           f"--data.fasta={fasta}", "--data.cache_dir=null", "--data.eval_tokens=512",
           "--data.eval_lengths=[128,256,512,1024]"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "mlflow.db").exists()
