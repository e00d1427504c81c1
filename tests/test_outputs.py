"""What ``python -m pipelines.inference.predict`` writes, and what it refuses to write.

The output is checked before the model loads (a folder, a missing or read-only folder, one of the
inputs, an existing file without ``--overwrite``), replaced files keep their mode and symlinks, and
SIGTERM in the middle of a run leaves no temporary file. Real checkpoints, files and subprocesses.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from pipelines import DNALanguageModel
from pipelines.tracking.registry import RegisterModel
from tests.helpers import random_bases, write_fasta

ROOT = Path(__file__).resolve().parents[1]


def lm_checkpoint(path: Path) -> Path:
    """An untrained tiny DNA LM saved as Lightning saves one (weights, hyperparameters, data description)."""
    torch.manual_seed(0)
    model = DNALanguageModel(d_model=16, n_heads=2, n_layers=2).eval()
    model.posenc_inference = {"data": {"kmer": 1, "kmer_stride": 1, "seq_len": 32}}
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    RegisterModel().on_save_checkpoint(None, model, ckpt)
    torch.save(ckpt, path)
    return path


@pytest.fixture
def work(tmp_path, monkeypatch):
    """cwd = tmp_path holding ``lm.ckpt`` and ``new.fa`` (two short records)."""
    monkeypatch.chdir(tmp_path)
    lm_checkpoint(tmp_path / "lm.ckpt")
    write_fasta(tmp_path / "new.fa", {"a": random_bases(300, 1), "b": random_bases(90, 2)})
    return tmp_path


def predict(*args: str) -> int:
    from pipelines.inference.predict import main

    return main([*args, "--no_progress"])


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and "Traceback" not in "\n".join(err), err
    return err[-1]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------------------------ inputs are safe
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(work, capsys):
    os.symlink("new.fa", work / "link.fa")
    os.link(work / "new.fa", work / "hard.fa")
    before = (work / "new.fa").read_bytes(), (work / "lm.ckpt").read_bytes()
    for output in ("new.fa", "./new.fa", "link.fa", "hard.fa", str(work / "new.fa"), "lm.ckpt"):
        assert predict("--ckpt", "lm.ckpt", "--input", "new.fa", "--output", output, "--overwrite") == 2
        assert "the output is the input" in one_error(capsys), output
    assert ((work / "new.fa").read_bytes(), (work / "lm.ckpt").read_bytes()) == before
    assert not leftovers(work)


def test_an_existing_output_needs_overwrite_and_keeps_its_mode(work, capsys):
    out = work / "out.tsv"
    out.write_text("keep me\n")
    out.chmod(0o640)
    assert predict("--ckpt", "lm.ckpt", "--input", "new.fa", "--output", "out.tsv") == 2
    assert one_error(capsys) == "error: out.tsv: the output exists; pass --overwrite to replace it " \
                                "(make predict: ARGS=--overwrite)"
    assert out.read_text() == "keep me\n"
    assert predict("--ckpt", "lm.ckpt", "--input", "new.fa", "--output", "out.tsv", "--overwrite") == 0
    assert len(pd.read_csv(out, sep="\t")) == 390 and stat.S_IMODE(out.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    os.umask(umask)
    assert predict("--ckpt", "lm.ckpt", "--input", "new.fa", "--output", "fresh.tsv.gz") == 0
    assert stat.S_IMODE((work / "fresh.tsv.gz").stat().st_mode) == 0o666 & ~umask  # as any new file
    assert len(pd.read_csv(work / "fresh.tsv.gz", sep="\t")) == 390
    assert not leftovers(work)


def test_a_symlinked_output_is_replaced_through_the_link(work):
    (work / "real").mkdir()
    (work / "real" / "out.tsv").write_text("old\n")
    os.symlink("real/out.tsv", work / "out.tsv")
    assert predict("--ckpt", "lm.ckpt", "--input", "new.fa", "--output", "out.tsv", "--overwrite") == 0
    assert (work / "out.tsv").is_symlink()  # the link stays, the file it names holds the output
    assert len(pd.read_csv(work / "real" / "out.tsv", sep="\t")) == 390


# --------------------------------------------------------------------------- refused before the run
def unwritable_folder(tmp: Path) -> Path:
    """A folder that takes no new file: read-only for a normal user; root writes anywhere it may, but
    not into sysfs."""
    if os.geteuid() != 0:
        folder = tmp / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    if not Path("/sys/kernel").is_dir():
        pytest.skip("running as root without /sys: no folder refuses a new file")
    return Path("/sys")


@pytest.mark.parametrize("case", ["folder", "missing parent", "unwritable parent"])
def test_an_output_that_cannot_be_written_is_refused_before_the_model_loads(work, capsys, case):
    (work / "outdir").mkdir()
    output = {"folder": "outdir", "missing parent": "nope/out.tsv",
              "unwritable parent": str(unwritable_folder(work) / "out.tsv")}[case]
    # the checkpoint does not exist: refusing the output first proves it was checked before any work
    assert predict("--ckpt", "missing.ckpt", "--input", "new.fa", "--output", output) == 2
    line = one_error(capsys)
    assert line.startswith(f"error: {output}: ") and "missing.ckpt" not in line
    want = {"folder": "the output is a folder", "missing parent": "output folder",
            "unwritable parent": "cannot write in"}[case]
    assert want in line
    assert not leftovers(work) and list((work / "outdir").iterdir()) == []


# ------------------------------------------------------------------------------------------- SIGTERM
@pytest.mark.slow  # a fresh interpreter (~10 s of imports on a shared CPU) killed mid-run
def test_sigterm_mid_run_leaves_neither_output_nor_temporary_file(tmp_path):
    lm_checkpoint(tmp_path / "lm.ckpt")
    write_fasta(tmp_path / "big.fa", {f"r{i}": random_bases(100_000, i) for i in range(20)})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.inference.predict", "--ckpt", "lm.ckpt",
                             "--input", "big.fa", "--output", "out.tsv.gz", "--no_progress"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob(".out.tsv.gz.*.part")):  # writing has started
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.fa", "lm.ckpt"]
