"""What a person sees: ``--progress false`` prints no bar, logs get one line per step instead of a
redrawn bar, library chatter is filtered narrowly (``--verbose`` lets it through), every registered
model carries a model card readable through the MLflow client, and ``make ui`` names the pages."""

from __future__ import annotations

import io
import logging
import warnings
from contextlib import redirect_stderr
from pathlib import Path

import pandas as pd
import pytest

from datamodules.progress import MAX_LINES, LineProgress, progress, progress_bar, set_progress
from pipelines import console
from tests.helpers import random_bases, workdir_with_store, write_fasta

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=2",
        "--trainer.log_every_n_steps=1", "--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
        "--data.init_args.samples_per_epoch=16", "--data.init_args.eval_tokens=256",
        "--data.init_args.eval_lengths=[32,64,128,256]"]
BAR_MARKS = ("%|", "\r")  # tqdm's meter and the carriage return a live bar redraws with


def fit(tmp: Path, *extra: str):
    """A tiny DNA LM fit through the real CLI; returns (cli, what it printed on stderr)."""
    from pipelines.cli import main

    fasta = tmp / "train.fa"
    if not fasta.exists():
        write_fasta(fasta, {"chr1": random_bases(6000)})
    err = io.StringIO()
    with workdir_with_store(tmp), redirect_stderr(err):
        cli = main(["fit", "--config", str(ROOT / "configs" / "dna_lm.yaml"), *TINY,
                    f"--data.init_args.fasta={fasta}", *extra])
    return cli, err.getvalue()


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A fit with MLflow, registration and the test pass, run with ``--progress false``."""
    tmp = tmp_path_factory.mktemp("card")
    cli, err = fit(tmp, "--progress=false", "--verbose=false")
    return tmp, cli, err


# ----------------------------------------------------------------------------------------- progress
def test_progress_false_prints_no_bar_and_the_command_ends_with_its_summary(registered):
    _, cli, err = registered
    assert not any(mark in err for mark in BAR_MARKS), err
    assert "Epoch 0" not in err and "Testing" not in err
    summary = err[err.rindex("MLflow run "):]
    assert cli.trainer.logger.run_id in summary and "test/bits_per_base" in summary
    assert "model: models:/DNALanguageModel-PeriodicRoPE/1" in summary and "#/experiments/" in summary


def test_training_in_a_log_prints_one_line_per_step_not_a_redrawn_bar(tmp_path):
    _, err = fit(tmp_path, "--trainer.logger=false", "--register.register=false", "--test_after_fit=false",
                 "--progress=true")
    lines = [ln for ln in err.splitlines() if ln.startswith("Epoch 0")]
    assert "\r" not in err
    assert len(lines) == 4 and all("%|" in ln and "train/loss=" in ln for ln in lines), err  # 4 batches
    assert "val/bits_per_base=" in lines[-1]  # the epoch's last line carries the validation metric


def test_line_progress_prints_at_most_max_lines_plus_the_last(capsys):
    set_progress(True)
    for _ in progress(range(1000), "many"):
        pass
    many = capsys.readouterr().err.splitlines()
    assert 2 <= len(many) <= MAX_LINES + 1 and many[-1].startswith("many: 100%")
    for _ in progress(range(3), "few", unit="run"):
        pass
    assert [ln.split("|")[-1].split()[0] for ln in capsys.readouterr().err.splitlines()] == ["1/3", "2/3",
                                                                                            "3/3"]
    set_progress(False)
    try:
        with progress_bar(10, "off") as bar:
            bar.update(10)
        assert list(progress([1, 2], "off")) == [1, 2]
        assert capsys.readouterr().err == ""
    finally:
        set_progress(True)


def test_line_progress_without_a_total_prints_its_count(capsys):
    bar = LineProgress(None, "reading", unit="B")
    bar.update(5)
    bar.close()
    out = capsys.readouterr().err.splitlines()
    assert out and out[-1].startswith("reading: 5")


def test_predict_with_progress_false_prints_no_bar_and_in_a_log_one_line_per_step(registered, capsys):
    from pipelines.inference.predict import main

    tmp, cli, _ = registered
    new = write_fasta(tmp / "new.fa", {"a": random_bases(3000, 5)})
    ckpt = cli.trainer.checkpoint_callback.best_model_path
    with workdir_with_store(tmp):
        assert main(["--ckpt", ckpt, "--input", str(new), "--output", "a.tsv", "--progress", "false"]) == 0
        quiet = capsys.readouterr().err
        assert main(["--ckpt", ckpt, "--input", str(new), "--output", "b.tsv"]) == 0
        lines = capsys.readouterr().err
    assert not any(mark in quiet for mark in BAR_MARKS) and "predicting" not in quiet
    assert quiet.strip().splitlines() == ["1 record(s) → 3000 rows in a.tsv"]
    assert "\r" not in lines and "predicting a: 100%" in lines
    pd.testing.assert_frame_equal(pd.read_csv(tmp / "a.tsv", sep="\t"), pd.read_csv(tmp / "b.tsv", sep="\t"))


# ----------------------------------------------------------------------------------------- filters
def _warn_from(module: str, message: str, category: type[Warning]) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        console.loud()
        console.quiet()
        warnings.warn_explicit(message, category, "x.py", 1, module=module)
    return [str(w.message) for w in seen]


def test_quiet_drops_a_known_library_warning_only_from_its_module():
    known = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."
    assert _warn_from("lightning.pytorch.utilities._pytree", known, FutureWarning) == []
    assert _warn_from("pipelines.anything", known, FutureWarning) == [known]  # same text, our module
    new = "something new"
    assert _warn_from("lightning.pytorch.utilities._pytree", new, FutureWarning) == [new]


def test_quiet_drops_known_log_lines_and_verbose_lets_them_through():
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")

    def shown(text: str) -> bool:
        return logger.filter(logger.makeRecord(logger.name, logging.INFO, "x.py", 1, text, (), None))

    tip = "💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]"
    try:
        console.configure(verbose=False)
        assert not shown(tip) and not shown("TPU available: False, using: 0 TPU cores")
        assert shown("GPU available: False, used: False") and shown("TPU available: True, using: 8 TPU cores")
        console.configure(verbose=True)
        assert shown(tip)
    finally:
        console.configure(verbose=False)


def test_verbose_is_accepted_bare_on_the_training_command():
    assert console.spell_out_verbose(["fit", "--verbose", "--config", "x.yaml"]) == [
        "fit", "--verbose=true", "--config", "x.yaml"]
    assert console.spell_out_verbose(["fit", "--verbose", "false"]) == ["fit", "--verbose", "false"]


def test_signature_declares_input_integers_as_double_and_warns_nothing():
    from pipelines.inference.registry import signature_for

    example = pd.DataFrame({"id": ["a"], "count": [3], "x": [0.5]})
    output = pd.DataFrame({"pos": [1], "prob": [0.25], "name": ["CDS"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sig = signature_for(example, output)
    assert [(c.name, c.type.name) for c in sig.inputs.inputs] == [("id", "string"), ("count", "double"),
                                                                  ("x", "double")]
    assert [(c.name, c.type.name) for c in sig.outputs.inputs] == [("pos", "long"), ("prob", "double"),
                                                                   ("name", "string")]


# ----------------------------------------------------------------------------------------- model cards
def test_registered_model_has_a_card_with_the_runs_metrics_visible_through_the_client(registered):
    import mlflow

    tmp, cli, _ = registered
    with workdir_with_store(tmp):
        client = mlflow.MlflowClient()
        model = client.get_registered_model("DNALanguageModel-PeriodicRoPE")
        version = client.get_model_version("DNALanguageModel-PeriodicRoPE", "1")
        metrics = client.get_run(cli.trainer.logger.run_id).data.metrics
    text = model.description
    assert version.description == text and version.run_id == cli.trainer.logger.run_id
    for needle in ("`dna_lm`", "`PeriodicRoPE`", "train.fa", "train/val/test 0.8/0.1/0.1",
                   "32 tokens of context",
                   "1 epoch, 4 optimizer steps of batch 4", "python -m pipelines.train fit --config"):
        assert needle in text, needle
    shown = {k: v for k, v in metrics.items() if k.startswith(("test/", "baseline/")) and "_by_" not in k}
    assert any(k.startswith("baseline/") for k in shown) and "test/bits_per_base" in shown
    for key, value in shown.items():  # the test pass ran after registration: the card was rewritten
        assert f"| `{key}` | {value:.4f} |" in text, key
    assert model.tags["task"] == version.tags["task"] == "dna_lm"
    assert model.tags["scheme"] == "PeriodicRoPE" and model.tags["train_length"] == "32 tokens of context"


def test_ui_url_names_the_training_experiment_and_the_latest_comparison(registered, capsys):
    import mlflow

    from pipelines.tracking.ui_url import main

    tmp, cli, _ = registered
    with workdir_with_store(tmp):
        client = mlflow.MlflowClient()
        other = client.create_experiment("posenc-compare")
        parent = client.create_run(other, tags={"posenc.compare": "parent"}).info.run_id
        main(["--db", str(tmp / "mlflow.db"), "--port", "5123"])
        exp = cli.trainer.logger.experiment_id
        logged = client.search_logged_models(experiment_ids=[exp])
    err = capsys.readouterr().err
    assert [m.name for m in logged] == ["posenc_model"]  # in the run's experiment: its Models tab lists it
    assert f"#/experiments/{exp}/models?workflowType=machine_learning" in err
    assert f"http://127.0.0.1:5123/#/experiments/{exp}/runs" in err.splitlines()[0]  # posenc, not newest
    assert f"#/experiments/{other}/runs/{parent}" in err


# ----------------------------------------------------------------------------------------- figures
@pytest.mark.slow
def test_make_figures_draws_the_runs_it_finds_and_names_the_command_for_the_others(registered, capsys):
    from PIL import Image

    from pipelines.studies.figures import main

    tmp, cli, _ = registered
    with workdir_with_store(tmp):
        assert main(["--out", "figs", "--progress", "false"]) == 0
    captured = capsys.readouterr()
    names = sorted(p.name for p in (tmp / "figs").glob("*.png"))
    assert names == ["dna_lm_attention_distance.png", "dna_lm_extrapolation.png",
                     "periodic_rope_aliasing.png", "periodic_rope_bands.png"]
    for name in names:
        with Image.open(tmp / "figs" / name) as img:
            assert 300 <= img.width <= 800 and img.height <= 600, (name, img.size)
    assert "no finished Forecaster-RoPE run (make train CONFIG=configs/ts_forecast.yaml)" in captured.err
    assert str(Path("figs") / "dna_lm_extrapolation.png") in captured.out
