"""The comparison's child runs in MLflow: their key and reading their sweeps back (a comparison's
statistics are always read from the runs, so one can be extended with more seeds or schemes
without retraining the runs it has). They are trained, or finished ones found by their key, by
:func:`pipelines.eval.sweep.train_run`.

A child is identified by a *key*: a hash of what decides its numbers — the layered config contents
(comments and the summary-only options ``tolerance``/``retain`` aside), the scheme file, its
comparison override and the sweep's lengths — plus its scheme and seed (tags). Code and data files
are not hashed: after changing either, start a new experiment (``--experiment``) or pass ``--retrain``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.eval.extrapolation import LOG_SCALE, ROPE_VARIANTS, TRAINED, WINDOW, adapter_for
from pipelines.eval.report import PREFIX
from pipelines.eval.sweep import config_key, read_layers

NAMESPACE = "posenc.compare"  # the children's tags (key, seed, complete: set by the sweep runner)
TAGS = {name: f"{NAMESPACE}.{name}" for name in ("key", "scheme", "seed", "complete", "note")}
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
    #: variant → length → (K, 2) per-block (sum, count) of the test region (artifact blocks.csv; {} if none)
    blocks: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    trivial_blocks: np.ndarray | None = None

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
    return config_key(_without_summary_options([read_layers(layers), callbacks]))


# ----------------------------------------------------------------------------- notes on a child
def untrained_positions(module: Any, dm: Any) -> str:
    """A note when the encoding defines positions the model never saw in training (a learned table
    longer than the training length: its extra rows never received a gradient), else ``""``."""
    adapter = adapter_for(module)
    seen = adapter.n_positions(module, adapter.train_length(dm))
    pe = getattr(module, "pe", None)  # None: a model without an encoding (DLinear)
    max_len = getattr(pe, "max_len", None)
    if max_len is None or max_len <= seen:
        return ""
    return (f"{type(pe).__name__} max_len {max_len} > the {seen} positions seen in training: "
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
    for variant in (TRAINED, *ROPE_VARIANTS, WINDOW, LOG_SCALE):
        key = f"{PREFIX}/{name}" if variant == TRAINED else f"{PREFIX}/{variant}/{name}"
        if key in metrics:
            found = _history(client, child.run_id, key)
            child.curves[variant] = {n: found.get(n) for n in info.lengths}
    child.trivial = metrics.get(f"{PREFIX}/trivial_baseline")
    prefix = f"{PREFIX}/baseline/"
    child.baselines = {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)}
    child.note = tags.get(TAGS["note"], "")
    child.positions = _positions(client, child)
    child.blocks, child.trivial_blocks = _blocks(client, child)
    return child


def _artifact_table(client: Any, run_id: str, name: str) -> Any:
    """The run's CSV artifact ``extrapolation/<name>`` as a DataFrame, or ``None`` if it has none."""

    import mlflow  # heavy: mlflow, loaded only when tracking
    import pandas as pd  # heavy: pandas

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"{PREFIX}/{name}",
                                                       dst_path=tmp, tracking_uri=client.tracking_uri)
        except Exception:  # noqa: BLE001 - an older run (or a task) without the table
            return None
        return pd.read_csv(path)


def _blocks(client: Any, child: ChildRun) -> tuple[dict[str, dict[int, np.ndarray]], np.ndarray | None]:
    """Per-block (sum, count) arrays by variant and length, and the trivial baseline's (blocks.csv)."""
    table = _artifact_table(client, child.run_id, "blocks.csv")
    if table is None:
        return {}, None
    out: dict[str, dict[int, np.ndarray]] = {}
    trivial = None
    for (variant, length), part in table.groupby(["variant", "length"], sort=False):
        found = part.sort_values("block")[["sum", "count"]].to_numpy(dtype=np.float64)  # (K, 2)
        if variant == "trivial":
            trivial = found
        else:
            out.setdefault(str(variant), {})[int(length)] = found
    return out, trivial


def _positions(client: Any, child: ChildRun) -> tuple[int, np.ndarray] | None:
    """The per-position curve of the scheme as trained at its longest defined length (artifact)."""
    defined = [n for n, v in child.curves.get(TRAINED, {}).items() if v is not None]
    if not defined:
        return None
    table = _artifact_table(client, child.run_id, "per_position.csv")
    if table is None:
        return None
    rows = table[(table.variant == TRAINED) & (table.length == max(defined))]
    if rows.empty or rows["loss"].isna().all():
        return None
    return max(defined), rows.sort_values("position")["loss"].to_numpy(dtype=float)
