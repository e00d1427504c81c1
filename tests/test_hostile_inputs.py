"""Bad input that crashed or escaped the memory bound (issue 56), each through the real command: a
99 %-empty target in the training CLI, a ``.csv.gz`` bomb, a FASTA of many bomb records (bounded in
total, not per record), a checkpoint whose ``net`` is a string, a folder named ``run.lock``."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import (
    ROOT,
    exit_status,
    run_cli_in,
    runs,
    seasonal_frame,
    tiny_setup,
    ts_cli_args,
    write_csv,
)

TS = ROOT / "configs" / "ts_forecast.yaml"


def error_line(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def no_run_left_running(tmp: Path) -> None:
    if (tmp / "mlflow.db").is_file():
        _, found = runs(tmp)
        assert all(r.info.status != "RUNNING" for r in found), [r.info.status for r in found]


def test_a_99_percent_empty_target_is_one_line_in_the_training_cli(tmp_path, capsys):
    """The benchmark's rule (a target more than 10 % empty is refused, not filled) in the training CLI."""
    frame = seasonal_frame()
    frame.loc[frame.index % 100 != 0, "load"] = np.nan  # one value in a hundred is kept
    csv = write_csv(tmp_path / "load.csv", frame)
    code, _ = run_cli_in(tmp_path, ["fit", "--config", str(TS), *ts_cli_args(csv), "--trainer.max_epochs=1"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and "load.csv" in line and "'load'" in line and "99% empty" in line, line
    no_run_left_running(tmp_path)


def csv_bomb(path: Path, megabytes: int) -> Path:
    """``megabytes`` MiB of rows gzip-compressed into a few hundred KiB; the rows are not a usable series
    (no timestamps), so a reader that does not bound the decompression fails later, differently."""
    row = b"x,1,1\n" * 4096
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b"when,load,temp\n")
        for _ in range((megabytes << 20) // len(row)):
            fh.write(row)
    return path


def test_a_csv_gz_bomb_is_one_line_under_the_memory_bound(tmp_path, capsys, monkeypatch):
    path = csv_bomb(tmp_path / "load.csv.gz", 48)
    assert path.stat().st_size < 1 << 20
    monkeypatch.setenv("POSENC_MEMORY_LIMIT", "64M")
    code, _ = run_cli_in(tmp_path, ["fit", "--config", str(TS), *ts_cli_args(path), "--trainer.max_epochs=1"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and "load.csv.gz" in line and "decompress" in line, line
    assert "POSENC_MEMORY_CHECK=0" in line


def fasta_bombs(path: Path, records: int, megabytes_each: int) -> Path:
    """``records`` gzip-compressed records of ``megabytes_each`` MiB each, the last one ending in a
    character no FASTA has (so a reader that reads it all fails at the end, differently)."""
    line = b"A" * 1023 + b"\n"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for r in range(records):
            fh.write(f">r{r}\n".encode())
            fh.write(line * ((megabytes_each << 20) // len(line)))
        fh.write(b"!\n")
    return path


def test_fasta_decompression_is_bounded_in_total_not_per_record(tmp_path, capsys, monkeypatch):
    """12 records of 6 MiB under a 64 MiB limit: each fits the per-record bound (8 MiB at 8 bytes per
    base), all of them do not (the genome is kept whole)."""
    tiny_setup(tmp_path)
    fasta_bombs(tmp_path / "g.fa.gz", 12, 6)
    monkeypatch.setenv("POSENC_MEMORY_LIMIT", "64M")
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--data.init_args.fasta=g.fa.gz",
                                    "--trainer.max_epochs=1"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and "g.fa.gz" in line and "decompress" in line, line
    no_run_left_running(tmp_path)


@pytest.mark.parametrize("group, value", [("net", "evil"), ("net", [16, 2]), ("optim", 0.1)])
def test_a_checkpoint_whose_settings_group_is_not_a_mapping_is_one_line(tmp_path, capsys, group, value):
    import torch

    from pipelines.inference.predict import main as predict_main
    from tests.hostile import model_checkpoint

    ckpt = model_checkpoint(tmp_path / "m.ckpt", "posenc.RoPE")
    saved = torch.load(ckpt, weights_only=True)
    saved["hyper_parameters"][group] = value
    torch.save(saved, ckpt)
    (tmp_path / "in.fa").write_text(">r\n" + "ACGT" * 40 + "\n")
    code = exit_status(predict_main, ["--ckpt", str(ckpt), "--input", str(tmp_path / "in.fa"), "--output",
                                      str(tmp_path / "out.tsv"), "--no_progress"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and "m.ckpt" in line and group in line and "mapping" in line, line
    assert not (tmp_path / "out.tsv").exists()


def test_a_folder_named_run_lock_is_its_own_line(tmp_path, capsys, monkeypatch):
    """The training CLI's run folder holds a *folder* ``run.lock``: one line saying so, not ``4: Is a
    directory``."""
    from pipelines.tracking import resume

    run_dir = tmp_path / "outputs" / "runs" / "key"
    (run_dir / "run.lock").mkdir(parents=True)
    monkeypatch.setattr(resume, "run_dir_for", lambda text, root: run_dir)
    tiny_setup(tmp_path)
    code, _ = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1"])
    line = error_line(capsys.readouterr().err)
    assert code == 2 and "run.lock is a folder, not a lock file" in line, line
