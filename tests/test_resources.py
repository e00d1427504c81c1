"""Resources: the up-front memory estimate (against a measured training step; huge configs and a
checkpoint claiming a huge width refused before anything is allocated) and per-base ``predict``
whose memory stays flat in the record's length. Peaks are ``ru_maxrss`` (or the peak RSS reset just
before a step) of real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, migrated_store, runs, task, tiny_setup, write_fasta

MB = 1 << 20


def _python(code: str, *args: str, cwd: Path | None = None, env: dict | None = None):
    """Run ``code`` in a fresh interpreter; returns (exit status, stdout, stderr, peak RSS in bytes)."""
    runner = ("import json, resource, subprocess, sys\n"
              "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
              "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
              "print(json.dumps([p.returncode, p.stdout, p.stderr, peak]))\n")
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-c", runner, sys.executable, "-c", code, *args], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=900, check=True)
    return json.loads(done.stdout)


# ----------------------------------------------------------------------------------- the estimate
# measure(pe, B, T): bytes a training step adds to the resident set (the peak reset to the current
# size just before it: /proc/self/clear_refs) against the estimate without weights and optimizer.
STEP_FN = """
import json, sys, torch
from pipelines.tasks.resources import Shape, attention_kind, training_bytes
from pipelines.tasks.dna.lm import DNALanguageModel

def peak_rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))

def measure(pe, B, T):
    torch.manual_seed(0)
    net = {"d_model": 64, "n_heads": 4, "n_layers": 2}
    model = DNALanguageModel(net=net, pe={"class_path": pe}, vocab_size=8)
    opt = torch.optim.AdamW(model.parameters())
    def step(x):
        logits = model(x)  # (B, T, V)
        torch.nn.functional.cross_entropy(logits.reshape(-1, 8), x.reshape(-1)).backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    x = torch.randint(0, 4, (B, T))
    step(x[:1, :16])  # kernels and optimizer state in place on a tiny batch
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # peak RSS := current RSS
    base = peak_rss()
    step(x)
    parts = training_bytes(Shape(B, T, 64, 2, 4, vocab=8, attention=attention_kind(pe, T)))
    return {"measured": peak_rss() - base, "estimated": sum(parts.values()) - parts["weights + AdamW"]}
"""
STEP = STEP_FN + "print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))\n"


def _assert_estimate(got: dict) -> None:
    assert got["estimated"] > 100 * MB  # large enough to stand out of the allocator's noise
    assert 1 / 3 < got["measured"] / got["estimated"] < 3, got


@pytest.mark.slow  # each a fresh interpreter (~10 CPU s of imports) and a larger step
@pytest.mark.parametrize(("pe", "batch", "length"), [("posenc.RoPE", 16, 2048), ("posenc.FIRE", 4, 1024)])
def test_estimate_is_within_a_factor_of_three_of_a_measured_training_step(pe, batch, length):
    """FIRE: its (H, T, T) bias and MLP intermediates; RoPE (fused kernel, linear in T): the
    activations. (DeBERTa, the fast suite's quadratic-kernel case, runs in the MEMORY interpreter.)"""
    code, out, err, _ = _python(STEP, pe, str(batch), str(length))
    assert code == 0, err[-3000:]
    _assert_estimate(json.loads(out))


FIT = "import sys; from pipelines.cli import main; main(sys.argv[1:])"
HUGE_SEQ_LEN = ["--data.init_args.seq_len=200000", "--data.init_args.batch_size=64"]

# The fast suite's three memory checks in ONE fresh interpreter (each fresh one costs ~10 CPU s of
# imports): the fit CLI refused, predict refused on a checkpoint claiming a huge width (per phase: its
# exit status and the peak RSS so far; a marker line on stderr between the phases' output), then
# the estimate against a measured DeBERTa step (B 4, T 1024), whose peak is reset before it.
MEMORY = STEP_FN + """
import os, resource
from pipelines.cli import main as fit
from pipelines.inference.predict import main as predict

def phase(name, main, argv):
    sys.stderr.flush()
    os.write(2, f"\\n@@ {name}\\n".encode())
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    sys.stderr.flush()
    return {"code": code, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}

ckpt, fasta, out, *extra = sys.argv[1:]
phases = {"fit": phase("fit", fit, ["fit", "--config", "tiny.yaml", *extra]),
          "predict": phase("predict", predict, ["--ckpt", ckpt, "--input", fasta, "--output", out,
                                                "--device", "cpu"])}
phases["step"] = measure("posenc.DeBERTa", 4, 1024)
print(json.dumps(phases))
"""


@pytest.fixture(scope="module")
def memory(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """``(folder, {"fit" | "predict": {"code", "err", "peak"}, "step": measure's result})`` of MEMORY."""
    tmp = tmp_path_factory.mktemp("memory")
    tiny_setup(tmp)
    migrated_store(tmp / "mlflow.db")  # for runs() afterwards: ~2 CPU s of MLflow's migrations saved
    ckpt = _tiny_checkpoint(tmp / "huge.ckpt", d_model=65536, n_heads=8)
    write_fasta(tmp / "x.fa", n=200)
    code, out, err, _ = _python(MEMORY, str(ckpt), str(tmp / "x.fa"), str(tmp / "out.tsv"), *HUGE_SEQ_LEN,
                                cwd=tmp, env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"})
    assert code == 0, err[-3000:]
    phases = json.loads(out.splitlines()[-1])
    _, phases["fit"]["err"], phases["predict"]["err"] = err.split("\n@@ ")
    return tmp, phases


def test_estimate_is_within_a_factor_of_three_of_a_measured_deberta_step(memory):
    """DeBERTa: its (B, H, T, T) content bias per layer dominates."""
    _assert_estimate(memory[1]["step"])


def _assert_fit_refused(tmp: Path, code: int, err: str, peak: int) -> None:
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert "needs ~" in errors[0] and "GB available: lower data.batch_size, data.seq_len" in errors[0]
    assert peak < 1500 * MB  # the interpreter, torch and Lightning: nothing of the model or its batch
    assert not runs(tmp)[1]  # no MLflow run was started


def test_a_fit_that_cannot_fit_in_memory_is_refused_before_anything_is_allocated(memory):
    tmp, phases = memory
    _assert_fit_refused(tmp, phases["fit"]["code"], phases["fit"]["err"], phases["fit"]["peak"])


@pytest.mark.slow  # the same check through the batch size: another fresh interpreter (~10 CPU s of imports)
def test_a_fit_refused_through_its_batch_size(tmp_path):
    tiny_setup(tmp_path)
    code, _, err, peak = _python(FIT, "fit", "--config", "tiny.yaml", "--data.init_args.batch_size=300000",
                                 "--data.init_args.seq_len=512", cwd=tmp_path,
                                 env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    _assert_fit_refused(tmp_path, code, err, peak)


def _tiny_checkpoint(path: Path, **override) -> Path:
    import torch

    from pipelines.tasks.dna.lm import DNALanguageModel

    model = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe={"class_path": "posenc.RoPE"})
    hp = {**dict(model.hparams), **override}
    meta = {"data": {"seq_len": 32, "kmer": 1, "kmer_stride": 1}}
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": hp, "posenc_task": "dna_lm",
                "posenc_inference": meta}, path)
    return path


def test_a_checkpoint_claiming_a_huge_width_is_refused_before_its_model_is_built(memory):
    """Its peak is the interpreter's after both refusals: the refused fit's too, so at least as strict."""
    tmp, phases = memory
    code, err, peak = phases["predict"]["code"], phases["predict"]["err"], phases["predict"]["peak"]
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err[-3000:]
    assert "d_model 65536" in err and "needs ~" in err and "GB available" in err
    assert peak < 1500 * MB and not (tmp / "out.tsv").exists()


# ----------------------------------------------------------------------------------- streaming
def _long_fasta(path: Path, n: int, width: int = 60) -> Path:
    """One record of ``n`` random bases, written without Python strings."""
    import numpy as np

    bases = np.frombuffer(b"ACGT", dtype=np.uint8)[np.random.default_rng(n).integers(0, 4, n, dtype=np.uint8)]
    full = n // width * width
    lines = np.concatenate([bases[:full].reshape(-1, width), np.full((n // width, 1), 10, np.uint8)], axis=1)
    with path.open("wb") as fh:
        fh.write(b">chr synthetic\n")
        fh.write(lines.tobytes())
        fh.write(bases[full:].tobytes() + b"\n" if n > full else b"")
    return path


def _predict_peak(tmp: Path, ckpt: Path, n: int) -> int:
    """Peak RSS of a per-base ``predict`` of one ``n``-base record (windows of 2048, no overlap)."""
    fasta = _long_fasta(tmp / f"r{n}.fa", n)
    out = tmp / f"r{n}.tsv"
    code, _, err, peak = _python("from pipelines.inference.predict import main; raise SystemExit(main())",
                                 "--ckpt", str(ckpt), "--input", str(fasta), "--output", str(out),
                                 "--device", "cpu", "--window", "2048", "--overlap", "0",
                                 "--batch_size", "16", "--no_progress", env={"OMP_NUM_THREADS": "1"})
    assert code == 0, err[-3000:]
    with out.open() as fh:
        assert sum(1 for _ in fh) == n + 1  # header + one row per base
    out.unlink()
    fasta.unlink()
    return peak


@pytest.mark.slow  # two real predict subprocesses over 0.1 and 0.5 Mb: ~35 s
def test_per_base_predict_memory_is_flat_in_the_record_length(tmp_path):
    """A record four times longer costs (nearly) no more memory: today's whole-record tables cost
    ~250 bytes per base; streaming keeps the FASTA text and one byte per base of codes."""
    ckpt = _tiny_checkpoint(tmp_path / "m.ckpt")
    short, long = 100_000, 500_000
    grown = _predict_peak(tmp_path, ckpt, long) - _predict_peak(tmp_path, ckpt, short)
    assert grown / (long - short) < 40, f"{grown / MB:.0f} MB more for {long - short} more bases"


@pytest.mark.slow
def test_per_base_predict_of_a_100_mb_record_peaks_under_2_gb(tmp_path):
    """The issue's case: one 100 Mb record, per-base TSV (~6 GB, removed afterwards)."""
    ckpt = _tiny_checkpoint(tmp_path / "m.ckpt")
    peak = _predict_peak(tmp_path, ckpt, 100_000_000)
    assert peak <= 2 * 1024 * MB, f"peak RSS {peak / MB:.0f} MB"
