"""Issue 27/26: the causal LM is scored on whole windows at every length, over the same test bases
spread over the whole test region, beside the Markov chain on exactly those windows; sliding-window
inference only when a context is set, under its own keys; the table and figure of ``make train``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from datamodules import DNADataModule
from pipelines.tasks.dna.whole_window import (
    FIGURE,
    format_lengths,
    length_figure,
    log_run_lengths,
    read_lengths,
)
from tests.helpers import flat_dm, flatten, readable_png, store_client, task, workdir_with_store, write_fasta

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = [32, 64, 128, 256]


@pytest.fixture(scope="module")
def dm(tmp_path_factory) -> DNADataModule:
    fasta = write_fasta(tmp_path_factory.mktemp("genome") / "g.fa", n=40000)
    return flat_dm(DNADataModule, fasta=str(fasta), seq_len=32, batch_size=4, eval_lengths=LENGTHS,
                   eval_tokens=1024, cache_dir=None)


def scored(loader, length: int) -> set[int]:
    """Genome offsets of the bases a test loader's windows predict (targets 1..n of each window)."""
    return {int(s) + j for s in loader.dataset.starts for j in range(1, length + 1)}


def test_every_length_scores_the_same_bases_spread_over_the_test_region(dm):
    loaders = dm.test_dataloader()
    bases = [scored(loader, n) for loader, n in zip(loaders, LENGTHS, strict=True)]
    assert all(b == bases[0] for b in bases)
    assert len(bases[0]) == 1024  # eval_tokens bases at every length
    (start, end), = dm.regions["test"]
    quarter = (end - start) // 4
    # four blocks of 256 over a 4,000-base region: the first and the last quarter are both sampled
    assert min(bases[0]) < start + quarter and max(bases[0]) >= end - quarter
    # the blocks the chain is scored on are exactly those windows (the first base of a block: context only)
    spans = dm.region_spans("test", dm.eval_span)
    assert len(spans) == 4
    assert {p for a, b in spans for p in range(a + 1, b)} == bases[0]


def test_the_chain_is_scored_per_length_on_the_models_windows(dm):
    from pipelines.tasks.dna.markov import InterpolatedMarkov, MarkovBaselines

    found = MarkovBaselines(max_order=3, progress=False).compute(dm)
    chain = InterpolatedMarkov(3).fit(dm.region_codes("train"))
    chain.select_order(dm.region_codes("val"))
    for n, loader in zip(LENGTHS, dm.test_dataloader(), strict=True):
        windows = [np.asarray(dm.genome.codes[s : s + n + 1]) for s in loader.dataset.starts]
        by_hand = chain.bits_per_base(windows, window=n)  # each window alone: exactly the model's view
        assert found[f"baseline/markov_bits_per_base_L{n}"] == pytest.approx(by_hand, rel=1e-12)


def tiny_model(context: int | None = None, window: int | None = None):
    import torch

    from pipelines import DNALanguageModel

    torch.manual_seed(0)
    return task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, context=context,
                            pe={"class_path": "posenc.ALiBi"}, attention_window=window)


def test_run(dm, tmp: Path, context: int | None, window: int | None = None) -> dict[str, float]:
    import lightning as L
    from lightning.pytorch.loggers import MLFlowLogger

    from pipelines.tasks.dna.markov import MarkovBaselines

    logger = MLFlowLogger("wholewin", tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    trainer = L.Trainer(logger=logger, callbacks=[MarkovBaselines(max_order=2, progress=False)],
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.test(tiny_model(context, window), datamodule=dm, verbose=False)
    return logger.run_id


test_run.__test__ = False  # a helper, not a test


def test_whole_windows_and_chain_per_length_sliding_only_with_a_context_table_and_figure(dm, tmp_path):
    client = store_client(tmp_path)
    whole = client.get_run(test_run(dm, tmp_path, None)).data.metrics
    for n in LENGTHS:
        assert np.isfinite(whole[f"test/bits_per_base_whole_L{n}"])
        assert whole[f"test/bits_per_base_L{n}"] == whole[f"test/bits_per_base_whole_L{n}"]  # older name
        assert np.isfinite(whole[f"baseline/markov_bits_per_base_L{n}"])
    assert whole["test/bits_per_base"] == whole["test/bits_per_base_whole_L32"]
    assert not any("sliding" in k for k in whole)

    run_id = test_run(dm, tmp_path, 32)  # the same weights, sliding chunks of 32 tokens
    sliding = client.get_run(run_id).data.metrics
    w, s = "test/bits_per_base_whole_L", "test/bits_per_base_sliding_L"
    for n in LENGTHS:  # the whole-window score does not depend on the inference context
        assert sliding[f"{w}{n}"] == pytest.approx(whole[f"{w}{n}"])
    assert sliding[f"{s}32"] == pytest.approx(sliding[f"{w}32"])  # a window within the context
    assert sliding[f"{s}256"] != pytest.approx(sliding[f"{w}256"])  # chunks of 32: another number

    table = log_run_lengths(client, run_id, 32)  # what make train prints, and its figure artifact
    lines = table.splitlines()
    assert "whole-window bits/base" in lines[1] and "chain bits/base" in lines[1] and "sliding" in lines[1]
    for n in LENGTHS:
        row = next(line for line in lines if line.strip().startswith(f"{n // 32}× ({n})"))
        assert f"{sliding[f'{w}{n}']:.4f}" in row and f"{sliding[f'{s}{n}']:.4f}" in row
        assert f"{sliding[f'baseline/markov_bits_per_base_L{n}']:.4f}" in row
    assert [a.path for a in client.list_artifacts(run_id)] == [FIGURE]
    readable_png(Path(client.download_artifacts(run_id, FIGURE, str(tmp_path))))
    assert log_run_lengths(client, client.create_run("0").info.run_id, 32) is None  # nothing to show


def test_length_figure_draws_bands_and_the_chain(tmp_path):
    curves = {"rope": {128: (1.95, 1.94, 1.96), 256: (1.97, 1.95, 1.99)}, "alibi": {128: (1.93, 1.93, 1.93)}}
    path = length_figure(curves, {128: 1.94, 256: 1.94}, 128, "t", tmp_path / "f.png")
    readable_png(path)
    table = read_lengths({"test/bits_per_base_whole_L128": 1.9, "baseline/markov_bits_per_base_L128": 1.94,
                          "test/bits_per_base_whole_L256": 1.8}, 128)
    assert table.lengths == [128, 256] and "undefined" in format_lengths(table).splitlines()[-1]


def test_study_config_matches_make_train_and_scores_1x_to_64x():
    study = yaml.safe_load((ROOT / "configs/compare_dna_lm.yaml").read_text())
    train = yaml.safe_load((ROOT / "configs/dna_lm.yaml").read_text())
    lengths = [128 * 2**i for i in range(7)]
    data, train_data = (flatten(c["data"]["init_args"], DNADataModule) for c in (study, train))
    assert data["eval_lengths"] == train_data["eval_lengths"] == lengths
    for group in ("net", "optim"):
        study_group, train_group = (c["model"]["init_args"][group] for c in (study, train))
        for key, value in study_group.items():
            assert train_group[key] == value, key
    for key in ("seq_len", "batch_size", "samples_per_epoch", "split", "eval_tokens"):
        assert data[key] == train_data[key], key
    assert study["trainer"]["max_epochs"] == train["trainer"]["max_epochs"]
    sweep = next(c for c in study["trainer"]["callbacks"] if c["class_path"].endswith("ExtrapolationEval"))
    assert [f * 128 for f in sweep["init_args"]["factors"]] == lengths
    # make train's model is the study's `window` variant: a local attention window of L0
    assert train["model"]["init_args"]["net"]["attention_window"] == train_data["seq_len"]
    assert "attention_window" not in study["model"]["init_args"]["net"]
    assert sweep["init_args"]["window"] is True


def test_the_window_variant_scores_the_same_weights_with_a_window_of_l0(dm):
    from pipelines.eval.extrapolation import TRAINED, WINDOW, evaluate

    result = evaluate(tiny_model(), dm, lengths=LENGTHS, window=True)
    trained, local = result.by_length(TRAINED), result.by_length(WINDOW)
    assert local[32] == pytest.approx(trained[32], rel=1e-6)  # within L0 the window changes nothing
    assert all(local[n] != pytest.approx(trained[n], rel=1e-6) for n in LENGTHS[1:])
    windowed = evaluate(tiny_model(window=32), dm, lengths=LENGTHS, window=True)
    assert windowed.variants == [TRAINED]  # a model with its own window: no second pass
    assert windowed.by_length(TRAINED) == pytest.approx(local, rel=1e-6)


@pytest.mark.slow  # a real (tiny) `make train`: fit, test, console table, figure artifact
def test_make_train_prints_the_table_and_logs_the_figure(tmp_path, capfd):
    from pipelines.cli import main

    with workdir_with_store(tmp_path):
        fasta = write_fasta(tmp_path / "g.fa", n=12000)
        cli = main(["fit", "--config", str(ROOT / "configs/dna_lm.yaml"), f"--data.init_args.fasta={fasta}",
                    "--model.init_args.d_model=16", "--model.init_args.n_heads=2",
                    "--model.init_args.n_layers=2",
                    "--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
                    "--data.init_args.samples_per_epoch=16", "--data.init_args.eval_tokens=256",
                    f"--data.init_args.eval_lengths=[{','.join(map(str, LENGTHS))}]",
                    "--trainer.max_epochs=1", "--trainer.limit_val_batches=2",
                    "--trainer.enable_progress_bar=false"])
    err = capfd.readouterr().err
    assert "Whole-window extrapolation" in err and "8× (256)" in err
    client = store_client(tmp_path)
    names = {a.path for a in client.list_artifacts(cli.trainer.logger.run_id)}
    assert FIGURE in names
    from pipelines.studies.figures import whole_windows  # make figures: the same figure from the run

    run = client.get_run(cli.trainer.logger.run_id)
    assert run.data.params["seq_len"] == "32"
    readable_png(whole_windows(run, tmp_path / "docs.png"))


def test_compare_report_shows_the_chain_per_length_and_draws_the_whole_window_figure(tmp_path):
    from pipelines.eval.extrapolation import TRAINED
    from pipelines.studies.compare.report import markdown, others, whole_window_figure
    from pipelines.studies.compare.runs import ChildRun, TaskInfo
    from pipelines.studies.compare.stats import compare

    info = TaskInfo("dna_lm", "bits_per_base", False, 128, [128, 256], "tokens", "position", "order-0 Markov")
    chain = {"markov0": 2.0, "markov_best": 1.938, "markov_best_L128": 1.9390, "markov_best_L256": 1.9384}
    children = [ChildRun(s, seed, f"{s}{seed}", "trained", trivial=2.0, info=info, baselines=chain,
                         curves={TRAINED: {128: 1.93 + d + 0.001 * seed, 256: 1.94 + d + 0.002 * seed}})
                for seed in range(3) for s, d in (("none", 0.01), ("alibi", 0.0))]
    cmp = compare(children, reference="none")
    md = markdown(cmp)
    assert "| best Markov chain (same windows) | — | 1.9390 | 1.9384 |" in md
    assert "markov_best_L128" not in md and set(others(cmp)) == {"markov_best"}
    readable_png(whole_window_figure(cmp, tmp_path / "whole_windows.png"))


def test_a_local_attention_window_changes_only_windows_longer_than_it(dm, tmp_path):
    """attention_window = L0: the same weights score the same at L0 and differently beyond it, under
    the same keys; the table says each query reads only its window."""
    client = store_client(tmp_path)
    full = client.get_run(test_run(dm, tmp_path, None)).data.metrics
    run_id = test_run(dm, tmp_path, None, window=32)
    local = client.get_run(run_id).data.metrics
    w = "test/bits_per_base_whole_L"
    assert local[f"{w}32"] == pytest.approx(full[f"{w}32"], rel=1e-6)
    for n in LENGTHS[1:]:
        assert local[f"{w}{n}"] != pytest.approx(full[f"{w}{n}"], rel=1e-6)
    title = log_run_lengths(client, run_id, 32, 32).splitlines()[0]
    assert "each query attending its 32 nearest tokens" in title
