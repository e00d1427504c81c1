"""The DNA tasks' predictors (each task names its own as ``predictor``): records in, DataFrames out.

DNA input (``data``): any of :func:`datamodules.dna.records.as_records`' inputs (a sequence string,
records, a DataFrame with ``sequence``, a FASTA/GenBank path). Positions in outputs are 1-based base
offsets of each token's first base in its record (for single-base tokens: the base itself).

* ``dna_lm`` (causal): per token the model's probability of the base that is there given the bases
  before it (``prob``, ``bits`` = −log2 prob; the first token of a record has no prediction) and for
  single-base tokens ``p_A``…``p_T``; ``per_base=False`` gives one row per record with bits/base.
* ``dna_mlm`` (masked): the same columns, each token predicted while masked — every ``mask_every``-th
  token is masked per pass (1/7 ≈ the 15% of training), ``mask_every`` passes cover all tokens.
* ``dna_segment``: per base the label (0 non-coding, 1–3 + strand frame 0–2, 4–6 − strand), its name
  and probability; :func:`datamodules.dna.annotation.label_intervals` turns labels into CDS
  intervals (GFF/BED).
* ``dna_classify``: per record the class probabilities (mean over windows for long records).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from datamodules.dna.records import as_records
from datamodules.dna.tokenize import KmerTokenizer
from pipelines.tasks.resources import check_inference
from pipelines.tasks.windows import check_window, inference_meta, iter_windows, run_windows, window_starts
from posenc import PosencError

LN2 = math.log(2.0)


def dna_settings(model: torch.nn.Module, window: int | None, overlap: int | None) -> tuple:
    """Tokenizer and window/overlap (tokens): the training tokenizer and length unless given."""
    data = inference_meta(model).get("data", {})
    tok = KmerTokenizer(int(data.get("kmer", 1)), int(data.get("kmer_stride", 1)))
    window = int(data.get("seq_len", 512)) if window is None else int(window)
    overlap = window // 2 if overlap is None else int(overlap)
    if window < 0 or overlap < 0 or (window and overlap >= window):
        raise PosencError(f"need window ≥ 0 and 0 ≤ overlap < window, got window={window}, overlap={overlap}")
    return tok, window, overlap


def _tokens(tok: KmerTokenizer, rid: str, codes: np.ndarray) -> np.ndarray:
    ids = tok.encode(codes)
    if len(ids) == 0:
        raise PosencError(f"record {rid!r}: {len(codes)} bases, shorter than one {tok.k}-mer token")
    return ids


def _positions(tok: KmerTokenizer, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) * tok.stride + 1  # 1-based first base of each token


def _token_text(tok: KmerTokenizer, ids: np.ndarray) -> list[str]:
    if tok.k == 1:
        return list(np.frombuffer(b"ACGTN--", dtype="S1")[np.minimum(ids, 6)].astype(str))
    vocab = np.array(tok.vocab())
    return list(vocab[ids])


# ----------------------------------------------------------------------------------------- LM / MLM
def lm_window_fn(model: torch.nn.Module) -> Callable[[Tensor], Tensor]:
    """Causal LM: log-probs (B, W, V) of the token at t from the tokens before t (t=0: NaN)."""
    def fn(batch: Tensor) -> Tensor:
        logp = model(batch).float().log_softmax(-1)  # (B, W, V)
        out = torch.full_like(logp, float("nan"))
        out[:, 1:] = logp[:, :-1]
        return out
    return fn


def mlm_window_fn(model: torch.nn.Module, mask_id: int, mask_every: int) -> Callable[[Tensor], Tensor]:
    """Masked LM: log-probs (B, W, V) of every token while masked, ``mask_every`` passes per batch."""
    def fn(batch: Tensor) -> Tensor:
        out = None
        for j in range(mask_every):
            x = batch.clone()
            x[:, j::mask_every] = mask_id
            logp = model(x).float().log_softmax(-1)  # (B, W, V)
            out = torch.empty_like(logp) if out is None else out
            out[:, j::mask_every] = logp[:, j::mask_every]
        return out
    return fn


def _lm_table(rid: str, tok: KmerTokenizer, ids: np.ndarray, logp: np.ndarray,
              first: int = 0) -> pd.DataFrame:
    """Rows of tokens ``first …`` of a record (``ids`` and ``logp`` (n, V) of those tokens)."""
    ids = ids.astype(np.int64)
    got = np.take_along_axis(logp, ids[:, None], axis=1)[:, 0]  # (n,)
    got = np.where(ids < tok.n_kmers, got, np.nan)  # N / UNK tokens are not scored
    cols: dict[str, Any] = {"record": rid, "pos": _positions(tok, len(ids)) + first * tok.stride,
                            "token": _token_text(tok, ids)}
    if tok.k == 1:
        cols.update({f"p_{b}": np.exp(logp[:, i]) for i, b in enumerate("ACGT")})
    cols.update({"prob": np.exp(got), "bits": -got / LN2})
    return pd.DataFrame(cols)


def _summary(rid: str, tok: KmerTokenizer, tokens: int, scored: int, bits: float) -> dict[str, Any]:
    bpb = bits / scored / tok.stride if scored else float("nan")
    return {"record": rid, "tokens": tokens, "scored": scored, "bits_per_base": bpb}


def _record_tokens(tok: KmerTokenizer, rid: str, codes: np.ndarray) -> np.ndarray:
    """Token ids of a record: for single bases the codes themselves (one byte per base; ids equal
    codes), otherwise the tokenizer's int64 ids."""
    if tok.k == 1 and len(codes):
        return codes
    return _tokens(tok, rid, codes)


def check_memory(model: torch.nn.Module, batch_size: int, window: int, n: int) -> None:
    """Refuse (one line) windows that cannot fit in memory
    (:func:`pipelines.tasks.resources.check_inference`)."""
    width = n if window == 0 else min(window, n)
    check_inference(model.hparams, batch_size if window else 1, width, str(model.device))


def _predict_lm_like(model, data, fn_for, causal: bool, *, window=None, overlap=None, batch_size=32,
                     per_base=True, progress=None, sink=None) -> pd.DataFrame | None:
    """Rows per token (or per record), returned as one DataFrame, or with ``sink`` handed over one
    batch of windows at a time (memory flat in the record's length) and ``None`` returned."""
    tok, window, overlap = dna_settings(model, window, overlap)
    fn = fn_for(tok)
    frames: list[pd.DataFrame] = []
    emit = sink if sink is not None else frames.append
    for rid, codes in as_records(data):
        ids = _record_tokens(tok, rid, codes)
        check_window(model, window, len(ids))
        check_memory(model, batch_size, window, len(ids))
        scored, bits = 0, 0.0
        for lo, logp in iter_windows(ids, fn, window, overlap, causal, batch_size, model.device, progress):
            table = _lm_table(rid, tok, ids[lo : lo + len(logp)], logp, lo)
            if per_base:
                emit(table)
            else:
                scored += int(table["bits"].notna().sum())
                bits += float(table["bits"].sum())
        if not per_base:
            emit(pd.DataFrame([_summary(rid, tok, len(ids), scored, bits)]))
    return None if sink is not None else pd.concat(frames, ignore_index=True)


def predict_lm(model, data, *, window=None, overlap=None, batch_size=32, per_base=True,
               progress=None, sink=None) -> pd.DataFrame | None:
    """Causal LM predictions (see the module docstring); ``sink``: streamed (see ``_predict_lm_like``)."""
    return _predict_lm_like(model, data, lambda tok: lm_window_fn(model), True, window=window,
                            overlap=overlap, batch_size=batch_size, per_base=per_base, progress=progress,
                            sink=sink)


def predict_mlm(model, data, *, mask_every: int = 7, window=None, overlap=None, batch_size=32, per_base=True,
                progress=None, sink=None) -> pd.DataFrame | None:
    """Masked-LM predictions, every token scored while masked (see the module docstring)."""
    if mask_every < 1:
        raise PosencError(f"mask_every must be ≥ 1, got {mask_every}")
    return _predict_lm_like(model, data, lambda tok: mlm_window_fn(model, tok.mask_id, mask_every), False,
                            window=window, overlap=overlap, batch_size=batch_size, per_base=per_base,
                            progress=progress, sink=sink)


# ----------------------------------------------------------------------------------------- segmentation
def predict_segment(model, data, *, window=None, overlap=None, batch_size=32, progress=None) -> pd.DataFrame:
    """Per-base labels with their names and probabilities (columns record, pos, base, label, name, prob)."""
    tok, window, overlap = dna_settings(model, window, overlap)
    names = list(getattr(model, "class_names", None) or range(model.num_classes))
    fn = lambda batch: model(batch).float().softmax(-1)  # (B, W, C)
    frames = []
    for rid, codes in as_records(data):
        ids = _tokens(tok, rid, codes)
        check_window(model, window, len(ids))
        check_memory(model, batch_size, window, len(ids))
        probs = run_windows(ids, fn, window, overlap, False, batch_size, model.device, progress)
        label = probs.argmax(-1)
        frames.append(pd.DataFrame({
            "record": rid, "pos": _positions(tok, len(ids)), "base": _token_text(tok, ids), "label": label,
            "name": np.asarray(names, dtype=object)[label], "prob": probs[np.arange(len(label)), label],
        }))
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------------------- classification
def predict_classify(model, data, *, window=None, overlap=None, batch_size=32, progress=None) -> pd.DataFrame:
    """Class probabilities per record (``p_<class>`` columns, ``predicted``); ``window`` 0 or None
    scores each record whole where the encoding allows, otherwise windows whose probabilities are
    averaged."""
    tok, window, overlap = dna_settings(model, 0 if window is None else window, overlap)
    names = list(inference_meta(model).get("class_names") or [str(i) for i in range(model.num_classes)])
    max_len = model.backbone.pe.max_len
    segments: list[tuple[int, np.ndarray]] = []  # (record index, token window)
    ids_by_record: list[str] = []
    for rid, codes in as_records(data):
        ids = _tokens(tok, rid, codes)
        width = len(ids) if window == 0 else min(window, len(ids))
        if max_len is not None and width > max_len:
            if window:
                check_window(model, window, len(ids))  # an explicit window the encoding cannot take
            width = max_len  # a whole record past the table: windows of the longest defined length
        step_overlap = min(overlap, width - 1) if window else width // 2
        for s in window_starts(len(ids), width, step_overlap):
            segments.append((len(ids_by_record), ids[s : s + width]))
        ids_by_record.append(rid)
    sums = np.zeros((len(ids_by_record), len(names)))
    counts = np.zeros(len(ids_by_record))
    order = sorted(range(len(segments)), key=lambda i: len(segments[i][1]))  # equal lengths batch together
    i = 0
    while i < len(order):
        n = len(segments[order[i]][1])
        group = [j for j in order[i : i + batch_size] if len(segments[j][1]) == n]
        batch = torch.as_tensor(np.stack([segments[j][1] for j in group]), device=model.device)  # (B, T)
        with torch.inference_mode():
            probs = model(batch).float().softmax(-1).cpu().numpy()  # (B, C)
        for j, p in zip(group, probs, strict=True):
            sums[segments[j][0]] += p
            counts[segments[j][0]] += 1
        if progress is not None:
            progress(n * len(group))
        i += len(group)
    probs = sums / counts[:, None]
    table = pd.DataFrame({"record": ids_by_record, "windows": counts.astype(int)})
    for c, name in enumerate(names):
        table[f"p_{name}"] = probs[:, c]
    table["predicted"] = np.asarray(names, dtype=object)[probs.argmax(1)]
    return table
