"""``python -m pipelines.eval.compare``: a parent MLflow run, a nested child per scheme, table + figure."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.test_extrapolation import InDir, client, write_fasta

ROOT = Path(__file__).resolve().parents[1]


def tiny_overlay(tmp: Path) -> Path:
    """compare_dna_lm.yaml shrunk to seconds: synthetic genome, tiny model, a few steps, 1×–4×."""
    fasta = write_fasta(tmp / "g.fa")
    cfg = {
        "trainer": {"max_epochs": 1, "limit_val_batches": 2},
        "model": {"init_args": {"d_model": 16, "n_heads": 2, "n_layers": 1}},
        "data": {
            "init_args": {
                "fasta": str(fasta),
                "seq_len": 32,
                "batch_size": 4,
                "samples_per_epoch": 16,
                "eval_lengths": [32, 64, 128],
                "eval_tokens": 256,
            }
        },
    }
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_compare_two_schemes_makes_one_parent_and_two_children(tmp_path):
    from pipelines.eval.compare import main

    overlay = tiny_overlay(tmp_path)
    with InDir(tmp_path):
        main(
            [
                "--config",
                str(ROOT / "configs/compare_dna_lm.yaml"),
                "--config",
                str(overlay),
                "--schemes",
                "alibi",
                "rope",
                "--factors",
                "1",
                "2",
                "4",
                "--out",
                "cmp",
            ]
        )
    c = client(tmp_path)
    exp = c.get_experiment_by_name("posenc-compare")
    runs = c.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0].info.run_id
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent}
    assert sorted(r.data.tags["posenc.compare.scheme"] for r in children) == ["alibi", "rope"]
    assert {r.data.tags["posenc.compare.seed"] for r in children} == {"0"}  # same seed for every scheme
    for r in children:  # each child swept at every length, step = length
        steps = [m.step for m in c.get_metric_history(r.info.run_id, "extrapolation/bits_per_base_by_length")]
        assert steps == [32, 64, 128]
    assert {a.path for a in c.list_artifacts(parent)} >= {
        "comparison.md",
        "comparison.csv",
        "comparison_long.csv",
        "comparison.png",
    }
    table = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    assert list(table.scheme) == ["alibi", "rope", "rope+pi", "rope+ntk", "rope+dynamic_ntk", "rope+yarn"]
    assert table[["mean_L32", "mean_L64", "mean_L128"]].notna().all().all()
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "| alibi |" in md and "L=128 (4×)" in md and "markov5" in md
    steps = [m.step for m in c.get_metric_history(parent, "rope/yarn/bits_per_base_by_length")]
    assert steps == [32, 64, 128]
    assert c.get_run(parent).info.status == "FINISHED"


def test_unknown_scheme_fails_before_any_run(tmp_path, capsys):
    from pipelines.eval.compare import main

    with InDir(tmp_path), pytest.raises(SystemExit) as exc:
        main(["--config", str(ROOT / "configs/compare_dna_lm.yaml"), "--schemes", "rope", "ropee"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown scheme 'ropee'" in err and "periodic_rope" in err
    assert not (tmp_path / "mlflow.db").exists() or not client(tmp_path).search_experiments(
        filter_string="name = 'posenc-compare'"
    )
    assert os.getcwd() != str(tmp_path)
