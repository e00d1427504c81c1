"""``evaluate --split val``: the length sweep on validation windows (choose on validation, read test
once). Tiny untrained models saved as checkpoints: no training here."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules import DNADataModule
from pipelines import DNALanguageModel
from pipelines.eval.extrapolation import evaluate
from posenc import PosencError
from tests.helpers import flat_dm, runs, task, workdir_with_store, write_fasta

LENGTHS = [32, 64, 128]
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "pe": {"class_path": "posenc.RoPE"}}


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """(folder, untrained tiny RoPE DNA LM, its datamodule, checkpoint path with the datamodule's
    hyperparameters, as Lightning saves them)."""
    tmp = tmp_path_factory.mktemp("val")
    dm = flat_dm(DNADataModule, fasta=str(write_fasta(tmp / "g.fa", n=8000)), seq_len=32, batch_size=4,
                 eval_lengths=LENGTHS, eval_tokens=256, cache_dir=None)
    torch.manual_seed(0)
    model = task(DNALanguageModel, vocab_size=dm.vocab_size, pad_id=dm.pad_id, **TINY).eval()
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
            "datamodule_hyper_parameters": dict(dm.hparams)}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp / "lm.ckpt")
    return tmp, model, dm, tmp / "lm.ckpt"


def direct_bits(model: DNALanguageModel, loader) -> tuple[float, np.ndarray]:
    """Bits/base over every window of ``loader`` summed here (log-softmax of the next base), and the
    counts of the scored target bases by code."""
    total, count, codes = 0.0, 0, np.zeros(8, dtype=np.int64)
    with torch.no_grad():
        for batch in loader:
            x, y = batch[:, :-1], batch[:, 1:]  # (B, n) inputs, (B, n) next bases
            logp = torch.log_softmax(model(x, torch.arange(x.shape[1])).double(), dim=-1)  # (B, n, V)
            got = logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (B, n)
            keep = y != model.pad_id
            total -= float(got[keep].sum()) / math.log(2)
            count += int(keep.sum())
            codes += np.bincount(y[keep].numpy(), minlength=8)[:8]
    return total / count, codes


def test_val_sweep_scores_the_validation_windows_and_its_baseline_there(lm):
    from pipelines.tasks.dna.markov import MarkovModel

    _, model, dm, _ = lm
    val = evaluate(model, dm, lengths=LENGTHS, variants=[], split="val")
    test = evaluate(model, dm, lengths=LENGTHS, variants=[])
    assert (val.split, test.split) == ("val", "test")
    counts = []
    for n in LENGTHS:
        bits, codes = direct_bits(model, dm.eval_dataloader("val", n))
        assert val.by_length()[n] == pytest.approx(bits, rel=1e-5)
        assert val.by_length()[n] != pytest.approx(test.by_length()[n], rel=1e-6)  # other bases
        counts.append(codes)
    assert all((c == counts[0]).all() for c in counts)  # every length scores the same validation bases
    # the trivial baseline: order-0 Markov fitted on train, on the validation bases every length scores
    span = dm.region_codes("val", dm.eval_span)
    targets = [s[1:] for s in span]  # the first base of a span is context only
    assert val.trivial == pytest.approx(MarkovModel(0).fit(dm.region_codes("train")).bits_per_base(targets))
    assert val.trivial != pytest.approx(test.trivial, rel=1e-6)
    scored = np.bincount(np.concatenate([np.asarray(s[1:]) for s in span]), minlength=8)[:8]
    assert (scored == counts[0]).all()  # that span is the bases the windows score (the first is context)


def test_val_reference_baselines_are_scored_on_the_validation_bases(lm):
    from pipelines.tasks.dna.markov import InterpolatedMarkov

    _, model, dm, _ = lm
    val = evaluate(model, dm, lengths=LENGTHS, variants=[], split="val", baselines=True, max_batches=1)
    test = evaluate(model, dm, lengths=LENGTHS, variants=[], baselines=True, max_batches=1)
    chain = InterpolatedMarkov().fit(dm.region_codes("train"), progress=False)
    chain.select_order(dm.region_codes("val"))  # the order is chosen on validation, as for test
    span = dm.region_codes("val", dm.eval_span)
    assert val.baselines["markov_best"] == pytest.approx(chain.bits_per_base(span))
    assert val.baselines["markov_best_L64"] == pytest.approx(chain.bits_per_base(span, window=64))
    assert val.baselines["markov_best"] != pytest.approx(test.baselines["markov_best"], rel=1e-6)


def test_tasks_without_validation_windows_refuse_the_val_split(tmp_path):
    from datamodules.synthetic.datamodule import SyntheticLMDataModule

    dm = flat_dm(SyntheticLMDataModule, seq_len=16, eval_lengths=[16, 32], eval_tokens=64,
                 samples_per_epoch=8)
    model = task(DNALanguageModel, vocab_size=dm.vocab_size, pad_id=dm.pad_id, **TINY)
    with pytest.raises(PosencError, match=r"^evaluate --split val: task 'dna_lm' \(SyntheticLMDataModule\) "
                                          r"has no per-length validation windows"):
        evaluate(model, dm, factors=[1, 2], split="val")
    # a genome whose validation region (400 bases) is shorter than the longest window (513): said, not skipped
    short = flat_dm(DNADataModule, fasta=str(write_fasta(tmp_path / "g.fa", n=8000)), seq_len=32,
                    split=(0.8, 0.05, 0.15), eval_lengths=[32, 512], eval_tokens=512, cache_dir=None)
    lm = task(DNALanguageModel, vocab_size=short.vocab_size, pad_id=short.pad_id, **TINY)
    assert evaluate(lm, short, lengths=[32, 512], variants=[], max_batches=1).lengths == [32, 512]  # test
    why = r"^evaluate --split val: every length is scored on blocks of the longest \(512 tokens\) and the "
    with pytest.raises(PosencError, match=why + "validation split has none that fit"):
        evaluate(lm, short, lengths=[32, 512], split="val")


def test_val_results_are_logged_and_written_under_their_own_names(lm, tmp_path):
    from pipelines.eval.report import format_table, mlflow_metrics, mlflow_tags, write_tables

    _, model, dm, _ = lm
    val = evaluate(model, dm, lengths=LENGTHS, variants=["pi"], split="val", window=True, max_batches=1)
    keys = {k for k, _, _ in mlflow_metrics(val)}
    assert {"val/extrapolation/bits_per_base_by_length", "val/extrapolation/window/bits_per_base_by_length",
            "val/extrapolation/pi/bits_per_base_by_length", "val/extrapolation/trivial_baseline"} <= keys
    assert all(k.startswith("val/extrapolation/") for k in [*keys, *mlflow_tags(val)])
    assert mlflow_tags(val)["val/extrapolation/split"] == "val"
    write_tables(val, tmp_path)
    assert set(pd.read_csv(tmp_path / "results.csv").split) == {"val"}
    assert json.loads((tmp_path / "summary.json").read_text())["split"] == "val"
    assert format_table(val).splitlines()[0] == "dna_lm RoPE: whole windows of the validation split"
    test = evaluate(model, dm, lengths=LENGTHS, variants=[], max_batches=1)
    assert {k for k, _, _ in mlflow_metrics(test)} >= {"extrapolation/bits_per_base_by_length"}  # unchanged
    assert format_table(test).splitlines()[0] == "dna_lm RoPE: whole windows of the test split"


@pytest.mark.slow  # two figures and an MLflow store: ~10-25 s on a shared CPU
def test_cli_split_val_names_the_split_everywhere(lm, capsys):
    from pipelines.eval.evaluate import main

    tmp, model, dm, ckpt = lm
    with workdir_with_store(tmp):
        main([str(ckpt), "--split", "val", "--lengths", "32", "64", "--variants", "pi", "--window",
              "--out", "ev"])
        out = capsys.readouterr().out
        assert "dna_lm RoPE: whole windows of the validation split" in out
        client, (run,) = runs(tmp)
        keys = set(run.data.metrics)
        want = ("bits_per_base_by_length", "pi/bits_per_base_by_length", "window/bits_per_base_by_length",
                "trivial_baseline")
        assert {f"val/extrapolation/{k}" for k in want} <= keys
        assert all(k.startswith("val/extrapolation/") for k in keys)  # nothing reads as a test score
        assert run.data.tags["val/extrapolation/split"] == "val"
        assert not any(k.startswith("extrapolation/") for k in run.data.tags)
        assert {a.path for a in client.list_artifacts(run.info.run_id, "val/extrapolation")} >= {
            "val/extrapolation/results.csv", "val/extrapolation/summary.json"}
        history = client.get_metric_history(run.info.run_id, "val/extrapolation/bits_per_base_by_length")
        direct = {n: evaluate(model, dm, lengths=[32, 64], variants=[], split="val").by_length()[n]
                  for n in (32, 64)}
        assert {m.step: m.value for m in history} == pytest.approx(direct, rel=1e-6)
        table = pd.read_csv(tmp / "ev" / "results.csv")
        assert set(table.split) == {"val"} and set(table.variant) == {"trained", "pi", "window"}
        assert json.loads((tmp / "ev" / "summary.json").read_text())["split"] == "val"
        main([str(ckpt), "--split", "val", "--lengths", "32", "64", "--variants", "--no-mlflow"])
        assert len(runs(tmp)[1]) == 1  # --no-mlflow: nothing logged
        assert (tmp / "outputs" / "extrapolation" / "lm-val" / "results.csv").is_file()


def test_cli_split_val_on_a_forecaster_is_one_line_and_exit_2(tmp_path, capsys):
    from datamodules import TimeSeriesDataModule
    from pipelines import Forecaster
    from pipelines.eval.evaluate import main
    from tests.helpers import dm_kwargs, seasonal_frame, write_csv

    dm = TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "s.csv", seasonal_frame())))
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, horizon=dm.horizon,
                 patch_len=dm.patch_len,
                       **TINY)
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
            "datamodule_hyper_parameters": dict(dm.hparams)}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "f.ckpt")
    with workdir_with_store(tmp_path), pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "f.ckpt"), "--split", "val", "--factors", "1", "2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("error: evaluate --split val: task 'ts_forecast' (TimeSeriesDataModule) has no "
                       "per-length validation windows for the length sweep; use --split test")
    assert "Traceback" not in "\n".join(err) and not (tmp_path / "outputs").exists()
    assert runs(tmp_path)[1] == []


def test_logscale_variant_is_the_same_weights_with_the_temperature_of_l0(lm):
    """Variant ``logscale`` = the model built with ``log_scale_len = L0`` and the same weights: equal to
    the scheme as trained at L0 (the temperature's floor of 1), different past it."""
    _, model, dm, _ = lm
    swept = evaluate(model, dm, lengths=LENGTHS, variants=[], log_scale=True, max_batches=2)
    plain, scaled = swept.by_length(), swept.by_length("logscale")
    assert scaled[32] == plain[32] and scaled[64] != plain[64] and scaled[128] != plain[128]
    built = task(DNALanguageModel, vocab_size=dm.vocab_size, pad_id=dm.pad_id, log_scale_len=32,
                 **TINY).eval()
    built.load_state_dict(model.state_dict())
    direct = evaluate(built, dm, lengths=LENGTHS, variants=[], log_scale=True, max_batches=2)
    assert direct.by_length() == pytest.approx(scaled, rel=1e-6) and direct.variants == ["trained"]
    assert model.backbone.log_scale_len is None  # restored after the sweep
