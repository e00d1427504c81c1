"""Fault injection that the CLI loads by class path, like the toy task beside it:
``--trainer.callbacks+=tests.toy.faults.FailAtStep`` (``tests.helpers.FAULT``).

A module of its own so that importing tests/helpers.py does not import Lightning.
"""

from __future__ import annotations

import os
import signal
import time

import lightning as L


class FailAtStep(L.Callback):
    """Test fault injection: at ``step`` (when ``$POSENC_FAULT`` is set) raise, or send the process
    SIGKILL (``how="kill"``) or SIGTERM (``how="term"``)."""

    def __init__(self, step: int = 9, how: str = "raise") -> None:
        self.step, self.how = step, how

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or not os.environ.get("POSENC_FAULT"):
            return
        if self.how in ("kill", "term"):
            os.kill(os.getpid(), signal.SIGKILL if self.how == "kill" else signal.SIGTERM)
        raise RuntimeError(f"injected fault at step {self.step}")


class SlowStep(L.Callback):
    """Test stand-in for a step that takes minutes (a huge batch or length): at ``step`` (when
    ``$POSENC_FAULT`` is set) the training step sleeps ``seconds``."""

    def __init__(self, step: int = 5, seconds: float = 600.0) -> None:
        self.step, self.seconds = step, seconds

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and os.environ.get("POSENC_FAULT"):
            time.sleep(self.seconds)
