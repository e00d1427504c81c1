"""Claim 16, source 000's frequency-domain reading of rotary attention: with a rotary encoding a head's
score at relative distance Δ is Σ_p |q_p|·|k_p|·cos(ω_p·Δ + φ_p) over its rotary pairs p, so a head
whose q·k amplitude sits in one pair is a *band-selective filter* at ω_p, and the heads of a layer
form a *bank of filters at different bands*.

Measured per head on real inputs (the test windows), in float64: the share of the head's mean
rotary amplitude E|q_p|·E|k_p| (content of query and key drawn independently) in each pair p — its
band spectrum (:func:`band_spectrum`). Two numbers summarise it:

* band concentration — the share of the head's dominant band (1/P for a flat spectrum, 1 for one
  band; :func:`concentration`);
* I(head; band) — the mutual information, in bits, between the head and the band when a unit of
  amplitude is drawn from a uniformly chosen head of a layer: H(mean spectrum) − mean H(spectrum)
  (:func:`head_band_information`). 0 when every head has the same spectrum (flat or all on one
  band), log₂ H when each head owns a band of its own: selective *and* distinct.

The experiment (:class:`BandSelectiveHeads`) trains a rotary LM on the two-period testbed (two
independent periodic streams: a next-token predictor needs a vote over each period) and compares
each statistic with the same network at its initialisation (same seed: the control, paired) and,
reported beside it, with the same LM trained on randomized positions (no fixed rotary phase per token
spacing). The testbed's power is the LM's gain in bits/token over uniform tokens.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import lightning as L
import numpy as np
import torch

from pipelines.eval.evaluate import _merge
from pipelines.studies.bootstrap import Arm
from pipelines.studies.claims.base import ClaimResult, Experiment, est, fmt
from pipelines.studies.claims.context import Child
from pipelines.studies.claims.gates import measure_gate
from pipelines.studies.claims.judge import judge_stats, verdict_reason
from pipelines.studies.claims.trained import primary_verdict
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import paired
from posenc import PosencError
from posenc.diagnostics import rotary_part
from posenc.nn.attention import Attention


# ----------------------------------------------------------------------------- measurement (float64)
def pair_norms(x: np.ndarray, layout: str) -> np.ndarray:
    """|x_p| per rotary pair of vectors ``x`` (N, H, Dh) → (N, H, Dh/2), pairs as ``layout`` forms them
    (``interleaved``: (x0, x1), (x2, x3), …; ``half``: (x_i, x_{i+Dh/2}))."""
    x = np.asarray(x, dtype=np.float64)
    half = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if layout == "interleaved" else (x[..., :half], x[..., half:])
    return np.hypot(a, b)  # (N, H, Dh/2)


def band_spectrum(q: np.ndarray, k: np.ndarray, layout: str = "interleaved") -> np.ndarray:
    """Each head's share of rotary amplitude per pair: E_i|q_{i,p}|·E_j|k_{j,p}| normalised over p.

    Args:
        q, k: unrotated queries and keys (N, H, Dh) of one layer (rows: tokens).
        layout: how the rotary encoding pairs the features.

    Returns:
        (H, Dh/2) rows summing to 1 (a head with no amplitude at all gets a flat row).
    """
    amp = pair_norms(q, layout).mean(axis=0) * pair_norms(k, layout).mean(axis=0)  # (H, P)
    total = amp.sum(axis=1, keepdims=True)
    flat = np.full_like(amp, 1.0 / amp.shape[1])
    return np.divide(amp, total, out=flat, where=total > 0)


def concentration(spectrum: np.ndarray) -> np.ndarray:
    """Share of each head's dominant band (H,): 1/P flat, 1 for a single band."""
    return np.asarray(spectrum, dtype=np.float64).max(axis=1)


def _entropy_bits(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return -np.sum(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0), axis=-1)


def head_band_information(spectrum: np.ndarray) -> float:
    """I(head; band) in bits for the heads (rows) of one layer: H(mean row) − mean H(row)."""
    s = np.asarray(spectrum, dtype=np.float64)
    return float(_entropy_bits(s.mean(axis=0)) - _entropy_bits(s).mean())


# ----------------------------------------------------------------------------- reading a model
@torch.no_grad()
def layer_queries_keys(model: Any, x: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """Per attention layer, in order: unrotated queries and keys (B·T, H, Dh) as float64 arrays for
    the token windows ``x`` (B, T), and the layer's encoding."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    if not layers:
        raise PosencError(f"{type(model).__name__} has no posenc.nn.Attention layers")
    inputs: dict[int, torch.Tensor] = {}

    def keep(i: int):
        def hook(_m: Any, args: tuple, kwargs: dict) -> None:
            inputs.setdefault(i, (args[0] if args else kwargs["x"]).detach())

        return hook

    handles = [m.register_forward_pre_hook(keep(i), with_kwargs=True) for i, m in enumerate(layers)]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    out = []
    for i, att in enumerate(layers):
        h = inputs[i]  # (B, T, C)
        B, T, C = h.shape
        qkv = att.qkv(h).view(B, T, 3, att.n_heads, C // att.n_heads)  # (B, T, 3, H, Dh)
        q, k = (qkv[:, :, j].reshape(B * T, att.n_heads, -1).double().numpy() for j in (0, 1))  # (B·T, H, Dh)
        out.append((q, k, att.pe))
    return out


def model_bands(model: Any, x: torch.Tensor) -> dict[str, Any]:
    """Band spectra of every layer of ``model`` on ``x`` (B, T) and their summaries: ``spectra``
    (layers × (H, P)), ``omegas`` (P,) rad/position, ``concentration`` (mean over all heads),
    ``information`` (I(head; band) averaged over layers)."""
    spectra, omegas = [], None
    for q, k, pe in layer_queries_keys(model, x):
        rope = rotary_part(pe)
        if rope is None:
            raise PosencError(f"band spectra need a rotary encoding; this model's is {type(pe).__name__}")
        spectra.append(band_spectrum(q, k, rope.layout))
        omegas = rope.scaled_frequencies().double().numpy()
    return {
        "spectra": spectra,
        "omegas": omegas,
        "concentration": float(np.mean([concentration(s).mean() for s in spectra])),
        "information": float(np.mean([head_band_information(s) for s in spectra])),
    }


def data_band_share(spectra: list[np.ndarray], omegas: np.ndarray, periods: list[int]) -> float:
    """Mean over heads of the amplitude share in the pairs whose frequency is 2π/p for a period p of
    the data (NaN if no pair has one)."""
    on = np.zeros(len(omegas), dtype=bool)
    for p in periods:
        on |= np.isclose(omegas, 2 * math.pi / p, rtol=1e-9)
    if not on.any():
        return math.nan
    return float(np.mean([s[:, on].sum(axis=1).mean() for s in spectra]))


class KeepInitial(L.Callback):
    """Keeps a copy of the module's weights as they are when fitting starts, as
    ``module.initial_state``: the same network before training (the claim's control)."""

    def on_fit_start(self, trainer: L.Trainer, module: Any) -> None:
        module.initial_state = copy.deepcopy(module.state_dict())


def initial_model(module: Any) -> Any:
    """A copy of ``module`` with the weights :class:`KeepInitial` kept (eval mode)."""
    state = getattr(module, "initial_state", None)
    if state is None:
        raise PosencError(f"the task config must add the callback {KeepInitial.__module__}.KeepInitial")
    init = copy.deepcopy(module)
    init.load_state_dict(state)
    return init.eval()


# ----------------------------------------------------------------------------- the experiment
#: the per-seed statistics, in Holm family order; the first is the primary's (unlabelled arms)
STATS = {
    "information": "I(head; band), bits",
    "concentration": "band concentration",
    "data_share": "share on the data's periods",
}


def arm_label(arm: str, stat: str) -> str:
    """The comparison label of ``arm`` for ``stat``: the arm itself for the primary statistic."""
    return arm if stat == next(iter(STATS)) else f"{arm} ({STATS[stat]})"


class BandSelectiveHeads(Experiment):
    """Args:
        task: the synthetic LM config (the two-period testbed); scheme: a rotary encoding spec;
        overrides: merged over the task (must add :class:`KeepInitial`); trained, control: the
        primary's arms (``a`` the trained network, ``b`` the same network at initialisation);
        controls: further trained arms, label → overrides merged over ``overrides`` (e.g. randomized
        training positions: the same model and data without a usable position signal), compared
        with the trained arm on every statistic (reported, in the Holm family); seeds; batches: test
        batches measured.
    """

    claim = (
        "Each attention head of a rotary model acts as a band-selective filter, and the heads form a "
        "bank of filters at different frequency bands (source 000)."
    )

    def __init__(self, task: str, scheme: dict | str, overrides: dict | None = None,
                 trained: str = "trained heads", control: str = "same heads at initialisation",
                 controls: dict[str, dict] | None = None, seeds: list[int] | None = None,
                 batches: int | None = 8) -> None:
        self.task, self.scheme, self.overrides = task, scheme, overrides or {}
        self.trained, self.control, self.controls = trained, control, dict(controls or {})
        self.seeds, self.batches = seeds, batches

    @property
    def arms(self) -> list[str]:
        return [self.trained, self.control, *self.controls]

    def children(self, ctx) -> list[Child]:
        out = []
        for seed in ctx.seeds(self.seeds):
            out.append(Child(self.task, self.scheme, seed, self.trained, self.overrides))
            out += [Child(self.task, self.scheme, seed, label, _merge(self.overrides, over))
                    for label, over in self.controls.items()]
        return out

    def _measure(self, ctx, seed: int) -> dict[str, Any]:
        """Train one seed (and each control); the band statistics of every arm; bits/token."""
        t = ctx.train(self.task, self.scheme, seed, self.trained, self.overrides)
        dm, n = t.datamodule, ctx.max_batches(self.batches)
        batches = [b for i, b in enumerate(dm.test_dataloader()[0]) if n is None or i < n]
        x = torch.cat([b[:, :-1] for b in batches])  # (N, T)
        periods = list(getattr(dm, "data_periods", ()))  # the testbed's own periods (none: NaN share)
        L0 = int(dm.seq_len)
        models = {self.trained: t.module, self.control: initial_model(t.module)}
        for label, over in self.controls.items():
            over = _merge(self.overrides, over)
            models[label] = ctx.train(self.task, self.scheme, seed, label, over).module
        out = {"bits": {a: lm_bits(m, batches) for a, m in models.items() if a != self.control},
               "ref": dm.reference(L0), "L0": L0, "periods": periods}
        for arm, model in models.items():
            b = model_bands(model, x)
            b["data_share"] = data_band_share(b["spectra"], b["omegas"], periods)
            out[arm] = b
        return out

    def run(self, ctx) -> ClaimResult:
        seeds = ctx.seeds(self.seeds)
        got = {seed: self._measure(ctx, seed) for seed in seeds}
        first, L0 = got[seeds[0]], got[seeds[0]]["L0"]
        vals = {(arm, s): [got[seed][arm][s] for seed in seeds] for arm in self.arms for s in STATS}
        stats = {}
        for other in self.arms[1:]:
            for s in STATS:
                if all(math.isfinite(v) for v in vals[self.trained, s] + vals[other, s]):
                    stats[arm_label(self.trained, s), arm_label(other, s), L0] = paired(
                        Arm.from_values(vals[self.trained, s]), Arm.from_values(vals[other, s]))
        j = judge_stats(stats, ctx.primary, L0, True)
        holds, rule = primary_verdict(ctx, j)
        measured = "; ".join(
            f"{STATS[s]}: " + ", ".join(f"{arm} {fmt(est(vals[arm, s]))}" for arm in self.arms)
            for s in STATS if not math.isnan(est(vals[self.trained, s]).mean))
        out = ClaimResult(
            setup=setup_text(first, self.trained, self.arms[1:], len(seeds)), measured=measured, holds=holds,
            rule=rule, details=details(got, self.arms) + j.table("statistic", digits=3),
            metrics={f"{s}/{arm}": est(vals[arm, s]).mean for s in STATS for arm in self.arms},
            primary=j.summary(),
        )
        out.figures.append(spectra_figure(first, self.arms, ctx.out / "band_spectra.png"))
        out.why = verdict_reason(ctx, j, holds)
        gate = ctx.gate  # the claimed arm's I(head; band) over the control's (paired by seed)
        gains = {} if gate is None else {a: stats.get((a, gate.control, L0)) for a in gate.gated(ctx.primary)}
        measure_gate(out, gate, gains, j.primary_stat())
        return out


@torch.no_grad()
def lm_bits(model: Any, batches: list[torch.Tensor]) -> float:
    """Bits/token of windows (B, T + 1) at the model's own evaluation positions."""
    total = count = 0.0
    for batch in batches:
        logits = model(batch[:, :-1])  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="sum")
        total += float(loss)
        count += batch[:, 1:].numel()
    return total / count / math.log(2)


def setup_text(first: dict[str, Any], trained: str, controls: list[str], n_seeds: int) -> str:
    """The setup sentence: testbed, bands, seeds, what is compared."""
    periods = ", ".join(str(p) for p in first["periods"])
    bands = ", ".join(f"{2 * math.pi / w:.3g}" for w in first[trained]["omegas"])
    return (f"rotary causal LM on the synthetic two-period testbed (periods {periods}; L0 = {first['L0']}), "
            f"{n_seeds} seeds; per head the share of its rotary q·k amplitude in each band "
            f"(periods {bands}); {trained} vs {', '.join(controls)} (paired by seed)")


def details(got: dict[int, dict[str, Any]], arms: list[str]) -> str:
    """Per seed: bits/token of each trained arm, each statistic per arm, and the dominant band of
    every head of each trained arm."""
    rows = []
    trained = [a for a in arms if a in next(iter(got.values()))["bits"]]
    for seed, g in got.items():
        periods = 2 * math.pi / g[arms[0]]["omegas"]
        dominant = ["; ".join(" ".join(f"{periods[i]:.3g}" for i in s.argmax(axis=1))
                              for s in g[a]["spectra"]) for a in trained]
        rows.append([seed, *(f"{g['bits'][a]:.3f}" for a in trained),
                     *(" / ".join(f"{g[a][s]:.3f}" for a in arms) for s in STATS), *dominant])
    ref = next(iter(got.values()))["ref"]
    head = ["seed", *(f"bits/token, {a}" for a in trained),
            *(f"{v} ({' / '.join(arms)})" for v in STATS.values()),
            *(f"dominant band per head, {a} (period; layers split by ;)" for a in trained)]
    return (f"Bits/token on the test windows (trivial {ref['trivial']:.3f}, Bayes-optimal "
            f"{ref['optimal']:.3f}; each trained arm at its own evaluation positions):\n\n"
            + md_table(head, rows))


def spectra_figure(g: dict[str, Any], arms: list[str], path) -> str:
    """Each head's band spectrum (share per band) of one seed, one row per arm, one panel per layer."""
    import matplotlib  # optional: matplotlib, figures only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: matplotlib, figures only

    layers = len(g[arms[0]]["spectra"])
    fig, axes = plt.subplots(len(arms), layers, figsize=(3.4 * layers, 2.4 * len(arms)), squeeze=False)
    labels = [f"{2 * math.pi / w:.3g}" for w in g[arms[0]]["omegas"]]
    for row, arm in enumerate(arms):
        for layer, spec in enumerate(g[arm]["spectra"]):
            ax = axes[row][layer]
            image = ax.imshow(spec, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            fig.colorbar(image, ax=ax, label="share of amplitude")
            ax.set(xticks=range(len(labels)), xticklabels=labels, yticks=range(spec.shape[0]),
                   title=f"{arm}, layer {layer + 1}", xlabel="band (period)", ylabel="head")
            ax.title.set_fontsize(8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return str(path)
