"""Training children for the claim experiments: one LightningCLI ``fit`` per (task, scheme, seed),
logged as a nested MLflow run of the experiment's parent run in experiment ``posenc-claims``.

Children are trained in this process through :func:`pipelines.cli.main`, exactly as
``python -m pipelines.train fit --config <task> [--config <scheme>] --config <overlay>`` would,
with registration, resume checkpoints and model logging off (the experiments keep the trained
module in memory). Within one suite run a child with the same task, scheme, seed and overrides is
trained once: later experiments get a run of their own under their parent that points to it
(tag ``posenc.claims.trained_in``) and carries a copy of its metrics.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.eval.evaluate import ExtrapolationEval, _merge, load_config
from pipelines.eval.extrapolation import Extrapolation
from pipelines.tracking.store import mlflow_loggers, tracking_uri
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENT = "posenc-claims"
#: what ``--smoke`` lays over every child: two batches of everything (not 1: the CLI reads an
#: integer 1 as the fraction 1.0, i.e. every batch)
SMOKE = {"trainer": {"limit_train_batches": 2, "limit_val_batches": 2, "limit_test_batches": 2,
                     "max_epochs": 1}}


@dataclass
class Trained:
    """A trained child: its MLflow run, the module and datamodule (in memory), its sweep result."""

    label: str
    seed: int
    run_id: str | None
    module: Any
    datamodule: Any
    sweep: Extrapolation | None
    seconds: float


@dataclass
class Context:
    """What an experiment runs in: the parent run, output folder, smoke flag and child cache."""

    name: str
    client: Any
    experiment_id: str
    parent: str
    out: Path
    smoke: bool = False
    cache: dict[str, Trained] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)

    def max_batches(self, n: int | None) -> int | None:
        """``n`` batches of evaluation, or one under ``--smoke``."""
        return 1 if self.smoke else n

    def seeds(self, seeds: list[int]) -> list[int]:
        """The seeds to train (the first two under ``--smoke``, enough for an interval)."""
        return list(seeds[:2]) if self.smoke else list(seeds)

    def train(self, task: str, scheme: str | dict | None, seed: int, label: str,
              overrides: dict | None = None, test: bool = False) -> Trained:
        """Fit ``task`` (a YAML path) with ``scheme`` (a ``configs/posenc`` name, a YAML path or an
        encoding spec) and ``overrides`` (merged over the task), seed ``seed``; cached per suite run."""
        task_cfg = load_config([str(resolve(task))])
        pe = scheme_spec(scheme)
        key = hashlib.sha256(json.dumps([task_cfg, pe, seed, overrides, test, self.smoke],
                                        sort_keys=True, default=str).encode()).hexdigest()[:16]
        if key in self.cache:
            return self._alias(self.cache[key], label)
        overlay = _merge(overrides or {}, {"model": {"init_args": {"pe": pe}}} if pe is not None else {})
        overlay = _merge(overlay, self._overlay(seed, label, test))
        if self.smoke:
            overlay = _merge(overlay, SMOKE)
        start = time.perf_counter()
        print(f"[claims:{self.name}] training {label} (seed {seed})", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "overlay.yaml"
            path.write_text(yaml.safe_dump(overlay))
            cli = cli_fit(["--config", str(resolve(task)), "--config", str(path)], label)
        run_id = next((lg.run_id for lg in mlflow_loggers(cli.trainer)), None)
        hook = next((c for c in cli.trainer.callbacks if isinstance(c, ExtrapolationEval)), None)
        found = Trained(label, seed, run_id, cli.model.eval(), cli.datamodule,
                        hook.result if hook is not None else None, time.perf_counter() - start)
        self.cache[key] = found
        self.children.append(run_id)
        return found

    def _overlay(self, seed: int, label: str, test: bool) -> dict[str, Any]:
        tags = {"mlflow.parentRunId": self.parent, "posenc.claims.experiment": self.name,
                "posenc.claims.label": label, "posenc.claims.seed": str(seed)}
        logger = {"class_path": "lightning.pytorch.loggers.MLFlowLogger",
                  "init_args": {"experiment_name": EXPERIMENT, "tracking_uri": tracking_uri(),
                                "run_name": f"{self.name}:{label}:seed{seed}", "log_model": False,
                                "tags": tags}}
        return {"seed_everything": seed, "test_after_fit": test, "resume": False,
                "register": {"register": False},
                "trainer": {"logger": logger, "enable_checkpointing": False,
                            "default_root_dir": str(self.out / "lightning")}}

    def _alias(self, source: Trained, label: str) -> Trained:
        """A run under this parent that records which earlier run trained this child."""
        tags = {"mlflow.parentRunId": self.parent, "posenc.claims.experiment": self.name,
                "posenc.claims.label": label, "posenc.claims.seed": str(source.seed),
                "posenc.claims.trained_in": str(source.run_id)}
        run = self.client.create_run(self.experiment_id, run_name=f"{self.name}:{label}:seed{source.seed}",
                                     tags=tags).info.run_id
        if source.run_id:
            for k, v in self.client.get_run(source.run_id).data.metrics.items():
                self.client.log_metric(run, k, v)
        self.client.set_terminated(run)
        self.children.append(run)
        return copy.copy(source)


def cli_fit(args: list[str], label: str) -> Any:
    """``pipelines.cli.main(["fit", *args])``; a failing child is a :class:`PosencError`."""
    from pipelines.cli import main as cli_main

    argv, sys.argv = sys.argv, sys.argv[:1]  # the CLI must not see the runner's own options
    try:
        return cli_main(["fit", *args])
    except SystemExit as exc:  # the CLI already printed the one-line reason
        raise PosencError(f"training {label} failed (exit status {exc.code}); see the error above") from None
    finally:
        sys.argv = argv


def resolve(path: str) -> Path:
    """``path`` as given, or relative to the repository root."""
    p = Path(path)
    if p.is_file():
        return p
    if (ROOT / p).is_file():
        return ROOT / p
    raise PosencError(f"{path}: config file not found (relative to the working folder or the repository)")


def scheme_spec(scheme: str | dict | None) -> dict | None:
    """An encoding spec ``{class_path, init_args}`` from a ``configs/posenc`` name, a scheme YAML or
    a spec (``None``: the task's own encoding)."""
    if scheme is None or isinstance(scheme, dict):
        return copy.deepcopy(scheme)
    path = Path(scheme) if scheme.endswith((".yaml", ".yml")) else Path("configs/posenc") / f"{scheme}.yaml"
    cfg = load_config([str(resolve(str(path)))])
    pe = ((cfg.get("model") or {}).get("init_args") or {}).get("pe")
    if not isinstance(pe, dict):
        raise PosencError(f"{path}: no model.init_args.pe in this scheme config")
    return pe
