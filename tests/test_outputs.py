"""What ``python -m pipelines.inference.predict`` writes, what it refuses to write, and the values
and options it refuses to compute with.

Outputs: checked before the model loads (a folder, a missing or read-only folder, one of the
inputs, an existing file without ``--overwrite``); replaced files keep their mode and symlinks;
SIGTERM in the middle of a run leaves no temporary file. Values: a number beyond float32, or one
that overflows once scaled, is one line naming its row and column, in training and in inference; a
forecast is never silently empty; a forecast origin moved back by missing targets is said; numeric
options below their range are one line. Real checkpoints, files and subprocesses.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from datamodules import DNADataModule, TimeSeriesDataModule
from datamodules.dna.classify import ClassificationDataModule
from pipelines import DNALanguageModel, Forecaster
from pipelines.inference.registry import RegisterModel
from pipelines.tasks.upgrade.legacy import legacy_keys
from posenc import PosencError
from tests.helpers import dm_kwargs, nest, random_bases, seasonal_frame, task, write_csv, write_fasta

ROOT = Path(__file__).resolve().parents[1]
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "pe": {"class_path": "posenc.RoPE"}}


def save(model: torch.nn.Module, path: Path) -> Path:
    """``model`` saved as Lightning saves a checkpoint (weights, hyperparameters, data description)."""
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    RegisterModel().on_save_checkpoint(None, model, ckpt)
    torch.save(ckpt, path)
    return path


def lm_checkpoint(path: Path) -> Path:
    """An untrained tiny DNA LM checkpoint."""
    torch.manual_seed(0)
    model = task(DNALanguageModel, **TINY).eval()
    model.posenc_inference = {"data": {"kmer": 1, "kmer_stride": 1, "seq_len": 32}}
    return save(model, path)


def forecaster_checkpoint(path: Path, train_csv: Path, nan_weights: bool = False) -> Path:
    """An untrained tiny Forecaster checkpoint over ``train_csv`` (tests.helpers.dm_kwargs: hourly
    ``load`` with a ``temp`` covariate, lookback 24, horizon 6); ``nan_weights``: every weight NaN."""
    dm = TimeSeriesDataModule(**dm_kwargs(train_csv))
    torch.manual_seed(0)
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, horizon=dm.horizon,
                 patch_len=dm.patch_len,
                       **TINY).eval()
    model.posenc_inference = model.describe_data(dm)
    if nan_weights:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float("nan"))
    return save(model, path)


@pytest.fixture
def work(tmp_path, monkeypatch):
    """cwd = tmp_path holding ``lm.ckpt`` and ``new.fa`` (two short records)."""
    monkeypatch.chdir(tmp_path)
    lm_checkpoint(tmp_path / "lm.ckpt")
    write_fasta(tmp_path / "new.fa", {"a": random_bases(300, 1), "b": random_bases(90, 2)})
    return tmp_path


def predict(*args: str) -> int:
    from pipelines.inference.predict import main

    try:
        return main([*args, "--no_progress"])
    except SystemExit as exc:  # a user mistake: one error line, exit status 2
        return exc.code


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


def test_an_output_that_is_a_pipe_is_not_replaced_by_a_file(work, capsys):
    os.mkfifo(work / "out.tsv")  # like /dev/null or /dev/stdout: not a file to rename over
    assert predict("--ckpt", "lm.ckpt", "--input", "new.fa", "--output", "out.tsv", "--overwrite") == 2
    assert one_error(capsys) == "error: out.tsv: the output exists and is not a regular file; name a file"
    assert stat.S_ISFIFO((work / "out.tsv").stat().st_mode) and not leftovers(work)


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


# ------------------------------------------------------------------------------------------- values
def test_a_value_beyond_float32_stops_training_data_with_its_row_and_column(tmp_path):
    df = seasonal_frame()
    df.loc[5, "load"] = 1e300  # a float64 number that is inf in float32
    with pytest.raises(PosencError) as err:
        TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "a.csv", df)))
    assert str(err.value).startswith("a.csv: column 'load' has the value 1e+300 at row 5 (line 7), beyond "
                                     "float32")
    df = seasonal_frame()
    df.loc[900, "temp"] = 3e38  # in float32's range, but not once divided by the training rows' spread
    with pytest.raises(PosencError) as err:
        TimeSeriesDataModule(**dm_kwargs(write_csv(tmp_path / "b.csv", df)))
    assert str(err.value).startswith("b.csv: column 'temp' at row 900 (2024-02-07 12:00:00) is not finite "
                                     "after scaling")


@pytest.fixture
def forecast_work(tmp_path, monkeypatch):
    """cwd = tmp_path holding ``fc.ckpt`` (trained on ``train.csv``, no known-future input)."""
    monkeypatch.chdir(tmp_path)
    forecaster_checkpoint(tmp_path / "fc.ckpt", write_csv(tmp_path / "train.csv", seasonal_frame()))
    return tmp_path


@pytest.mark.parametrize(("column", "value", "needle"), [
    ("load", 1e300, "column 'load' has the value 1e+300 at row 30 (line 32), beyond float32"),
    ("temp", 3e38, "column 'temp' at row 30 (2024-01-02 06:00:00) is not finite after scaling"),
])
def test_a_value_that_is_not_finite_in_float32_stops_predict_with_its_row_and_column(
        forecast_work, capsys, column, value, needle):
    df = seasonal_frame().head(48)
    df.loc[30, column] = value
    write_csv(forecast_work / "new.csv", df)
    assert predict("--ckpt", "fc.ckpt", "--input", "new.csv", "--output", "out.csv") == 2
    assert one_error(capsys).startswith(f"error: new.csv: {needle}")
    assert not (forecast_work / "out.csv").exists() and not leftovers(forecast_work)


def test_a_forecast_that_is_not_finite_is_an_error_not_an_empty_file(forecast_work, capsys):
    forecaster_checkpoint(forecast_work / "nan.ckpt", forecast_work / "train.csv", nan_weights=True)
    write_csv(forecast_work / "new.csv", seasonal_frame().head(48))
    assert predict("--ckpt", "nan.ckpt", "--input", "new.csv", "--output", "out.csv") == 2
    line = one_error(capsys)
    assert line.startswith("error: new.csv: the forecast of 'load' from row 47 (2024-01-02 23:00:00) is not "
                           "finite at step 1")
    assert not (forecast_work / "out.csv").exists()


def test_a_forecast_origin_moved_back_by_missing_targets_is_said(forecast_work):
    df = seasonal_frame().head(48)
    df.loc[43:, "load"] = np.nan  # the last 5 rows have no target
    write_csv(forecast_work / "new.csv", df)
    said = ("new.csv: the last 5 row(s) lack a value of load: the forecast origin is row 42 "
            "(2024-01-02 18:00:00), the last row with every target")
    with pytest.warns(UserWarning, match=re.escape(said)):  # the CLI prints it as one "warning: …" line
        assert predict("--ckpt", "fc.ckpt", "--input", "new.csv", "--output", "out.csv") == 0
    out = pd.read_csv(forecast_work / "out.csv")
    assert set(out["origin"]) == {"2024-01-02T18:00:00"} and len(out) == 6
    write_csv(forecast_work / "full.csv", seasonal_frame().head(48))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert predict("--ckpt", "fc.ckpt", "--input", "full.csv", "--output", "full_out.csv") == 0
    assert not [w for w in caught if "lack a value" in str(w.message)]  # every row has its target


@pytest.mark.parametrize(("option", "value", "least"), [
    ("--batch_size", "0", 1), ("--batch_size", "-3", 1), ("--every", "-1", 1), ("--every", "0", 1),
    ("--window", "-2", 0), ("--overlap", "-1", 0), ("--mask_every", "0", 1), ("--min_length", "-1", 0),
])
def test_numeric_options_below_their_range_are_one_line(forecast_work, capsys, option, value, least):
    write_csv(forecast_work / "new.csv", seasonal_frame().head(48))
    assert predict("--ckpt", "fc.ckpt", "--input", "new.csv", "--output", "out.csv", option, value) == 2
    assert one_error(capsys) == f"error: {option} must be ≥ {least}, got {value}"
    assert not (forecast_work / "out.csv").exists()


def test_every_below_one_is_refused_by_the_library_too(forecast_work):
    from pipelines.inference import load_model

    model = load_model("fc.ckpt", device="cpu")
    for every in (0, -1):
        with pytest.raises(PosencError, match=f"every must be ≥ 1 .*got {every}"):
            model.predict(seasonal_frame().head(48), every=every)


@pytest.mark.parametrize(("make", "key", "value", "least"), [
    (DNADataModule, "batch_size", 0, 1), (DNADataModule, "samples_per_epoch", -1, 1),
    (DNADataModule, "eval_tokens", 0, 1), (DNADataModule, "num_workers", -1, 0),
    (ClassificationDataModule, "batch_size", -3, 1), (TimeSeriesDataModule, "samples_per_epoch", 0, 1),
    (TimeSeriesDataModule, "num_workers", -2, 0),
])
def test_datamodule_counts_below_their_range_are_one_line(tmp_path, make, key, value, least):
    if make is TimeSeriesDataModule:
        kwargs = dm_kwargs(write_csv(tmp_path / "s.csv", seasonal_frame()))
    else:
        kwargs = {"fasta": str(write_fasta(tmp_path / "g.fa")), "seq_len": 32, "cache_dir": None}
    with pytest.raises(PosencError) as err:  # the flat key of before, in its group where the class has groups
        make(**nest(make, {**kwargs, key: value}))
    assert str(err.value) == f"data.init_args.{legacy_keys(make)[key]}: must be ≥ {least}, got {value}"
