"""What a run does when it goes wrong: stop on a non-finite loss, never leave an MLflow run RUNNING.

SIGTERM (:func:`stop_on_sigterm`) raises :class:`Terminated` in the main thread at the next Python
instruction — mid-step, not at the end of a step as Lightning's own handler does — and the run is
marked KILLED (so the same command resumes it), as it is on Ctrl-C; any other exception marks it FAILED.

Lightning already calls ``logger.finalize("failed")`` when fit/test raise; :class:`FailedRunGuard`
makes sure of it independently of the logger (a failing checkpoint upload inside ``finalize`` would
otherwise leave the run RUNNING) and says which run failed. :class:`StopOnNonFiniteLoss` checks the
training loss before the backward pass, so the weights (and the last checkpoint) are never NaN.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import lightning as L
import torch

from pipelines.tracking.store import mlflow_loggers, tracking_uri
from posenc import PosencError

log = logging.getLogger(__name__)


class NonFiniteLoss(PosencError):
    """The training loss became NaN or infinite."""


class Terminated(SystemExit):
    """The process received SIGTERM; exits with status 128 + the signal number (143) if not caught."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(128 + signum)
        self.signum = signum


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While inside: the first SIGTERM raises :class:`Terminated` in the main thread (Lightning's own
    handler, which only stops after the current step, is kept and chained); a second one ends the
    process at once. The previous handler is restored on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def handler(signum: int, frame: object) -> None:
        if fired:  # cleanup after the first one is hanging: die as SIGTERM normally does
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        fired.append(signum)
        raise Terminated(signum)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def mark_runs_failed(trainer: L.Trainer, status: str = "FAILED") -> list[str]:
    """Set every MLflow run of ``trainer`` that is still RUNNING to ``status`` (FAILED or KILLED);
    returns their ids. For KILLED, the logger's own ``finalize("failed")`` that Lightning calls
    next is made to keep KILLED."""

    failed = []
    for logger in mlflow_loggers(trainer):
        if not getattr(logger, "_initialized", False):  # no run was ever created
            continue
        try:
            client, run_id = logger.experiment, logger.run_id
            set_status_when_free(client, run_id, status)
            if status != "FAILED":
                logger.finalize = lambda *_, _lg=logger, **__: type(_lg).finalize(_lg, status)
            failed.append(run_id)
        except Exception as exc:  # the store itself may be what failed; report, never mask the cause
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            log.warning("could not mark MLflow run %s %s (%s); the same command resumes it",
                        getattr(logger, "_run_id", None), status, first)
    return failed


#: how long a stopping run keeps trying to record its status in a store another process holds locked
#: (sqlite gives up after 20 s each time); a second SIGTERM ends the wait at once
STATUS_BUDGET_S = 120.0


def set_status_when_free(client: object, run_id: str, status: str, budget_s: float = STATUS_BUDGET_S) -> None:
    """Set a RUNNING run's status, retrying while the store is locked by another process (sqlite's
    ``database is locked``) for up to ``budget_s`` seconds, so that a run stopped under contention ends
    KILLED or FAILED, not RUNNING.

    Raises:
        Exception: the store's error once the budget is spent, or at once for any other error.
    """
    deadline = time.monotonic() + budget_s
    while True:
        try:
            if client.get_run(run_id).info.status == "RUNNING":
                client.set_terminated(run_id, status)
            return
        except Exception as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class FailedRunGuard(L.Callback):
    """On any exception during fit/validate/test: the MLflow run is marked FAILED (not RUNNING), or
    KILLED when the exception is SIGTERM's :class:`Terminated` or Ctrl-C."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule,
                     exception: BaseException) -> None:
        if trainer.global_rank != 0:
            return
        status = "KILLED" if isinstance(exception, (Terminated, KeyboardInterrupt)) else "FAILED"
        for run_id in mark_runs_failed(trainer, status):
            print(f"MLflow run {run_id} marked {status} ({type(exception).__name__})", file=sys.stderr)


class StopOnNonFiniteLoss(L.Callback):
    """Raise a one-line :class:`NonFiniteLoss` before backward when the training loss is NaN/inf.

    Checked on every step (one scalar ``isfinite``); the optimizer never steps on a bad loss, so the
    weights and any checkpoint written afterwards stay finite.
    """

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           loss: torch.Tensor) -> None:
        if bool(torch.isfinite(loss.detach()).all()):
            return
        value = float(loss.detach().float().reshape(-1)[0])
        shown = "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        raise NonFiniteLoss(
            f"training loss is {shown} at step {trainer.global_step} (epoch {trainer.current_epoch}, batch "
            f"{trainer.fit_loop.epoch_loop.batch_idx}); the run was stopped: lower model.lr, keep "
            f"trainer.gradient_clip_val, or check the input data for extreme values"
        )


__all__ = ["FailedRunGuard", "NonFiniteLoss", "StopOnNonFiniteLoss", "Terminated", "mark_runs_failed",
           "stop_on_sigterm"]


def exception_chain(exc: BaseException):
    """``exc`` and its causes/contexts, innermost last (each once, cycles cut)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


_STORE: dict[str, str | None] = {"uri": None}


def note_store(uri: str | None) -> None:
    """Remember the MLflow store the CLI is about to open, for :func:`environment_error`."""
    _STORE["uri"] = uri


def environment_error(exc: BaseException) -> str | None:
    """One line for a broken environment — a file or folder that cannot be written, an MLflow
    store that is corrupt or locked — found anywhere in the exception chain, else ``None``."""

    lost = lost_peer(exc)
    if lost is not None:
        return lost
    for e in exception_chain(exc):
        module = type(e).__module__
        if module.startswith(("sqlalchemy", "sqlite3", "mlflow")):
            reason = str(getattr(e, "orig", None) or e).strip().splitlines()
            reason = reason[0][:200] if reason else type(e).__name__
            hint = " (another process holds it: retry later)" if "locked" in reason else ""
            return f"MLflow store {_STORE['uri'] or tracking_uri()}: {reason}{hint}"
    for e in exception_chain(exc):
        if isinstance(e, OSError) and e.filename:
            return f"{e.filename}: {e.strerror or type(e).__name__} (cannot write there: check the path)"
    return None


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "NCCL communicator was aborted",
              "Watchdog caught collective operation timeout")


def lost_peer(exc: BaseException) -> str | None:
    """One line when another process of a distributed (DDP) run died — this rank's collective then
    fails (gloo: "Connection closed by peer"; NCCL: an aborted communicator or a timeout) — else
    ``None``. Rerunning the same command resumes the run from its last checkpoint."""
    import torch.distributed as dist  # heavy: torch.distributed, only under DDP

    backend_error = getattr(dist, "DistBackendError", ())
    for e in exception_chain(exc):
        text = str(e)
        gone = isinstance(e, RuntimeError) and any(p in text for p in _PEER_GONE)
        if gone or isinstance(e, backend_error):
            rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "?"))
            reason = text.strip().splitlines()[0][:160] if text.strip() else type(e).__name__
            return (f"rank {rank}: another process of this distributed run stopped ({reason}); "
                    "run the same command again to resume from the last checkpoint")
    return None
