"""``python -m pipelines.train test|validate --config C --ckpt_path P`` re-scores a trained checkpoint:
the checkpoint's saved hyperparameters decide the model (its architecture over the config's), the
config the data and the trainer (:mod:`pipelines.cli.ckpt_config`). On main every task checkpoint was
refused ("model.init_args.pe.init_args.base: unknown key"): Lightning parsed its hyperparameters
against ``LightningModule``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import (
    ROOT,
    TINY_CONFIG,
    final_metrics,
    random_bases,
    run_cli_in,
    runs,
    seasonal_frame,
    task,
    tiny_setup,
    ts_cli_args,
    write_csv,
    write_fasta,
    write_gff,
)

LEGACY_LM = next((ROOT / "tests/fixtures/legacy/mlruns/1").glob("13cdc5a0*/artifacts/best/best.ckpt"))
LEGACY_FLAT = ROOT / "tests" / "fixtures" / "legacy_flat"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> tuple[Path, str, dict[str, float]]:
    """A tiny DNA LM fit (one epoch, its own test pass after fit): (folder, best.ckpt, the fit's metrics)."""
    tmp = tmp_path_factory.mktemp("ckpt-lm")
    tiny_setup(tmp)
    code, cli = run_cli_in(tmp, ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1", "--resume=false"])
    assert code == 0
    ckpt = str(tmp / cli.trainer.checkpoint_callback.best_model_path)
    (run,) = runs(tmp)[1]
    return tmp, ckpt, final_metrics(run)


def new_run_metrics(tmp: Path, before: set[str]) -> dict[str, float]:
    (run,) = [r for r in runs(tmp)[1] if r.info.run_id not in before]
    return final_metrics(run)


def run_ids(tmp: Path) -> set[str]:
    return {r.info.run_id for r in runs(tmp)[1]}


def state_equal(module: torch.nn.Module, ckpt: Path | str) -> bool:
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    mine = module.state_dict()
    return set(saved) == set(mine) and all(torch.equal(saved[k], mine[k]) for k in saved)


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: "), err[-3000:]
    return last


@pytest.mark.slow
def test_test_with_ckpt_path_logs_the_test_metrics_of_the_fit(fitted):
    """Same data, same weights: the ``test`` subcommand's run logs the fit's own test metrics."""
    tmp, ckpt, fit = fitted
    before = run_ids(tmp)
    code, cli = run_cli_in(tmp, ["test", "--config", "tiny.yaml", "--ckpt_path", ckpt])
    assert code == 0
    assert state_equal(cli.model, ckpt)
    got = new_run_metrics(tmp, before)
    want = {k: v for k, v in fit.items() if k.startswith("test/")}
    assert want and set(want) <= set(got)
    assert {k: got[k] for k in want} == pytest.approx(want, rel=1e-6)


@pytest.mark.slow
def test_the_checkpoint_decides_the_architecture_over_the_config(fitted):
    """A config (and a command line) with another ``net.d_model`` / ``n_layers``: Lightning's order,
    the checkpoint's hyperparameters win for the model; the config still decides data and trainer.
    ``validate`` scores the checkpoint's weights as the fit's own validation did."""
    tmp, ckpt, fit = fitted
    (tmp / "wide.yaml").write_text(TINY_CONFIG.replace("d_model: 16", "d_model: 32"))
    code, cli = run_cli_in(tmp, ["validate", "--config", "wide.yaml", "--ckpt_path", ckpt,
                                 "--model.init_args.net.n_layers=3", "--trainer.logger=false"])
    assert code == 0
    assert (cli.model.net.d_model, cli.model.net.n_layers) == (16, 2)
    assert state_equal(cli.model, ckpt)
    got = float(cli.trainer.callback_metrics["val/bits_per_base"])
    assert got == pytest.approx(fit["val/bits_per_base"], rel=1e-6)


def saved_lm(tmp: Path) -> str:
    """An untrained tiny DNA LM checkpoint (weights, hyperparameters, task name, as a trainer saves them)
    beside the tiny config (:func:`tests.helpers.tiny_setup`) in ``tmp``."""
    import lightning

    from pipelines import DNALanguageModel

    tiny_setup(tmp)
    model = task(DNALanguageModel, vocab_size=7, pad_id=5, d_model=16, n_heads=2, n_layers=2,
                             pe={"class_path": "posenc.RoPE"})
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
            "pytorch-lightning_version": lightning.__version__}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp / "lm.ckpt")
    return str(tmp / "lm.ckpt")


def test_a_checkpoint_of_another_task_is_one_line_and_nothing_runs(tmp_path, capsys):
    ckpt = saved_lm(tmp_path)
    (tmp_path / "mlm.yaml").write_text(TINY_CONFIG.replace("DNALanguageModel", "MaskedDNAModel"))
    code, _ = run_cli_in(tmp_path, ["test", "--config", "mlm.yaml", "--ckpt_path", ckpt])
    assert code == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"ckpt_path {ckpt}" in line
    assert "pipelines.tasks.dna.lm.DNALanguageModel ('dna_lm')" in line
    assert "pipelines.tasks.dna.mlm.MaskedDNAModel ('dna_mlm')" in line
    assert runs(tmp_path)[1] == []  # refused while parsing: no MLflow run


def test_a_saved_key_this_code_does_not_know_is_one_line_naming_the_checkpoint(tmp_path, capsys):
    ckpt = saved_lm(tmp_path)
    saved = torch.load(ckpt, weights_only=True)
    saved["hyper_parameters"]["net"]["n_layerz"] = 3
    torch.save(saved, ckpt)
    code, _ = run_cli_in(tmp_path, ["validate", "--config", "tiny.yaml", "--ckpt_path", ckpt])
    assert code == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: ckpt_path {ckpt}: saved hyperparameters do not fit ")
    assert "n_layerz" in line


def test_a_checkpoint_claiming_a_huge_width_is_refused_before_its_model_is_built(tmp_path, capsys):
    ckpt = saved_lm(tmp_path)
    saved = torch.load(ckpt, weights_only=True)
    saved["hyper_parameters"]["net"]["d_model"] = 2**20
    torch.save(saved, ckpt)
    code, _ = run_cli_in(tmp_path, ["test", "--config", "tiny.yaml", "--ckpt_path", ckpt])
    assert code == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"ckpt_path {ckpt}: the model (d_model 1048576" in line
    assert "cannot be loaded on this machine" in line


@pytest.mark.slow
def test_data_that_does_not_fit_the_checkpoint_is_one_line(tmp_path, capsys):
    """kmer 2 links a vocabulary of 19 tokens to the model; the checkpoint's embedding has 7."""
    ckpt = saved_lm(tmp_path)
    code, _ = run_cli_in(tmp_path, ["validate", "--config", "tiny.yaml", "--ckpt_path", ckpt,
                                    "--data.init_args.kmer=2", "--trainer.logger=false"])
    assert code == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"ckpt_path {ckpt}" in line and "embedding.weight is [7, 16] in the checkpoint, [19, 16]" in line


def test_a_legacy_flat_lm_checkpoint_of_another_encoding_validates(tmp_path):
    """The legacy fixture's DNA LM (flat hyperparameters, ALiBi) over today's tiny config (grouped,
    RoPE): the checkpoint's encoding and flat settings are taken, its weights load."""
    tiny_setup(tmp_path)
    code, cli = run_cli_in(tmp_path, ["validate", "--config", "tiny.yaml", "--ckpt_path", str(LEGACY_LM),
                                      "--trainer.logger=false"])
    assert code == 0
    assert type(cli.model.pe).__name__ == "ALiBi"
    assert (cli.model.net.d_model, cli.model.optim.lr, cli.model.optim.warmup_steps) == (16, 0.002, 50)
    assert state_equal(cli.model, LEGACY_LM)


@pytest.mark.slow
def test_a_legacy_flat_forecaster_tests_with_its_flat_config(tmp_path):
    """tests/fixtures/legacy_flat: flat config and flat checkpoint (before the typed groups)."""
    for name in ("config.yaml", "series.csv", "forecaster.ckpt"):
        shutil.copy(LEGACY_FLAT / name, tmp_path)
    code, cli = run_cli_in(tmp_path, ["test", "--config", "config.yaml", "--ckpt_path", "forecaster.ckpt",
                                      "--model.init_args.n_layers=1", "--trainer.logger=false"])
    assert code == 0
    assert cli.model.net.n_layers == 2 and state_equal(cli.model, tmp_path / "forecaster.ckpt")
    assert 0.0 < float(cli.trainer.callback_metrics["test/mse_scaled"]) < 1.0


# ------------------------------------------------------------------------------- every task
DNA_TINY = ["--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
            "--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
            "--data.init_args.eval_lengths=[32,64]"]
WINDOWS = ["--data.init_args.samples_per_epoch=16", "--data.init_args.eval_tokens=256"]  # not classify's


def task_args(tmp: Path, task: str) -> list[str]:
    """Config and data arguments of a tiny ``task``, its files written to ``tmp``."""
    if task in ("forecaster", "patchtst", "dlinear"):
        csv = write_csv(tmp / "s.csv", seasonal_frame(480))
        model = {"forecaster": "pipelines.Forecaster",
                 "patchtst": "pipelines.tasks.forecast.patchtst.PatchTSTForecaster",
                 "dlinear": "pipelines.tasks.forecast.linear.DLinearForecaster"}[task]
        return ["--config", str(ROOT / "configs/ts_forecast.yaml"), f"--model={model}", *ts_cli_args(csv),
                "--model.init_args.output.linear_path=false"]  # the ridge path of the Forecaster
    fasta = write_fasta(tmp / "g.fa", {"chr1": random_bases(6000)})
    if task == "classify":
        write_fasta(tmp / "s.fa", {f"s{i}": random_bases(80, i) for i in range(12)})
        (tmp / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'pq'[i % 2]}\n" for i in range(12)))
        data = [f"--data.init_args.fasta={tmp / 's.fa'}", f"--data.init_args.labels={tmp / 'labels.csv'}",
                "--data.init_args.split=[0.5,0.25,0.25]"]
    elif task == "segment":
        gff = write_gff(tmp / "a.gff", [("chr1", 101, 3100, "+", 0), ("chr1", 3201, 5800, "-", 0)])
        data = [f"--data.init_args.fasta={fasta}", f"--data.init_args.annotation={gff}",
                "--data.init_args.gap=0", *WINDOWS]
    else:
        data = [f"--data.init_args.fasta={fasta}", *WINDOWS]
    return ["--config", str(ROOT / f"configs/dna_{task}.yaml"), *DNA_TINY, *data]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["mlm", "segment", "classify", "forecaster", "patchtst", "dlinear"])
def test_every_task_validates_its_checkpoint_with_the_checkpoints_architecture(tmp_path, task):
    """A one-step fit's checkpoint (saved by its trainer), validated through the CLI with a config whose
    ``net.d_model`` differs: the model is the checkpoint's, its weights load strictly."""
    args = [*task_args(tmp_path, task), "--trainer.logger=false", "--resume=false"]
    code, cli = run_cli_in(tmp_path, ["fit", *args, "--trainer.fast_dev_run=true", "--test_after_fit=false"])
    assert code == 0
    cli.trainer.save_checkpoint(tmp_path / "model.ckpt")
    width = cli.model.net.d_model
    code, again = run_cli_in(tmp_path, ["validate", *args, "--ckpt_path", str(tmp_path / "model.ckpt"),
                                        "--model.init_args.net.d_model=32", "--trainer.limit_val_batches=1"])
    assert code == 0
    assert type(again.model) is type(cli.model) and again.model.net.d_model == width
    assert state_equal(again.model, tmp_path / "model.ckpt")
