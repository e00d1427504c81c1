"""Smoke: is everything wired? ``make smoke`` runs the tests marked ``smoke`` (install, train, predict
end to end): every module of posenc/, datamodules/ and pipelines/ imports; one tiny fit goes through
the CLI into an MLflow sqlite store and writes a checkpoint that ``predict`` scores a FASTA with.
``make test`` runs the whole file, so also: every scheme builds from its config and runs a forward
through the tiny Transformer."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc import all_schemes, build_encoding
from posenc.base import public_class_path
from tests.helpers import (
    ROOT,
    SCHEME_SPECS,
    D,
    H,
    random_bases,
    run_cli_in,
    runs,
    tiny_setup,
    workdir_with_store,
    write_fasta,
)

PACKAGES = ("posenc", "datamodules", "pipelines")
T = 32


def module_names() -> list[str]:
    """Every module of PACKAGES but the ``__main__`` entry points (importing those runs their CLI)."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name != "__main__.py":
                names.append(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    return names


@pytest.mark.smoke
def test_every_module_imports():
    names = module_names()
    assert {"posenc", "datamodules", "pipelines", "pipelines.cli", "posenc.nn.attention"} <= set(names)
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - collect every failure, then report them together
            failed[name] = f"{type(exc).__name__}: {exc}"
    assert failed == {}


@pytest.mark.parametrize("cls", all_schemes(), ids=lambda c: c.__name__)  # make test, not make smoke
def test_every_scheme_builds_and_runs_a_forward(cls):
    from posenc.nn import Transformer

    path = public_class_path(cls)
    assert path in SCHEME_SPECS, f"no configs/posenc/*.yaml names {path}"
    torch.manual_seed(0)
    pe = build_encoding(SCHEME_SPECS[path], D, H)
    assert type(pe) is cls
    model = Transformer(D, H, 2, pe, causal=True).eval()
    t = min(T, pe.max_len or T)
    x = torch.randn(2, t, D)  # (B, T, D)
    with torch.no_grad():
        y = model(x, torch.arange(t))
    assert y.shape == (2, t, D) and torch.isfinite(y).all()


@pytest.mark.smoke
def test_one_tiny_fit_then_predict(tmp_path: Path):
    """d_model 16, 2 heads, 2 layers, T 32, 3 steps of a RoPE DNA LM on a synthetic FASTA; then the
    predict command scores a new FASTA from the checkpoint (one row per base, finite bits)."""
    import pandas as pd

    from pipelines.inference.predict import main as predict

    tiny_setup(tmp_path)
    code, cli = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1",
                                      "--data.init_args.samples_per_epoch=24", "--test_after_fit=false"])
    assert code == 0 and cli.trainer.global_step == 3
    _, (run,) = runs(tmp_path)
    assert run.info.status == "FINISHED"
    assert torch.isfinite(torch.tensor(run.data.metrics["val/bits_per_base"]))
    ckpt = tmp_path / cli.trainer.checkpoint_callback.best_model_path  # relative to cwd
    assert ckpt.is_file()
    new = write_fasta(tmp_path / "new.fa", {"a": random_bases(100, 1), "b": random_bases(40, 2)})
    with workdir_with_store(tmp_path):
        code = predict(["--ckpt", str(ckpt), "--input", str(new), "--output", "bits.tsv", "--no_progress"])
    assert code == 0
    table = pd.read_csv(tmp_path / "bits.tsv", sep="\t")
    assert len(table) == 140 and table["bits"].notna().sum() == 138  # each record's first base: unscored
    assert np.isfinite(table["bits"].dropna()).all()
