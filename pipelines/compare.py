"""Compare positional encodings on one task: train once per scheme (and seed), test at every length.

Usage::

    python -m pipelines.compare --config configs/compare_dna_lm.yaml --schemes none sinusoidal rope alibi
    make compare CONFIG=configs/compare_ts.yaml SCHEMES="none rope alibi" [SEEDS="0 1 2"]

Scheme names are files ``configs/posenc/<name>.yaml`` (or paths to such files). Every child run uses
the same config, data, budget and seed; only the encoding differs. All runs are nested under one
parent MLflow run, which receives ``comparison.md``, ``comparison.csv`` (mean ± std over seeds),
``comparison_long.csv`` (every run and length) and ``comparison.png`` (one curve per scheme).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipelines.evaluate import ExtrapolationEval, import_class, load_config
from pipelines.extrapolation import (
    DEFAULT_FACTORS,
    TRAINED,
    Extrapolation,
    adapter_for,
    check_factors,
    extrapolation_ratio,
    with_lengths,
)
from pipelines.tracking import mlflow_loggers, tracking_uri
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Child:
    """One trained scheme × seed: its run and its sweep (``None`` if training failed)."""

    scheme: str
    seed: int
    run_id: str | None
    result: Extrapolation | None
    error: str = ""
    module: Any = None  # the trained LightningModule and its datamodule (for the baselines)
    datamodule: Any = None


def scheme_file(name: str) -> Path:
    """``configs/posenc/<name>.yaml`` (repo or cwd), or ``name`` itself if it is a YAML file."""
    for cand in (
        Path(name),
        Path("configs/posenc") / f"{name}.yaml",
        ROOT / "configs/posenc" / f"{name}.yaml",
    ):
        if cand.is_file() and cand.suffix in (".yaml", ".yml"):
            return cand
    known = sorted(p.stem for p in (ROOT / "configs/posenc").glob("*.yaml"))
    raise PosencError(f"unknown scheme {name!r}: no configs/posenc/{name}.yaml; known: {' '.join(known)}")


def train_child(
    configs: list[str],
    scheme: str,
    seed: int,
    parent: str,
    experiment: str,
    callbacks: list[dict[str, Any]],
    workdir: Path,
    test_after_fit: bool,
) -> Child:
    """Train one scheme with the CLI (a nested MLflow run) and sweep it; failures are recorded."""
    from pipelines.cli import main as cli_main

    overlay = workdir / f"{scheme}-seed{seed}.yaml"
    logger = {
        "class_path": "lightning.pytorch.loggers.MLFlowLogger",
        "init_args": {
            "experiment_name": experiment,
            "tracking_uri": tracking_uri(),
            "run_name": f"{scheme}-seed{seed}",
            "log_model": True,
            "tags": {
                "mlflow.parentRunId": parent,
                "posenc.compare.scheme": scheme,
                "posenc.compare.seed": str(seed),
            },
        },
    }
    overlay.write_text(
        yaml.safe_dump(
            {
                "seed_everything": seed,
                "test_after_fit": test_after_fit,
                "trainer": {"logger": logger, "callbacks": callbacks},
            }
        )
    )
    args = [
        "fit",
        *[a for c in configs for a in ("--config", c)],
        "--config",
        str(scheme_file(scheme)),
        "--config",
        str(overlay),
    ]
    try:
        cli = cli_main(args)
    except SystemExit as exc:  # a config error, already printed as one line by the CLI
        return Child(scheme, seed, None, None, f"exit status {exc.code}")
    run_id = next((lg.run_id for lg in mlflow_loggers(cli.trainer)), None)
    hook = next(c for c in cli.trainer.callbacks if isinstance(c, ExtrapolationEval))
    result = hook.result if hook.result is not None else hook.run(cli.trainer, cli.model)
    return Child(scheme, seed, run_id, result, module=cli.model, datamodule=cli.datamodule)


# ----------------------------------------------------------------------------- aggregation
def mean_curves(children: list[Child], variant: str) -> dict[int, tuple[float, float, int] | None]:
    """length → (mean, std, n seeds) of the metric over ``children``; ``None`` where undefined."""
    out: dict[int, tuple[float, float, int] | None] = {}
    lengths = sorted({n for c in children for n in c.result.by_length(variant)})
    for n in lengths:
        vals = [c.result.by_length(variant).get(n) for c in children]
        if any(v is None for v in vals):
            out[n] = None
        else:
            out[n] = (float(np.mean(vals)), float(np.std(vals)), len(vals))
    return out


def rows(children: list[Child]) -> list[dict[str, Any]]:
    """One row per (scheme, variant): mean ± std per length, extrapolation ratio, metric at the longest."""
    out = []
    by_scheme: dict[str, list[Child]] = {}
    for c in children:
        if c.result is not None:
            by_scheme.setdefault(c.scheme, []).append(c)
    for scheme, group in by_scheme.items():
        ref = group[0].result
        for variant in ref.variants:
            curve = mean_curves(group, variant)
            means = {n: (v[0] if v else None) for n, v in curve.items()}
            max_len, ratio = extrapolation_ratio(means, ref.train_length, ref.higher_is_better, ref.tolerance)
            longest = max(curve)
            out.append(
                {
                    "scheme": scheme if variant == TRAINED else f"{scheme}+{variant}",
                    "variant": variant,
                    "seeds": len(group),
                    "curve": curve,
                    "ratio": ratio,
                    "max_length": max_len,
                    "at_longest": means[longest],
                    "metric": ref.metric,
                    "train_length": ref.train_length,
                }
            )
    return out


def _cell(v: tuple[float, float, int] | None) -> str:
    if v is None:
        return "undefined"
    return f"{v[0]:.4f}" if v[2] == 1 else f"{v[0]:.4f} ± {v[1]:.4f}"


def markdown(table: list[dict[str, Any]], baselines: dict[str, float]) -> str:
    lengths = sorted({n for r in table for n in r["curve"]})
    train = table[0]["train_length"]
    head = ["scheme", *[f"L={n} ({n / train:g}×)" for n in lengths], "extrap. ratio (≤5%)", "at longest"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:g}×"
        longest = "undefined" if r["at_longest"] is None else f"{r['at_longest']:.4f}"
        lines.append(
            "| "
            + " | ".join([r["scheme"], *[_cell(r["curve"].get(n)) for n in lengths], ratio, longest])
            + " |"
        )
    note = f"\nMetric: {table[0]['metric']} (mean ± std over seeds where > 1)."
    if baselines:
        note += (
            " Baselines on the same test data: "
            + ", ".join(f"{k} {v:.4f}" for k, v in baselines.items())
            + "."
        )
    return "\n".join(lines) + "\n" + note + "\n"


def write_csvs(table: list[dict[str, Any]], children: list[Child], folder: Path) -> list[Path]:
    wide, long_ = folder / "comparison.csv", folder / "comparison_long.csv"
    lengths = sorted({n for r in table for n in r["curve"]})
    with wide.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "scheme",
                "variant",
                "seeds",
                *[f"mean_L{n}" for n in lengths],
                *[f"std_L{n}" for n in lengths],
                "extrapolation_ratio",
                "max_length_within_tol",
                "metric_at_longest",
            ]
        )
        for r in table:
            cur = r["curve"]
            w.writerow(
                [
                    r["scheme"],
                    r["variant"],
                    r["seeds"],
                    *[("" if cur.get(n) is None else cur[n][0]) for n in lengths],
                    *[("" if cur.get(n) is None else cur[n][1]) for n in lengths],
                    r["ratio"] if r["ratio"] is not None else "",
                    r["max_length"] or "",
                    r["at_longest"] or "",
                ]
            )
    with long_.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheme", "seed", "run_id", "variant", "length", "metric", "status"])
        for c in children:
            if c.result is None:
                w.writerow([c.scheme, c.seed, c.run_id or "", "", "", "", f"failed: {c.error}"])
                continue
            for cell in c.result.cells:
                w.writerow(
                    [
                        c.scheme,
                        c.seed,
                        c.run_id,
                        cell.variant,
                        cell.length,
                        "" if cell.metric is None else cell.metric,
                        cell.status,
                    ]
                )
    return [wide, long_]


def figure(table: list[dict[str, Any]], children: list[Child], baselines: dict[str, float]):
    """Metric vs length, one curve per scheme (band: min–max over seeds); RoPE variants beside;
    per-position curves of every scheme at the longest length it defines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipelines.extrapolation_report import binned

    ref = next(c.result for c in children if c.result is not None)
    trained = [r for r in table if r["variant"] == TRAINED]
    rope_family = {r["scheme"].split("+")[0] for r in table if r["variant"] != TRAINED}
    variants = [r for r in table if r["scheme"].split("+")[0] in rope_family]  # as trained + variants
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for ax, group, title in (
        (axes[0], trained, "schemes as trained"),
        (axes[1], variants or trained, "RoPE family + inference-time variants"),
    ):
        for i, r in enumerate(group):
            xs = [n for n, v in r["curve"].items() if v is not None]
            ys = np.array([r["curve"][n][0] for n in xs])
            style = "o-" if r["variant"] == TRAINED else "s--"
            ax.plot(xs, ys, style, color=f"C{i % 10}", lw=1.5, ms=4, label=r["scheme"])
            spread = _seed_range(children, r, xs)
            if spread is not None:
                ax.fill_between(xs, spread[0], spread[1], color=f"C{i % 10}", alpha=0.15)
            bad = [n for n, v in r["curve"].items() if v is None]
            if bad:
                ax.plot(bad, [ys.max() if len(ys) else 0] * len(bad), "x", color=f"C{i % 10}", ms=10)
        for j, (name, value) in enumerate(baselines.items()):
            ax.axhline(value, color="0.3", ls=[":", "-."][j % 2], lw=1, label=f"baseline: {name}")
        ax.axvline(ref.train_length, color="0.6", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"test length ({ref.length_unit}); × = undefined")
        ax.set_ylabel(f"{ref.metric} ({'higher' if ref.higher_is_better else 'lower'} is better)")
        ax.set_title(f"{ref.task}: {title}", fontsize=10)
        ax.legend(fontsize=7, ncol=2)
    _position_panel(axes[2], children, ref, binned)
    fig.tight_layout()
    return fig


def _seed_range(children: list[Child], row: dict[str, Any], xs: list[int]):
    group = [c for c in children if c.result is not None and c.scheme == row["scheme"].split("+")[0]]
    if len(group) < 2:
        return None
    vals = np.array([[c.result.by_length(row["variant"])[n] for n in xs] for c in group], dtype=float)
    return vals.min(axis=0), vals.max(axis=0)


def _position_panel(ax, children: list[Child], ref: Extrapolation, binned) -> None:
    seen: dict[str, list[np.ndarray]] = {}
    longest = {}
    for c in children:
        if c.result is None:
            continue
        cells = [x for x in c.result.cells if x.variant == TRAINED and x.curve is not None]
        if cells:
            last = max(cells, key=lambda x: x.length)
            seen.setdefault(c.scheme, []).append(last.curve)
            longest[c.scheme] = last.length
    for i, (scheme, curves) in enumerate(seen.items()):
        x, y = binned(np.nanmean(np.stack(curves), axis=0), 48)
        ax.plot(x, y, color=f"C{i % 10}", lw=1.2, label=f"{scheme} (L={longest[scheme]})")
    if ref.position_label.startswith("position"):
        ax.axvline(ref.train_length - 1, color="0.6", ls=":", lw=1)
    ax.set_xlabel(ref.position_label + " (binned)")
    ax.set_ylabel(ref.metric)
    ax.set_title("per position at the longest defined length", fontsize=10)
    ax.legend(fontsize=7, ncol=2)


# ----------------------------------------------------------------------------- entry point
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.compare", description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", required=True, help="task config(s), layered in order")
    p.add_argument("--schemes", nargs="+", required=True, help="names of configs/posenc/<name>.yaml")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="seeds (one child run per scheme and seed)"
    )
    p.add_argument(
        "--factors",
        type=float,
        nargs="+",
        default=None,
        help="test lengths as multiples of the training length (default: the config's "
        "pipelines.evaluate.ExtrapolationEval factors, else 1 2 4 8 16)",
    )
    p.add_argument("--experiment", default="posenc-compare", help="MLflow experiment")
    p.add_argument(
        "--out",
        default=None,
        help="local folder for the table and figure (default outputs/compare/<parent run id>)",
    )
    p.add_argument(
        "--test-after-fit", action="store_true", help="also run the task's own test pass per child"
    )
    return p.parse_args(argv)


def sweep_callbacks(config: dict[str, Any], factors: list[float] | None) -> list[dict[str, Any]]:
    """The config's ``trainer.callbacks`` with one :class:`ExtrapolationEval` (added if missing),
    its ``factors`` replaced by ``factors`` when given."""
    out, found = [], False
    for cb in (config.get("trainer") or {}).get("callbacks") or []:
        path = cb.get("class_path", "") if isinstance(cb, dict) else ""
        if path and issubclass(import_class(path), ExtrapolationEval):
            found = True
            if factors is not None:
                cb = {
                    "class_path": path,
                    "init_args": {
                        **(cb.get("init_args") or {}),
                        "lengths": None,
                        "factors": check_factors(factors),
                    },
                }
        out.append(cb)
    if not found:
        out.append(
            {
                "class_path": "pipelines.evaluate.ExtrapolationEval",
                "init_args": {"factors": check_factors(factors or DEFAULT_FACTORS)},
            }
        )
    return out


def run(argv: Sequence[str] | None = None) -> tuple[str, list[Child], Path]:
    import mlflow

    args = parse_args(argv)
    config = load_config(args.config)
    for name in args.schemes:
        scheme_file(name)  # fail before anything is trained
    if len(set(args.schemes)) != len(args.schemes):
        raise PosencError(f"--schemes lists a scheme twice: {args.schemes}")
    callbacks = sweep_callbacks(config, args.factors)
    client = mlflow.MlflowClient(tracking_uri())
    exp = client.get_experiment_by_name(args.experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(args.experiment)
    names = "+".join(Path(c).stem for c in args.config)
    parent = client.create_run(
        exp_id, run_name=f"compare-{names}", tags={"posenc.compare": "parent"}
    ).info.run_id
    client.log_param(parent, "configs", " ".join(args.config))
    client.log_param(parent, "schemes", " ".join(args.schemes))
    client.log_param(parent, "seeds", " ".join(map(str, args.seeds)))
    children: list[Child] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for scheme in args.schemes:
                print(f"[compare] training {scheme} (seed {seed})", file=sys.stderr)
                children.append(
                    train_child(
                        args.config,
                        scheme,
                        seed,
                        parent,
                        args.experiment,
                        callbacks,
                        Path(tmp),
                        args.test_after_fit,
                    )
                )
    ok = [c for c in children if c.result is not None]
    if not ok:
        client.set_terminated(parent, "FAILED")
        raise PosencError(f"every run failed (first: {children[0].scheme}: {children[0].error})")
    out = Path(args.out or Path("outputs") / "compare" / parent)
    finish(client, parent, children, out)
    return parent, children, out


def finish(client: Any, parent: str, children: list[Child], out: Path) -> None:
    """Table, CSVs and figure into ``out`` and onto the parent run; summary metrics on the parent."""
    import matplotlib.pyplot as plt

    ok = [c for c in children if c.result is not None]
    first = ok[0]
    adapter = adapter_for(first.module)
    dm = with_lengths(first.datamodule, adapter, first.result.lengths)
    baselines = adapter.baselines(dm)
    table = rows(children)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "comparison.md"
    md.write_text(markdown(table, baselines))
    files = [md, *write_csvs(table, children, out)]
    fig = figure(table, children, baselines)
    fig.savefig(out / "comparison.png", dpi=110)
    plt.close(fig)
    files.append(out / "comparison.png")
    for f in files:
        client.log_artifact(parent, str(f))
    for r in table:
        key = r["scheme"].replace("+", "/")
        for n, v in r["curve"].items():
            if v is not None:
                client.log_metric(parent, f"{key}/{r['metric']}_by_length", v[0], step=n)
        if r["ratio"] is not None:
            client.log_metric(parent, f"{key}/extrapolation_ratio", r["ratio"])
    for name, value in baselines.items():
        client.log_metric(parent, f"baseline/{name}", value)
    failed = [f"{c.scheme}(seed {c.seed}): {c.error}" for c in children if c.result is None]
    if failed:
        client.set_tag(parent, "posenc.compare.failed", "; ".join(failed))
    client.set_terminated(parent, "FINISHED" if not failed else "FAILED")
    print(md.read_text())
    print(f"files: {' '.join(map(str, files))}\nMLflow parent run {parent} in {client.tracking_uri}")


def main(argv: Sequence[str] | None = None) -> None:
    try:
        run(argv)
    except PosencError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
