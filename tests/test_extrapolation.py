"""Length-extrapolation sweep: arithmetic, the after-fit callback, RoPE variants, the entry point."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipelines.eval.extrapolation import TRAINED, Extrapolation, LengthResult, evaluate
from pipelines.eval.lengths import check_lengths, extrapolation_ratio
from posenc import PosencError
from tests.helpers import ROOT, flat_dm, store_client, task, workdir_with_store, write_fasta

TINY = [
    "--model.init_args.d_model=16",
    "--model.init_args.n_heads=2",
    "--model.init_args.n_layers=2",
    "--data.init_args.seq_len=32",
    "--data.init_args.batch_size=4",
    "--data.init_args.samples_per_epoch=16",
    "--data.init_args.eval_tokens=512",
    "--data.init_args.eval_lengths=[32,64,128,256,512]",
    "--trainer.max_epochs=1",
    "--trainer.limit_val_batches=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks+=pipelines.eval.evaluate.ExtrapolationEval",
    "--test_after_fit=false",
]
LENGTHS = [32, 64, 128, 256, 512]  # 1×…16× of seq_len 32


# ----------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize(
    ("metrics", "higher", "expected"),
    [
        ({100: 2.00, 200: 2.05, 400: 2.10, 800: 2.11}, False, (400, 4.0)),  # 2.10 = +5.0%: still within
        ({100: 2.00, 200: 2.11, 400: 2.00}, False, (100, 1.0)),  # a recovery after a break does not count
        ({100: 2.00, 200: 1.50, 400: 1.00}, False, (400, 4.0)),  # improving is within
        ({100: 0.80, 200: 0.77, 400: 0.75}, True, (200, 2.0)),  # higher is better: 0.75 < 0.76
        ({100: 0.80, 200: 0.90}, True, (200, 2.0)),
        ({100: 2.00, 200: 2.01, 400: None, 800: 2.0}, False, (200, 2.0)),  # undefined ends the run
        ({100: 2.00, 200: float("nan")}, False, (100, 1.0)),
        ({200: 2.00}, False, (None, None)),  # training length not scored
    ],
)
def test_extrapolation_ratio_on_hand_made_numbers(metrics, higher, expected):
    assert extrapolation_ratio(metrics, 100, higher, 0.05) == expected


def toy_result(trivial: float | None = 2.0, tolerance: float | None = None) -> Extrapolation:
    cells = [LengthResult(TRAINED, n, m) for n, m in ((10, 1.0), (20, 1.04), (40, 1.2))]
    cells.append(LengthResult(TRAINED, 80, None, status="undefined"))
    return Extrapolation("t", "loss", False, 10, "tokens", "position", "X", cells, tolerance=tolerance,
                         trivial=trivial, trivial_name="coin")


def test_summary_reports_the_retained_gain_ratio_and_metric_at_longest():
    # trivial baseline 2.0, loss 1.0 at L0 → gain 1.0; retained 0.96 at 20, 0.8 at 40 (< 0.9)
    res = toy_result()
    assert res.retained() == pytest.approx({10: 1.0, 20: 0.96, 40: 0.8, 80: None})
    s = res.summary()
    assert (s["ratio"], s["max_length"], s["loss_at_train"], s["beats_trivial"]) == (2.0, 20.0, 1.0, 1.0)
    assert s["retained_gain_at_train"] == 1.0 and "tolerance_ratio" not in s
    assert "loss_at_longest" not in s  # the longest length (80) is undefined
    assert res.undefined() == [80] and res.verdict() == ""
    # the relative rule, kept as an option: 1.04 is within 5 % of 1.0, 1.2 is not
    assert toy_result(tolerance=0.05).summary()["tolerance_ratio"] == 2.0


def test_no_ratio_without_a_gain_over_the_trivial_baseline():
    res = toy_result(trivial=0.9)  # the baseline (0.9) beats the model (1.0) at L0
    s = res.summary()
    assert s["beats_trivial"] == 0.0 and "ratio" not in s
    assert "does not beat the trivial baseline (coin 0.9)" in res.verdict()
    assert all(v is None for v in res.retained().values())
    assert "ratio" not in toy_result(trivial=None).summary()
    assert toy_result(trivial=None).verdict() == "the task defines no trivial baseline"


def test_single_run_retained_gain_is_undefined_below_the_minimum_effect_and_says_why():
    from pipelines.eval.report import format_table, mlflow_metrics, mlflow_tags

    # bits/base, minimum effect 0.01: a gain of 0.004 bits at L0 is above 0 but no denominator
    cells = [LengthResult(TRAINED, n, m) for n, m in ((10, 1.996), (20, 1.998), (40, 2.01))]
    res = Extrapolation("t", "bits_per_base", False, 10, "tokens", "position", "X", cells, trivial=2.0,
                        trivial_name="markov0")
    assert all(v is None for v in res.retained().values())  # the plain ratio would give 0.5 at 20
    s = res.summary()
    assert s["beats_trivial"] == 0.0 and "ratio" not in s and "retained_gain_at_train" not in s
    why = res.verdict()
    assert why.startswith("retained gain undefined against markov0 2:") and "minimum effect 0.01" in why
    assert mlflow_tags(res)["extrapolation/no_ratio"] == why
    assert not [k for k, _, _ in mlflow_metrics(res) if "retained_gain" in k]
    assert format_table(res).splitlines()[-1] == f"trained: {why}"
    # just above the minimum effect (gain 0.02): defined, the plain ratio of gains
    res.cells[0] = LengthResult(TRAINED, 10, 1.98)
    assert res.verdict() == "" and res.retained()[20] == pytest.approx(0.1)


def test_retained_gain_is_logged_per_length_next_to_the_metric():
    from pipelines.eval.report import mlflow_metrics, mlflow_tags

    res = toy_result()
    res.baselines = {"markov5": 1.5}
    got = {(k, step): v for k, v, step in mlflow_metrics(res)}
    assert got[("extrapolation/loss_by_length", 20)] == 1.04
    assert got[("extrapolation/retained_gain_by_length", 20)] == pytest.approx(0.96)
    assert ("extrapolation/retained_gain_by_length", 80) not in got  # undefined there
    assert got[("extrapolation/trivial_baseline", 0)] == 2.0
    assert got[("extrapolation/baseline/markov5", 0)] == 1.5
    tags = mlflow_tags(res)
    assert tags["extrapolation/trivial"] == "coin" and tags["extrapolation/lengths"] == "10,20,40,80"
    assert tags["extrapolation/undefined_lengths"] == "80" and tags["extrapolation/no_ratio"] == "none"


def test_posenc_figures_0_writes_the_tables_but_no_figure(tmp_path, monkeypatch):
    """What the comparison and claims tests' children run with (the figure itself: the rope run's
    artifacts below, drawn by default)."""
    from pipelines.eval.report import save_all, write_tables

    monkeypatch.setenv("POSENC_FIGURES", "0")
    files = save_all(toy_result(), tmp_path / "off")
    tables = [p.name for p in write_tables(toy_result(), tmp_path / "tables")]
    assert [p.name for p in files] == tables and "results.csv" in tables
    assert sorted(p.name for p in (tmp_path / "off").iterdir()) == sorted(tables)  # no extrapolation.png


@pytest.mark.parametrize("bad", [[], [64, 32], [32, 32], [0, 32]])
def test_lengths_must_increase(bad):
    with pytest.raises(PosencError, match="strictly increasing"):
        check_lengths(bad)


def test_callback_rejects_decreasing_factors():
    from pipelines.eval.evaluate import ExtrapolationEval

    with pytest.raises(PosencError, match="factors"):
        ExtrapolationEval(factors=[1, 4, 2])
    with pytest.raises(PosencError, match="unknown RoPE variant"):
        ExtrapolationEval(rope_variants=["pi", "rope3"])
    with pytest.raises(PosencError, match="retain must be in"):
        ExtrapolationEval(retain=1.5)


# ----------------------------------------------------------------------------- tiny runs
def fit(tmp: Path, scheme: str, *extra: str):
    from pipelines.cli import main

    with workdir_with_store(tmp):
        fasta = write_fasta(tmp / "g.fa", n=8000)
        return main(
            [
                "fit",
                "--config",
                str(ROOT / "configs/dna_lm.yaml"),
                "--config",
                str(ROOT / f"configs/posenc/{scheme}.yaml"),
                f"--data.init_args.fasta={fasta}",
                *TINY,
                *extra,
            ]
        )


def sweep(cli):
    return next(c for c in cli.trainer.callbacks if type(c).__name__ == "ExtrapolationEval").result


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rope")
    return tmp, fit(tmp, "rope")


def test_callback_logs_one_metric_per_length_with_steps(rope_run):
    tmp, cli = rope_run
    c, run_id = store_client(tmp), cli.trainer.logger.run_id
    for key in ("extrapolation/bits_per_base_by_length", "extrapolation/yarn/bits_per_base_by_length"):
        history = c.get_metric_history(run_id, key)
        assert [m.step for m in history] == LENGTHS, key
        assert all(math.isfinite(m.value) for m in history)
    run = c.get_run(run_id)
    metrics, tags = run.data.metrics, run.data.tags
    # the trivial baseline (order-0 Markov) on the same test bases — the target bases of the windows,
    # not the first base of a span, which is context only — computed here independently
    from pipelines.tasks.dna.markov import MarkovModel

    dm = cli.datamodule
    test = [codes[1:] for codes in dm.region_codes("test", dm.eval_span)]
    markov0 = MarkovModel(0).fit(dm.region_codes("train")).bits_per_base(test)
    assert metrics["extrapolation/trivial_baseline"] == pytest.approx(markov0, rel=1e-12)
    assert tags["extrapolation/metric"] == "bits_per_base" and tags["extrapolation/train_length"] == "32"
    if metrics["extrapolation/beats_trivial"]:  # a ratio, and retained gain at every defined length
        assert metrics["extrapolation/ratio"] in (1, 2, 4, 8, 16)
        assert metrics["extrapolation/max_length"] == 32 * metrics["extrapolation/ratio"]
        gains = c.get_metric_history(run_id, "extrapolation/retained_gain_by_length")
        assert [m.step for m in gains] == LENGTHS
    else:  # a tiny model a few steps in: no gain to keep, so no ratio, and the run says why
        assert "extrapolation/ratio" not in metrics
        assert tags["extrapolation/no_ratio"].startswith(
            ("does not beat the trivial baseline (order-0 Markov", "retained gain undefined against order-0"))
    arts = {a.path for a in c.list_artifacts(run_id, "extrapolation")}
    assert {
        "extrapolation/extrapolation.png",
        "extrapolation/results.csv",
        "extrapolation/per_position.csv",
        "extrapolation/blocks.csv",
    } <= arts


def test_the_callbacks_block_sums_are_read_back_by_compare(rope_run):
    """blocks.csv of the after-fit sweep, as ``make compare`` reads it: per variant and length the
    per-block (bits, bases) whose ratio is the logged metric, and the trivial baseline's."""
    from pipelines.studies.compare.runs import ChildRun, read_child

    tmp, cli = rope_run
    child = read_child(store_client(tmp), ChildRun("rope", 0, cli.trainer.logger.run_id, "trained"))
    assert sorted(child.blocks) == sorted(sweep(cli).variants)
    for variant, by_length in child.blocks.items():
        assert sorted(by_length) == LENGTHS
        for n, table in by_length.items():
            assert table[:, 0].sum() / table[:, 1].sum() == pytest.approx(child.curves[variant][n], rel=1e-6)
    assert child.trivial_blocks[:, 0].sum() / child.trivial_blocks[:, 1].sum() == pytest.approx(
        child.trivial, rel=1e-9)


def test_rope_family_gets_every_variant_and_per_position_curves(rope_run):
    _, cli = rope_run
    res = sweep(cli)
    assert res.variants == [TRAINED, "pi", "ntk", "dynamic_ntk", "yarn"]
    for cell in res.cells:
        assert cell.curve is not None and cell.curve.shape == (cell.length,)  # one value per position
        assert np.isfinite(cell.curve).all()
        # the metric is the count-weighted mean of the curve (every position scores the same windows)
        assert cell.metric == pytest.approx(float(np.mean(cell.curve)), rel=1e-5)
    at_train = {c.variant: c.metric for c in res.cells if c.length == 32}
    assert max(at_train.values()) == pytest.approx(min(at_train.values()), rel=1e-5)  # s = 1: all equal RoPE


def test_sweep_matches_the_models_own_test_pass(rope_run):
    """bits/base of the sweep at each length = the LM's own per-length test (same windows)."""
    import lightning as L

    _, cli = rope_run
    model, dm = cli.model, cli.datamodule
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).test(
        model, datamodule=dm, verbose=False
    )
    own = model.length_results()
    res = evaluate(model, dm, lengths=sorted(own), variants=[])
    assert res.by_length() == pytest.approx(own, rel=1e-5)


def test_learned_pe_past_max_len_is_undefined_not_a_crash(tmp_path):
    """Learned (64 rows) past its table, in one fit: the sweep marks 128 undefined; SelectContext
    cannot read whole 256-base windows, so it scores only the chunked contexts and chooses one; the
    test pass then defines every length through it in sliding chunks, while the whole windows past
    the table stay undefined (the extrapolation score)."""
    cli = fit(
        tmp_path,
        "learned",
        "--model.init_args.pe.init_args.max_len=64",
        "--trainer.callbacks.init_args.factors=[1,2,4]",
        "--trainer.callbacks+=pipelines.tasks.dna.lm.SelectContext",
        "--data.init_args.eval_lengths=[32,64,128,256]",
        "--test_after_fit=true",
    )
    select = next(c for c in cli.trainer.callbacks if type(c).__name__ == "SelectContext")
    assert None not in select.scores and select.chosen in (32, 64)
    assert cli.model.undefined_lengths == [128, 256]
    assert sorted(cli.model.sliding_results()) == [32, 64, 128, 256]
    res = sweep(cli)
    assert res.undefined() == [128]
    assert [c.status for c in res.cells] == ["ok", "ok", "undefined"]
    assert res.variants == [TRAINED]  # not a RoPE-family scheme: no inference-time variants
    run = store_client(tmp_path).get_run(cli.trainer.logger.run_id)
    assert run.data.tags["extrapolation/undefined_lengths"] == "128"
    assert run.data.metrics.get("extrapolation/max_length", 0) <= 64  # (no ratio without a gain)
    assert "extrapolation/bits_per_base_at_longest" not in run.data.metrics


def test_standalone_evaluate_from_checkpoint_and_run_id(rope_run, capsys):
    from pipelines.eval.evaluate import main

    tmp, cli = rope_run
    ckpt = cli.trainer.checkpoint_callback.best_model_path
    with workdir_with_store(tmp):
        main([ckpt, "--lengths", "32", "64", "--variants", "pi", "--no-mlflow", "--out", "ev"])
        table = pd.read_csv(tmp / "ev" / "results.csv")
        blocks = pd.read_csv(tmp / "ev" / "blocks.csv")  # per-block sums: every cell and the trivial baseline
        cells = {(v, n) for v, n in zip(blocks.variant, blocks.length, strict=True)}
        assert cells == {("trained", 32), ("pi", 32), ("trained", 64), ("pi", 64), ("trivial", 0)}
        assert list(zip(table.variant, table.length, strict=True)) == [
            ("trained", 32),
            ("pi", 32),
            ("trained", 64),
            ("pi", 64),
        ]
        main([cli.trainer.logger.run_id, "--factors", "1", "2", "--variants"])  # resolves the logged ckpt
        history = store_client(tmp).get_metric_history(
            cli.trainer.logger.run_id, "extrapolation/bits_per_base_by_length"
        )
        assert [m.step for m in history][-2:] == [32, 64]
        for bad, msg in (
            (["nope"], "neither a checkpoint"),
            ([ckpt, "--factors", "2", "1"], "strictly increasing"),
        ):
            with pytest.raises(SystemExit) as exc:
                main(bad)
            assert exc.value.code == 2
            assert msg in capsys.readouterr().err


# ----------------------------------------------------------------------------- forecaster
def test_forecaster_sweep_over_lookbacks(tmp_path):
    import lightning as L

    from datamodules.config import Loader
    from datamodules.timeseries.config import Source, Windows
    from datamodules.timeseries.datamodule import TimeSeriesDataModule
    from pipelines.tasks.forecast.model import Forecaster

    t = pd.date_range("2024-01-01", periods=1500, freq="h")
    y = np.sin(np.arange(1500) * 2 * np.pi / 24) + 0.1 * np.random.default_rng(0).normal(size=1500)
    pd.DataFrame({"Time": t, "y": y}).to_csv(tmp_path / "s.csv", index=False)
    source = Source(str(tmp_path / "s.csv"), target_cols=["y"])
    dm = TimeSeriesDataModule(source, windows=Windows(lookback=16, horizon=4, patch_len=4, eval_stride=7),
                              loader=Loader(batch_size=16))
    torch.manual_seed(0)
    model = task(Forecaster,
        n_targets=1,
        horizon=4,
        patch_len=4,
        d_model=16,
        n_heads=2,
        n_layers=1,
        pe={"class_path": "posenc.RoPE"},
        plot_examples=0,
    )
    res = evaluate(model, dm, factors=[1, 2, 4])
    assert res.metric == "mse" and res.lengths == [16, 32, 64]
    assert set(res.variants) == {TRAINED, "pi", "ntk", "dynamic_ntk", "yarn"}
    assert all(c.curve.shape == (4,) for c in res.cells)  # per forecast step
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).test(
        model,
        datamodule=TimeSeriesDataModule(
            source, loader=Loader(batch_size=16),
            windows=Windows(lookback=16, horizon=4, patch_len=4, eval_stride=7, eval_lookbacks=[16, 32, 64]),
        ),
        verbose=False,
    )
    own = {n: e.mse for n, e in model.test_errors.items() if e is not None}
    assert res.by_length() == pytest.approx(own, rel=1e-5)


def test_masked_lm_sweep_matches_its_own_test_pass(tmp_path):
    import lightning as L

    from datamodules.dna.genome import MaskedDNADataModule
    from pipelines.tasks.dna.mlm import MaskedDNAModel

    dm = flat_dm(MaskedDNADataModule,
        fasta=str(write_fasta(tmp_path / "g.fa", n=8000)),
        seq_len=32,
        batch_size=4,
        eval_lengths=[32, 64, 128],
        eval_tokens=256,
        cache_dir=None,
    )
    torch.manual_seed(0)
    model = task(MaskedDNAModel,
        vocab_size=dm.vocab_size,
        pad_id=dm.pad_id,
        d_model=16,
        n_heads=2,
        n_layers=1,
        pe={"class_path": "posenc.Learned", "init_args": {"max_len": 64}},
    )
    res = evaluate(model, dm, factors=[1, 2, 4])
    assert res.metric == "bits_per_base" and res.undefined() == [128] and res.variants == [TRAINED]
    assert all(c.curve.shape == (c.length,) for c in res.cells if c.status == "ok")
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).test(
        model, datamodule=dm, verbose=False
    )
    own = {n: r["bits_per_base"] for n, r in model.length_results().items()}
    assert {n: v for n, v in res.by_length().items() if v is not None} == pytest.approx(own, rel=1e-5)


# ----------------------------------------------------------------------------- segmentation, classification
class Constant(torch.nn.Module):
    """Stands in for a task's forward: the same logits for every input (a trivial predictor)."""

    def __init__(self, n_classes: int, winner: int, per_token: bool) -> None:
        super().__init__()
        self.logits = torch.zeros(n_classes)
        self.logits[winner] = 1.0
        self.per_token = per_token

    def forward(self, tokens):
        shape = (*tokens.shape, -1) if self.per_token else (tokens.shape[0], -1)
        return self.logits.expand(*shape)  # (B, T, C) or (B, C)


def test_segmentation_sweep_scores_accuracy_and_its_majority_class_baseline(tmp_path, monkeypatch):
    import lightning as L

    from datamodules import SegmentationDataModule
    from pipelines.tasks.dna.segment import FrameSegmenter
    from tests.helpers import random_bases, write_gff

    fasta = write_fasta(tmp_path / "g.fa", {"r": random_bases(6000)})
    gff = write_gff(tmp_path / "a.gff", [("r", 1001, 2200, "+", 0), ("r", 3001, 3600, "-", 0),
                                         ("r", 5501, 5710, "+", 0)])
    dm = flat_dm(SegmentationDataModule, annotation=str(gff), fasta=str(fasta), seq_len=32, batch_size=4,
                 gap=0, eval_lengths=[32, 64, 128], eval_tokens=256, cache_dir=None)
    torch.manual_seed(0)
    model = task(FrameSegmenter, vocab_size=dm.vocab_size, pad_id=dm.pad_id, d_model=16, n_heads=2,
                 n_layers=1,
                           pe={"class_path": "posenc.RoPE"})
    res = evaluate(model, dm, factors=[1, 2, 4], variants=[])
    assert (res.metric, res.higher_is_better, res.trivial_name) == ("acc", True, "majority class")
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).test(
        model, datamodule=dm, verbose=False)
    own = {n: r["acc"] for n, r in model.length_results().items()}
    assert res.by_length() == pytest.approx(own, rel=1e-6)  # = the task's own per-length accuracy
    # the baseline = the sweep's accuracy of a model that always calls the train region's majority (0)
    train = np.concatenate([dm.labels[a:b] for a, b in dm.regions["train"]])
    assert np.bincount(train).argmax() == 0
    monkeypatch.setattr(FrameSegmenter, "forward", Constant(7, 0, per_token=True).forward)
    constant = evaluate(model, dm, factors=[1, 2, 4], variants=[])
    assert list(constant.by_length().values()) == pytest.approx([res.trivial] * 3) and 0 < res.trivial < 1


def test_classification_sweep_scores_auroc_against_chance(tmp_path, monkeypatch):
    import lightning as L

    from datamodules import ClassificationDataModule
    from pipelines.tasks.dna.classify import SequenceClassifier
    from tests.helpers import random_bases

    fasta = write_fasta(tmp_path / "s.fa", {f"s{i}": random_bases(30 + i, i) for i in range(24)})
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'ab'[i % 2]}\n" for i in range(24)))
    dm = flat_dm(ClassificationDataModule, fasta=str(fasta), labels=str(tmp_path / "labels.csv"), seq_len=16,
                 batch_size=4, split=(0.5, 0.25, 0.25), cache_dir=str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = task(SequenceClassifier, vocab_size=dm.vocab_size, pad_id=dm.pad_id, d_model=16, n_heads=2,
                 n_layers=1,
                               pe={"class_path": "posenc.ALiBi"})
    res = evaluate(model, dm, factors=[1, 2, 4])
    assert (res.metric, res.higher_is_better, res.trivial) == ("auroc", True, 0.5)
    assert all(c.curve is None for c in res.cells)  # a pooled classifier scores no position
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).test(
        model, datamodule=dm, verbose=False)
    own = {n: r["auroc"] for n, r in model.length_results().items()}
    assert res.by_length() == pytest.approx(own, rel=1e-6)  # over all test sequences at once
    monkeypatch.setattr(SequenceClassifier, "forward", Constant(2, 1, per_token=False).forward)
    assert set(evaluate(model, dm, factors=[1, 2]).by_length().values()) == {0.5}  # chance is 0.5
