"""Up-front memory estimates: a run that cannot fit is refused with one line before anything is
allocated (training before the model is built, inference before a checkpoint's model is built).

The estimate is deliberately simple (float32 everywhere; B batch, T tokens, D width, F = d_ff
(default 4·D), L layers, H heads, V vocabulary):

* parameters P = L·(4·D² + 2·D·F + F + 9·D) + 2·V·D (attention, MLP, LayerNorms; embedding and head);
* training: 16·P bytes (weights, gradients, AdamW's two moments) + activations autograd keeps,
  4·B·T·(10·D + 2·F) bytes per layer, + the logits 3 × 4·B·T·V bytes, + attention: the kernels keep
  O(T) per head (fused SDPA, the Toeplitz view of a translation-invariant bias on CPU, the blocked
  paths past ``long_threshold`` = 4096 tokens, the clipped path) except three — a position-only
  dense bias (FIRE; any bias on CUDA) is built once per step: with its gradient and the scheme's
  intermediates (FIRE's MLP runs on all T² distances) 40 × 4·H·T² bytes (measured: 635 MiB at H 4,
  T 1024);
  a content-dependent bias (DeBERTa, Transformer-XL) is 2 × 4·B·H·T² per layer; explicit weights
  (a value-side term: Shaw off the clipped path, Compose) 3 × 4·B·H·T² per layer;
* inference (no gradients): 4·P bytes + one layer's working set 2 × 4·B·T·(4·D + F) bytes + the
  attention tensors of one layer (a position-only bias 10 × 4·H·T², a content bias 4·B·H·T², explicit
  weights 2 × 4·B·H·T²) + 2 × the logits.

It is compared with the memory available to this process: ``MemAvailable`` of ``/proc/meminfo``
and, in a container, the cgroup's limit minus its usage (the smaller); on a GPU, the device's free
memory. Tested against the measured peak of a small training step (within a factor of 3,
``tests/test_resources.py``). Set ``POSENC_MEMORY_CHECK=0`` to skip the check.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from datamodules.memory import checks_enabled, host_available_bytes
from posenc import PosencError, all_schemes

GB = 1e9


@dataclass(frozen=True)
class Shape:
    """What the estimate needs to know about a model and its batches."""

    batch: int
    length: int
    d_model: int
    n_layers: int
    n_heads: int
    vocab: int = 0
    d_ff: int | None = None
    attention: str = "linear"  # linear | bias | batch-bias | explicit (see the module docstring)

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model


def parameters(s: Shape) -> int:
    """Parameter count of the backbone plus a V-token embedding and head."""
    d, f = s.d_model, s.ff
    return s.n_layers * (4 * d * d + 2 * d * f + f + 9 * d) + 2 * s.vocab * d


def _square(s: Shape) -> int:
    return 4 * s.n_heads * s.length * s.length  # bytes of one (H, T, T) float32 tensor


def training_bytes(s: Shape) -> dict[str, int]:
    """Bytes of one training step, by part (see the module docstring)."""
    tokens = s.batch * s.length
    per = {"bias": 40 * _square(s), "batch-bias": 2 * s.n_layers * s.batch * _square(s),
           "explicit": 3 * s.n_layers * s.batch * _square(s)}
    return {"weights + AdamW": 16 * parameters(s),
            "activations": s.n_layers * 4 * tokens * (10 * s.d_model + 2 * s.ff),
            "attention": per.get(s.attention, 0), "logits": 3 * 4 * tokens * s.vocab}


def inference_bytes(s: Shape) -> dict[str, int]:
    """Bytes of one forward pass without gradients, by part."""
    tokens = s.batch * s.length
    per = {"bias": 10 * _square(s), "batch-bias": s.batch * _square(s), "explicit": 2 * s.batch * _square(s)}
    return {"weights": 4 * parameters(s), "activations": 2 * 4 * tokens * (4 * s.d_model + s.ff),
            "attention": per.get(s.attention, 0), "logits": 2 * 4 * tokens * s.vocab}


def available_bytes(device: str = "cpu") -> int | None:
    """Memory this process may still take: on ``cuda…`` the device's free memory; otherwise the
    smaller of ``MemAvailable`` and the cgroup (v2 or v1) limit minus usage
    (:func:`datamodules.memory.host_available_bytes`); None if unknown."""
    if device.startswith("cuda"):

        return int(torch.cuda.mem_get_info(torch.device(device))[0]) if torch.cuda.is_available() else None
    return host_available_bytes()


def check_fits(parts: dict[str, int], what: str, advice: str, device: str = "cpu") -> None:
    """Raise a one-line :class:`PosencError` when ``parts`` add up to more than is available.

    Args:
        parts: bytes by part (:func:`training_bytes`, :func:`inference_bytes`).
        what: the job, e.g. ``"training batch 64 × length 200000 at d_model 128 × 4 layers"``.
        advice: what to lower, e.g. ``"lower data.batch_size or data.seq_len"``.
        device: ``cpu`` or ``cuda[:n]`` (whose memory is compared).
    """
    if not checks_enabled():
        return
    need, have = sum(parts.values()), available_bytes(device)
    if have is None or need <= have:
        return
    biggest = max(parts, key=parts.get)
    raise PosencError(f"{what} needs ~{need / GB:.1f} GB (most of it {biggest}: "
                      f"{parts[biggest] / GB:.1f} GB); "
                      f"{have / GB:.1f} GB available: {advice} (POSENC_MEMORY_CHECK=0 skips this check)")


def attention_kind(pe_class_path: str | None, length: int, device: str = "cpu") -> str:
    """Which attention tensors the scheme's kernel keeps at ``length`` on ``device`` (see the
    module docstring; the path choice is :func:`posenc.nn.attention.choose_path`'s)."""

    name = (pe_class_path or "posenc.PositionalEncoding").rsplit(".", 1)[-1]
    meta = next((c.meta for c in all_schemes() if c.__name__ == name), None)
    if meta is None:
        return "explicit"  # a scheme from elsewhere: assume the worst
    path, cpu = meta.attention_path, not device.startswith("cuda")
    if path == "sdpa-fused" or length > 4096 or (cpu and (path == "sdpa+toeplitz" or meta.clipped_relative)):
        return "linear"
    if path == "explicit":
        return "explicit"
    return "batch-bias" if meta.content_bias else "bias"


def fit_shape(model: dict, data: dict, pe_class_path: str | None, device: str = "cpu") -> Shape | None:
    """The training :class:`Shape` from a fit config's ``model.init_args.net`` and the ``windows`` and
    ``loader`` groups of ``data.init_args`` (given here as ``model`` and ``data``, one mapping each; DNA:
    ``seq_len``/``kmer``; series: ``lookback``/``horizon``/``patch_len``); None when unknown."""
    if data.get("seq_len"):
        length, vocab = int(data["seq_len"]), 4 ** int(data.get("kmer") or 1) + 4
    elif data.get("lookback") and data.get("patch_len"):
        patch = int(data["patch_len"])
        length, vocab = -(-int(data["lookback"]) // patch) + -(-int(data.get("horizon") or 0) // patch), 0
    else:
        return None
    if not data.get("batch_size") or not model.get("d_model"):
        return None
    return Shape(batch=int(data["batch_size"]), length=length, d_model=int(model["d_model"]),
                 n_layers=int(model.get("n_layers") or 4), n_heads=int(model.get("n_heads") or 8),
                 vocab=vocab, d_ff=model.get("d_ff"), attention=attention_kind(pe_class_path, length, device))


def check_fit(model: dict, data: dict, pe_class_path: str | None, device: str = "cpu") -> None:
    """Refuse (one line) a training step that cannot fit in memory; see the module docstring."""
    s = fit_shape(model, data, pe_class_path, device)
    if s is None or min(s.batch, s.length, s.d_model, s.n_layers, s.n_heads) < 1:
        return  # the config's own checks name bad values
    what = (f"training batch {s.batch} × length {s.length} at d_model {s.d_model} × {s.n_layers} layers "
            f"({s.n_heads} heads)")
    size = "data.seq_len" if data.get("seq_len") else "data.lookback"
    check_fits(training_bytes(s), what, f"lower data.batch_size, {size} or the model size", device)


def model_shape(hparams: dict, batch: int = 1, length: int = 1, device: str = "cpu") -> Shape:
    """The :class:`Shape` of a model's hyperparameters (its ``net`` group, ``vocab_size`` and ``pe``) at
    ``batch × length``."""
    pe, net = hparams.get("pe"), hparams.get("net") or {}
    pe_path = pe.get("class_path") if isinstance(pe, dict) else None
    return Shape(batch=batch, length=length, d_model=int(net.get("d_model") or 0),
                 n_layers=int(net.get("n_layers") or 0), n_heads=int(net.get("n_heads") or 1),
                 vocab=int(hparams.get("vocab_size") or 0), d_ff=net.get("d_ff"),
                 attention=attention_kind(pe_path, length, device))


def check_checkpoint(hparams: dict, source: str) -> None:
    """Refuse (one line) to build a checkpoint's model whose weights alone do not fit in memory
    (hyperparameters that are not numbers are left to the model's own checks)."""
    try:
        s = model_shape(hparams)
    except (TypeError, ValueError):
        return
    check_fits({"weights": 4 * parameters(s)}, f"{source}: the model (d_model {s.d_model} × {s.n_layers} "
               f"layers, d_ff {s.ff})", "this checkpoint cannot be loaded on this machine")


def check_inference(hparams: dict, batch: int, length: int, device: str = "cpu") -> None:
    """Refuse (one line) a forward pass of ``batch`` windows of ``length`` tokens that cannot fit."""
    s = model_shape(hparams, batch, length, device)
    check_fits(inference_bytes(s), f"predicting batch {batch} × window {length} at d_model {s.d_model} × "
               f"{s.n_layers} layers", "lower --batch_size or --window", device)


__all__ = ["Shape", "available_bytes", "check_checkpoint", "check_fit", "check_inference", "check_fits",
           "fit_shape", "inference_bytes", "attention_kind", "model_shape", "parameters",
           "training_bytes"]
