"""posenc pipelines: the Transformer, task LightningModules, CLI entry points, MLflow wiring."""

from pipelines.callbacks import MarkovBaselines
from pipelines.classify import SequenceClassifier
from pipelines.forecast import Forecaster
from pipelines.lm import DNALanguageModel
from pipelines.mlm import MaskedDNAModel
from pipelines.model import Attention, Transformer, build_mask
from pipelines.segment import FrameSegmenter
from pipelines.task import TaskModule
from pipelines.ts_baselines import ForecastBaselines

__all__ = ["Attention", "DNALanguageModel", "ForecastBaselines", "Forecaster", "MarkovBaselines", "TaskModule",
           "Transformer", "build_mask"]
__all__ += ["FrameSegmenter", "MaskedDNAModel", "SequenceClassifier"]  # DNA tasks
from pipelines.inference import load_model  # noqa: E402 - inference: checkpoints, MLflow runs and models

__all__ += ["load_model"]
