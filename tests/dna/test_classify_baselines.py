"""The classifier's practitioner baselines (one-hot logistic regression, position weight matrix, the Genomic
Benchmarks CNN): they find a planted motif, see nothing in shuffled labels, choose their settings on
validation only, read a longer crop as the best of its windows, and log per test length beside a run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datamodules.dna.samples import SampleSet
from tests.helpers import flat_dm, workdir_with_store, write_fasta

ROOT = Path(__file__).resolve().parents[2]
MOTIF = np.array([3, 0, 3, 0, 0, 3, 2, 1])  # TATAATGC


def motif_set(n: int, length: int, seed: int, offset: int | None = None) -> SampleSet:
    """``n`` random sequences of ``length`` bases, half of them (label 1) with MOTIF at ``offset``
    (default: centred)."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(n, length)).astype(np.uint8)  # (N, length)
    labels = (np.arange(n) % 2).astype(np.int64)
    at = (length - len(MOTIF)) // 2 if offset is None else offset
    codes[labels == 1, at : at + len(MOTIF)] = MOTIF
    starts = np.arange(n, dtype=np.int64) * length
    return SampleSet(codes.reshape(-1), starts, starts + length, labels, [f"s{i}" for i in range(n)])


def shuffled(samples: SampleSet, seed: int) -> SampleSet:
    labels = np.random.default_rng(seed).permutation(samples.labels)
    return SampleSet(samples.codes, samples.starts, samples.ends, labels, samples.names)


def motif_sets(length: int = 48) -> dict[str, SampleSet]:
    return {name: motif_set(n, length, seed) for name, n, seed in (("train", 400, 1), ("val", 120, 2),
                                                                    ("test", 200, 3))}


@pytest.mark.slow
def test_every_baseline_finds_a_planted_motif_and_nothing_in_shuffled_labels():
    from pipelines.tasks.dna.classify_baselines import fit_baselines, score_lengths

    sets = motif_sets()
    planted = score_lengths(fit_baselines(sets, 32, 2, cnn_epochs=6), sets["test"], {32: 32, 48: 48}, 32)
    noise = {name: shuffled(s, i) for i, (name, s) in enumerate(sets.items())}
    null = score_lengths(fit_baselines(noise, 32, 2, cnn_epochs=6), noise["test"], {32: 32, 48: 48}, 32)
    for name in ("onehot_lr", "pwm", "cnn"):
        assert planted[name][32] > 0.9 and planted[name][48] > 0.9, (name, planted[name])
        assert abs(null[name][32] - 0.5) < 0.15 and abs(null[name][48] - 0.5) < 0.15, (name, null[name])


def test_settings_are_chosen_on_validation_without_the_test_split():
    from sklearn.linear_model import LogisticRegression

    from pipelines.tasks.dna.classify_baselines import auroc, crops, fit_baselines, one_thread

    sets = motif_sets(32)
    del sets["test"]  # fitting must not need it: a KeyError here would mean it reads the test split
    fitted = fit_baselines(sets, 32, 2, cnn_epochs=2)
    x, y = crops(sets["train"], 32, 32)
    xv, yv = crops(sets["val"], 32, 32)
    lr = fitted["onehot_lr"]
    for c, got in lr.val_curve.items():  # the curve is the validation AUROC of each C fitted on train
        with one_thread():
            clf = LogisticRegression(C=c, max_iter=2000).fit(x.flatten(1).numpy(), y)
        assert got == pytest.approx(auroc(yv, clf.predict_proba(xv.flatten(1).numpy())), abs=1e-6)
    assert lr.val_curve[lr.chosen] == max(lr.val_curve.values())
    assert set(fitted["cnn"].val_curve) == {1, 2} and fitted["cnn"].chosen in (1, 2)
    assert fitted["pwm"].val_curve[fitted["pwm"].chosen] == max(fitted["pwm"].val_curve.values())


def test_the_cnn_trains_inside_inference_mode_as_after_a_lightning_test_loop():
    import torch

    from pipelines.tasks.dna.classify_baselines import crops, train_cnn

    with torch.inference_mode():  # Lightning calls on_test_end inside it
        train, val = crops(motif_set(40, 16, 1), 16, 16), crops(motif_set(20, 16, 2), 16, 16)
        cnn = train_cnn(train, val, 2, epochs=1)
    assert cnn.chosen == 1 and 0.0 <= cnn.val_curve[1] <= 1.0


def test_two_class_pwm_ranks_by_the_log_odds_of_positives_against_negatives():
    import torch

    from pipelines.tasks.dna.classify_baselines import PositionWeightMatrix, crops

    train, val = motif_set(60, 12, 4), motif_set(20, 12, 5)
    pwm = PositionWeightMatrix(grid=(0.5,)).fit(crops(train, 12, 12), crops(val, 12, 12), 2)
    rows = np.asarray(train.codes).reshape(60, 12)
    x, _ = crops(val, 12, 12)
    got = (pwm.logits(x)[:, 1] - pwm.logits(x)[:, 0]).squeeze(1).double()  # (N,)
    want = np.zeros(20)
    for k, seq in enumerate(np.asarray(val.codes).reshape(20, 12)):  # float64 reference, by hand
        for i, b in enumerate(seq):
            pos, neg = rows[train.labels == 1, i], rows[train.labels == 0, i]
            want[k] += np.log(((pos == b).sum() + 0.5) / (len(pos) + 2.0))
            want[k] -= np.log(((neg == b).sum() + 0.5) / (len(neg) + 2.0))
    assert torch.allclose(got, torch.from_numpy(want), atol=1e-4)  # equal class priors: no prior term


def test_a_longer_crop_scores_as_its_best_window_and_a_shorter_one_is_centred():
    import torch

    from pipelines.tasks.dna.classify_baselines import (
        OneHotLogistic,
        crops,
        one_thread,
        train_cnn,
        window_scores,
    )

    train, val = motif_set(80, 16, 6), motif_set(40, 16, 7)
    x, _ = crops(motif_set(6, 40, 8, offset=3), 40, 16)  # (6, 4, 40): the motif far from the centre
    with one_thread():
        lr = OneHotLogistic(grid=(1.0,)).fit(crops(train, 16, 16), crops(val, 16, 16), 2)
        cnn = train_cnn(crops(train, 16, 16), crops(val, 16, 16), 2, epochs=1)
        for scorer in (lr, cnn):
            each = np.stack([window_scores(scorer.logits, x[:, :, o : o + 16])
                             for o in range(0, 25, 2)])  # (W, N, C): every 16-base window at stride 2
            assert np.allclose(scorer.scores(x, stride=2), each.max(0), atol=1e-5)
    short, _ = crops(motif_set(2, 8, 9), 8, 16)  # 8 bases inside a 16-base window, 4 zero columns each side
    assert short.shape == (2, 4, 16) and short[:, :, :4].sum() == 0 and short[:, :, 12:].sum() == 0
    assert torch.equal(short[:, :, 4:12].sum(1), torch.ones(2, 8))


@pytest.mark.slow
def test_the_callback_logs_every_baseline_at_every_test_length_to_mlflow(tmp_path, capsys):
    import mlflow
    from lightning.pytorch.loggers import MLFlowLogger

    from datamodules import ClassificationDataModule
    from pipelines.tasks.dna.classify import ClassifyBaselines

    sets = motif_sets(64)
    recs = {f"{n}{i}": "".join("ACGT"[c] for c in s.codes[a:b])
            for n, s in sets.items() for i, (a, b) in enumerate(zip(s.starts, s.ends, strict=True))}
    fasta = write_fasta(tmp_path / "seqs.fa", recs)
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(
        f"{n}{i},{'ab'[y]}\n" for n, s in sets.items() for i, y in enumerate(s.labels)))
    dm = flat_dm(ClassificationDataModule, fasta=str(fasta), labels=str(tmp_path / "labels.csv"), seq_len=32,
                 eval_lengths=[32, 64], cache_dir=str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with workdir_with_store(tmp_path):
        logger = MLFlowLogger(experiment_name="t", tracking_uri=uri)

        class Trainer:  # what the callback reads of a trainer after testing
            datamodule, loggers, is_global_zero = dm, [logger], True

        ClassifyBaselines(cnn_epochs=2).on_test_end(Trainer(), None)
        logged = mlflow.MlflowClient(uri).get_run(logger.run_id).data.metrics
    for name in ("onehot_lr", "pwm", "cnn"):
        keys = {f"baseline/{name}_auroc_L32", f"baseline/{name}_auroc_L64", f"baseline/{name}_val_auroc"}
        assert keys <= set(logged)
        assert logged[f"baseline/{name}_auroc_L32"] > 0.8  # the motif is planted in every split
    assert logged["baseline/onehot_lr_C"] in (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    assert logged["baseline/cnn_epoch"] in (1, 2)
    table = capsys.readouterr().err
    assert "onehot_lr" in table and table.count("nan") == 2  # no model results here: its column is NaN


def test_the_shipped_config_adds_the_baselines_and_bad_settings_are_refused(tmp_path):
    from pipelines.cli import make_cli
    from pipelines.tasks.dna.classify import ClassifyBaselines
    from posenc import PosencError

    write_fasta(tmp_path / "s.fa", {f"s{i}": "ACGT" * 10 for i in range(12)})
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'pq'[i % 2]}\n" for i in range(12)))
    with workdir_with_store(tmp_path):
        cli = make_cli(["--config", str(ROOT / "configs" / "dna_classify.yaml"),
                        f"--data.init_args.fasta={tmp_path / 's.fa'}",
                        f"--data.init_args.labels={tmp_path / 'labels.csv'}",
                        "--data.init_args.split=[0.5,0.25,0.25]", "--trainer.logger=false"], run=False)
    found = [c for c in cli.trainer.callbacks if isinstance(c, ClassifyBaselines)]
    assert len(found) == 1 and found[0].cnn_epochs == 10 and found[0].stride == 1
    with pytest.raises(PosencError, match="cnn_epochs=0"):
        ClassifyBaselines(cnn_epochs=0)
