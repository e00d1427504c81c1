"""MLflow system metrics (GPU utilisation and memory, CPU, RAM) for training runs on a GPU.

Lightning's ``MLFlowLogger`` creates its run through the client, so MLflow's own
``log_system_metrics`` switch never starts; this callback starts MLflow's monitor on that run when
the trainer runs on CUDA and stops it when fitting ends. On CPU it does nothing. It needs
``psutil`` and, for GPU figures, ``nvidia-ml-py``; without them it logs one warning and does nothing.
"""

from __future__ import annotations

import logging

from lightning.pytorch.callbacks import Callback

from pipelines.tracking.store import mlflow_loggers

log = logging.getLogger(__name__)


class GpuSystemMetrics(Callback):
    """Log ``system/*`` metrics to every MLflow run of a CUDA fit, every ``interval`` seconds."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self.monitors: list = []

    def on_fit_start(self, trainer, pl_module) -> None:
        if trainer.strategy.root_device.type != "cuda" or trainer.global_rank != 0:
            return
        try:
            # heavy: mlflow, loaded only when tracking
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
        except ImportError as exc:
            log.warning("MLflow system metrics off: %s (pip install psutil nvidia-ml-py)", exc)
            return
        for logger in mlflow_loggers(trainer):
            monitor = SystemMetricsMonitor(logger.run_id, sampling_interval=self.interval,
                                           resume_logging=True, tracking_uri=logger._tracking_uri)
            monitor.start()
            self.monitors.append(monitor)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.teardown(trainer, pl_module, "fit")

    def teardown(self, trainer, pl_module, stage: str) -> None:
        while self.monitors:
            monitor = self.monitors.pop()
            monitor.finish()
            final_sample(monitor)


def final_sample(monitor) -> None:
    """Log one last sample after the monitor stopped: MLflow's loop publishes only after a full
    interval, so a fit shorter than one (seen on an H200: a 2-step fit logged nothing) and the tail
    of a longer one would go unrecorded. A failure here costs a warning, never the fit."""
    try:
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
        monitor.mlflow_logger.flush()
    except Exception as exc:  # noqa: BLE001 - monitoring must not fail a finished fit
        log.warning("MLflow system metrics: the final sample was not logged (%s)", exc)
