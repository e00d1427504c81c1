"""One smoke fit per DNA task through the CLI (tiny model, tmp sqlite MLflow store, cwd=tmp_path),
every scheme config layered on every task, and bad input ending as ``error: …`` with exit status 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import random_bases, task, workdir_with_store, write_fasta, write_gff

ROOT = Path(__file__).resolve().parents[2]
YEAST = "package:bio_test_artifacts/prebuilt/artifacts/yeast_chr01"
TINY = [
    "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
    "--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
    "--trainer.max_epochs=1", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2",
    "--trainer.enable_progress_bar=false", "--trainer.logger.init_args.log_model=false",
]
WINDOWS = ["--data.init_args.samples_per_epoch=16", "--data.init_args.eval_tokens=256"]


def fit(tmp: Path, config: str, *extra: str):
    from pipelines.cli import main

    with workdir_with_store(tmp):
        return main(["fit", "--config", str(ROOT / "configs" / config), *TINY, *extra])


def run_metrics(tmp: Path, cli) -> tuple[dict, dict]:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    run = client.get_run(cli.trainer.logger.run_id)
    assert run.info.status == "FINISHED"
    history = {key: [m.step for m in client.get_metric_history(run.info.run_id, key)]
               for key in run.data.metrics if key.endswith("_by_length")}
    return run.data.metrics, history


def test_masked_lm_fit(tmp_path):
    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(6000)})
    cli = fit(tmp_path, "dna_mlm.yaml", f"--data.init_args.fasta={fasta}", *WINDOWS,
              "--config", str(ROOT / "configs/posenc/alibi.yaml"))
    metrics, history = run_metrics(tmp_path, cli)
    assert history["test/bits_per_base_by_length"] == [32, 64, 128, 256]
    for key in ("val/bits_per_base", "test/bits_per_base", "test/masked_acc"):
        assert np.isfinite(metrics[key]), key
    assert 1.0 < metrics["test/bits_per_base"] < 4.0  # random bases: ≈ 2 bits, an untrained model a bit more


def test_segmentation_fit_on_the_shipped_yeast_chromosome_and_gff(tmp_path):
    cli = fit(tmp_path, "dna_segment.yaml", f"--data.init_args.fasta={YEAST}.fasta",
              f"--data.init_args.annotation={YEAST}.gff", *WINDOWS,
              "--config", str(ROOT / "configs/posenc/periodic_rope.yaml"))
    metrics, history = run_metrics(tmp_path, cli)
    assert cli.datamodule.label_source.endswith("yeast_chr01.gff")
    assert history["test/acc_by_length"] == [32, 64, 128, 256]
    for name in ("noncoding", "plus_f0", "plus_f1", "plus_f2", "minus_f0", "minus_f1", "minus_f2"):
        assert 0.0 <= metrics[f"test/f1_{name}"] <= 1.0
    assert {"val/f1_macro", "test/acc", "test/coding_acc", "test/f1_macro_L256"} <= set(metrics)


def test_classification_fit_from_a_labels_file_with_learned_pe_undefined_past_max_len(tmp_path):
    recs = {f"s{i}": random_bases(120, i) for i in range(40)}
    fasta = write_fasta(tmp_path / "seqs.fa", recs)
    labels = tmp_path / "labels.tsv"
    labels.write_text("id\tlabel\n" + "".join(f"s{i}\t{'pq'[i % 2]}\n" for i in range(40)))
    cli = fit(tmp_path, "dna_classify.yaml", f"--data.init_args.fasta={fasta}",
              f"--data.init_args.labels={labels}", "--data.init_args.split=[0.5,0.25,0.25]",
              "--config", str(ROOT / "configs/posenc/learned.yaml"),
              "--model.init_args.pe.init_args.max_len=64",
              "--model.init_args.readout.positions=index")  # 0..T−1: the table covers 2× (centred: 1× only)
    metrics, history = run_metrics(tmp_path, cli)
    assert cli.model.num_classes == 2  # linked from the datamodule
    assert cli.model.undefined_lengths == [128]
    assert history["test/auroc_by_length"] == [32, 64]
    assert 0.0 <= metrics["test/auroc"] <= 1.0 and 0.0 <= metrics["test/acc"] <= 1.0
    assert 0.0 <= metrics["baseline/kmer4_auroc"] <= 1.0 and 0.0 <= metrics["baseline/kmer4_acc"] <= 1.0


def test_vocab_size_follows_the_kmer_setting(tmp_path):
    """Linked when the CLI builds the model (no training needed to see it)."""
    from pipelines.cli import make_cli

    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(20000)})
    with workdir_with_store(tmp_path):
        cli = make_cli(["--config", str(ROOT / "configs" / "dna_mlm.yaml"), *TINY,
                        f"--data.init_args.fasta={fasta}", *WINDOWS, "--data.init_args.kmer=3",
                        "--data.init_args.kmer_stride=3"], run=False)
    assert cli.model.embedding.num_embeddings == cli.model.head.out_features == 4**3 + 3
    assert cli.model.bases_per_token == 3 and cli.model.pad_id == cli.datamodule.pad_id


def schemes() -> list[str]:
    return sorted(p.name for p in (ROOT / "configs" / "posenc").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("task", ["dna_mlm.yaml", "dna_segment.yaml", "dna_classify.yaml"])
def test_every_scheme_runs_on_every_task(tmp_path, task):
    """Each configs/posenc/*.yaml layered on the task: a fast_dev_run fit + test at two lengths."""
    from pipelines.cli import main

    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(6000)})
    gff = write_gff(tmp_path / "a.gff", [("chr1", 101, 3100, "+", 0), ("chr1", 3201, 5800, "-", 0)])
    labels = tmp_path / "labels.csv"
    write_fasta(tmp_path / "s.fa", {f"s{i}": random_bases(80, i) for i in range(12)})
    labels.write_text("id,label\n" + "".join(f"s{i},{'pq'[i % 2]}\n" for i in range(12)))
    data = {"dna_mlm.yaml": [f"--data.init_args.fasta={fasta}", *WINDOWS],
            "dna_segment.yaml": [f"--data.init_args.fasta={fasta}", f"--data.init_args.annotation={gff}",
                                 "--data.init_args.gap=0", *WINDOWS],
            "dna_classify.yaml": [f"--data.init_args.fasta={tmp_path / 's.fa'}",
                                  f"--data.init_args.labels={labels}",
                                  "--data.init_args.split=[0.5,0.25,0.25]"]}[task]
    for scheme in schemes():
        with workdir_with_store(tmp_path):
            cli = main(["fit", "--config", str(ROOT / "configs" / task), *TINY, *data,
                        "--data.init_args.eval_lengths=[32,64]", "--trainer.fast_dev_run=true",
                        "--config", str(ROOT / "configs" / "posenc" / scheme)])
        assert set(cli.model.length_results()) | set(cli.model.undefined_lengths) == {32, 64}, scheme


def cli_error(tmp: Path, capsys, config: str, *extra: str) -> str:
    from pipelines.cli import main

    with workdir_with_store(tmp), pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(ROOT / "configs" / config), *TINY, *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ")
    return err[-1]


def test_cli_bad_inputs_exit_2_with_one_line_naming_file_and_record(tmp_path, capsys):
    missing = cli_error(tmp_path, capsys, "dna_mlm.yaml", f"--data.init_args.fasta={tmp_path / 'nope.fa'}")
    assert missing == f"error: {tmp_path / 'nope.fa'}: sequence file not found"
    (tmp_path / "notes.txt").write_text("just some notes\n")
    assert "notes.txt: not a FASTA or GenBank file" in cli_error(
        tmp_path, capsys, "dna_mlm.yaml", f"--data.init_args.fasta={tmp_path / 'notes.txt'}")
    (tmp_path / "empty.fa").write_text(">a\n>b\n")
    assert "empty.fa: contains no sequences" in cli_error(
        tmp_path, capsys, "dna_mlm.yaml", f"--data.init_args.fasta={tmp_path / 'empty.fa'}")
    short = write_fasta(tmp_path / "short.fa", {"chr1": random_bases(6000), "plasmid": random_bases(20)})
    msg = cli_error(tmp_path, capsys, "dna_segment.yaml", f"--data.init_args.fasta={short}")
    assert "short.fa: record 'plasmid' has 20 bases, shorter than one training window of 32" in msg
    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(6000)})
    gff = write_gff(tmp_path / "past.gff", [("chr1", 5900, 6200, "+", 0)])
    msg = cli_error(tmp_path, capsys, "dna_segment.yaml", f"--data.init_args.fasta={fasta}",
                    f"--data.init_args.annotation={gff}", "--data.init_args.gap=0")
    assert "past.gff: line 3: CDS 5900..6200 on record 'chr1' exceeds its length 6000" in msg
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\nchr1,a\nchr9,b\n")
    msg = cli_error(tmp_path, capsys, "dna_classify.yaml", f"--data.init_args.fasta={fasta}",
                    f"--data.init_args.labels={labels}")
    assert "labels.csv: 1 id(s) not among the records of" in msg and "['chr9']" in msg
    assert not (tmp_path / "mlflow.db").exists() or not list((tmp_path / "outputs").glob("**/*.ckpt"))


@pytest.mark.parametrize("scheme", schemes())
def test_every_scheme_builds_in_every_dna_task_model(scheme):
    """Forward at the training length and at 2× (with padding for the classifier), or a recorded
    PositionOutOfRange where the scheme does not define the longer positions."""
    import torch
    import yaml

    from pipelines import FrameSegmenter, MaskedDNAModel, SequenceClassifier
    from posenc import PositionOutOfRange

    spec = yaml.safe_load((ROOT / "configs" / "posenc" / scheme).read_text())["model"]["init_args"]["pe"]
    tiny = {"d_model": 16, "n_heads": 2, "n_layers": 1, "pe": spec}
    torch.manual_seed(0)
    models = ((task(MaskedDNAModel, **tiny), 7), (task(FrameSegmenter, **tiny), 7),
                    (task(SequenceClassifier, **tiny), 2))
    for model, out in models:
        for length in (32, 64):
            tokens = torch.randint(0, 4, (2, length))
            tokens[1, length - 5 :] = 5  # PAD
            try:
                y = model(tokens)
            except PositionOutOfRange:
                assert length > 32, f"{scheme}: training length undefined"
                continue
            assert y.shape[-1] == out and torch.isfinite(y).all(), scheme


def test_classifier_sanity_check_with_one_class_batches_warns_nothing(tmp_path, recwarn):
    """The sanity check's first validation batches may hold one class: AUROC is not computed there."""
    import lightning as L
    import torch

    from pipelines import SequenceClassifier

    torch.manual_seed(0)
    model = task(SequenceClassifier, vocab_size=6, pad_id=5, num_classes=2, d_model=16, n_heads=2, n_layers=1)
    batch = lambda *labels: {"tokens": torch.randint(0, 4, (len(labels), 32)), "label": torch.tensor(labels)}  # noqa: E731
    val = [batch(0, 0, 0, 0), batch(0, 0, 0, 0), batch(0, 1, 0, 1)]  # the sanity check sees one class
    loader = torch.utils.data.DataLoader(val, batch_size=None)  # already batched
    trainer = L.Trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    said = [str(w.message) for w in recwarn]
    assert trainer.sanity_checking is False and not [m for m in said if "samples in target" in m], said
