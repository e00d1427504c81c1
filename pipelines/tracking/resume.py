"""Resume an interrupted ``fit``: rerunning the same command continues the same MLflow run.

Every ``fit`` gets a run directory ``<default_root_dir>/runs/<key>/``, where ``key`` hashes the
resolved config (without the run id and ckpt path, which resuming sets itself). While training:

* ``run.json`` holds the MLflow run id (written when the run is created);
* ``last.ckpt`` is written every ``every_n_steps`` optimizer steps and at each epoch end, to a
  temporary name and renamed into place, so a kill (even ``SIGKILL``) never leaves a torn file.

* ``run.lock`` says which process trains it (:mod:`pipelines.tracking.runlock`): a second process
  with the same config stops with one line while the first is alive.

A rerun of the same config, once the lock is free (or stale), resumes only an *interrupted* run:
one left RUNNING (``kill -9``) or KILLED (SIGTERM, Ctrl-C) with a ``last.ckpt``. It logs into the
same MLflow run (``MLFlowLogger(run_id=…)``) and passes ``ckpt_path`` to ``fit``. A FAILED run is
never resumed (it stays FAILED; the command starts a new run), nor a FINISHED one. A successful fit
removes the files, so the next run of that config starts afresh.

Exact continuation. Lightning restores the weights, optimizer, scheduler, loop counters and callback
states, but a plain ``DataLoader`` restarts its epoch from the first batch and the global RNGs are
not saved. :class:`ResumableLoader` makes the training loader stateful (Lightning stores its
``state_dict`` in the checkpoint): it records the sampler generator's state at the start of the
epoch (or, for a sampler whose order is a function of its epoch, the epoch) and, on restore, rewinds
it and skips the batches already trained on. :class:`ResumeCheckpoint`
saves the global torch/numpy/Python RNG states and puts them back before the first resumed batch.
Limits: samplers drawing from the *global* torch RNG (no ``generator``) and augmentation drawing from
a dataset's own RNG are not rewound; every datamodule in this project seeds its training sampler.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import yaml
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states

from pipelines.console.scrub import scrub_value
from pipelines.tracking.failure import set_status_when_free
from pipelines.tracking.runlock import acquire, hold
from pipelines.tracking.store import mlflow_logger_args, mlflow_loggers
from posenc import PosencError

log = logging.getLogger(__name__)

RUN_FILE, LAST = "run.json", "last.ckpt"
_NOT_HASHED = ("ckpt_path", "trainer.logger.init_args.run_id", "trainer.logger.init_args.run_name",
               "resume", "checkpoint_every_n_steps", "config", "take_over_lock")


def config_key(config: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the resolved config (as a dict), minus the keys resuming sets."""
    data = json.loads(json.dumps(config, default=str))
    for dotted in _NOT_HASHED:
        *parents, last = dotted.split(".")
        node = data
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def run_dir_for(config_yaml: str, root: str | Path) -> Path:
    """``<root>/runs/<key>`` for a config dumped as YAML."""
    return Path(root) / "runs" / config_key(yaml.safe_load(config_yaml))


def _atomic_json(path: Path, value: dict) -> None:
    """Write ``value`` (scrubbed: no credential or home path, :func:`pipelines.console.scrub.scrub_value`) to
    ``path`` through a temporary file, readable by its owner only."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(scrub_value(value)))
    os.replace(tmp, path)


def previous_run(run_dir: Path, tracking_uri: str | None) -> tuple[str | None, Path | None]:
    """``(run_id, last.ckpt)`` of an *interrupted* run of this config, else ``(None, None)``.

    Call it holding the run directory's lock (:mod:`pipelines.tracking.runlock`): no live process
    then owns the run. Only a run left RUNNING (killed) or KILLED (stopped by a signal) with a resume
    checkpoint is resumed. A FAILED run stays FAILED in the history and a FINISHED or deleted one is
    left alone: the resume files are cleared and the command starts a new run. A RUNNING run without
    a checkpoint (killed before its first one) is marked KILLED.
    """
    state = run_dir / RUN_FILE
    if not state.is_file():
        return None, None
    try:
        run_id = json.loads(state.read_text())["run_id"]
    except (OSError, ValueError, KeyError, TypeError):
        run_id = None
    status = _run_status(run_id, tracking_uri) if run_id else None
    ckpt = run_dir / LAST
    if status in ("RUNNING", "KILLED") and ckpt.is_file():
        return run_id, ckpt
    if os.environ.get("RANK", "0") != "0":  # torchrun/SLURM: rank 0 alone clears and reports
        return None, None
    if status == "FAILED":
        print(f"MLflow run {run_id} FAILED: it is not resumed (its failure stays in the history); "
              "starting a new run", file=sys.stderr)
    elif status == "RUNNING":
        from mlflow.tracking import MlflowClient  # heavy: mlflow, loaded only when tracking

        set_status_when_free(MlflowClient(tracking_uri), run_id, "KILLED")
    clear(run_dir)
    return None, None


def _run_status(run_id: str, tracking_uri: str | None) -> str | None:
    from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking
    from mlflow.tracking import MlflowClient  # heavy: mlflow, loaded only when tracking

    try:
        return MlflowClient(tracking_uri).get_run(run_id).info.status
    except MlflowException:
        return None


def clear(run_dir: Path) -> None:
    """Remove the resume state of a run directory (the directory goes if it is then empty)."""
    for name in (RUN_FILE, LAST):
        (run_dir / name).unlink(missing_ok=True)
    for tmp in run_dir.glob(".*.tmp-*"):
        tmp.unlink(missing_ok=True)
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()


class ResumableLoader:
    """A training ``DataLoader`` made stateful for exact mid-epoch resumption.

    ``state_dict()`` holds the sampler generator's state at the start of the current epoch and the
    number of batches the trainer has processed in it; after ``load_state_dict`` the next epoch
    iteration rewinds the generator and skips those batches (they are drawn and dropped, not
    trained on), so the remaining batches are exactly those of an uninterrupted run.
    """

    def __init__(self, loader: Any, trainer: L.Trainer) -> None:
        self.loader, self.trainer = loader, trainer
        self._epoch_start: torch.Tensor | None = None
        self._pending: dict[str, Any] | None = None

    @property
    def _generator(self) -> torch.Generator | None:
        sampler = getattr(self.loader, "sampler", None)
        return getattr(sampler, "generator", None)

    @property
    def _epoch_sampler(self) -> Any:
        """The sampler when its order is a function of its epoch (``datamodules.sampling``), else None."""
        sampler = getattr(self.loader, "sampler", None)
        return sampler if hasattr(sampler, "set_epoch") and hasattr(sampler, "epoch") else None

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # batch_size, dataset, … for Lightning's inspection
        if name in ("loader", "trainer"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self):
        gen, skip = self._generator, 0
        if self._pending is not None:
            state, self._pending = self._pending, None
            if gen is not None and state.get("generator") is not None:
                gen.set_state(state["generator"])
            by_epoch = self._epoch_sampler if state.get("epoch") is not None else None
            skip = int(state.get("batches", 0))
            if skip >= len(self.loader):  # saved at the end of an epoch: move past the whole epoch
                if by_epoch is None:  # (an epoch-ordered sampler draws lazily, after Lightning's set_epoch)
                    for _ in self.loader:
                        pass
                skip = 0
            elif by_epoch is not None:  # the skipped batches are drawn now, before Lightning sets the epoch
                by_epoch.set_epoch(int(state["epoch"]))
        self._epoch_start = gen.get_state().clone() if gen is not None else None
        it = iter(self.loader)
        for _ in range(skip):
            next(it)
        return it

    def state_dict(self) -> dict[str, Any]:
        done = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        sampler = self._epoch_sampler
        return {"generator": self._epoch_start, "batches": int(done),
                "epoch": int(sampler.epoch) if sampler is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = dict(state)


class ResumeCheckpoint(L.Callback):
    """Keep ``run_dir/last.ckpt`` (atomic) and ``run_dir/run.json`` for :mod:`pipelines.tracking.resume`.

    Args:
        run_dir: the config's run directory.
        every_n_steps: optimizer steps between checkpoints (also saved at every epoch end).
    """

    def __init__(self, run_dir: str | Path, every_n_steps: int = 50) -> None:
        if every_n_steps < 1:
            raise ValueError(f"checkpoint_every_n_steps must be ≥ 1, got {every_n_steps}")
        self.run_dir, self.every_n_steps = Path(run_dir), every_n_steps
        self._rng: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        dm = trainer.datamodule
        if dm is not None and not getattr(dm, "_resumable_wrapped", False):
            make = dm.train_dataloader
            dm.train_dataloader = lambda: ResumableLoader(make(), trainer)
            dm._resumable_wrapped = True
        if trainer.is_global_zero:
            self._record_run(trainer)

    def _record_run(self, trainer: L.Trainer) -> None:

        self.run_dir.mkdir(parents=True, exist_ok=True)
        for logger in mlflow_loggers(trainer):
            client, run_id = logger.experiment, logger.run_id  # creates the run if it is new
            if client.get_run(run_id).info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")  # a resumed KILLED run is running again
            _atomic_json(self.run_dir / RUN_FILE, {"run_id": run_id, "tracking_uri": logger._tracking_uri})
            break

    def _save(self, trainer: L.Trainer) -> None:
        if trainer.sanity_checking:
            return
        path = self.run_dir / LAST
        tmp = path.with_name(f".{LAST}.tmp-{os.getpid()}")
        trainer.save_checkpoint(tmp, weights_only=False)  # the full state: optimizer, loops, callbacks
        if trainer.is_global_zero:
            os.replace(tmp, path)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        fit_state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        self._loader_states = fit_state.get("combined_loader")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Put the training loader where the checkpoint left it. Lightning does this itself only when
        the loader is first built after the restore; ``configure_optimizers`` asking for
        ``trainer.estimated_stepping_batches`` builds it before, so it is done (again) here."""
        check_same_resume(trainer)
        states, self._loader_states = getattr(self, "_loader_states", None), None
        loader, fetcher = trainer.fit_loop._combined_loader, trainer.fit_loop._data_fetcher
        if not states or loader is None or fetcher is None:
            return
        stateful = [dl for dl in loader.flattened if isinstance(dl, ResumableLoader)]
        if len(stateful) != len(states):
            log.warning("resume: the training loader does not match the checkpoint; its epoch restarts")
            return
        for dl, state in zip(stateful, states, strict=True):
            dl.load_state_dict(state)
        iter(fetcher)  # a new iterator from the restored position

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._rng is not None:
            _set_rng_states(self._rng)
            self._rng = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        last_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        if trainer.global_step % self.every_n_steps == 0 and not last_of_epoch:
            self._save(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and not trainer.interrupted:
            clear(self.run_dir)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _primitive_rng(_collect_rng_states(include_cuda=False))}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        rng = state_dict.get("rng")
        self._rng = _numpy_rng(rng) if rng is not None else None


def _primitive_rng(states: dict[str, Any]) -> dict[str, Any]:
    """RNG states without numpy objects, so every checkpoint still loads with ``weights_only=True``."""
    out = dict(states)
    if "numpy" in out:
        kind, keys, pos, has_gauss, gauss = out["numpy"]
        keys = torch.from_numpy(keys.astype("int64"))
        out["numpy"] = (str(kind), keys, int(pos), int(has_gauss), float(gauss))
    return out


def _numpy_rng(states: dict[str, Any]) -> dict[str, Any]:

    out = dict(states)
    if "numpy" in out:
        kind, keys, pos, has_gauss, gauss = out["numpy"]
        out["numpy"] = (kind, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, gauss)
    return out


__all__ = ["ResumableLoader", "ResumeCheckpoint", "clear", "config_key", "previous_run", "run_dir_for"]


def prepare(parser: Any, cfg: Any) -> Path:
    """Before instantiation: take the config's run directory's lock (a live run of the same config
    is a one-line :class:`~pipelines.tracking.runlock.RunLocked`); if an interrupted run of the
    same config left ``run.json`` and ``last.ckpt`` there, log into that MLflow run and resume.

    Args:
        parser: the subcommand's parser (to dump the resolved config).
        cfg: the subcommand's config namespace; ``trainer.logger.init_args.run_id`` and
            ``ckpt_path`` are set in place when resuming (an explicit ``ckpt_path`` is kept).
    """
    text = parser.dump(cfg, skip_none=False, skip_validation=True)
    run_dir = run_dir_for(text, cfg.trainer.get("default_root_dir") or "outputs")
    mlflow = mlflow_logger_args(cfg)
    handed = handed_down(run_dir)
    if handed is not None:  # a rank Lightning launched: follow the launching process's decision
        run_id, ckpt = handed
    else:
        if os.environ.get("RANK", "0") == "0":  # torchrun/SLURM: rank 0 holds the lock for all
            hold(acquire(run_dir, bool(cfg.get("take_over_lock", False))))
        run_id, ckpt = (None, None) if mlflow is None else previous_run(run_dir, mlflow.get("tracking_uri"))
        hand_down(run_dir, run_id, ckpt)
    if run_id is None:
        return run_dir
    mlflow.run_id = run_id
    if ckpt is not None and not cfg.get("ckpt_path"):
        cfg.ckpt_path = str(ckpt)
    if handed is None:
        print(f"resuming MLflow run {run_id} from {ckpt}", file=sys.stderr)
    return run_dir


# ----------------------------------------------------------------------------- several processes
_HANDOFF = "POSENC_RESUME_HANDOFF"


def hand_down(run_dir: Path, run_id: str | None, ckpt: Path | None) -> None:
    """Record this process's resume decision in its environment, which the ranks Lightning's DDP
    launcher starts from it inherit: they must resume exactly like rank 0, and by the time they
    look, rank 0 may already have changed ``run_dir``."""
    os.environ[_HANDOFF] = json.dumps({"pid": os.getpid(), "run_dir": str(Path(run_dir).resolve()),
                                       "run_id": run_id, "ckpt": str(ckpt) if ckpt else None})


def handed_down(run_dir: Path) -> tuple[str | None, Path | None] | None:
    """The decision of the parent process for the same run directory, when this process is a rank
    that the parent launched (``torchrun``/SLURM ranks have no such parent: they read ``run_dir``)."""
    try:
        state = json.loads(os.environ.get(_HANDOFF, ""))
    except ValueError:
        return None
    if state.get("pid") != os.getppid() or state.get("run_dir") != str(Path(run_dir).resolve()):
        return None
    return state.get("run_id"), Path(state["ckpt"]) if state.get("ckpt") else None


def check_same_resume(trainer: L.Trainer) -> None:
    """Every rank must start from the same checkpoint: ranks that read different ``outputs/`` folders
    (one per node, not shared) would not, and would train out of step; stop with one line instead."""
    import torch.distributed as dist  # heavy: torch.distributed, only under DDP


    if trainer.world_size < 2 or not (dist.is_available() and dist.is_initialized()):
        return
    mine = str(trainer.ckpt_path or "")
    every: list[Any] = [None] * trainer.world_size
    dist.all_gather_object(every, mine)
    if len(set(every)) > 1:
        raise PosencError(f"resume: the {trainer.world_size} processes would start from different "
                          f"checkpoints ({sorted(set(every))}); put trainer.default_root_dir on a folder "
                          "every node shares, or set --resume false")
