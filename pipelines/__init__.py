"""posenc pipelines: the Transformer, task LightningModules, CLI entry points, MLflow wiring."""

from pipelines.callbacks import MarkovBaselines
from pipelines.classify import SequenceClassifier
from pipelines.forecast import Forecaster
from pipelines.inference import load_model
from pipelines.lm import DNALanguageModel
from pipelines.mlm import MaskedDNAModel
from pipelines.model import Attention, Transformer, build_mask
from pipelines.segment import FrameSegmenter
from pipelines.task import TaskModule
from pipelines.ts_baselines import ForecastBaselines

__all__ = [
    "Attention", "Transformer", "build_mask", "TaskModule",           # the model
    "DNALanguageModel", "MaskedDNAModel", "FrameSegmenter", "SequenceClassifier", "Forecaster",  # tasks
    "MarkovBaselines", "ForecastBaselines",                            # baselines beside every run
    "load_model",                                                      # inference
]
