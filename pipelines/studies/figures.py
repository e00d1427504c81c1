"""The README's figures, regenerated from the runs in this MLflow store: ``make figures``
(= ``python -m pipelines.studies.figures --out docs/figures``).

=================================  ==============================================================
file                               what, and where it comes from
=================================  ==============================================================
``dna_lm_extrapolation.png``       bits/base against test length (1–16× the training context) of
                                   the newest finished ``DNALanguageModel-PeriodicRoPE`` run (``make
                                   train``): as trained and with RoPE's inference-time variants,
                                   scored as ``make evaluate`` does, beside the run's Markov
                                   baselines
``dna_lm_whole_windows.png``       that run's whole-window bits/base at every test length (1–64×
                                   with ``configs/dna_lm.yaml``) beside the Markov chain on the same
                                   windows, from its logged metrics (no re-scoring)
``dna_lm_attention_distance.png``  where that model's attention mass falls, at the training length
                                   and at 8×, on windows of the held-out test region
``ts_forecast_extrapolation.png``  test MSE against lookback (1–8× the training lookback) of the
                                   newest ``Forecaster-RoPE`` run (``make train
                                   CONFIG=configs/ts_forecast.yaml``) beside its baselines
``ts_forecast_examples.png``       that run's ``forecast.png``: test forecasts against the truth
``periodic_rope_aliasing.png``     ``python -m pipelines.studies.diagnose configs/posenc/periodic_rope.yaml``
``periodic_rope_bands.png``        (aliasing distance and the rotary band periods; no training)
=================================  ==============================================================

A figure whose run is missing is skipped with a note saying which command makes the run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipelines.console import add_console_args, configure, print_error
from pipelines.eval.evaluate import build_from_checkpoint, load_config
from pipelines.eval.evaluate import run as evaluate
from pipelines.inference.loading import read_checkpoint
from pipelines.inference.resolve import resolve
from pipelines.studies.diagnose import load_scheme
from pipelines.tracking.store import tracking_uri
from pipelines.tracking.whole_window import length_figure, read_lengths, run_curves
from posenc import PosencError, diagnostic_plots
from posenc.diagnostic_plots import attention_distance_figure

SIZE, DPI, MAX_WIDTH = (6.4, 3.6), 100, 800  # our figures 640×360 px; copied ones scaled to ≤ 800 px
ROOT = Path(__file__).resolve().parents[2]
DNA_RUN, FORECAST_RUN, EXPERIMENT = "DNALanguageModel-PeriodicRoPE", "Forecaster-RoPE", "posenc"


def newest_run(client: Any, name: str, experiment: str = EXPERIMENT) -> Any | None:
    """The newest FINISHED run called ``name`` in ``experiment`` (``None`` if there is none)."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{name}' and "
                              "attributes.status = 'FINISHED'", order_by=["attributes.start_time DESC"],
                              max_results=1)
    return runs[0] if runs else None


def baselines(run: Any, metric: str) -> dict[str, float]:
    """The run's baseline summaries of ``metric`` (``baseline/markov0_bits_per_base`` → ``markov0``)."""
    out = {}
    for key, value in sorted(run.data.metrics.items()):
        if key.startswith("baseline/") and key.endswith(metric) and "_by_" not in key:
            out[key[len("baseline/"):-len(metric)].rstrip("_") or key] = float(value)
    return out


def curve_figure(result: Any, base: dict[str, float], title: str, path: Path) -> Path:
    """Metric against test length, one line per variant, baselines dashed, training length dotted."""
    import matplotlib  # optional: matplotlib, figures only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: matplotlib, figures only

    fig, ax = plt.subplots(figsize=SIZE)
    for i, variant in enumerate(result.variants):
        values = result.by_length(variant)
        xs = [n for n in result.lengths if values.get(n) is not None]
        trained = i == 0
        ax.plot(xs, [values[n] for n in xs], "o-" if trained else ".--", color=f"C{i}",
                lw=2 if trained else 1, label=f"{result.scheme} as trained" if trained else variant)
    for j, (name, value) in enumerate(base.items()):
        ax.axhline(value, color=f"{0.25 + 0.25 * j:.2f}", ls=(0, (4, 2)), lw=1, label=f"baseline: {name}")
    ax.axvline(result.train_length, color="0.6", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(result.lengths, [str(n) for n in result.lengths])
    direction = "higher is better" if result.higher_is_better else "lower is better"
    ax.set(xlabel=f"test length ({result.length_unit}; dotted: training length)",
           ylabel=f"{result.metric} ({direction})", title=title)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt  # optional: matplotlib, figures only

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def copy_scaled(src: Path, dst: Path) -> Path:
    """``src`` as ``dst``, scaled down to at most :data:`MAX_WIDTH` pixels wide."""
    from PIL import Image  # optional: PIL

    dst.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(src) as img:
        if img.width > MAX_WIDTH:
            img = img.resize((MAX_WIDTH, round(img.height * MAX_WIDTH / img.width)), Image.LANCZOS)
        img.save(dst, optimize=True)
    return dst


def extrapolation(run: Any, factors: Sequence[float], title: str, path: Path) -> Path:
    """Score the run's model at ``factors`` × its training length (``make evaluate``) and plot it."""

    with tempfile.TemporaryDirectory(prefix="posenc-figures-") as tmp:
        result = evaluate([run.info.run_id, "--out", tmp, "--no-mlflow",
                           "--factors", *map(str, factors)])
    return curve_figure(result, baselines(run, result.metric), title, path)


def whole_windows(run: Any, path: Path) -> Path | None:
    """The run's logged whole-window scores per length beside the chain on the same windows
    (:func:`pipelines.tracking.whole_window.length_figure`); ``None`` if it logged none (an older run)."""

    table = read_lengths(run.data.metrics, int(run.data.params.get("seq_len") or 0))
    if table is None:
        print(f"skipped {path.name}: run {run.info.run_id} has no whole-window scores", file=sys.stderr)
        return None
    table.train_length = table.train_length or min(table.whole)  # the shortest test length is L0
    return length_figure(run_curves(table, f"{DNA_RUN} (whole windows)"), table.chain, table.train_length,
                         f"{DNA_RUN}: held-out test bases", path)


def attention_distances(run: Any, path: Path, windows: int = 8, factor: int = 8) -> Path:
    """Attention-distance histograms of the run's model at its training length and ``factor``×."""

    with resolve(run.info.run_id, tracking_uri(), with_config=True) as found:
        ckpt, config = read_checkpoint(found.checkpoint), load_config([str(found.config)])
    module, dm = build_from_checkpoint(ckpt, config, run.info.run_id)
    module.eval()
    test = max(dm.region_codes("test"), key=len)
    tokens = torch.as_tensor(dm.tokenizer.encode(np.asarray(test)), dtype=torch.long)  # (N,)
    gen = torch.Generator().manual_seed(0)
    inputs = {}
    for n in (dm.seq_len, factor * dm.seq_len):
        starts = torch.randint(0, len(tokens) - n, (windows,), generator=gen)
        batch = torch.stack([tokens[s : s + n] for s in starts])  # (windows, n)
        inputs[f"length {n}" + (" (training)" if n == dm.seq_len else f" ({factor}×)")] = (batch,)
    with torch.inference_mode():
        out, _ = attention_distance_figure(module, inputs, f"{DNA_RUN}: attention against distance "
                                                           f"({windows} test windows)", path)
    return out


def diagnostics(out: Path) -> list[Path]:
    """PeriodicRoPE's aliasing and band-period figures (``python -m pipelines.studies.diagnose``)."""

    with tempfile.TemporaryDirectory(prefix="posenc-figures-") as tmp:
        pe = load_scheme(ROOT / "configs/posenc/periodic_rope.yaml").eval()
        written = {p.name: p for p in diagnostic_plots.write_all(pe, Path(tmp), 512, 128)}
        return [copy_scaled(written[name], out / f"periodic_rope_{name}") for name in ("aliasing.png",
                                                                                      "bands.png")]


def forecast_examples(run: Any, path: Path) -> Path:
    """The run's ``forecast.png`` artifact (test forecasts against the truth), scaled."""
    import mlflow  # heavy: mlflow, loaded only when tracking

    with tempfile.TemporaryDirectory(prefix="posenc-figures-") as tmp:
        local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="forecast.png",
                                                    dst_path=tmp)
        return copy_scaled(Path(local), path)


def make_all(out: Path) -> list[Path]:
    """Every figure whose run exists (see the module docstring); notes the ones skipped."""
    import mlflow  # heavy: mlflow, loaded only when tracking


    client = mlflow.MlflowClient(tracking_uri())
    written = diagnostics(out)
    dna = newest_run(client, DNA_RUN)
    if dna is None:
        print(f"skipped the DNA LM figures: no finished {DNA_RUN} run (make train)", file=sys.stderr)
    else:
        written.append(extrapolation(dna, (1, 2, 4, 8, 16), f"{DNA_RUN}: held-out test region",
                                     out / "dna_lm_extrapolation.png"))
        written.append(attention_distances(dna, out / "dna_lm_attention_distance.png"))
        written += [p for p in [whole_windows(dna, out / "dna_lm_whole_windows.png")] if p is not None]
    ts = newest_run(client, FORECAST_RUN)
    if ts is None:
        print(f"skipped the forecaster figures: no finished {FORECAST_RUN} run "
              "(make train CONFIG=configs/ts_forecast.yaml)", file=sys.stderr)
    else:
        written.append(extrapolation(ts, (1, 2, 4, 8), f"{FORECAST_RUN}: test split",
                                     out / "ts_forecast_extrapolation.png"))
        written.append(forecast_examples(ts, out / "ts_forecast_examples.png"))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pipelines.studies.figures [--out docs/figures]``: regenerate the README's figures."""
    ap = argparse.ArgumentParser(prog="python -m pipelines.studies.figures", description=main.__doc__)
    ap.add_argument("--out", default="docs/figures", help="folder for the PNG files")
    add_console_args(ap)
    args = ap.parse_args(argv)
    configure(args.verbose, args.progress)
    try:
        written = make_all(Path(args.out))
    except PosencError as exc:
        print_error(exc)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
