"""One training run of a sweep (config layers × overlay × seed), the same way for every caller.

``compare`` (scheme × seed), the claim experiments (condition × seed) and ``forecast_seeds`` (seed)
all train through :func:`train_run`: it lays the caller's overlay and this module's own one (the
seed, the MLflow logger) over the config layers, trains with :func:`pipelines.cli.main` — in this
process, or as its own command when the trainer starts several processes (DDP, see
:mod:`pipelines.eval.sweep_child`) — and reads the run's metrics back from MLflow.

Every run is a child of ``parent_run_id`` (tag ``mlflow.parentRunId``) named ``run_name``, with the
tags ``<namespace>.seed``, ``<namespace>.key`` (when a key is given) and ``<namespace>.complete``
(``true`` once the run and its length sweep are done). Given a key, a FINISHED complete run of the
experiment with the same key, seed and caller tags is reused instead of training again.

    from pipelines.eval.sweep import config_key, read_layers, train_run

    layers = ["configs/ts_forecast.yaml"]
    run = train_run(layers, ["--trainer.max_epochs=2"], seed=1, experiment="my-sweep",
                    parent_run_id=parent, run_name="seed1", namespace="my.sweep",
                    key=config_key([read_layers(layers), ["--trainer.max_epochs=2"]]))
    run.metrics["test/mse"], run.source  # "trained", or "reused" on a second call
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from datamodules.config import group_of
from pipelines.cli import main as cli_main
from pipelines.eval.evaluate import ExtrapolationEval, _merge, load_config
from pipelines.eval.sweep_child import launches_processes, run_in_subprocess
from pipelines.tasks.base import mlflow_loggers
from pipelines.tracking.store import tracking_uri
from posenc import PosencError
from posenc.registry import import_class


class TrainingFailed(PosencError):
    """A run the CLI refused or that stopped (``reason``: its one-line error, or its exit status)."""

    def __init__(self, run_name: str, reason: str) -> None:
        super().__init__(f"training {run_name} failed: {reason}")
        self.run_name, self.reason = run_name, reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # a worker process sends it back pickled
        return type(self), (self.run_name, self.reason)


@dataclass
class TrainedRun:
    """One trained (or reused) run: its MLflow id and what was read back from it.

    ``module``, ``datamodule`` and ``sweep`` (the :class:`ExtrapolationEval` result) are set only
    when the run was trained in this process; ``wall_s``/``cpu_s`` only when it was trained now.
    """

    run_id: str
    seed: int
    source: str  # "trained" or "reused"
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    checkpoint: str | None = None  # the best checkpoint's local path, where one was written
    wall_s: float = float("nan")
    cpu_s: float = float("nan")
    module: Any = None
    datamodule: Any = None
    sweep: Any = None


# ----------------------------------------------------------------------------- keys and look-up
def read_layers(layers: Sequence[Path | str]) -> list[Any]:
    """The parsed YAML of every layer, in order (comments and formatting do not count)."""
    return [yaml.safe_load(Path(p).read_text()) or {} for p in layers]


def config_key(parts: Any) -> str:
    """A 16-hex-digit hash of ``parts`` (JSON-able: parsed layers, overlays, …) for :func:`train_run`."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def find_finished(client: Any, experiment: str, namespace: str, key: str, seed: int,
                  tags: dict[str, str] | None = None) -> str | None:
    """The newest FINISHED, complete run of ``experiment`` with this key, seed and ``tags``, or ``None``."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`{namespace}.key` = '{key}' and tags.`{namespace}.complete` = 'true' "
        "and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
    )
    want = {**(tags or {}), f"{namespace}.seed": str(seed)}
    for run in runs:
        if all(run.data.tags.get(k) == str(v) for k, v in want.items()):
            return run.info.run_id
    return None


# ----------------------------------------------------------------------------- the overlay
def seed_overlay(data_class: str | None, seed: int) -> dict[str, Any]:
    """``seed_everything`` and, when the datamodule takes a ``seed`` (sampling order, augmentation),
    ``data.init_args.loader.seed`` (or its own ``seed``) too: one seed fixes initialisation and data order."""
    out: dict[str, Any] = {"seed_everything": seed}
    if data_class:
        cls = import_class(data_class, what="datamodule class")
        group = group_of(cls, "seed")  # loader.seed, or a datamodule's own seed argument
        if group or "seed" in inspect.signature(cls).parameters:
            out["data"] = {"init_args": {group: {"seed": seed}} if group else {"seed": seed}}
    return out


def _own_overlay(config: dict[str, Any], seed: int, logger: dict[str, Any]) -> dict[str, Any]:
    """The seed overlay and the MLflow logger of one run."""
    data_class = (config.get("data") or {}).get("class_path")
    return _merge(seed_overlay(data_class, seed), {"trainer": {"logger": logger}})


def _logger(experiment: str, run_name: str, log_model: bool, tags: dict[str, str]) -> dict[str, Any]:
    return {"class_path": "lightning.pytorch.loggers.MLFlowLogger",
            "init_args": {"experiment_name": experiment, "tracking_uri": tracking_uri(),
                          "run_name": run_name, "log_model": log_model, "tags": tags}}


def _command(layers: Sequence[Path | str], args: Sequence[str], overlay: dict[str, Any]) -> str:
    """How a person retrains this run alone (the model card shows it): the layers, the caller's
    arguments and the seed (the logger and a dict overlay's settings are this runner's)."""
    seed = [f"--seed_everything={overlay['seed_everything']}"]
    for key, value in (overlay.get("data") or {}).get("init_args", {}).items():  # {"loader": {"seed": n}}, …
        seed += _dotted(f"data.init_args.{key}", value)
    configs = [a for p in layers for a in ("--config", str(p))]
    return " ".join(["python -m pipelines.train fit", *configs, *args, *seed])


def _dotted(key: str, value: Any) -> list[str]:
    """``--key.sub=value`` arguments of a (nested) setting; lists as JSON."""
    if isinstance(value, dict):
        return [arg for k, v in value.items() for arg in _dotted(f"{key}.{k}", v)]
    return [f"--{key}={json.dumps(list(value)) if isinstance(value, list | tuple) else value}"]


# ----------------------------------------------------------------------------- training
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


def _fit_here(args: list[str], command: str, run_name: str) -> TrainedRun:
    """Fit in this process; the length sweep run if the fit ended before it (interrupted)."""

    tee, argv = _Tee(sys.stderr), sys.argv
    sys.argv = sys.argv[:1]  # the CLI must not see the caller's own options
    try:
        with contextlib.redirect_stderr(tee):
            cli = cli_main(["fit", *args], command=command)
    except SystemExit as exc:  # a config error, printed as one line by the CLI
        raise TrainingFailed(run_name, tee.error or f"exit status {exc.code}") from None
    finally:
        sys.argv = argv
    trainer = cli.trainer
    run_id = next(lg.run_id for lg in mlflow_loggers(trainer))
    hook = next((c for c in trainer.callbacks if isinstance(c, ExtrapolationEval)), None)
    if hook is not None and hook.result is None:
        hook.run(trainer, cli.model)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    best = str(Path(best).resolve()) if best else None  # absolute: the caller may run elsewhere
    return TrainedRun(run_id, 0, "trained", checkpoint=best, module=cli.model, datamodule=cli.datamodule,
                      sweep=hook.result if hook is not None else None)


def _fit_elsewhere(args: list[str], workdir: Path, run_name: str) -> TrainedRun:
    """Fit as its own command, whose ranks Lightning starts (DDP)."""
    run_id, error, best = run_in_subprocess(["fit", *args], workdir / "result.json")
    if run_id is None:
        raise TrainingFailed(run_name, error)
    return TrainedRun(run_id, 0, "trained", checkpoint=best)


def _cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def train_run(layers: Sequence[Path | str], overlay: dict[str, Any] | Sequence[str] | None, seed: int, *,
              experiment: str, run_name: str, parent_run_id: str | None = None,
              namespace: str = "posenc.sweep", key: str | None = None, tags: dict[str, str] | None = None,
              reuse: bool = True, log_model: bool = True) -> TrainedRun:
    """Train ``layers`` + ``overlay`` at ``seed`` as a child run of ``parent_run_id``, or reuse one.

    Args:
        layers: config files, layered in order (like repeated ``--config``).
        overlay: settings over the layers: a config dict, or CLI arguments (``--a.b=value``).
        seed: ``seed_everything`` and, where the datamodule takes one, ``data.init_args.seed``.
        experiment: MLflow experiment of the run (and of ``parent_run_id``).
        run_name: the run's name.
        parent_run_id: the run this one is nested under (``None``: a top-level run).
        namespace: prefix of this runner's tags (``<namespace>.key``, ``.seed``, ``.complete``).
        key: what decides the run's numbers (:func:`config_key`); with ``reuse``, a finished run
            with the same key, seed and ``tags`` is returned instead of training.
        tags: the caller's own tags, set on the run and matched on reuse.
        reuse: look for a finished run with ``key`` first.
        log_model: log the best checkpoint as a run artifact.

    Returns:
        The run, with its metrics and tags read back from MLflow.

    Raises:
        TrainingFailed: the CLI refused the config (one line) or the training stopped.
    """
    from mlflow import MlflowClient  # heavy: mlflow, loaded only when tracking

    tags = {k: str(v) for k, v in (tags or {}).items()}
    if key and reuse:  # the store is opened only when needed: a config the CLI refuses writes none
        client = MlflowClient(tracking_uri())
        found = find_finished(client, experiment, namespace, key, seed, tags)
        if found:
            print(f"[sweep] {run_name}: reusing finished run {found}", file=sys.stderr)
            return _read_back(client, TrainedRun(found, seed, "reused"), namespace)
    print(f"[sweep] training {run_name}", file=sys.stderr)
    mine = {**tags, f"{namespace}.seed": str(seed), **({f"{namespace}.key": key} if key else {}),
            **({"mlflow.parentRunId": parent_run_id} if parent_run_id else {})}
    args, extra = ([], dict(overlay or {})) if isinstance(overlay, dict) else (list(overlay or []), {})
    config = _merge(load_config(list(map(str, layers))), extra)
    own = _merge(extra, _own_overlay(config, seed, _logger(experiment, run_name, log_model, mine)))
    wall0, cpu0 = time.perf_counter(), _cpu_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "overlay.yaml"
        path.write_text(yaml.safe_dump(own))
        fit_args = [*(a for p in layers for a in ("--config", str(p))), *args, "--config", str(path)]
        if launches_processes(_merge(config, own)):  # DDP: the ranks re-run a command
            run = _fit_elsewhere(fit_args, Path(tmp), run_name)
        else:
            run = _fit_here(fit_args, _command(layers, args, own), run_name)
    run.seed, run.wall_s, run.cpu_s = seed, time.perf_counter() - wall0, _cpu_seconds() - cpu0
    client = MlflowClient(tracking_uri())
    if run.checkpoint:
        client.set_tag(run.run_id, f"{namespace}.checkpoint", run.checkpoint)
    client.set_tag(run.run_id, f"{namespace}.complete", "true")
    return _read_back(client, run, namespace)


def _read_back(client: Any, run: TrainedRun, namespace: str) -> TrainedRun:
    """``run`` with its metrics and tags (and a reused run's checkpoint) as MLflow has them."""
    found = client.get_run(run.run_id).data
    run.metrics, run.tags = dict(found.metrics), dict(found.tags)
    run.checkpoint = run.checkpoint or run.tags.get(f"{namespace}.checkpoint")
    return run
