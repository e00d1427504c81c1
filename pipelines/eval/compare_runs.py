"""The comparison's child runs in MLflow: their key, finding finished ones, training new ones, and
reading their sweeps back (a comparison's statistics are always read from the runs, so one can be
extended with more seeds or schemes without retraining the runs it has).

A child is identified by a *key*: a hash of what decides its numbers — the layered config contents
(comments and the summary-only options ``tolerance``/``retain`` aside), the scheme file, its
comparison override and the sweep's lengths — plus its scheme and seed (tags). Code and data files
are not hashed: after changing either, start a new experiment (``--experiment``) or pass ``--retrain``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipelines.eval.compare_child import launches_processes, run_in_subprocess
from pipelines.eval.evaluate import ExtrapolationEval, load_config
from pipelines.eval.extrapolation import ROPE_VARIANTS, TRAINED, adapter_for
from pipelines.eval.report import PREFIX
from pipelines.tracking.store import mlflow_loggers, tracking_uri
from posenc.registry import import_class

TAGS = {"key": "posenc.compare.key", "scheme": "posenc.compare.scheme", "seed": "posenc.compare.seed",
        "complete": "posenc.compare.complete", "note": "posenc.compare.note"}
#: ExtrapolationEval options that change no number of the child's sweep (so not part of its key)
SUMMARY_ONLY = ("tolerance", "retain", "baselines")


@dataclass
class TaskInfo:
    """What the children's tags say about the task and its metric."""

    task: str
    metric: str
    higher_is_better: bool
    train_length: int
    lengths: list[int]
    length_unit: str
    position_label: str
    trivial_name: str


@dataclass
class ChildRun:
    """One scheme × seed: where it came from and its sweep as read from MLflow."""

    scheme: str
    seed: int
    run_id: str | None
    source: str  # "trained", "reused" or "skipped"
    error: str = ""
    curves: dict[str, dict[int, float | None]] = field(default_factory=dict)  # variant → length → metric
    trivial: float | None = None
    baselines: dict[str, float] = field(default_factory=dict)
    note: str = ""
    info: TaskInfo | None = None
    positions: tuple[int, np.ndarray] | None = None  # (length, per-position curve) at the longest defined

    @property
    def ok(self) -> bool:
        return self.source != "skipped"


# ----------------------------------------------------------------------------- keys and look-up
def _without_summary_options(config: Any) -> Any:
    """``config`` with the summary-only options of every ExtrapolationEval callback removed."""
    if isinstance(config, dict):
        out = {k: _without_summary_options(v) for k, v in config.items()}
        if "ExtrapolationEval" in str(out.get("class_path", "")) and isinstance(out.get("init_args"), dict):
            out["init_args"] = {k: v for k, v in out["init_args"].items() if k not in SUMMARY_ONLY}
        return out
    if isinstance(config, list):
        return [_without_summary_options(v) for v in config]
    return config


def child_key(layers: Sequence[Path], callbacks: list[dict[str, Any]]) -> str:
    """Hash of the parsed YAML ``layers`` (in order) and the sweep ``callbacks`` (16 hex digits)."""
    parsed = [yaml.safe_load(Path(p).read_text()) or {} for p in layers]
    blob = json.dumps(_without_summary_options([parsed, callbacks]), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def find_finished(client: Any, experiment_id: str, key: str, scheme: str, seed: int) -> str | None:
    """The newest FINISHED, completely swept child with this key, scheme and seed, or ``None``."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAGS['key']}` = '{key}' and tags.`{TAGS['complete']}` = 'true' "
        "and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
    )
    for run in runs:
        tags = run.data.tags
        if tags.get(TAGS["scheme"]) == scheme and tags.get(TAGS["seed"]) == str(seed):
            return run.info.run_id
    return None


# ----------------------------------------------------------------------------- training one child
def seed_overlay(data_class: str | None, seed: int) -> dict[str, Any]:
    """``seed_everything`` and, when the datamodule takes a ``seed`` (sampling order, augmentation),
    ``data.init_args.seed`` too: one seed fixes initialisation and data order, the same for every
    scheme."""
    import inspect

    out: dict[str, Any] = {"seed_everything": seed}
    if data_class:
        params = inspect.signature(import_class(data_class, what="datamodule class")).parameters
        if "seed" in params:
            out["data"] = {"init_args": {"seed": seed}}
    return out


class _Tee(io.TextIOBase):
    """Write to the real stderr and remember the last ``error: …`` line."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.error = stream, ""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("error: "):
                self.error = line[len("error: "):]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def train_child(layers: list[Path], scheme: str, seed: int, key: str, parent: str, experiment: str,
                callbacks: list[dict[str, Any]], data_class: str | None, workdir: Path,
                test_after_fit: bool) -> ChildRun:
    """Train one scheme × seed with the CLI as a run nested under ``parent`` and sweep it; a scheme
    the task cannot run (a one-line config error) comes back skipped, with the reason."""
    from pipelines.cli import main as cli_main

    tags = {"mlflow.parentRunId": parent, TAGS["key"]: key, TAGS["scheme"]: scheme, TAGS["seed"]: str(seed)}
    logger = {"class_path": "lightning.pytorch.loggers.MLFlowLogger",
              "init_args": {"experiment_name": experiment, "tracking_uri": tracking_uri(),
                            "run_name": f"{scheme}-seed{seed}", "log_model": True, "tags": tags}}
    overlay = workdir / f"{scheme}-seed{seed}.yaml"
    overlay.write_text(yaml.safe_dump({**seed_overlay(data_class, seed), "test_after_fit": test_after_fit,
                                       "trainer": {"logger": logger, "callbacks": callbacks}}))
    args = ["fit", *[a for p in [*layers, overlay] for a in ("--config", str(p))]]
    command = " ".join(["python -m pipelines.train", *args[:-2], f"--seed_everything={seed}"])
    if launches_processes(load_config([*map(str, layers), str(overlay)])):  # DDP: the ranks re-run a command
        return train_in_subprocess(scheme, seed, args, workdir / f"{scheme}-seed{seed}.result")
    tee = _Tee(sys.stderr)
    try:
        with contextlib.redirect_stderr(tee):
            cli = cli_main(args, command=command)  # the model card: how to retrain this child alone
    except SystemExit as exc:  # a config error, printed as one line by the CLI
        return ChildRun(scheme, seed, None, "skipped", tee.error or f"exit status {exc.code}")
    run_id = next((lg.run_id for lg in mlflow_loggers(cli.trainer)), None)
    hook = next(c for c in cli.trainer.callbacks if isinstance(c, ExtrapolationEval))
    if hook.result is None:
        hook.run(cli.trainer, cli.model)
    client = next(lg.experiment for lg in mlflow_loggers(cli.trainer))
    note = untrained_positions(cli.model, cli.datamodule)
    if note:
        client.set_tag(run_id, TAGS["note"], note)
    client.set_tag(run_id, TAGS["complete"], "true")
    return ChildRun(scheme, seed, run_id, "trained", note=note)


def train_in_subprocess(scheme: str, seed: int, args: list[str], result: Path) -> ChildRun:
    """A child whose trainer starts several processes (DDP), as its own command (``compare_child``)."""
    from mlflow import MlflowClient

    run_id, error = run_in_subprocess(args, result)
    if run_id is None:
        return ChildRun(scheme, seed, None, "skipped", error)
    MlflowClient(tracking_uri()).set_tag(run_id, TAGS["complete"], "true")
    return ChildRun(scheme, seed, run_id, "trained")


def untrained_positions(module: Any, dm: Any) -> str:
    """A note when the encoding defines positions the model never saw in training (a learned table
    longer than the training length: its extra rows never received a gradient), else ``""``."""
    adapter = adapter_for(module)
    seen = adapter.n_positions(module, adapter.train_length(dm))
    max_len = getattr(module.pe, "max_len", None)
    if max_len is None or max_len <= seen:
        return ""
    return (f"{type(module.pe).__name__} max_len {max_len} > the {seen} positions seen in training: "
            f"positions {seen}…{max_len - 1} were never trained")


# ----------------------------------------------------------------------------- reading children back
def _history(client: Any, run_id: str, key: str) -> dict[int, float]:
    """step → the latest value logged for ``key`` at that step."""
    out: dict[int, tuple[int, float]] = {}
    for m in client.get_metric_history(run_id, key):
        if m.step not in out or m.timestamp >= out[m.step][0]:
            out[m.step] = (m.timestamp, m.value)
    return {step: v for step, (_, v) in out.items()}


def task_info(tags: dict[str, str]) -> TaskInfo:
    return TaskInfo(
        tags[f"{PREFIX}/task"], tags[f"{PREFIX}/metric"], tags[f"{PREFIX}/higher_is_better"] == "true",
        int(tags[f"{PREFIX}/train_length"]), [int(n) for n in tags[f"{PREFIX}/lengths"].split(",")],
        tags[f"{PREFIX}/length_unit"], tags[f"{PREFIX}/position_label"], tags[f"{PREFIX}/trivial"])


def read_child(client: Any, child: ChildRun) -> ChildRun:
    """Fill ``child`` from its run: the metric per variant and length (``None`` where undefined),
    the baselines, the note, and the per-position curve at the longest defined length."""
    run = client.get_run(child.run_id)
    tags, metrics = run.data.tags, run.data.metrics
    child.info = info = task_info(tags)
    name = f"{info.metric}_by_length"
    for variant in (TRAINED, *ROPE_VARIANTS):
        key = f"{PREFIX}/{name}" if variant == TRAINED else f"{PREFIX}/{variant}/{name}"
        if key in metrics:
            found = _history(client, child.run_id, key)
            child.curves[variant] = {n: found.get(n) for n in info.lengths}
    child.trivial = metrics.get(f"{PREFIX}/trivial_baseline")
    prefix = f"{PREFIX}/baseline/"
    child.baselines = {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)}
    child.note = tags.get(TAGS["note"], "")
    child.positions = _positions(client, child)
    return child


def _positions(client: Any, child: ChildRun) -> tuple[int, np.ndarray] | None:
    """The per-position curve of the scheme as trained at its longest defined length (artifact)."""
    import tempfile

    import mlflow
    import pandas as pd

    defined = [n for n, v in child.curves.get(TRAINED, {}).items() if v is not None]
    if not defined:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=child.run_id, artifact_path=f"{PREFIX}/per_position.csv", dst_path=tmp,
                tracking_uri=client.tracking_uri)
        except Exception:  # noqa: BLE001 - an older run without the table: no curve
            return None
        table = pd.read_csv(path)
    rows = table[(table.variant == TRAINED) & (table.length == max(defined))]
    if rows.empty or rows["loss"].isna().all():
        return None
    return max(defined), rows.sort_values("position")["loss"].to_numpy(dtype=float)
