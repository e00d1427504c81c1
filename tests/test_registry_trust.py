"""What loading a registered model runs (docs/reliability.md, "Threat model"): posenc's own loader
(``make predict CKPT=models:/…``, ``pipelines.load_model``) takes only the version's checkpoint and never
runs its stored ``pyfunc.py``; ``mlflow.pyfunc.load_model`` runs that file (MLflow's design), which is
why the docs say to load pyfunc models only from registries you trust."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import random_bases, run_cli_in, write_fasta

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false", "--trainer.logger.init_args.log_model=false",
        "--test_after_fit=false", "--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
        "--data.init_args.samples_per_epoch=8", "--data.init_args.eval_tokens=256",
        "--data.init_args.eval_lengths=[32,64,128,256]"]
URI = "models:/DNALanguageModel-PeriodicRoPE/1"


@pytest.mark.slow
def test_posenc_loader_never_runs_a_registered_models_stored_code(tmp_path, monkeypatch):
    import mlflow

    from pipelines.inference import load_model
    from pipelines.inference.predict import main as predict_main

    fasta = write_fasta(tmp_path / "train.fa", {"chr1": random_bases(4000)})
    code, _ = run_cli_in(tmp_path, ["fit", "--config", str(ROOT / "configs" / "dna_lm.yaml"), *TINY,
                                    f"--data.init_args.fasta={fasta}"])
    assert code == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    stored = Path(client.get_model_version_download_uri("DNALanguageModel-PeriodicRoPE", "1").removeprefix("file://"))
    (code_file,) = [p for p in stored.rglob("*.py")]  # the model's "model from code" file
    marker = tmp_path / "ran.txt"
    code_file.write_text(code_file.read_text() + f"\nopen({str(marker)!r}, 'w').write('stored code ran')\n")

    assert load_model(URI, device="cpu") is not None
    out = tmp_path / "bits.tsv"
    assert predict_main(["--ckpt", URI, "--input", str(fasta), "--output", str(out), "--level", "record",
                         "--no_progress"]) == 0
    assert out.is_file() and not marker.exists()

    mlflow.pyfunc.load_model(URI)  # MLflow's loader: executes the stored file
    assert marker.read_text() == "stored code ran"
