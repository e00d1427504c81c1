"""MLflow system metrics are started for CUDA fits only."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import MLFlowLogger

from pipelines.tracking.system_metrics import GpuSystemMetrics
from tests.helpers import migrated_store


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.lin(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)


def _fit(tmp_path, accelerator: str) -> tuple[GpuSystemMetrics, MLFlowLogger]:
    db = migrated_store(tmp_path / "mlflow.db")
    logger = MLFlowLogger(tracking_uri=f"sqlite:///{db}", experiment_name="t")
    cb = GpuSystemMetrics(interval=1.0)
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_steps=2, logger=logger, callbacks=[cb],
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(_Tiny())
    return cb, logger


@pytest.mark.slow  # a real Trainer and sqlite MLflow store: ~10-60 s on 2 shared cores
def test_cpu_fit_logs_no_system_metrics(tmp_path):
    cb, logger = _fit(tmp_path, "cpu")
    assert cb.monitors == []
    metrics = logger.experiment.get_run(logger.run_id).data.metrics
    assert not any(k.startswith("system/") for k in metrics)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fit_logs_gpu_metrics(tmp_path):
    pytest.importorskip("psutil")
    pytest.importorskip("pynvml")
    cb, logger = _fit(tmp_path, "cuda")
    assert cb.monitors == []  # finished after fit
    metrics = logger.experiment.get_run(logger.run_id).data.metrics
    assert any(k.startswith("system/gpu") for k in metrics)
