"""Inference without a training run: windows and stitching, checkpoint round trips per task,
loading errors, CDS intervals back through the annotation reader, forecasts against the datamodule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines import DNALanguageModel, Forecaster, FrameSegmenter, MaskedDNAModel, SequenceClassifier
from pipelines.inference import load_model
from pipelines.inference.registry import RegisterModel
from pipelines.tasks.windows import keep_ranges, window_starts
from posenc import PosencError
from tests.helpers import task

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2}
DNA_META = {"data": {"kmer": 1, "kmer_stride": 1, "seq_len": 32}}


def random_bases(n: int, seed: int = 0) -> str:
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), size=n))


def save(model, path: Path) -> Path:
    """A checkpoint as Lightning writes one: weights, hyperparameters and the save hooks' entries."""
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    RegisterModel().on_save_checkpoint(None, model, ckpt)
    torch.save(ckpt, path)
    return path


def tiny(cls, meta=None, seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = task(cls, **{**TINY, **kw}).eval()
    model.posenc_inference = meta if meta is not None else DNA_META
    return model


# ----------------------------------------------------------------------------------------- windows
@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 400), window=st.integers(2, 64), frac=st.floats(0, 0.95), causal=st.booleans())
def test_windows_tile_the_sequence_with_margins(n, window, frac, causal):
    overlap = min(int(window * frac), window - 1)
    starts = window_starts(n, window, overlap)
    width = min(window, n)
    assert starts[0] == 0 and starts[-1] + width == n
    keep = keep_ranges(starts, width, n, causal)
    assert keep[0][0] == 0 and keep[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(keep, keep[1:], strict=False))  # a tiling, no gap or repeat
    for i, (s, (lo, hi)) in enumerate(zip(starts, keep, strict=True)):
        assert s <= lo <= hi <= s + width
        if i > 0:  # left context kept inside the window
            assert lo - s >= (overlap if causal else overlap // 2)
        if i < len(starts) - 1 and not causal:  # right context kept inside the window
            assert s + width - hi >= overlap // 2


def local_model(cls, causal: bool, n_layers: int = 0):
    """ConvPE and no attention layer: each output sees only a few neighbouring tokens."""
    pe = {"class_path": "posenc.ConvPE", "init_args": {"kernel_size": 4 if causal else 5, "causal": causal}}
    return tiny(cls, pe=pe, d_model=16, n_heads=2, n_layers=n_layers)


def test_stitched_windows_equal_a_direct_pass_when_the_receptive_field_fits_the_overlap():
    seq = random_bases(700, seed=1)
    seg = local_model(FrameSegmenter, causal=False)
    whole = seg.predict(seq, window=0)
    for window, overlap in ((64, 16), (50, 8), (128, 64)):
        stitched = seg.predict(seq, window=window, overlap=overlap, batch_size=3)
        np.testing.assert_allclose(stitched["prob"], whole["prob"], rtol=0, atol=1e-5)
        assert (stitched["label"] == whole["label"]).all()
    lm = local_model(DNALanguageModel, causal=True)
    whole = lm.predict(seq, window=0)
    stitched = lm.predict(seq, window=40, overlap=5)
    np.testing.assert_allclose(stitched["bits"], whole["bits"], rtol=0, atol=1e-5)
    assert np.isnan(stitched["bits"][0]) and not np.isnan(stitched["bits"][1:]).any()


def test_stitching_differs_from_a_direct_pass_when_attention_sees_the_whole_window():
    seq = random_bases(400, seed=2)
    seg = local_model(FrameSegmenter, causal=False, n_layers=2)
    whole, stitched = seg.predict(seq, window=0), seg.predict(seq, window=64, overlap=16)
    assert not np.allclose(stitched["prob"], whole["prob"], atol=1e-5)


def test_a_window_past_a_learned_table_is_a_clear_error():
    lm = tiny(DNALanguageModel, pe={"class_path": "posenc.Learned", "init_args": {"max_len": 64}})
    assert len(lm.predict(random_bases(200), window=32)) == 200  # windows inside the table are fine
    with pytest.raises(PosencError, match=r"defines positions 0..63.*--window ≤ 64"):
        lm.predict(random_bases(200), window=0)
    with pytest.warns(UserWarning, match="does not extrapolate: positions past the training length 32"):
        lm.predict(random_bases(200), window=64)  # defined by the table, but never trained


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_predictions_on_gpu_match_cpu():
    seq = random_bases(500, seed=8)
    for cls in (DNALanguageModel, FrameSegmenter):
        model = tiny(cls, pe={"class_path": "posenc.RoPE"})
        cpu = model.predict(seq, window=64)
        gpu = model.to("cuda").predict(seq, window=64)
        col = "bits" if cls is DNALanguageModel else "prob"
        np.testing.assert_allclose(gpu[col], cpu[col], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("cls", [DNALanguageModel, MaskedDNAModel, FrameSegmenter, SequenceClassifier])
def test_checkpoint_round_trip_predicts_identically(tmp_path, cls):
    meta = {**DNA_META, "class_names": ["neg", "pos"]}
    model = tiny(cls, meta=meta, pe={"class_path": "posenc.RoPE"})
    loaded = load_model(save(model, tmp_path / "m.ckpt"), device="cpu")
    assert type(loaded) is cls and not loaded.training and loaded.posenc_inference == meta
    records = {"a": random_bases(150, seed=3), "b": random_bases(90, seed=4) + "NNACGT"}
    before = model.predict(records, window=48, overlap=12)
    after = loaded.predict(records, window=48, overlap=12)
    pd.testing.assert_frame_equal(before, after, check_exact=True)
    if cls is SequenceClassifier:
        assert list(after.columns) == ["record", "windows", "p_neg", "p_pos", "predicted"]
        np.testing.assert_allclose(after[["p_neg", "p_pos"]].sum(axis=1), 1.0, rtol=1e-6)


def test_dna_inputs_in_every_form_give_the_same_predictions(tmp_path):
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    model = tiny(FrameSegmenter)
    seqs = {"r1": random_bases(80, 5), "r2": random_bases(60, 6)}
    fasta = tmp_path / "x.fa"
    fasta.write_text("".join(f">{k} desc\n{v}\n" for k, v in seqs.items()))
    ref = model.predict(seqs)
    for form in (fasta, str(fasta), list(seqs.items()), [SeqRecord(Seq(v), id=k) for k, v in seqs.items()],
                 pd.DataFrame({"id": list(seqs), "sequence": list(seqs.values())})):
        pd.testing.assert_frame_equal(model.predict(form), ref)
    assert set(model.predict(random_bases(40)).record) == {"seq1"}


# ----------------------------------------------------------------------------------------- loading errors
def test_loading_errors_are_one_clear_line(tmp_path):
    good = save(tiny(FrameSegmenter), tmp_path / "seg.ckpt")
    with pytest.raises(PosencError, match="nope.ckpt: checkpoint file not found"):
        load_model(tmp_path / "nope.ckpt")
    (tmp_path / "cut.ckpt").write_bytes(good.read_bytes()[:3000])
    with pytest.raises(PosencError, match="cut.ckpt: not a complete PyTorch checkpoint"):
        load_model(tmp_path / "cut.ckpt")
    with pytest.raises(PosencError, match="checkpoint is for task 'dna_segment', expected 'dna_lm'"):
        load_model(good, task="dna_lm")
    with pytest.raises(PosencError, match="neither a checkpoint file, an MLflow run id"):
        load_model("my-model")


def test_unknown_scheme_and_unsafe_objects_are_named(tmp_path):
    ckpt = torch.load(save(tiny(FrameSegmenter), tmp_path / "a.ckpt"), weights_only=True)
    ckpt["hyper_parameters"]["pe"] = {"class_path": "posenc.NoSuchScheme", "init_args": {}}
    torch.save(ckpt, tmp_path / "b.ckpt")
    with pytest.raises(PosencError, match="unknown positional encoding class 'posenc.NoSuchScheme'"):
        load_model(tmp_path / "b.ckpt")
    ckpt["hyper_parameters"]["pe"] = {"class_path": "posenc.RoPE"}
    ckpt["extra"] = Path("/x")  # not loadable with weights_only=True
    torch.save(ckpt, tmp_path / "c.ckpt")
    with pytest.raises(PosencError, match=r"weights_only.*Unsupported global.*Path"):
        load_model(tmp_path / "c.ckpt")
    del ckpt["extra"], ckpt["posenc_task"]
    torch.save(ckpt, tmp_path / "d.ckpt")
    with pytest.raises(PosencError, match="unknown task None"):
        load_model(tmp_path / "d.ckpt")


# ----------------------------------------------------------------------------------------- intervals
def test_predicted_intervals_parse_back_with_the_annotation_reader(tmp_path):
    from datamodules.dna.annotation import CDS, frame_labels, read_annotation
    from datamodules.dna.fasta import EncodeReport, Genome
    from pipelines.inference.predict import write_intervals

    rng = np.random.default_rng(7)
    n, cds, pos = 3000, [], 0
    while pos < 2800:  # non-overlapping CDSs, random strand and phase, some back to back
        start = pos + int(rng.integers(0, 40))
        end = start + int(rng.integers(5, 200))
        cds.append(CDS("chr1", start, min(end, n), int(rng.choice([1, -1])), int(rng.integers(0, 3))))
        pos = end
    genome = Genome(["chr1"], np.zeros(n, dtype=np.uint8), np.array([0]), np.array([n]), EncodeReport())
    labels = frame_labels(genome, cds)
    table = pd.DataFrame({"record": "chr1", "label": labels, "prob": np.full(n, 0.9)})
    for kind in ("gff", "bed"):
        out = tmp_path / f"p.{kind}"
        with open(out, "w") as fh:
            write_intervals(fh, kind, table, first=True)
        back = frame_labels(genome, read_annotation(out, genome))
        if kind == "gff":  # GFF carries the phase: the labels come back exactly
            np.testing.assert_array_equal(back, labels)
        else:  # BED has no phase: the coding strand per base comes back
            strand = lambda x: np.sign(x) * (1 + (x >= 4))  # 0 non-coding, 1 plus, 2 minus
            np.testing.assert_array_equal(strand(back), strand(labels))


# ----------------------------------------------------------------------------------------- forecasting
@pytest.mark.parametrize("positions", ["index", "time"])
def test_forecasts_match_the_datamodule_windows(tmp_path, positions):
    from datamodules import TimeSeriesDataModule
    from tests.helpers import dm_kwargs, seasonal_frame, write_csv

    df = seasonal_frame()
    path = write_csv(tmp_path / "load.csv", df)
    dm = TimeSeriesDataModule(**dm_kwargs(path, calendar=["hour", "dayofweek"], positions=positions))
    torch.manual_seed(0)
    model = task(Forecaster, n_targets=1, n_covariates=dm.n_covariates, horizon=6, patch_len=4, **TINY).eval()
    model.posenc_inference = model.describe_data(dm)
    ds = dm.dataset("test")
    for i in (0, len(ds) // 2, len(ds) - 1):
        item = ds[i]
        tau = int(item["start"])
        with torch.no_grad():
            want = model(item["x"][None], item["cov"][None], item["pos"][None])[0, :, 0]
        want = want.numpy() * dm.target_scale[0] + dm.target_loc[0]
        got = model.predict(df.iloc[:tau])  # the table up to the forecast origin
        np.testing.assert_allclose(got["load"], want, rtol=1e-5)
        assert list(got["time"]) == [pd.Timestamp(t).isoformat() for t in df["when"].iloc[tau : tau + 6]]
        assert got["load_actual"].isna().all()  # past the end of the table given
        rolling = model.predict(df, every=len(df) - tau)  # origins at the end and at tau
        at_tau = rolling[rolling["origin"] == pd.Timestamp(df["when"].iloc[tau - 1]).isoformat()]
        np.testing.assert_allclose(at_tau["load"], got["load"], rtol=1e-5)
        np.testing.assert_allclose(at_tau["load_actual"], df["load"].iloc[tau : tau + 6], rtol=1e-12)
    future = model.predict(df)  # past the end: timestamps continue at the median step
    assert future["time"].iloc[0] == (pd.Timestamp(df["when"].iloc[-1]) + pd.Timedelta(hours=1)).isoformat()
    assert future["load_actual"].isna().all()
    rolling = model.predict(df, every=100)
    assert rolling["origin"].nunique() == len(range(len(df), 23, -100)) and len(rolling) % 6 == 0
    with pytest.raises(PosencError, match="column 'temp' not found"):
        model.predict(df.drop(columns="temp"))
