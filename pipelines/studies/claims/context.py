"""Training children for the claim experiments: one ``fit`` per (task, scheme, seed) through the
sweep runner (:func:`pipelines.eval.sweep.train_run`), logged as a nested MLflow run of the
experiment's parent run in experiment ``posenc-claims``.

Children are trained in this process (or, with ``--jobs N``, ahead of time in worker processes: see
:mod:`pipelines.studies.claims.jobs`; :meth:`Context.train` then takes the worker's result), exactly
as ``python -m pipelines.train fit --config <task> --config <overlay>`` would, with registration,
resume checkpoints and model logging off (the experiments keep the trained module in memory). Within
one suite run a child with the same task, scheme, seed and overrides is trained once: later experiments
get a run of their own under their parent that points to it (tag ``posenc.claims.trained_in``) and
carries a copy of its metrics.
"""

from __future__ import annotations

import copy
import io
import sys
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipelines.eval.evaluate import _merge, load_config
from pipelines.eval.sweep import TrainedRun, config_key, read_layers, train_run
from pipelines.studies.claims.judge import CLAIM_SEEDS, QUICK_SEEDS, QUICK_STEPS
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENT = "posenc-claims"
NAMESPACE = "posenc.claims"  # the children's tags
#: what ``--smoke`` lays over every child: two batches of everything (not 1: the CLI reads an
#: integer 1 as the fraction 1.0, i.e. every batch)
SMOKE = {
    "trainer": {"limit_train_batches": 2, "limit_val_batches": 2, "limit_test_batches": 2, "max_epochs": 1}
}


def smoke_overlay(config: dict[str, Any]) -> dict[str, Any]:
    """:data:`SMOKE`, with the length sweeps of ``config`` (its ``ExtrapolationEval`` callbacks) cut to
    two batches per length as well: a wiring check need not score a whole test region (the DNA LM's
    is 1 Mb)."""
    callbacks = (config.get("trainer") or {}).get("callbacks")
    if not isinstance(callbacks, list) or not any(_is_sweep(c) for c in callbacks):
        return SMOKE
    cut = [_merge(c, {"init_args": {"max_batches": 2}}) if _is_sweep(c) else c for c in callbacks]
    return _merge(SMOKE, {"trainer": {"callbacks": cut}})


def _is_sweep(callback: Any) -> bool:
    return isinstance(callback, dict) and str(callback.get("class_path", "")).endswith("ExtrapolationEval")


@dataclass
class Child:
    """One training an experiment asks for (the arguments of :meth:`Context.train`); experiments list
    theirs up front (``Experiment.children``) so that ``--jobs N`` can train them in workers."""

    task: str
    scheme: str | dict | None
    seed: int
    label: str
    overrides: dict | None = None
    test: bool = False


@dataclass
class Context:
    """What an experiment runs in: the parent run, output folder, smoke flag and child cache."""

    name: str
    client: Any
    experiment_id: str
    parent: str
    out: Path
    smoke: bool = False
    cache: dict[tuple[str, int], TrainedRun] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    quick: bool = False
    primary: Any = None  # the config's declared primary comparison (judge.Primary) or sentence
    gate: Any = None  # the config's declared gate (gates.Gate), None for an exempt experiment
    pilot_seeds: list[int] | None = None  # --seeds: every experiment's seeds replaced (a pilot)
    #: children being trained in worker processes: (key, seed) → (owning experiment, future)
    pool: dict[tuple[str, int], tuple[str, Any]] = field(default_factory=dict)
    pooled_cpu_s: float = 0.0  # CPU seconds of the workers' children this experiment owns
    workers: bool = False  # children are trained in worker processes (--jobs > 1)

    def max_batches(self, n: int | None) -> int | None:
        """``n`` batches of evaluation, or one under ``--smoke``."""
        return 1 if self.smoke else n

    def seeds(self, seeds: list[int] | None = None) -> list[int]:
        """The seeds to train: ``--seeds`` (a pilot), else ``seeds`` (default
        :data:`~pipelines.studies.claims.judge.CLAIM_SEEDS`),
        the first three under ``--quick``, the first two under ``--smoke`` (enough for an interval)."""
        chosen = list(self.pilot_seeds or (CLAIM_SEEDS if seeds is None else seeds))
        return chosen[:2] if self.smoke else chosen[:QUICK_SEEDS] if self.quick else chosen

    def fit(self, child: Child) -> TrainedRun:
        """:meth:`train` of a :class:`Child`."""
        return self.train(child.task, child.scheme, child.seed, child.label, child.overrides, child.test)

    def request(self, child: Child) -> tuple[str, dict[str, Any]]:
        """The cache key of ``child`` and the keyword arguments of :func:`fit_child` that train it
        under this experiment's parent (picklable: a worker process can train it)."""
        pe = scheme_spec(child.scheme)
        layers = [resolve(child.task)]
        key = config_key([read_layers(layers), pe, child.overrides, child.test, self.smoke, self.quick])
        overlay = _merge(child.overrides or {}, {} if pe is None else {"model": {"init_args": {"pe": pe}}})
        overlay = _merge(overlay, self._overlay(child.test))
        if self.quick:  # a fraction of every epoch's training batches (the LR schedule follows)
            overlay = _merge(overlay, {"trainer": {"limit_train_batches": QUICK_STEPS}})
        if self.smoke:
            overlay = _merge(overlay, smoke_overlay(load_config([str(p) for p in layers])))
        tags = {f"{NAMESPACE}.experiment": self.name, f"{NAMESPACE}.label": child.label}
        return key, dict(layers=layers, overlay=overlay, seed=child.seed, experiment=EXPERIMENT,
                         run_name=f"{self.name}:{child.label}:seed{child.seed}", parent_run_id=self.parent,
                         namespace=NAMESPACE, key=key, tags=tags)

    def train(
        self,
        task: str,
        scheme: str | dict | None,
        seed: int,
        label: str,
        overrides: dict | None = None,
        test: bool = False,
    ) -> TrainedRun:
        """Fit ``task`` (a YAML path) with ``scheme`` (a ``configs/posenc`` name, a YAML path or an
        encoding spec) and ``overrides`` (merged over the task), seed ``seed``; cached per suite run,
        taken from a worker when ``--jobs`` trained it there."""
        key, kwargs = self.request(Child(task, scheme, seed, label, overrides, test))
        if (key, seed) in self.cache:
            return self._alias(self.cache[key, seed], label)
        owner = self.name
        if (key, seed) in self.pool:
            owner, future = self.pool.pop((key, seed))
            found = taken(future, kwargs["run_name"])
            self.pooled_cpu_s += found.cpu_s if owner == self.name else 0.0
        else:
            if self.workers:  # the experiment's children() missed it: slower, not wrong
                print(f"[claims] {self.name}: {label} seed {seed} was not planned (children()); "
                      "training it in the main process", file=sys.stderr)
            found = fit_child(kwargs)
        self.cache[key, seed] = found
        if owner != self.name:  # asked for out of plan order: trained under the planning experiment
            return self._alias(found, label)
        self.children.append(found.run_id)
        return found

    def _overlay(self, test: bool) -> dict[str, Any]:
        """No registration, resume or checkpoints: the experiments keep the trained module in memory."""
        return {
            "test_after_fit": test,
            "resume": False,
            "register": {"register": False},
            "trainer": {"enable_checkpointing": False, "default_root_dir": str(self.out / "lightning")},
        }

    def _alias(self, source: TrainedRun, label: str) -> TrainedRun:
        """A run under this parent that records which earlier run trained this child."""
        tags = {
            "mlflow.parentRunId": self.parent,
            f"{NAMESPACE}.experiment": self.name,
            f"{NAMESPACE}.label": label,
            f"{NAMESPACE}.seed": str(source.seed),
            f"{NAMESPACE}.trained_in": str(source.run_id),
        }
        run = self.client.create_run(
            self.experiment_id, run_name=f"{self.name}:{label}:seed{source.seed}", tags=tags
        ).info.run_id
        if source.run_id:
            for k, v in self.client.get_run(source.run_id).data.metrics.items():
                self.client.log_metric(run, k, v)
        self.client.set_terminated(run)
        self.children.append(run)
        return copy.copy(source)


def taken(future: Any, run_name: str) -> TrainedRun:
    """A worker's run (:func:`fit_packed`'s bytes, unpacked); a worker that died (killed, out of
    memory) or a result this process could not read is one line naming the child and the cause."""

    try:
        return unpack(future.result())
    except BrokenProcessPool as exc:
        cause = _last_line(exc.__cause__)
        cause = f"; cause: {cause}" if cause else ""
        raise PosencError(f"training {run_name}: its --jobs worker process died ({exc}{cause}); "
                          "rerun with --jobs 1 to see why") from None


def _last_line(cause: BaseException | None) -> str:
    """The last line of a pool's remote traceback (the error the pool's result reader met), or ``""``."""
    lines = [ln.strip() for ln in str(cause or "").splitlines() if ln.strip().strip("'\"")]
    return lines[-1] if lines else ""


def fit_packed(kwargs: dict[str, Any]) -> bytes:
    """:func:`fit_child` in a ``--jobs`` worker, the run sent back as :func:`pack`'s bytes.

    Sent as an object, its tensors would cross the pool's pipe by torch's multiprocessing
    reductions: each storage moved to shared memory and received as a file descriptor that this
    process keeps open for as long as the tensor lives. The suite keeps every child (later
    experiments rescore them), about 30 descriptors each, so some 350 children in the main process
    ran out of descriptors (``RLIMIT_NOFILE``), could not unpickle the next result, and the pool
    reported that as a worker "terminated abruptly" (claim 18's ``rope`` seed 3, issue 39).
    """
    return pack(fit_child(kwargs))


def pack(run: TrainedRun) -> bytes:
    """``run`` as bytes, tensors by value (``torch.save``: tensors that share a storage still do)."""
    buffer = io.BytesIO()
    torch.save(run, buffer)
    return buffer.getvalue()


def unpack(data: bytes) -> TrainedRun:
    """The run of :func:`pack`'s bytes (made by this code base's own worker, so not restricted to
    weights: the module and datamodule are whole objects)."""
    return torch.load(io.BytesIO(data), weights_only=False)


def fit_child(kwargs: dict[str, Any]) -> TrainedRun:
    """Train one child (:meth:`Context.request`'s arguments) through the sweep runner; the module in
    eval mode and the trainer let go of (a worker sends the run back pickled; the trainer holds
    closures that cannot be)."""
    found = train_run(**kwargs, reuse=False, log_model=False)  # the experiments need the module
    found.module.eval()
    if found.datamodule is not None:
        found.datamodule.trainer = None
    found.module.trainer = None
    return found


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
