"""Length extrapolation: train short, test long — evaluate one trained model at many lengths.

A trained model is scored on the held-out split at lengths ``factor × training length`` (DNA:
context tokens; time series: lookback steps), every length over the same test data. Per length it
records the task metric and a per-position curve (DNA LM: bits of the next base at each position of
the window; forecaster: squared error at each forecast step). Lengths a scheme does not define
(:class:`~posenc.PositionOutOfRange`, e.g. learned PE past ``max_len``) are recorded as undefined.
With ``split="val"`` the same sweep scores validation windows instead (every length over the same
validation bases, baselines on them too; :mod:`pipelines.eval.splits`), so that a variant or
scheme can be chosen on validation and read once on test.

For RoPE-family schemes (any :class:`~posenc.RoPE` subclass) the same weights are also scored with
the catalogue's inference-time scalings, one curve each: position interpolation (``pi``, Chen et
al., 2023), NTK-aware (``ntk``, bloc97, 2023), dynamic NTK (``dynamic_ntk``) and YaRN (``yarn``,
Peng et al., 2023), each with scale s = (positions at length L) / (positions at training length).

With ``window``, every scheme is also scored with a local attention window of the training length
(variant ``window``: query i attends only its L₀ nearest keys, LM-Infinite's local branch — Han et
al., 2024; :mod:`posenc.nn.attention`), so no relative distance exceeds what training saw; each token
still reads at most about n_layers × L₀ tokens back, through the layers.

With ``log_scale``, every scheme is also scored with the log-length attention temperature of the
training length (variant ``logscale``: the logits of a query attending n keys times max(1, log n / log
L₀); :mod:`posenc.nn.temperature`). Its floor of 1 leaves every window of at most L₀ tokens exactly as
trained, so a model trained with the temperature at L₀ has the weights of one trained without it: this
variant *is* that training-side technique, read on the same weights (skipped when the model already
has it).

Per length it also records *retained gain* against the task's trivial baseline b
(``TaskAdapter.trivial_baseline``: order-0 Markov for the DNA LMs, seasonal naive for forecasting,
the majority class for segmentation, AUROC 0.5 for classification), scored on the same test data:
``(b − m(L)) / (b − m(L₀))`` (sign flipped for higher-is-better metrics), 1 = the whole gain over b
kept at length L, 0 = none of it (see :mod:`pipelines.eval.statistics`).

The summary ("extrapolation ratio") is the largest tested length L up to which retained gain stays
≥ ``retain`` (0.9) at every tested length — over seeds its lower 95 % bound (``make compare``); for
one run, its value. An undefined length ends the run. Retained gain is a ratio over the gain at L₀,
so it is guarded as in :mod:`pipelines.studies.verdicts`: for one run (no interval) it is undefined —
at every length, with no ratio, and the reason in the run's ``no_ratio`` tag and table — unless the
gain at L₀ exceeds 0 and the metric's minimum effect (:func:`~pipelines.eval.statistics.point_guard`).
The ratio is reported as L and as L / train length. A relative rule (every length within
``tolerance`` of the metric at the training length, in the bad direction only) is an option
(``tolerance_ratio``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from datamodules.progress import progress
from pipelines.eval.block_sums import block_sums
from pipelines.eval.lengths import extrapolation_ratio, resolve_lengths
from pipelines.eval.splits import SPLIT_WORDS, check_split, split_loaders, with_lengths
from pipelines.eval.statistics import point_guard, retained_gain, retained_ratio
from pipelines.tasks.base import TaskAdapter
from posenc import PosencError, PositionalEncoding, PositionOutOfRange, RoPE, build_encoding
from posenc.rope_scaling import SCALINGS

TRAINED = "trained"  # the scheme exactly as trained
#: inference-time RoPE variants → the scaling type (:data:`posenc.rope_scaling.SCALINGS`) they use
ROPE_VARIANTS: dict[str, str] = {"pi": "linear", "ntk": "ntk", "dynamic_ntk": "dynamic_ntk", "yarn": "yarn"}
WINDOW = "window"  # the same weights with a local attention window of the training length
LOG_SCALE = "logscale"  # the same weights with the log-length attention temperature of L0


def adapter_for(module: Any) -> TaskAdapter:
    """The task's extrapolation adapter (``TaskModule.adapter``), or a clear error if it has none."""
    adapter = getattr(type(module), "adapter", None)
    if adapter is None:
        raise PosencError(f"length extrapolation is not defined for {type(module).__name__} "
                          "(its task declares no adapter)")
    return adapter


# ----------------------------------------------------------------------------- results
@dataclass
class LengthResult:
    """One (variant, length) cell: the metric, its per-position curve, and whether it was defined."""

    variant: str
    length: int
    metric: float | None = None
    curve: np.ndarray | None = None  # per-position loss (position_label), NaN where nothing scored
    status: str = "ok"  # "ok", "undefined" (scheme has no such positions) or "oom"
    #: (K, 2) float64 per block of the test region: (metric numerator summed, count), so that
    #: metric = blocks[:, 0].sum() / blocks[:, 1].sum(); None when the task does not score blocks
    blocks: np.ndarray | None = None


@dataclass
class Extrapolation:
    """All results of one sweep, with what is needed to summarise and draw them."""

    task: str
    metric: str
    higher_is_better: bool
    train_length: int
    length_unit: str
    position_label: str
    scheme: str
    cells: list[LengthResult] = field(default_factory=list)
    tolerance: float | None = None  # relative-tolerance ratio as well (None: not reported)
    retain: float = 0.9  # retained gain the extrapolation ratio asks for
    trivial: float | None = None  # the trivial baseline's metric on the same test data
    trivial_name: str = ""
    baselines: dict[str, float] = field(default_factory=dict)  # other reference values (no model)
    trivial_blocks: np.ndarray | None = None  # the trivial baseline's (K, 2) on the same blocks
    split: str = "test"  # whose windows were scored: "test", or "val" (pipelines.eval.splits)

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(c.variant for c in self.cells))

    @property
    def lengths(self) -> list[int]:
        return sorted({c.length for c in self.cells})

    def by_length(self, variant: str = TRAINED) -> dict[int, float | None]:
        return {c.length: c.metric for c in self.cells if c.variant == variant}

    def undefined(self, variant: str = TRAINED) -> list[int]:
        return [c.length for c in self.cells if c.variant == variant and c.status != "ok"]

    def retained(self, variant: str = TRAINED) -> dict[int, float | None]:
        """Retained gain per length (``None`` where the length is undefined, and at every length
        when :meth:`verdict` gives a reason: no trivial baseline, or a gain at the training length
        that does not clear the guard of :func:`pipelines.eval.statistics.point_guard`)."""
        values = self.by_length(variant)
        at_train = values.get(self.train_length)
        out: dict[int, float | None] = dict.fromkeys(values)
        if self.verdict(variant):
            return out
        for length, value in values.items():
            if value is not None:
                gain = retained_gain(value, at_train, self.trivial, self.higher_is_better)
                out[length] = gain if math.isfinite(gain) else None
        return out

    def gain_at_train(self, variant: str = TRAINED) -> float:
        """Gain over the trivial baseline at the training length (positive = better; NaN if undefined)."""
        at_train = self.by_length(variant).get(self.train_length)
        if self.trivial is None or at_train is None:
            return math.nan
        return (at_train - self.trivial) * (1.0 if self.higher_is_better else -1.0)

    def verdict(self, variant: str = TRAINED) -> str:
        """Why retained gain (and so the ratio) is undefined for this run (``""`` when it is defined):
        no trivial baseline, the training length undefined, or a gain at the training length that
        is not above 0 and the metric's minimum effect (the single-run form of the guard)."""
        at_train = self.by_length(variant).get(self.train_length)
        if self.trivial is None:
            return "the task defines no trivial baseline"
        if at_train is None:
            return f"undefined at the training length {self.train_length}"
        gain = self.gain_at_train(variant)
        if not gain > 0:
            return (f"does not beat the trivial baseline ({self.trivial_name} {self.trivial:.4g}) at the "
                    f"training length ({self.metric} {at_train:.4g})")
        why = point_guard(gain, self.metric, self.trivial)
        return f"retained gain undefined against {self.trivial_name} {self.trivial:.4g}: {why}" if why else ""

    def summary(self, variant: str = TRAINED) -> dict[str, float]:
        """``ratio``, ``max_length`` (retained-gain extrapolation ratio as a factor and as a length;
        absent when :meth:`verdict` says why), ``beats_trivial`` (1/0: the gain at L₀ clears the guard),
        ``tolerance_ratio``/``tolerance_max_length`` when a tolerance is set, the metric and the
        retained gain at the training length and at the longest tested length (omitted where undefined)."""
        values = self.by_length(variant)
        out: dict[str, float] = {}
        if self.trivial is not None and values.get(self.train_length) is not None:
            out["beats_trivial"] = 0.0  # 1 only when the gain at L₀ clears the guard (verdict "")
        if not self.verdict(variant):
            curves = {n: [math.nan if v is None else v] for n, v in values.items()}
            best, _ = retained_ratio(curves, self.train_length, self.trivial, self.higher_is_better,
                                     self.retain)
            out["beats_trivial"] = float(best is not None)
            if best is not None:
                out.update(ratio=best / self.train_length, max_length=float(best))
        if self.tolerance is not None:
            max_len, ratio = extrapolation_ratio(values, self.train_length, self.higher_is_better,
                                                 self.tolerance)
            if ratio is not None:
                out.update(tolerance_ratio=ratio, tolerance_max_length=float(max_len))
        gains = self.retained(variant)
        for key, length in (("at_train", self.train_length), ("at_longest", max(values, default=0))):
            if gains.get(length) is not None:
                out[f"retained_gain_{key}"] = float(gains[length])
            if values.get(length) is not None:
                out[f"{self.metric}_{key}"] = float(values[length])
        return out


# ----------------------------------------------------------------------------- the sweep
def rope_variant_specs(pe: PositionalEncoding, scale: float, train_positions: int) -> dict[str, dict]:
    """``{variant: encoding spec}`` of the inference-time scalings of a RoPE-family scheme (else {}):
    its scaling replaced, its partial rotation kept."""
    if not isinstance(pe, RoPE):
        return {}
    spec = pe.spec()
    out = {}
    for name, kind in ROPE_VARIANTS.items():
        factor = 1.0 if kind == "dynamic_ntk" else max(1.0, scale)  # dynamic NTK scales itself
        scaling = {"type": kind, "factor": factor, "partial_rotary_factor": pe.scaling.partial_rotary_factor}
        if "train_len" in SCALINGS[kind].reads:
            scaling["train_len"] = train_positions
        out[name] = {"class_path": spec["class_path"], "init_args": {**spec["init_args"], "scaling": scaling}}
    return out


@contextmanager
def backbone_set(module: Any, name: str, value: Any) -> Iterator[None]:
    """Temporarily set ``module.backbone.<name>`` (e.g. its encoding ``pe`` or attention ``window``)."""
    old = getattr(module.backbone, name)
    setattr(module.backbone, name, value)
    try:
        yield
    finally:
        setattr(module.backbone, name, old)


@contextmanager
def swapped_encoding(module: Any, spec: dict | None) -> Iterator[None]:
    """Temporarily give ``module``'s backbone the encoding ``spec`` (same weights); ``None``: as is."""
    if spec is None:
        yield
        return
    old = module.backbone.pe
    new = build_encoding(spec, old.d_model, old.n_heads).to(module.device)
    new.load_state_dict(old.state_dict())
    with backbone_set(module, "pe", new):
        yield


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def score_loader(
    module: Any, adapter: TaskAdapter, variant: str, length: int, loader: Any, max_batches: int | None = None
) -> LengthResult:
    """Score one loader (and its blocks, :func:`block_sums`); an undefined position or running out
    of memory is recorded, not raised."""
    parts: list[tuple[Any, Any]] = []
    curve_sum = curve_n = None
    blocks = block_sums(adapter, loader)
    try:
        for i, batch in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            if blocks is not None:
                ws, wc, ps, pc = adapter.score_windows(module, to_device(batch, module.device))
                blocks.add(ws, wc)
                s, c = float(ws.sum()), float(wc.sum())
            else:
                s, c, ps, pc = adapter.score(module, to_device(batch, module.device))
            parts.append((s, c))
            curve_sum = ps if curve_sum is None else curve_sum + ps
            curve_n = pc if curve_n is None else curve_n + pc
    except PositionOutOfRange:
        return LengthResult(variant, length, status="undefined")
    except torch.OutOfMemoryError:
        return LengthResult(variant, length, status="oom")
    try:
        metric = adapter.combine(parts) if parts else math.nan
    except ZeroDivisionError:  # nothing scored
        metric = math.nan
    if not math.isfinite(metric):
        return LengthResult(variant, length, status="empty")
    curve = adapter.finish_curve(curve_sum, curve_n)
    return LengthResult(variant, length, metric, curve if np.isfinite(curve).any() else None,
                        blocks=None if blocks is None else blocks.table())


def score_length(module: Any, adapter: TaskAdapter, length: int, loader: Any, train: int,
                 variants: Sequence[str] | None, window: bool, max_batches: int | None,
                 log_scale: bool = False) -> list[LengthResult]:
    """The cells of one length: the scheme as trained, its RoPE variants in ``variants`` (``None``:
    all) and, with ``window`` / ``log_scale``, the local window / the log-length temperature of the
    training length (unless the model already has it)."""
    scale = adapter.n_positions(module, length) / adapter.n_positions(module, train)
    pe = getattr(module, "pe", None)  # None: a model without an encoding (DLinear)
    specs = {TRAINED: None, **rope_variant_specs(pe, scale, adapter.n_positions(module, train))}
    cells = []
    for name, spec in specs.items():
        if name != TRAINED and variants is not None and name not in variants:
            continue
        with swapped_encoding(module, spec):
            cells.append(score_loader(module, adapter, name, length, loader, max_batches))
    backbone = getattr(module, "backbone", None)
    if window and backbone is not None and backbone.window is None:
        with backbone_set(module, "window", adapter.n_positions(module, train)):
            cells.append(score_loader(module, adapter, WINDOW, length, loader, max_batches))
    if log_scale and backbone is not None and backbone.log_scale_len is None:
        with backbone_set(module, "log_scale_len", adapter.n_positions(module, train)):
            cells.append(score_loader(module, adapter, LOG_SCALE, length, loader, max_batches))
    return cells


@torch.inference_mode()
def evaluate(
    module: Any,
    dm: Any,
    factors: Sequence[float] | None = None,
    lengths: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
    tolerance: float | None = None,
    max_batches: int | None = None,
    retain: float = 0.9,
    baselines: bool = False,
    window: bool = False,
    split: str = "test",
    log_scale: bool = False,
) -> Extrapolation:
    """Score ``module`` on whole windows of ``dm``'s ``split`` (``"test"``, or ``"val"``: the
    validation windows, :mod:`pipelines.eval.splits`) at every length, as trained and (RoPE family)
    with every inference-time variant in ``variants`` (default: all of :data:`ROPE_VARIANTS`), and
    the task's trivial baseline on the same bases of that split; with ``baselines``, also its
    reference baselines (``TaskAdapter.baselines``: e.g. the best interpolated Markov chain, ridge —
    these can take minutes; the chain's order is chosen on the validation region, so with
    ``split="val"`` that choice has seen the bases it is scored on); with ``window``, also with a
    local attention window of the training length (variant :data:`WINDOW`; skipped when the model
    already has a window); with ``log_scale``, also with the log-length attention temperature of the
    training length (variant :data:`LOG_SCALE`; skipped when the model has one). A task that cannot
    score ``split`` is a one-line :class:`PosencError`."""
    adapter = adapter_for(module)
    check_split(module.task_name, adapter, dm, split)
    train = adapter.train_length(dm)
    todo = resolve_lengths(train, factors, lengths)
    unknown = set(variants or ()) - set(ROPE_VARIANTS)
    if unknown:
        raise PosencError(f"unknown RoPE variant(s) {sorted(unknown)}; choose from {sorted(ROPE_VARIANTS)}")
    result = Extrapolation(module.task_name, adapter.metric, adapter.higher_is_better, train,
                           adapter.length_unit, adapter.position_label,
                           type(getattr(module, "pe", None)).__name__,
                           tolerance=tolerance, retain=retain, trivial_name=adapter.trivial_name, split=split)
    dm = with_lengths(dm, adapter, todo)
    loaders = split_loaders(dm, adapter, todo, split)  # before the baselines: a too short split fails here
    result.trivial = adapter.trivial_baseline(dm, split)
    result.trivial_blocks = adapter.trivial_blocks(dm, split)
    result.baselines = adapter.baselines(dm, split) if baselines else {}
    was_training = module.training
    module.eval()
    try:
        for n, loader in progress(loaders, f"scoring lengths ({SPLIT_WORDS[split]})", unit="length"):
            result.cells += score_length(module, adapter, n, loader, train, variants, window, max_batches,
                                         log_scale)
    finally:
        module.train(was_training)
    return result
