"""The spine end to end: CLI → training → MLflow sqlite run → per-length test → checkpoint reload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.tasks.dna.markov import MarkovModel
from tests.helpers import store_client, workdir_with_store, write_fasta

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
    "--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
    "--data.init_args.samples_per_epoch=16", "--data.init_args.eval_tokens=256",
    "--data.init_args.eval_lengths=[32,64,128,256]",  # configs/dna_lm.yaml: 1×…64× of 128
    "--trainer.max_epochs=1", "--trainer.limit_val_batches=2", "--trainer.enable_progress_bar=false",
]


def run_cli(tmp: Path, *extra: str):
    from pipelines.cli import main

    with workdir_with_store(tmp):
        fasta = write_fasta(tmp / "g.fa")
        return main(["fit", "--config", str(ROOT / "configs/dna_lm.yaml"),
                     f"--data.init_args.fasta={fasta}", *TINY, *extra])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    cli = run_cli(tmp, "--config", str(ROOT / "configs/posenc/alibi.yaml"))
    return tmp, cli


def test_run_is_logged_to_sqlite(trained):
    tmp, cli = trained
    run = store_client(tmp).get_run(cli.trainer.logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "DNALanguageModel-ALiBi"
    assert run.data.params["pe/class_path"] == "posenc.ALiBi"
    metrics = run.data.metrics
    for key in ("val/bits_per_base", "test/bits_per_base", "baseline/markov0_bits_per_base",
                "baseline/markov_bits_per_base", "baseline/markov_order",
                "baseline/markov_bits_per_base_L32"):
        assert np.isfinite(metrics[key]), key
    history = store_client(tmp).get_metric_history(run.info.run_id, "test/bits_per_base_by_length")
    steps = [m.step for m in history]
    assert steps == [32, 64, 128, 256]


def test_config_and_checkpoint_are_run_artifacts(trained):
    tmp, cli = trained
    c = store_client(tmp)
    names = {a.path for a in c.list_artifacts(cli.trainer.logger.run_id)}
    assert "config.yaml" in names
    cfg = Path(c.download_artifacts(cli.trainer.logger.run_id, "config.yaml", str(tmp / "dl")))
    assert "posenc.ALiBi" in cfg.read_text()
    ckpts = list((tmp / "mlruns").rglob("*.ckpt"))
    assert ckpts, "best checkpoint not logged"
    best = Path(cli.trainer.checkpoint_callback.best_model_path)
    assert best.parts[0] == "outputs" and (tmp / best).is_file()  # checkpoints under outputs/


def test_checkpoint_reloads_weights_only_with_same_scheme(trained):
    from pipelines import DNALanguageModel

    tmp, cli = trained
    path = tmp / cli.trainer.checkpoint_callback.best_model_path
    raw = torch.load(path, weights_only=True, map_location="cpu")  # no pickled objects
    assert raw["hyper_parameters"]["pe"]["class_path"] == "posenc.ALiBi"
    model = DNALanguageModel.load_from_checkpoint(path, map_location="cpu", weights_only=True).eval()
    assert type(model.pe).__name__ == "ALiBi"
    tokens = torch.randint(0, 4, (2, 40))
    ref = cli.model.eval()
    ref.load_state_dict(raw["state_dict"])
    torch.testing.assert_close(model(tokens), ref(tokens))


@pytest.mark.slow  # a real fit; the fast suite sees Learned's undefined lengths in the classification fit
def test_learned_past_max_len_is_recorded_undefined(tmp_path):
    (tmp_path / "plain.yaml").write_text("trainer: {callbacks: []}\n")  # no baselines: faster
    cli = run_cli(tmp_path, "--config", str(ROOT / "configs/posenc/learned.yaml"),
                  "--model.init_args.pe.init_args.max_len=64", "--config", str(tmp_path / "plain.yaml"))
    assert cli.model.undefined_lengths == [128, 256]
    run = store_client(tmp_path).get_run(cli.trainer.logger.run_id)
    assert run.data.params["extrapolation/undefined_lengths"] == "128,256"
    assert {"test/bits_per_base_L32", "test/bits_per_base_L64"} <= set(run.data.metrics)
    assert "test/bits_per_base_L128" not in run.data.metrics


def test_markov_baselines():
    rng = np.random.default_rng(0)
    uniform = rng.integers(0, 4, 50_000).astype(np.uint8)
    assert MarkovModel(0).fit([uniform]).bits_per_base([uniform]) == pytest.approx(2.0, abs=0.01)
    periodic = np.tile(np.array([0, 1, 2, 3, 3, 1], dtype=np.uint8), 5000)
    assert MarkovModel(3).fit([periodic]).bits_per_base([periodic]) < 0.01
    assert MarkovModel(0).fit([periodic]).bits_per_base([periodic]) > 1.5
    with_n = np.array([0, 1, 4, 2, 3, 0, 1], dtype=np.uint8)  # N breaks contexts, never scored
    m = MarkovModel(1).fit([with_n])
    assert m.counts.sum() == 4
