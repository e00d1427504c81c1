"""Per-base reads of a long window by a classifier trained on short crops (single-base tokens).

Every read gives base ``i`` of a window the score of "a promoter whose TSS is here" (NaN where it gives
none), so reads compare base for base:

* :func:`whole_read` — the model reads the window in **one pass** (``token_logits``: the two-class logit
  of every token) and a crop's logit is the pooling of its tokens' logits (``pool_weights``: uniform, or
  the model's learned prior over a training crop's positions), so pooling the window's token logits with
  those weights, slid as a convolution, gives every training-length crop's logit from that one pass; it
  is placed at the crop's TSS index. The raw token logits (``pooled=False``) are a read too: they peak
  where the evidence sits, at an offset from the TSS chosen on validation.
* :func:`sliding_read` — the honest baseline: the same model's classifier on every training-length
  window (81x the compute), its two-class logit placed at the window's TSS index.
* :func:`conv_read` — a fixed-window scorer (the position weight matrix and the one-hot logistic
  regression of :mod:`pipelines.tasks.dna.classify_baselines`) slid the same way, as a convolution.

Only bases whose whole training-length crop lies in the window are scored (``evaluable``), by every read:
the reads are compared on the same bases. A read's calls are its peaks (:func:`peaks`: local maxima).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pipelines.tasks.dna.classify_baselines import one_hot
from posenc import PosencError

NMS_RADIUS = 10  # bases: one call per ±10 stretch (E. coli σ70 TSSs of one promoter cluster lie closer)
POSITIVE = 1  # the class scored: token_logits is class 1 minus class 0 (class names sorted: promoter last)


def evaluable(n: int, width: int, tss_index: int) -> slice:
    """The bases of an ``n``-base window whose ``width``-base crop (TSS at ``tss_index``) lies inside it."""
    return slice(tss_index, n - width + tss_index + 1)


def _place(values: np.ndarray, n: int, width: int, tss_index: int) -> np.ndarray:
    """Scores of the ``n - width + 1`` crops (by start) as a per-base read (n,), NaN where none."""
    out = np.full(n, np.nan)
    out[evaluable(n, width, tss_index)] = values
    return out


def _tokens(codes: np.ndarray, device: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(codes, dtype=np.int64), device=device)  # single bases: ids = codes


def check_model(model: Any) -> None:
    """Refuse a model whose tokens are not single bases or that gives no per-token logit."""
    data = (getattr(model, "posenc_inference", {}) or {}).get("data", {})
    if int(data.get("kmer", 1)) != 1:
        raise PosencError(f"scanning reads single-base tokens; this model reads {data.get('kmer')}-mers")
    if not hasattr(model, "token_logits"):
        raise PosencError(f"{type(model).__name__} has no token_logits: it cannot read a window in one pass")


def crop_weights(model: Any, width: int) -> np.ndarray:
    """The pooling weights (width,) of a full training-length crop: the model's ``pool_weights`` where
    it has them, else uniform (a mean-pooled classifier)."""
    if not hasattr(model, "pool_weights"):
        return np.full(width, 1.0 / width)
    tokens = torch.zeros(1, width, dtype=torch.long, device=model.device)  # any bases: no padding
    with torch.inference_mode():
        pos = model.positions(tokens) if hasattr(model, "positions") else torch.arange(width,
                                                                                          device=model.device)
        return model.pool_weights(tokens, pos)[0].double().cpu().numpy()  # (width,)


def token_read(model: Any, codes: np.ndarray) -> np.ndarray:
    """The model's per-token logit (n,) of a window of base codes, in one pass at positions 0..n-1."""
    tokens = _tokens(codes, model.device)[None]  # (1, n)
    with torch.inference_mode():
        z = model.token_logits(tokens, torch.arange(tokens.shape[1], device=model.device))  # (1, n)
    return z[0].double().cpu().numpy()


def pool_read(logits: np.ndarray, weights: np.ndarray, tss_index: int) -> np.ndarray:
    """Every crop's pooled logit (the weighted sum of its tokens' logits) placed at its TSS index (n,)."""
    width = len(weights)
    if len(logits) < width:
        return np.full(len(logits), np.nan)
    z = torch.as_tensor(logits)[None, None]  # (1, 1, n)
    pooled = F.conv1d(z, torch.as_tensor(weights)[None, None])[0, 0].numpy()  # (n - width + 1,)
    return _place(pooled, len(logits), width, tss_index)


def whole_read(model: Any, codes: np.ndarray, width: int, tss_index: int, pooled: bool = True,
               weights: np.ndarray | None = None) -> np.ndarray:
    """The one-pass read of a window (see the module docstring); ``pooled=False``: the raw token logits
    on the evaluable bases."""
    logits = token_read(model, codes)
    if pooled:
        return pool_read(logits, crop_weights(model, width) if weights is None else weights, tss_index)
    out = np.full(len(codes), np.nan)
    keep = evaluable(len(codes), width, tss_index)
    out[keep] = logits[keep]
    return out


def sliding_read(model: Any, codes: np.ndarray, width: int, tss_index: int,
                 batch_size: int = 256) -> np.ndarray:
    """The classifier's two-class logit of every ``width``-base window, placed at its TSS index (n,)."""
    n = len(codes)
    if n < width:
        return np.full(n, np.nan)
    tokens = _tokens(codes, model.device)
    out = []
    with torch.inference_mode():
        for lo in range(0, n - width + 1, batch_size):
            starts = torch.arange(lo, min(lo + batch_size, n - width + 1), device=model.device)
            batch = tokens[starts[:, None] + torch.arange(width, device=model.device)]  # (B, width)
            logits = model(batch).double()  # (B, C)
            rest = torch.cat([logits[:, :POSITIVE], logits[:, POSITIVE + 1 :]], 1)
            out.append((logits[:, POSITIVE] - rest.logsumexp(1)).cpu().numpy())
    return _place(np.concatenate(out), n, width, tss_index)


def conv_read(scorer: Any, codes: np.ndarray, tss_index: int) -> np.ndarray:
    """A fixed-window scorer's two-class log-odds of every window (its ``logits``: (1, C, W) over one-hot
    input) placed at each window's TSS index (n,)."""
    x = one_hot(np.asarray(codes)[None])  # (1, 4, n)
    width = _width(scorer)
    if x.shape[2] < width:
        return np.full(x.shape[2], np.nan)
    with torch.no_grad():
        logp = scorer.logits(x).double().log_softmax(1)[0]  # (C, W)
    rest = torch.cat([logp[:POSITIVE], logp[POSITIVE + 1 :]]).logsumexp(0)
    return _place((logp[POSITIVE] - rest).numpy(), x.shape[2], width, tss_index)


def _width(scorer: Any) -> int:
    for name in ("weight", "log_probs"):  # OneHotLogistic, PositionWeightMatrix: (C, 4, width)
        if hasattr(scorer, name):
            return int(getattr(scorer, name).shape[-1])
    raise PosencError(f"{type(scorer).__name__}: not a fixed-window scorer")


def peaks(score: np.ndarray, radius: int = NMS_RADIUS) -> tuple[np.ndarray, np.ndarray]:
    """Non-maximum suppression of a per-base ``score`` (n,): (indices, scores) of the peaks, best first
    (then leftmost). A peak is a base whose score is the highest within ``radius`` bases either side,
    and above every score in the ``radius`` bases to its left (of equal scores the leftmost wins); NaN
    bases are never peaks and never suppress. A local rule, so a long record is called chunk by chunk
    (:func:`local_peaks` with ``radius`` bases of context either side) exactly as in one piece."""
    s = np.asarray(score, dtype=np.float64)
    idx = local_peaks(s, radius)
    order = np.lexsort((idx, -s[idx]))
    return idx[order], s[idx[order]]


def local_peaks(s: np.ndarray, radius: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Indices ``lo <= i < hi`` (in order) of the peaks of :func:`peaks`, read from ``s`` (n,) alone:
    bases past ``s``'s ends count as NaN."""
    hi = len(s) if hi is None else hi
    filled = np.where(np.isnan(s), -np.inf, s)
    padded = np.concatenate([np.full(radius, -np.inf), filled, np.full(radius, -np.inf)])
    win = np.lib.stride_tricks.sliding_window_view(padded, 2 * radius + 1)[lo:hi]  # (hi - lo, 2r + 1)
    mid = filled[lo:hi]
    ok = ~np.isnan(s[lo:hi]) & (mid >= win.max(1))
    if radius:
        ok &= mid > win[:, :radius].max(1)
    return np.flatnonzero(ok) + lo
