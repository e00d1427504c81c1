"""Long inputs through a model trained on short windows: windows, stitching, and their checks.

Long sequences are cut into windows of ``window`` tokens overlapping by ``overlap`` (all windows the
same length, the last one aligned to the end) and the per-token outputs stitched: a bidirectional
model keeps each position from the window where it lies furthest from an edge (the cut is the middle
of each overlap), a causal model from the first window holding it (so it keeps ≥ ``overlap`` tokens
of left context). For a model whose receptive field fits in the margin this is exactly a direct pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc import PosencError


def window_starts(n: int, window: int, overlap: int) -> list[int]:
    """Starts of windows of ``window`` tokens every ``window - overlap`` tokens covering ``n``
    tokens; the last window ends at ``n`` (one window of ``n`` tokens when ``n <= window``)."""
    if window <= 0 or not 0 <= overlap < window:
        raise PosencError(f"window must be ≥ 1 and 0 ≤ overlap < window, got {window} and {overlap}")
    if n <= window:
        return [0]
    step = window - overlap
    starts = list(range(0, n - window, step))
    return starts + [n - window]


def keep_ranges(starts: list[int], width: int, n: int, causal: bool) -> list[tuple[int, int]]:
    """``[lo, hi)`` of the record each window contributes (they tile ``[0, n)``).

    Bidirectional: cut at the middle of each overlap; causal: a window hands over where the
    previous one ends (each kept position then has all of that window's left context).
    """
    cuts = [0]
    for a, b in zip(starts, starts[1:], strict=False):
        end_a = a + width
        cuts.append(end_a if causal else (b + end_a) // 2)
    cuts.append(n)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def iter_windows(
    tokens: np.ndarray,
    fn: Callable[[Tensor], Tensor],
    window: int,
    overlap: int,
    causal: bool,
    batch_size: int = 32,
    device: torch.device | None = None,
    progress: Callable[[int], object] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Per-token outputs of ``fn`` over a long token sequence, windowed and stitched, as they are
    finished: ``(lo, out)`` with ``out`` (hi - lo, F) float32 for tokens ``[lo, hi)``, in order and
    tiling ``[0, n)``. Memory is one batch of windows, whatever the length of the sequence.

    Args:
        tokens: (n,) token ids (any integer dtype; each batch is cast to int64 on its own).
        fn: maps a batch of windows (B, W) to per-token outputs (B, W, F).
        window: tokens per window (``0``: the whole sequence in one pass).
        overlap: tokens shared by consecutive windows.
        causal: stitching rule (see :func:`keep_ranges`).
        batch_size: windows per forward pass.
        progress: called with the number of tokens finished after each batch.
    """
    n = len(tokens)
    window = n if window == 0 else window
    starts = window_starts(n, window, min(overlap, window - 1))
    width = min(window, n)
    keep = keep_ranges(starts, width, n, causal)
    for b in range(0, len(starts), batch_size):
        chunk = starts[b : b + batch_size]
        rows = np.stack([tokens[s : s + width] for s in chunk]).astype(np.int64)  # (B, W)
        with torch.inference_mode():
            y = fn(torch.as_tensor(rows, device=device)).float().cpu().numpy()  # (B, W, F)
        lo, hi = keep[b][0], keep[b + len(chunk) - 1][1]
        out = np.empty((hi - lo, y.shape[-1]), dtype=np.float32)
        for s, (a, z), row in zip(chunk, keep[b : b + batch_size], y, strict=True):
            out[a - lo : z - lo] = row[a - s : z - s]
        if progress is not None:
            progress(hi - lo)
        yield lo, out


def run_windows(tokens: np.ndarray, fn: Callable[[Tensor], Tensor], *args: Any, **kwargs: Any) -> np.ndarray:
    """Per-token outputs (n, F) of ``fn`` over a long token sequence: :func:`iter_windows` (the same
    arguments) joined."""
    return np.concatenate([out for _, out in iter_windows(tokens, fn, *args, **kwargs)])


def check_window(model: torch.nn.Module, window: int, n: int) -> None:
    """A clear error when the encoding does not define the positions a window would need."""
    pe = model.backbone.pe
    need = n if window == 0 else min(window, n)
    if pe.max_len is not None and need > pe.max_len:
        what = "--window 0 (whole records)" if window == 0 else f"window {window}"
        raise PosencError(f"{type(pe).__name__} defines positions 0..{pe.max_len - 1} only: {what} needs "
                          f"{need} positions; use --window ≤ {pe.max_len}")
    trained = inference_meta(model).get("data", {}).get("seq_len")
    if not pe.meta.extrapolates and trained and need > trained:
        warnings.warn(f"{type(pe).__name__} does not extrapolate: positions past the training length "
                      f"{trained} (window of {need}) were never trained", UserWarning, stacklevel=3)


def inference_meta(model: torch.nn.Module) -> dict[str, Any]:
    """What the model needs besides its weights (tokenizer, class names, scalers): set from the
    datamodule during training and stored in checkpoints; ``{}`` for a bare module."""
    return dict(getattr(model, "posenc_inference", None) or {})
