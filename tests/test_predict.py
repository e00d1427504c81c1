"""Train → register → reload → predict, per task, through the real CLI and a tmp sqlite MLflow store
(cwd = tmp_path): reloads by checkpoint path, run id and model URI predict exactly like the in-memory
model; ``python -m pipelines.inference.predict`` writes tables / GFF / BED atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.inference import load_model
from pipelines.inference.resolve import resolve
from tests.helpers import random_bases, workdir_with_store, write_fasta, write_gff

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=2",
    "--trainer.max_epochs=1", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2",
    "--trainer.enable_progress_bar=false", "--trainer.logger.init_args.log_model=false",
    "--test_after_fit=false",
]
DNA = ["--data.init_args.seq_len=32", "--data.init_args.batch_size=4",
       "--data.init_args.samples_per_epoch=16", "--data.init_args.eval_tokens=256",
       "--data.init_args.eval_lengths=[32,64,128,256]"]


def fit(tmp: Path, config: str, *extra: str):
    from pipelines.cli import main

    with workdir_with_store(tmp):
        return main(["fit", "--config", str(ROOT / "configs" / config), *TINY, *extra])


def registered(cli):
    """The RegisterModel callback of a finished fit (its model URI)."""
    from pipelines.inference.registry import RegisterModel

    return next(c for c in cli.trainer.callbacks if isinstance(c, RegisterModel))


def predict_cli(tmp: Path, *args: str) -> int:
    from pipelines.inference.predict import main

    with workdir_with_store(tmp):
        try:
            return main([*args, "--no_progress"])
        except SystemExit as exc:  # a user mistake: one error line, exit status 2
            return exc.code


def sources(tmp: Path, cli) -> list[str]:
    run_id = cli.trainer.logger.run_id
    return [cli.trainer.checkpoint_callback.best_model_path, run_id, f"runs:/{run_id}/posenc_model",
            registered(cli).model_uri]


def assert_reloads_identical(tmp: Path, cli, data, **kwargs) -> pd.DataFrame:
    """Every way of naming the trained model loads the same module that predicts exactly the same."""
    ref = cli.model.eval().predict(data, **kwargs)
    with workdir_with_store(tmp):
        for source in sources(tmp, cli):
            model = load_model(source, device="cpu")
            assert type(model) is type(cli.model), source
            pd.testing.assert_frame_equal(model.predict(data, **kwargs), ref, check_exact=True)
    return ref


# ----------------------------------------------------------------------------------------- causal LM
@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm")
    fasta = write_fasta(tmp / "train.fa", {"chr1": random_bases(6000)})
    new = write_fasta(tmp / "new.fa", {"a": random_bases(500, 9), "b": random_bases(77, 10)})
    return tmp, fit(tmp, "dna_lm.yaml", f"--data.init_args.fasta={fasta}", *DNA), new


def test_lm_reloads_by_path_run_id_and_model_uri_predict_identically(lm_run):
    tmp, cli, new = lm_run
    assert registered(cli).model_uri == "models:/DNALanguageModel-PeriodicRoPE/1"
    ref = assert_reloads_identical(tmp, cli, new)
    assert len(ref) == 577 and ref["bits"].notna().sum() == 575  # the first base of each record is unscored


def test_registered_model_is_a_pyfunc_with_signature_example_and_pinned_requirements(lm_run):
    import mlflow

    tmp, cli, new = lm_run
    uri = registered(cli).model_uri
    with workdir_with_store(tmp):
        info = mlflow.models.get_model_info(uri)
        pyfunc = mlflow.pyfunc.load_model(uri)
        with resolve(uri) as found:
            folder = found.checkpoint.parent.parent
            assert (folder / "input_example.json").is_file()
            reqs = (folder / "requirements.txt").read_text().split()
    assert [c.name for c in info.signature.inputs.inputs] == ["id", "sequence"]
    assert any(r.startswith("torch==") for r in reqs) and any(r.startswith("lightning==") for r in reqs)
    module = pyfunc.unwrap_python_model().model
    assert type(module) is type(cli.model)
    df = pd.DataFrame({"id": ["x"], "sequence": [random_bases(100, 3)]})
    pd.testing.assert_frame_equal(pyfunc.predict(df), cli.model.predict(df))


def test_predict_command_writes_per_base_and_per_record_tables(lm_run):
    tmp, cli, new = lm_run
    ckpt = cli.trainer.checkpoint_callback.best_model_path
    assert predict_cli(tmp, "--ckpt", ckpt, "--input", str(new), "--output", "bits.tsv.gz") == 0
    table = pd.read_csv(tmp / "bits.tsv.gz", sep="\t")
    ref = cli.model.predict(new)
    np.testing.assert_allclose(table["bits"], ref["bits"], rtol=1e-5)  # written with 6 significant digits
    assert list(table.columns) == ["record", "pos", "token", "p_A", "p_C", "p_G", "p_T", "prob", "bits"]
    assert predict_cli(tmp, "--ckpt", registered(cli).model_uri, "--input", str(new), "--output", "rec.csv",
                       "--level", "record", "--window", "64", "--overlap", "8") == 0
    rec = pd.read_csv(tmp / "rec.csv")
    want = cli.model.predict(new, window=64, overlap=8).groupby("record", sort=False)["bits"].mean()
    np.testing.assert_allclose(rec["bits_per_base"], want.to_numpy(), rtol=1e-5)


def test_predict_command_errors_are_one_line_and_leave_no_file(lm_run, capsys):
    tmp, cli, new = lm_run
    ckpt = cli.trainer.checkpoint_callback.best_model_path
    bad = tmp / "bad.fa"
    bad.write_text(f">ok\n{random_bases(300)}\n>broken\nACGTEACGT\n")
    cases = [
        ([ckpt, str(bad), "x.tsv"], "record 'broken'"),
        (["nothing.ckpt", str(new), "x.tsv"], "nothing.ckpt: checkpoint file"),
        ([ckpt, str(new), "x.gff"], "GFF/BED output is for segmentation"),
        ([ckpt, str(new), "x.tsv", "--window", "8", "--overlap", "8"], "overlap"),
        (["models:/DNALanguageModel-PeriodicRoPE/7", str(new), "x.tsv"], "not found"),
    ]
    for (source, data, out, *more), needle in cases:
        capsys.readouterr()
        assert predict_cli(tmp, "--ckpt", source, "--input", data, "--output", out, *more) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and needle in err[-1], err
        assert not list(tmp.glob("x.*")) and not list(tmp.glob(".x.*"))  # nothing written, no temp file


# ----------------------------------------------------------------------------------------- other tasks
@pytest.mark.slow
def test_segmentation_predicts_labels_and_intervals_that_parse_back(tmp_path):
    from datamodules.dna.annotation import frame_labels, label_intervals, read_annotation
    from datamodules.dna.fasta import read_fasta

    fasta = write_fasta(tmp_path / "train.fa", {"chr1": random_bases(6000)})
    gff = write_gff(tmp_path / "train.gff", [("chr1", 101, 400, "+", 0), ("chr1", 1001, 1600, "-", 0),
                                             ("chr1", 3001, 3900, "+", 0)])
    cli = fit(tmp_path, "dna_segment.yaml", f"--data.init_args.fasta={fasta}",
              f"--data.init_args.annotation={gff}", "--data.init_args.gap=100", *DNA)
    new = write_fasta(tmp_path / "new.fa", {"u": random_bases(700, 11), "v": random_bases(260, 12)})
    ref = assert_reloads_identical(tmp_path, cli, new)
    uri = registered(cli).model_uri
    for out in ("labels.tsv", "cds.gff", "cds.bed"):
        assert predict_cli(tmp_path, "--ckpt", uri, "--input", str(new), "--output", out) == 0
    labels = pd.read_csv(tmp_path / "labels.tsv", sep="\t")
    assert (labels["label"].to_numpy() == ref["label"].to_numpy()).all()
    genome = read_fasta(new)
    n = sum(len(label_intervals(g["label"].to_numpy())) for _, g in ref.groupby("record", sort=False))
    gff_lines = [ln for ln in (tmp_path / "cds.gff").read_text().splitlines() if not ln.startswith("#")]
    assert len(gff_lines) == n and len((tmp_path / "cds.bed").read_text().splitlines()) == n
    if n:  # an untrained model may call every base non-coding: then there is nothing to parse back
        np.testing.assert_array_equal(frame_labels(genome, read_annotation(tmp_path / "cds.gff", genome)),
                                      ref["label"].to_numpy())
        assert len(read_annotation(tmp_path / "cds.bed", genome)) == n


@pytest.mark.slow
def test_classifier_and_masked_lm_reload_identically(tmp_path):
    gc = {f"g{i}": "".join(np.random.default_rng(i).choice(list("GCGCAT"), 120)) for i in range(20)}
    at = {f"a{i}": "".join(np.random.default_rng(50 + i).choice(list("ATATGC"), 120)) for i in range(20)}
    fg, fa = write_fasta(tmp_path / "gc.fa", gc), write_fasta(tmp_path / "at.fa", at)
    cli = fit(tmp_path / "", "dna_classify.yaml", f"--data.init_args.class_fastas={{gc: {fg}, at: {fa}}}",
              "--data.init_args.seq_len=32", "--data.init_args.batch_size=4")
    new = write_fasta(tmp_path / "new.fa", {"x": random_bases(300, 1), "y": random_bases(40, 2)})
    ref = assert_reloads_identical(tmp_path, cli, new)
    assert set(ref.columns) == {"record", "windows", "p_gc", "p_at", "predicted"}
    uri = registered(cli).model_uri
    assert predict_cli(tmp_path, "--ckpt", uri, "--input", str(new), "--output", "c.csv") == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "c.csv")["p_gc"], ref["p_gc"], rtol=1e-5)

    mlm_dir = tmp_path / "mlm"
    mlm_dir.mkdir()
    genome = write_fasta(mlm_dir / "train.fa", {"chr1": random_bases(6000)})
    cli = fit(mlm_dir, "dna_mlm.yaml", f"--data.init_args.fasta={genome}", *DNA)
    ref = assert_reloads_identical(mlm_dir, cli, new, mask_every=5)
    assert ref["bits"].notna().all()  # every base is scored while masked


@pytest.mark.slow
def test_forecaster_reloads_and_forecasts_a_held_out_slice(tmp_path):
    from tests.helpers import seasonal_frame, write_csv

    df = seasonal_frame(n=960)
    train = write_csv(tmp_path / "train.csv", df.iloc[:720])
    held = write_csv(tmp_path / "held.csv", df.iloc[720:])
    data = {"path": train, "time_col": "when", "target_cols": "[load]", "covariate_cols": "[temp]",
            "calendar": "[hour]", "timezone": "null", "lookback": 24, "horizon": 6, "patch_len": 4,
            "eval_stride": 1, "samples_per_epoch": 32, "batch_size": 8}
    cli = fit(tmp_path, "ts_forecast.yaml", *(f"--data.init_args.{k}={v}" for k, v in data.items()))
    ref = assert_reloads_identical(tmp_path, cli, held, every=48)
    assert ref["origin"].nunique() == len(range(240, 23, -48))
    uri = registered(cli).model_uri
    args = ["--ckpt", uri, "--input", str(held), "--output", "f.csv", "--every", "48"]
    assert predict_cli(tmp_path, *args) == 0
    out = pd.read_csv(tmp_path / "f.csv")
    np.testing.assert_allclose(out["load"], ref["load"], rtol=1e-5)
    inside = out["load_actual"].notna()
    assert inside.sum() == (ref["time"] <= pd.Timestamp(df["when"].iloc[-1]).isoformat()).sum()


@pytest.mark.slow
def test_a_promoter_classifier_scans_a_fasta_into_a_track_and_calls(tmp_path):
    """``make predict`` with a promoter classifier: a BED of calls and (``--track``) a bedGraph, both
    strands, written in one pass; the track is the reloaded model's one-pass read of each strand."""
    from datamodules.dna.fasta import EncodeReport, iter_records
    from datamodules.dna.tokenize import reverse_complement
    from pipelines.tasks.dna.scan_reads import whole_read

    pos = {f"p{i}": random_bases(20, i) + "TATAAT" + random_bases(14, 100 + i) for i in range(20)}
    neg = {f"n{i}": random_bases(40, 200 + i) for i in range(20)}
    fp, fn = write_fasta(tmp_path / "p.fa", pos), write_fasta(tmp_path / "n.fa", neg)
    classes = f"--data.init_args.class_fastas={{promoter: {fp}, non_promoter: {fn}}}"
    cli = fit(tmp_path, "dna_classify.yaml", classes, "--data.init_args.seq_len=40",
              "--data.init_args.batch_size=4", "--model.init_args.attention_window=8")  # chunks read alike
    genome = write_fasta(tmp_path / "g.fa", {"c1": random_bases(500, 7), "c2": random_bases(90, 8)})
    run_id = cli.trainer.logger.run_id
    args = ("--ckpt", run_id, "--input", str(genome), "--tss_index", "30", "--threshold", "-50")
    outputs = ("--output", "calls.bed", "--track", "track.bedgraph", "--chunk", "64")
    assert predict_cli(tmp_path, *args, *outputs) == 0
    with workdir_with_store(tmp_path):
        model = load_model(run_id, device="cpu")
    track, strand = {}, None
    for line in (tmp_path / "track.bedgraph").read_text().splitlines():
        if line.startswith("track type=bedGraph"):
            strand = "+" if line.count(" +") else "-"
            continue
        chrom, a, b, v = line.split("\t")
        track.update({(strand, chrom, i): float(v) for i in range(int(a), int(b))})
    for chrom, codes in iter_records(genome, EncodeReport()):
        plus = whole_read(model, codes, 40, 30)
        minus = whole_read(model, reverse_complement(codes), 40, 30)[::-1]
        for sign, want in (("+", plus), ("-", minus)):
            got = np.array([track.get((sign, chrom, i), np.nan) for i in range(len(codes))])
            np.testing.assert_allclose(got, want, atol=2e-3, equal_nan=True)  # 3 decimals in the file
    bed = [line.split("\t") for line in (tmp_path / "calls.bed").read_text().splitlines()]
    assert {b[5] for b in bed} == {"+", "-"} and all(int(b[2]) == int(b[1]) + 1 for b in bed)
    assert all(0 <= int(b[4]) <= 1000 for b in bed)
    assert predict_cli(tmp_path, *args, "--output", "calls2.bed", "--track", "t.tsv") == 2  # not a .bedgraph
    assert not (tmp_path / "calls2.bed").exists() and not (tmp_path / "t.tsv").exists()
