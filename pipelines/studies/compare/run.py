"""Compare positional encodings on one task: train each scheme once per seed, test at every length,
and say which differences the seeds can stand behind.

Usage::

    python -m pipelines.studies.compare --config configs/compare_dna_lm.yaml \
        --schemes none sinusoidal rope alibi
    make compare CONFIG=configs/compare_ts.yaml SCHEMES="none rope alibi" [SEEDS="0 1 2 3 4"]

Scheme names are files ``configs/posenc/<name>.yaml`` (or paths to such files). Every child run uses
the same config, data, budget and seeds (3 by default: 0 1 2); only the encoding differs. Where a
config has a comparison override for a scheme — ``<config>_<scheme>.yaml`` beside it, e.g.
``compare_ts_periodic_rope.yaml`` — it is layered after the scheme file (fair setups: a learned table
only as long as the training length, periods in the task's units).

Statistics (:mod:`pipelines.eval.statistics`) are read from the child runs in MLflow: per scheme and
length the mean and a 95 % Student-t interval over seeds; the paired difference from ``--reference``
(default: the first scheme), *called* (▲/▼) only when its Holm-adjusted p-value (over every call of
the table) is below 0.05 — intervals from seeds and, where the children logged per-block sums of the
test region, a seed × block bootstrap (:mod:`pipelines.studies.verdicts`); the paired difference from
NoPE (``none``) at every length; the gain over the task's trivial baseline at L₀ and its power;
retained gain (guarded: undefined unless the gain at L₀ clears a minimum effect) and the
extrapolation ratio on it (``--retain``).
Children already finished with the same key, scheme and seed (any earlier comparison in the
experiment) are reused, so adding seeds trains only the new ones. All outputs go to a new parent
MLflow run: ``comparison.md``, ``comparison.csv``, ``comparison_long.csv``, ``comparison.png``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datamodules.progress import progress_bar
from pipelines.console import add_console_args, configure, user_errors_exit
from pipelines.console.scrub import scrub_text
from pipelines.eval.evaluate import ExtrapolationEval, check_retain, load_config
from pipelines.eval.lengths import DEFAULT_FACTORS, check_factors
from pipelines.eval.sweep import TrainingFailed, train_run
from pipelines.safety import add_trust_args, apply_trust_args
from pipelines.studies.compare.report import figure, markdown, whole_window_figure, write_csvs
from pipelines.studies.compare.runs import (
    NAMESPACE,
    TAGS,
    ChildRun,
    child_key,
    read_child,
    untrained_positions,
)
from pipelines.studies.compare.stats import Comparison, compare
from pipelines.tracking.store import experiment_id, tracking_uri
from pipelines.tracking.ui_url import run_url
from posenc import PosencError
from posenc.registry import import_class

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_SEEDS = (0, 1, 2)


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


def scheme_label(name: str) -> str:
    """The scheme's name in runs and tables: ``name``, or the file stem when a path was given."""
    return Path(name).stem if name.endswith((".yaml", ".yml")) else name


def overrides(configs: Sequence[str], label: str) -> list[Path]:
    """The comparison overrides of scheme ``label``: ``<config stem>_<label>.yaml`` beside each config."""
    found = [Path(c).with_name(f"{Path(c).stem}_{label}.yaml") for c in configs]
    return [p for p in found if p.is_file()]


# ----------------------------------------------------------------------------- entry point
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.compare",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", required=True, help="task config(s), layered in order")
    p.add_argument("--schemes", nargs="+", required=True, help="names of configs/posenc/<name>.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS),
                   help="seeds, one child run per scheme and seed, paired across schemes (default 0 1 2)")
    p.add_argument("--reference", default=None,
                   help="scheme the others are compared with, paired by seed (default: the first scheme)")
    p.add_argument("--retain", type=float, default=0.9,
                   help="extrapolation ratio: longest length whose retained gain's lower 95%% bound "
                   "is ≥ this")
    p.add_argument("--tolerance", type=float, default=None,
                   help="also report the relative-tolerance ratio (e.g. 0.05: within 5%% of the 1× mean)")
    p.add_argument("--factors", type=float, nargs="+", default=None,
                   help="test lengths as multiples of the training length (default: the config's "
                   "ExtrapolationEval factors, else 1 2 4 8 16)")
    p.add_argument("--experiment", default="posenc-compare", help="MLflow experiment")
    p.add_argument("--retrain", action="store_true", help="train every child, reusing no finished run")
    p.add_argument("--out", default=None,
                   help="local folder for the tables and figure (default outputs/compare/<parent run id>)")
    p.add_argument("--test-after-fit", action="store_true",
                   help="also run the task's own test pass per child")
    add_console_args(p)
    add_trust_args(p)
    return p.parse_args(argv)


def sweep_callbacks(config: dict[str, Any], factors: list[float] | None) -> list[dict[str, Any]]:
    """The config's ``trainer.callbacks`` with one :class:`ExtrapolationEval` (added if missing),
    its ``factors`` replaced by ``factors`` when given."""
    out, found = [], False
    for cb in (config.get("trainer") or {}).get("callbacks") or []:
        path = cb.get("class_path", "") if isinstance(cb, dict) else ""
        if path and issubclass(import_class(path, what="callback class"), ExtrapolationEval):
            found = True
            if factors is not None:
                args = {**(cb.get("init_args") or {}), "lengths": None, "factors": check_factors(factors)}
                cb = {"class_path": path, "init_args": args}
        out.append(cb)
    if not found:
        out.append({"class_path": "pipelines.eval.evaluate.ExtrapolationEval",
                    "init_args": {"factors": check_factors(factors or DEFAULT_FACTORS)}})
    return out


def with_baselines(callbacks: list[dict[str, Any]], on: bool) -> list[dict[str, Any]]:
    """``callbacks`` with the ExtrapolationEval's ``baselines`` option set to ``on``."""
    out = []
    for cb in callbacks:
        path = cb.get("class_path", "") if isinstance(cb, dict) else ""
        if path and issubclass(import_class(path, what="callback class"), ExtrapolationEval):
            cb = {"class_path": path, "init_args": {**(cb.get("init_args") or {}), "baselines": on}}
        out.append(cb)
    return out


def check_args(args: argparse.Namespace) -> list[str]:
    """The scheme labels, after every check that can fail before anything is trained."""
    for name in args.schemes:
        scheme_file(name)
    labels = [scheme_label(n) for n in args.schemes]
    if len(set(labels)) != len(labels):
        raise PosencError(f"--schemes lists a scheme twice: {args.schemes}")
    if len(set(args.seeds)) != len(args.seeds):
        raise PosencError(f"--seeds lists a seed twice: {args.seeds}")
    if args.reference is not None and args.reference not in labels:
        raise PosencError(f"--reference {args.reference!r} is not among --schemes ({' '.join(labels)})")
    check_retain(args.retain, args.tolerance)
    return labels


def run(argv: Sequence[str] | None = None) -> tuple[str, Comparison, Path]:
    import mlflow  # heavy: mlflow, loaded only when tracking

    args = parse_args(argv)
    apply_trust_args(args)  # before any config is read; the workers inherit it
    configure(args.verbose, args.progress)  # the children's trainings inherit both
    labels = check_args(args)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per child otherwise
    config = load_config(args.config)
    callbacks = sweep_callbacks(config, args.factors)
    client = mlflow.MlflowClient(tracking_uri())
    exp_id = experiment_id(client, args.experiment)
    names = "+".join(Path(c).stem for c in args.config)
    tags = {"posenc.compare": "parent"}
    parent = client.create_run(exp_id, run_name=f"compare-{names}", tags=tags).info.run_id
    for key, value in (("configs", scrub_text(" ".join(args.config))), ("schemes", " ".join(args.schemes)),
                       ("seeds", " ".join(map(str, args.seeds))), ("reference", args.reference or labels[0]),
                       ("retain", args.retain)):
        client.log_param(parent, key, value)
    children = train_all(args, labels, parent, callbacks)
    for c in children:
        if c.ok:
            read_child(client, c)
    if not any(c.ok for c in children):
        client.set_terminated(parent, "FAILED")
        raise PosencError(f"every run failed (first: {children[0].scheme}: {children[0].error})")
    cmp = compare(children, args.reference or labels[0], args.retain, args.tolerance)
    out = Path(args.out or Path("outputs") / "compare" / parent)
    finish(client, parent, cmp, out)
    return parent, cmp, out


def train_all(args: argparse.Namespace, labels: list[str], parent: str,
              callbacks: list[dict[str, Any]]) -> list[ChildRun]:
    """Every scheme × seed, seed by seed: reused when finished before, else trained; a scheme the
    task cannot run is skipped for every seed after its first failure. The first child trained also
    scores the task's reference baselines (the same test data for all; slow for some tasks)."""
    children: list[ChildRun] = []
    first = True
    skipped: dict[str, str] = {}
    layers = {lab: [*map(Path, args.config), scheme_file(name), *overrides(args.config, lab)]
              for name, lab in zip(args.schemes, labels, strict=True)}
    keys = {lab: child_key(layers[lab], callbacks) for lab in labels}
    for lab in labels:
        extra = [str(p) for p in layers[lab][len(args.config) + 1:]]
        if extra:
            print(f"[compare] {lab}: + {' '.join(extra)}", file=sys.stderr)
    n_runs = len(args.seeds) * len(labels)
    with progress_bar(n_runs, "compare", "run", live=False) as bar:
        for seed in args.seeds:
            for lab in labels:
                if lab in skipped:
                    children.append(ChildRun(lab, seed, None, "skipped", skipped[lab]))
                else:
                    overlay = {"test_after_fit": args.test_after_fit,
                               "trainer": {"callbacks": with_baselines(callbacks, first)}}
                    child = reuse_or_train(args, layers[lab], lab, seed, keys[lab], parent, overlay)
                    if child.source == "trained":
                        first = first and not child.ok
                    if not child.ok:
                        skipped[lab] = child.error
                    children.append(child)
                bar.update(1)  # a line per run: runs done, elapsed, time to go
    return children


def reuse_or_train(args: argparse.Namespace, layers: list[Path], lab: str, seed: int, key: str, parent: str,
                   overlay: dict[str, Any]) -> ChildRun:
    """A finished child with the same key, scheme and seed (unless ``--retrain``), else a new one
    nested under ``parent``; a scheme the task cannot run (a one-line config error) comes back
    skipped, with the reason."""
    try:
        run = train_run(layers, overlay, seed, experiment=args.experiment, run_name=f"{lab}-seed{seed}",
                        parent_run_id=parent, namespace=NAMESPACE, key=key, tags={TAGS["scheme"]: lab},
                        reuse=not args.retrain)
    except TrainingFailed as exc:
        return ChildRun(lab, seed, None, "skipped", exc.reason)
    note = untrained_positions(run.module, run.datamodule) if run.module is not None else ""
    if note:
        from mlflow import MlflowClient  # heavy: mlflow, loaded only when tracking

        MlflowClient(tracking_uri()).set_tag(run.run_id, TAGS["note"], note)
    return ChildRun(lab, seed, run.run_id, run.source, note=note)


def finish(client: Any, parent: str, cmp: Comparison, out: Path) -> None:
    """Tables, CSVs and figure into ``out`` and onto the parent run; summary metrics on the parent."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / "comparison.md"
    md.write_text(markdown(cmp))
    files = [md, *write_csvs(cmp, out)]
    figure(cmp).savefig(out / "comparison.png", dpi=110)
    files.append(out / "comparison.png")
    if cmp.info.metric == "bits_per_base":  # the DNA LMs: the extrapolation figure of issue 27
        files.append(whole_window_figure(cmp, out / "whole_windows.png"))
    for f in files:
        client.log_artifact(parent, str(f))
    log_parent_metrics(client, parent, cmp)
    client.set_tag(parent, "posenc.compare.children",
                   " ".join(f"{c.scheme}:{c.seed}:{c.run_id}" for c in cmp.children if c.ok)[:5000])
    skipped = sorted({f"{c.scheme}: {c.error}" for c in cmp.children if not c.ok})
    if skipped:
        client.set_tag(parent, "posenc.compare.skipped", "; ".join(skipped)[:5000])
    client.set_terminated(parent, "FINISHED")
    print(md.read_text())
    store = scrub_text(client.tracking_uri)
    print(f"files: {' '.join(map(str, files))}\nMLflow parent run {parent} in {store}")
    print(f"see it: make ui, then {run_url(client.get_run(parent).info.experiment_id, parent)}")


def log_parent_metrics(client: Any, parent: str, cmp: Comparison) -> None:
    """Per scheme: mean metric, paired difference (and its Holm-adjusted p), the difference from NoPE
    and the retained gain (where defined) per length (step = length), the power and the
    extrapolation ratio; the baselines."""

    from mlflow.entities import Metric  # heavy: mlflow, loaded only when tracking

    now, metrics = int(1000 * time.time()), []
    for r in cmp.rows:
        key = r.label.replace("+", "/")
        for n in cmp.info.lengths:
            call = r.holm.get(n)
            for name, est in ((f"{cmp.info.metric}_by_length", r.metric.get(n)),
                              ("diff_by_length", r.diff.get(n)),
                              ("diff_vs_none_by_length", r.nope.get(n)),
                              ("retained_gain_by_length", r.retained.get(n))):
                if est is not None and math.isfinite(est.mean):
                    metrics.append(Metric(f"{key}/{name}", est.mean, now, n))
            if call is not None and math.isfinite(call.p_adj):
                metrics.append(Metric(f"{key}/diff_p_holm_by_length", call.p_adj, now, n))
        if r.power is not None and math.isfinite(r.power):
            metrics.append(Metric(f"{key}/power", r.power, now, 0))
        if r.ratio is not None:
            metrics.append(Metric(f"{key}/extrapolation_ratio", r.ratio / cmp.info.train_length, now, 0))
    if cmp.trivial:
        metrics.append(Metric("baseline/trivial", sum(cmp.trivial.values()) / len(cmp.trivial), now, 0))
    metrics += [Metric(f"baseline/{k}", v, now, 0) for k, v in cmp.baselines.items()]
    for i in range(0, len(metrics), 500):
        client.log_batch(parent, metrics=metrics[i : i + 500])


def main(argv: Sequence[str] | None = None) -> None:
    with user_errors_exit():
        run(argv)


if __name__ == "__main__":
    main()
