"""posenc pipelines: task LightningModules, evaluation, inference and MLflow wiring.

The Transformer and its attention belong to the library (:mod:`posenc.nn`). Sub-packages: ``tasks``
(one module per task, each task's predictor beside it), ``tracking`` (MLflow, resume, failures),
``inference`` (resolve, load, register, write: the predict command), ``eval`` (length extrapolation,
evaluate, the sweep runner, statistics) and ``studies`` (claims, comparisons, benchmarks; nothing
else imports them). The names below are public API: configs, checkpoints and registered MLflow
models name them by these paths.
"""

import os
import sys

# `python -m pipelines.<command>` puts the working folder first on sys.path: a `yaml.py`, `numpy.py` or
# `secrets.py` beside the user's data would then stand in for the real module at its first import. This
# package is the first thing such a command imports (only the interpreter's own start-up modules are
# loaded yet), so the entry goes here, before any other import; the project itself is installed (or
# the working folder *is* the project, which is then kept). `PYTHONSAFEPATH=1` (the Makefile) does the
# same for every command.
if (sys.argv[:1] == ["-m"] and sys.path and sys.path[0] in ("", ".", os.getcwd())
        and os.path.dirname(os.path.dirname(os.path.abspath(__file__))) != os.getcwd()):
    del sys.path[0]

# A spawned worker (`--jobs`) imports this package first thing, while it re-imports the command's main
# module (torch, Lightning, MLflow: tens of seconds on a busy machine): it dies with its parent from now
# on, not only once its pool's initializer runs (a parent killed meanwhile left it and the resource
# tracker running). multiprocessing marks the process `_inheriting` while it prepares it.
if getattr(sys.modules.get("multiprocessing") and sys.modules["multiprocessing"].current_process(),
           "_inheriting", False):
    from pipelines.children import die_with_parent

    die_with_parent()

# No network at run time: MLflow 3's usage telemetry sends events to a remote host from a background
# thread unless switched off (a user who wants it sets MLFLOW_DISABLE_TELEMETRY=false).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from pipelines.inference import load_model  # noqa: E402
from pipelines.tasks.base import TaskModule
from pipelines.tasks.dna.classify import ClassifyBaselines, KmerBaseline, SequenceClassifier
from pipelines.tasks.dna.lm import DNALanguageModel
from pipelines.tasks.dna.markov import MarkovBaselines
from pipelines.tasks.dna.mlm import MaskedDNAModel
from pipelines.tasks.dna.segment import FrameSegmenter
from pipelines.tasks.forecast.baselines import ForecastBaselines
from pipelines.tasks.forecast.model import Forecaster
from posenc.registry import trust_modules

#: the packages this project's checkpoints, saved configs and registered models name (posenc itself
#: trusts only posenc and torch)
PROJECT_MODULES = ("pipelines", "datamodules", "lightning")
trust_modules(*PROJECT_MODULES)


def __getattr__(name: str) -> type:
    """``pipelines.ExtrapolationEval``, imported on first use: the package must not import the
    ``python -m pipelines.eval.evaluate`` entry point itself (runpy would warn that it was imported
    before it ran)."""
    if name == "ExtrapolationEval":
        from pipelines.eval.evaluate import ExtrapolationEval  # lazy: see above (runpy's warning)

        return ExtrapolationEval
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")

__all__ = [
    "TaskModule",                                                      # what every task shares
    "DNALanguageModel", "MaskedDNAModel", "FrameSegmenter", "SequenceClassifier", "Forecaster",  # tasks
    "MarkovBaselines", "ForecastBaselines", "KmerBaseline", "ClassifyBaselines",  # baselines beside every run
    "ExtrapolationEval",                                               # evaluation after fit
    "load_model",                                                      # inference
]
