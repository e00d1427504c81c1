"""The promoter benchmark (``make benchmark-promoters``): how a folder's files pair into sets and match the
published numbers, one line (exit 2, nothing written) for every bad DATA, and the documented command at
tiny size, read from ``make -n``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.studies.promoters.sets import pair_folder, published_for, read_sets
from posenc import PosencError
from tests.docs_commands import run_make
from tests.helpers import workdir_with_store, write_fasta

MOTIF = "TATAAT"


def planted(path: Path, n: int, length: int, seed: int, motif_at: int | None) -> Path:
    """``n`` random records of ``length`` bases, each with MOTIF at ``motif_at`` (``None``: none)."""
    rng = np.random.default_rng(seed)
    recs = {}
    for i in range(n):
        seq = "".join(rng.choice(list("ACGT"), length))
        if motif_at is not None:
            seq = seq[:motif_at] + MOTIF + seq[motif_at + len(MOTIF):]
        recs[f"r{i}"] = seq
    return write_fasta(path, recs)


def test_a_folder_pairs_each_promoter_file_with_its_organisms_negatives(tmp_path):
    for name in ("Ecoli_prom.fa", "Ecoli_non_prom.fa", "Mouse_tata.fa", "Mouse_nonprom.fa",
                 "Mouse_tata_dbtss.fa", "Arabidopsis_tata.fa", "Arabidopsis_non_tata.fa",
                 "Arabidopsis_non_prom_big.fa"):
        planted(tmp_path / name, 6, 20, len(name), None)
    (tmp_path / "README.md").write_text("not a set")
    pairs = {(p.name, n.name) for p, n in pair_folder(tmp_path)}
    big = "Arabidopsis_non_prom_big.fa"
    assert pairs == {("Ecoli_prom.fa", "Ecoli_non_prom.fa"), ("Mouse_tata.fa", "Mouse_nonprom.fa"),
                     ("Mouse_tata_dbtss.fa", "Mouse_nonprom.fa"), ("Arabidopsis_tata.fa", big),
                     ("Arabidopsis_non_tata.fa", big)}
    assert published_for(Path("Arabidopsis_non_tata.fa")) == {"Sn": 0.94, "Sp": 0.94, "CC": 0.86}
    assert published_for(Path("human_TATA.fa.gz"))["CC"] == 0.90
    assert published_for(Path("Mouse_tata_dbtss.fa")) == {} and published_for(Path("Yeast_prom.fa")) == {}
    sets = {s.name: s for s in read_sets([str(tmp_path)], folds=5)}
    assert sets["ecoli_prom"].n_pos == 6 and sets["ecoli_prom"].published["CC"] == 0.84


@pytest.mark.parametrize("case, message", [
    ("empty folder", "no promoter set to pair"),
    ("missing file", "no such file"),
    ("not FASTA", "not a FASTA"),
    ("one class", "a set needs two classes"),
    ("too few records", "fewer than the 5 folds"),
])
def test_bad_data_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case, message):
    from pipelines.studies.promoters import main

    pos = planted(tmp_path / "Ecoli_prom.fa", 12, 20, 0, 5)
    data = {"empty folder": [str(tmp_path / "empty")],
            "missing file": [str(pos), str(tmp_path / "gone.fa")],
            "not FASTA": [str(pos), str(tmp_path / "table.csv")], "one class": [str(pos), str(pos)],
            "too few records": [str(pos), str(planted(tmp_path / "few.fa", 3, 20, 2, None))]}[case]
    (tmp_path / "empty").mkdir()
    (tmp_path / "table.csv").write_text("id,label\nr1,a\n")
    with workdir_with_store(tmp_path, migrated=False), pytest.raises(SystemExit) as exit_:
        main(["--data", *data, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def test_the_fold_count_is_checked_before_reading(tmp_path):
    with pytest.raises(PosencError, match="no such file"):
        read_sets([str(tmp_path / "a.fa"), str(tmp_path / "b.fa")], folds=5)


TINY = """\
trainer:
  max_epochs: 1
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {monitor: val/auroc, mode: max, save_top_k: 1, filename: best}
    - class_path: pipelines.ClassifyBaselines
      init_args: {baselines: [composition, kmer_lr, onehot_lr, pwm, cnn, cnnprom], k: 2, cnn_epochs: 1}
model:
  init_args:
    net: {d_model: 16, n_heads: 2, n_layers: 2}
data:
  init_args:
    loader: {batch_size: 16}
"""


@pytest.mark.slow  # ~60 s on an idle 2-core host: a subprocess, a worker, a registered model
def test_the_documented_command_at_tiny_size(tmp_path):
    """What ``make benchmark-promoters DATA=<folder>`` runs, read from ``make -n``, on a planted motif:
    every method's row, one parent run with its child, the model registered with the published numbers."""
    import mlflow

    data = tmp_path / "sets"
    data.mkdir()
    planted(data / "Ecoli_prom.fa", 30, 32, 0, 10)
    planted(data / "Ecoli_non_prom.fa", 45, 32, 1, None)
    (tmp_path / "tiny.yaml").write_text(TINY)
    args = f"--config configs/dna_promoter.yaml --config {tmp_path / 'tiny.yaml'} --folds 3 --quick"
    make = ("make", "benchmark-promoters", f"DATA={data}", f"OUT={tmp_path / 'out'}", f"ARGS={args}")
    done = run_make(make, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(rows.method) == {"model", "composition", "kmer_lr", "onehot_lr", "pwm", "cnn", "cnnprom"}
    assert rows[["mcc", "sn", "sp", "auroc", "auprc"]].notna().all().all() and (rows.fold == 0).all()
    assert (rows.n_test_pos == 10).all() and (rows.n_test_neg == 15).all()
    onehot = rows[rows.method == "onehot_lr"].iloc[0]
    assert onehot.auroc > 0.9  # the planted motif at a fixed offset
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## ecoli_prom" in summary and "--quick: fold 0 of 3" in summary
    assert "| CNNProm (published) | 0.84 | 0.90 | 0.96 |" in summary
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs_ = client.search_runs([client.get_experiment_by_name("posenc-promoters").experiment_id])
    parents = [r for r in runs_ if r.data.tags.get("posenc.promoters") == "parent"]
    children = [r for r in runs_ if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == 1
    model_mcc = rows[rows.method == "model"].mcc.iloc[0]
    assert parents[0].data.metrics["model/mcc_mean"] == pytest.approx(model_mcc)
    card = client.get_registered_model("promoters-ecoli_prom").description
    assert "Published on this data: CNNProm" in card and "| published | 0.90 | 0.96 | 0.84 |" in card


def fake_rows(name: str, methods: dict[str, float], runs: int = 6) -> list[dict]:
    """Rows of ``runs`` folds × seeds: each method's MCC its mean plus a shared per-run wobble."""
    rng = np.random.default_rng(0)
    wobble = rng.normal(0, 0.01, runs)
    return [{"set": name, "method": m, "fold": i % 3, "seed": i // 3, "mcc": mcc + wobble[i], "sn": 0.9,
             "sp": 0.95, "auroc": 0.97, "auprc": 0.9, "threshold": 0.5} for m, mcc in methods.items()
            for i in range(runs)]


def test_the_summary_pairs_by_fold_and_seed_calls_with_holm_and_labels_the_ratio(tmp_path):
    from argparse import Namespace

    from pipelines.studies.promoters.report import set_section
    from pipelines.studies.promoters.sets import PromoterSet

    args = Namespace(schemes=[], folds=3, seeds=[0, 1], quick=False)
    pset = PromoterSet("arabidopsis_tata", Path("Arabidopsis_tata.fa"), Path("Arabidopsis_non_prom_big.fa"),
                       1497, 11459, (251, 251), published_for(Path("Arabidopsis_tata.fa")))
    text = set_section(pset, fake_rows(pset.name, {"model": 0.80, "pwm": 0.70, "cnnprom": 0.80}), args)
    assert "| **model** | 0.80" in text and "| CNNProm (published) | 0.91 | 0.95 | 0.97 |" in text
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| pwm") or
             line.startswith("| cnnprom")}
    assert lines["| pwm"].endswith("| ▲ |") and "+0.100" in lines["| pwm"]  # the same wobble: called
    assert lines["| cnnprom"].endswith("| · |")  # no difference: not called
    assert "Holm over the 2 comparisons" in text
    assert "the files' ratio is not" in text
    assert "Computed, not measured: our mean Sn 0.900 and Sp 0.950 give MCC 0.810 at 4.70" in text


def test_quick_runs_fold_0_and_the_first_seed_and_later_encodings_skip_the_baselines():
    from argparse import Namespace

    from pipelines.studies.promoters.run import child_overlay, jobs
    from pipelines.studies.promoters.sets import PromoterSet

    pset = PromoterSet("s", Path("s_prom.fa"), Path("s_non_prom.fa"), 30, 60, (40, 81))
    args = Namespace(schemes=["none", "rope"], folds=5, seeds=[3, 4], quick=True, max_epochs=None,
                     accelerator="cpu")
    assert [(m, f, s) for _, m, f, s in jobs([pset], args)] == [("none", 0, 3), ("rope", 0, 3)]
    config = {"trainer": {"callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint"},
                                        {"class_path": "pipelines.ClassifyBaselines"}]}}
    first, second = (child_overlay(pset, m, 0, args, config, register=False) for m in ("none", "rope"))
    assert "callbacks" not in first["trainer"] and len(second["trainer"]["callbacks"]) == 1
    assert first["data"]["init_args"]["windows"] == {"seq_len": 81, "eval_lengths": [81]}
    assert first["data"]["init_args"]["samples"]["folds"] == 5
