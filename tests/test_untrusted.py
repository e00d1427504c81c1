"""Untrusted files: no code runs from a checkpoint (remote, local or a tampered resume checkpoint), no
module is imported that a checkpoint or saved config names unless it is trusted, nothing is imported
from the working folder, and no home path or credential reaches what a run records.

Each crafted file carries a payload that creates a marker file when it runs: the tests assert the
marker is absent (docs/reliability.md, "Checkpoints, class names and recorded paths")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT, run_cli_in, runs, tiny_setup, workdir_with_store, write_fasta
from tests.hostile import evil_folder, model_checkpoint, serve


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the marker file exists iff the pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted_checkpoint(path: Path, marker: Path) -> Path:
    """A zip checkpoint as torch.save writes one, with the payload beside an empty state dict."""
    torch.save({"state_dict": {}, "epoch": 0, "global_step": 0, "payload": Payload(marker)}, path)
    return path


def cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real train entry point (``python -m pipelines.train fit``) in ``tmp`` with its own store."""
    drop = ("POSENC_FAULT", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    env = {**base, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
           "TORCH_HOME": str(tmp / "torch-home"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "pipelines.train", "fit", "--config", "tiny.yaml", *args],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


def one_error_line(stderr: str) -> str:
    """The ``error: …`` line a refused command ends with (and no traceback before it)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), stderr[-3000:]
    return last


# ----------------------------------------------------------------------------------- 1. checkpoints
@pytest.mark.slow
def test_ckpt_path_url_is_refused_before_anything_is_downloaded(tmp_path):
    """``--ckpt_path=http://…``: Lightning would download it and unpickle it with weights_only=False."""
    served, marker, hits = tmp_path / "served", tmp_path / "ran", []
    served.mkdir()
    crafted_checkpoint(served / "x.ckpt", marker)

    server = serve(served, hits)
    try:
        tiny_setup(tmp_path)
        url = f"http://127.0.0.1:{server.server_address[1]}/x.ckpt"
        done = cli(tmp_path, f"--ckpt_path={url}", "--trainer.max_epochs=1", "--test_after_fit=false")
    finally:
        server.shutdown()
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_error_line(done.stderr)
    assert "ckpt_path" in line and "only a local checkpoint file is loaded" in line
    assert hits == [] and not marker.exists()
    assert not (tmp_path / "outputs").exists()


def test_ckpt_path_of_a_crafted_local_file_is_refused_by_weights_only(tmp_path, monkeypatch, capsys):
    """Loaded with an explicit ``weights_only=True``: even ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (which
    turns every load that does not say so into a full unpickle) cannot make it run."""
    marker = tmp_path / "ran"
    tiny_setup(tmp_path)
    ckpt = crafted_checkpoint(tmp_path / "x.ckpt", marker)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", f"--ckpt_path={ckpt}",
                                    "--trainer.max_epochs=1", "--test_after_fit=false"])
    assert code == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(ckpt) in line and "weights_only" in line and "io.open" in line
    assert not marker.exists()


def test_weights_only_cannot_be_switched_off_on_the_command_line(tmp_path, capsys):
    tiny_setup(tmp_path)
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--weights_only=false"])
    assert code == 2 and "weights_only" in one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_a_tampered_resume_checkpoint_is_refused_by_weights_only(tmp_path):
    """A run killed at step 9 leaves ``last.ckpt`` (full state, saved with weights_only=False); the rerun
    resumes from it with ``weights_only=True``: a replaced file does not run, and the error names it."""
    tiny_setup(tmp_path)
    kill = ["--trainer.callbacks+=tests.toy.faults.FailAtStep", "--trainer.callbacks.step=9",
            "--trainer.callbacks.how=kill"]
    first = cli(tmp_path, *kill, env={"POSENC_FAULT": "1"})
    assert first.returncode == -9, first.stderr[-3000:]
    (last,) = (tmp_path / "outputs" / "runs").rglob("last.ckpt")
    assert "state_dict" in torch.load(last, map_location="cpu", weights_only=True)  # the real one loads
    marker = tmp_path / "ran"
    crafted_checkpoint(last, marker)
    again = cli(tmp_path, *kill, env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    assert again.returncode == 2, again.stderr[-3000:]
    line = one_error_line(again.stderr)
    assert "last.ckpt" in line and "cannot load the checkpoint safely (weights_only)" in line
    assert not marker.exists()


# ----------------------------------------------------------------------------------- 2. class names
@pytest.mark.slow
def test_ckpt_path_hyperparameters_naming_an_untrusted_class_are_refused(tmp_path):
    """Lightning's CLI parses a given ``ckpt_path``'s hyperparameters into the config, and the config
    parser imports the class they name (``_class_path``, the model class of Lightning's instantiator):
    ``evil.Bad`` beside the checkpoint must not be imported (on main it was, before any error)."""
    folder, marker = evil_folder(tmp_path, "evil")
    tiny_setup(folder)
    path = model_checkpoint(folder / "model.ckpt", "posenc.RoPE")
    ckpt = torch.load(path, weights_only=True)
    ckpt["hyper_parameters"]["_class_path"] = "evil.Bad"
    torch.save(ckpt, path)
    done = cli(folder, "--ckpt_path=model.ckpt", "--trainer.max_epochs=1", "--test_after_fit=false")
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_error_line(done.stderr)
    assert "ckpt_path model.ckpt" in line and "module 'evil' is not trusted" in line
    assert not marker.exists()


@pytest.mark.slow
def test_predict_never_imports_a_module_beside_a_crafted_checkpoint(tmp_path):
    """``python -m pipelines.inference.predict`` run in the folder of a checkpoint naming ``evil.Bad``,
    with ``evil.py`` beside it: one line saying the module is not trusted, nothing imported or written."""
    folder, marker = evil_folder(tmp_path, "evil")
    model_checkpoint(folder / "model.ckpt", "evil.Bad")
    write_fasta(folder / "in.fa", n=200)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-m", "pipelines.inference.predict", "--ckpt", "model.ckpt",
                           "--input", "in.fa", "--output", "out.tsv", "--no_progress"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_error_line(done.stderr)
    assert "'evil.Bad'" in line and "module 'evil' is not trusted" in line
    assert not marker.exists() and not (folder / "out.tsv").exists()


def test_a_name_that_only_starts_like_a_trusted_package_is_not_trusted(tmp_path, monkeypatch):
    """``posenc_evil`` is not under ``posenc``: prefixes match whole dotted components."""
    from pipelines.inference import load_model
    from posenc import PosencError

    folder, marker = evil_folder(tmp_path, "posenc_evil")
    ckpt = model_checkpoint(folder / "model.ckpt", "posenc_evil.Bad")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))  # what python -m does with the working folder
    with pytest.raises(PosencError, match="module 'posenc_evil' is not trusted"):
        load_model(ckpt, "cpu")
    assert not marker.exists()


def test_trusted_prefixes_match_whole_components_and_extend_only_explicitly(monkeypatch):
    from posenc.registry import TRUST_ENV, is_trusted, trusted_modules

    monkeypatch.delenv(TRUST_ENV, raising=False)
    assert is_trusted("posenc") and is_trusted("posenc.rotary") and is_trusted("datamodules.dna.genome")
    assert is_trusted("lightning.pytorch.callbacks") and is_trusted("pipelines.eval.evaluate")
    for name in ("posenc_evil", "pipelinesx.a", "evil", "evil.posenc", "", ".posenc", "posenc..x"):
        assert not is_trusted(name), name
    monkeypatch.setenv(TRUST_ENV, "mine.encodings, other")
    assert is_trusted("mine.encodings.pe") and is_trusted("other") and not is_trusted("mine.elsewhere")
    assert {"mine.encodings", "other"} <= set(trusted_modules())


def test_a_trusted_module_is_still_not_imported_from_the_working_folder(tmp_path, monkeypatch):
    """Trusting ``mine`` allows the installed ``mine``; a ``mine.py`` in the working folder is not it."""
    from posenc import PosencError
    from posenc.registry import TRUST_ENV, import_class

    folder, marker = evil_folder(tmp_path, "mine")
    monkeypatch.setenv(TRUST_ENV, "mine")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    with pytest.raises(PosencError, match="cannot import"):
        import_class("mine.Bad")
    assert not marker.exists() and "mine" not in sys.modules


def test_trust_module_option_allows_a_module_on_the_path(tmp_path, monkeypatch):
    """``--trust-module`` (here through :func:`trust_modules`, which the option calls) lets an installed
    module of your own be named, found on ``sys.path`` outside the working folder."""
    import posenc.registry as registry
    from posenc.registry import import_class, trust_modules

    lib, work = tmp_path / "lib", tmp_path / "work"
    lib.mkdir()
    work.mkdir()
    (lib / "mine_pe.py").write_text("class MyPE:\n    pass\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.chdir(work)
    monkeypatch.setattr(registry, "_TRUSTED", set(registry.DEFAULT_TRUSTED))  # undone after the test
    with pytest.raises(registry.PosencError, match="not trusted"):
        import_class("mine_pe.MyPE")
    trust_modules("mine_pe")
    assert import_class("mine_pe.MyPE").__name__ == "MyPE"


def test_evaluate_does_not_import_the_data_class_a_config_names(tmp_path, monkeypatch, capsys):
    """``make evaluate`` reads the datamodule class from the run's (or a given) config."""
    from pipelines.eval.evaluate import main as evaluate_main

    folder, marker = evil_folder(tmp_path, "evil")
    ckpt = model_checkpoint(folder / "model.ckpt", "posenc.RoPE")
    (folder / "run.yaml").write_text("data:\n  class_path: evil.Bad\n")
    monkeypatch.syspath_prepend(str(folder))
    with workdir_with_store(folder), pytest.raises(SystemExit) as exit_:
        evaluate_main([str(ckpt), "--config", "run.yaml", "--no-mlflow", "--out", str(folder / "ev")])
    assert exit_.value.code == 2
    assert "module 'evil' is not trusted" in one_error_line(capsys.readouterr().err)
    assert not marker.exists()


# ----------------------------------------------------------------------------------- 8. recorded paths
@pytest.mark.slow
def test_no_home_path_or_credential_in_anything_a_run_records(tmp_path, monkeypatch):
    """Data under a (temporary) home, a password in a URL tag, a secret in the environment: the run's
    params, tags, config, registered model card (model and version) and checkpoint metadata hold none
    of them; the data path is kept as ``~/…``, which loads again."""
    from pipelines.inference.resolve import resolve

    home, secret, token = tmp_path / "home", "pw-5e1d7c", "tok-8c1f3e9a"
    (home / "data").mkdir(parents=True)
    tiny_setup(tmp_path)
    fasta = write_fasta(home / "data" / "g.fa")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("POSENC_TEST_API_TOKEN", token)
    tags = f'{{"source": "https://alice:{secret}@data.example/g.fa", "notes": "{home}/notes.txt {token}"}}'
    code, cli_ = run_cli_in(tmp_path, [
        "fit", "--config", "tiny.yaml", f"--data.init_args.fasta={fasta}", "--trainer.max_epochs=1",
        "--test_after_fit=false", "--register.register=true", "--register.name=scrubbed",
        f"--trainer.logger.init_args.tags={tags}"])
    assert code == 0
    client, (run,) = runs(tmp_path)
    version = client.get_model_version("scrubbed", "1")
    registered = client.get_registered_model("scrubbed")
    config = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text()
    texts = {"params": repr(run.data.params), "tags": repr(run.data.tags), "config": config,
             "card": registered.description + repr(registered.tags),
             "version card": version.description + repr(version.tags)}
    best = tmp_path / cli_.trainer.checkpoint_callback.best_model_path  # relative to the run's folder
    logged = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "artifacts")))
    with resolve("models:/scrubbed/1", f"sqlite:///{tmp_path / 'mlflow.db'}") as found:  # registered
        for path in [best, found.checkpoint, *logged.rglob("*.ckpt")]:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
            texts[str(path)] = repr({k: v for k, v in ckpt.items() if k != "state_dict"})
    assert len(texts) > 5
    for where, text in texts.items():
        for leak in (str(home), secret, token):
            assert leak not in text, f"{leak!r} in the {where}"
    assert run.data.params["genome/fasta"] == "~/data/g.fa"  # the datamodule's groups, flattened by MLflow
    assert "python -m pipelines.train" in registered.description
    assert "~/data/g.fa" in registered.description and "https://***@data.example" in run.data.tags["source"]
    saved = torch.load(best, weights_only=True)["datamodule_hyper_parameters"]
    assert saved["genome"]["fasta"] == "~/data/g.fa"
