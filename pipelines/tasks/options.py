"""The model's typed option groups, read from a config (``model.init_args.<group>.<field>``).

Every task takes ``net`` (:class:`Net`, the Transformer's shape), ``optim`` (:class:`Optim`, AdamW and
its schedule) and ``attention`` (the library's :class:`posenc.nn.AttentionSettings`, how the attention
runs); the forecaster adds ``series`` (:class:`SeriesInput`) and ``output`` (:class:`ForecastOutput`).
Settings a datamodule links to the model (``vocab_size``, ``lookback``, ``horizon``…) and the encoding
(``pe``) stay top-level.

Each field keeps the name it had as a flat argument, so flat configs, flat overrides
(``--model.init_args.d_model=64``) and checkpoints with flat hyperparameters keep working: the command
line and config files are translated before parsing (:func:`pipelines.tasks.upgrade.legacy.translate_cli`),
checkpoints when read (:mod:`pipelines.tasks.upgrade`). A model itself takes the groups only.

``attention`` changes how, not what, the model computes, so it is not part of a checkpoint's identity:
a checkpoint saved before the group existed loads with the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from datamodules.config import at_least
from posenc import PosencError
from posenc.nn import AttentionSettings
from posenc.nn.attention import check_window

Head = Literal["query", "horizon", "last", "mean"]
Loss = Literal["mse", "mae"]
HEADS = ("query", "horizon", "last", "mean")


def _in_unit(group: str, **values: float | None) -> None:
    """Rates of ``model.init_args.<group>`` in [0, 1] (``None`` values are not checked)."""
    for name, value in values.items():
        if value is not None and not 0.0 <= value <= 1.0:
            raise PosencError(f"model.init_args.{group}.{name}: must be in [0, 1], got {value}")


@dataclass(frozen=True)
class Net:
    """The Transformer's shape (``model.init_args.net``; see :class:`posenc.nn.Transformer`).

    Attributes:
        d_model: model width.
        n_heads: attention heads.
        n_layers: Transformer blocks.
        d_ff: MLP width (default 4·d_model).
        dropout: dropout rate (attention, MLP and the embedding sum).
        embedding_dropout: dropout on the embedding + encoding sum alone (default: ``dropout``).
        scale_embedding: multiply token embeddings by √d_model before the encoding.
        log_scale_len: L0 (the training length) of the log-length attention temperature: a query
            attending n > L0 keys has its logits multiplied by log n / log L0
            (:mod:`posenc.nn.temperature`); ``None``: off.
        attention_window: local attention window w of every layer: query i attends only keys with
            |i − j| < w (LM-Infinite's local branch, :mod:`posenc.nn.attention`); with w = the training
            length, training is unchanged and longer inputs never show a distance training did not.
            ``None``: every key.
    """

    d_model: int = 128
    n_heads: int = 8
    n_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    embedding_dropout: float | None = None
    scale_embedding: bool = False
    log_scale_len: int | None = None
    attention_window: int | None = None

    def __post_init__(self) -> None:
        check_window(self.attention_window, "model.init_args.net.attention_window:")
        at_least("net", "model", d_model=(self.d_model, 1), n_heads=(self.n_heads, 1),
                 n_layers=(self.n_layers, 0), d_ff=(self.d_ff, 1))
        _in_unit("net", dropout=self.dropout, embedding_dropout=self.embedding_dropout)


@dataclass(frozen=True)
class Optim:
    """AdamW and its schedule (``model.init_args.optim``): linear warm-up, then cosine decay to 10%.

    Attributes:
        lr: peak learning rate.
        weight_decay: weight decay of the weight matrices (not of biases, norms or the encoding).
        warmup_steps: linear warm-up steps (at most half the run).
    """

    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise PosencError(f"model.init_args.optim.lr: must be > 0, got {self.lr}")
        at_least("optim", "model", weight_decay=(self.weight_decay, 0), warmup_steps=(self.warmup_steps, 0))


@dataclass(frozen=True)
class SeriesInput:
    """How the forecaster reads the series (``model.init_args.series``).

    Attributes:
        channel_independent: one sequence per target channel (weights shared; PatchTST-style), or
            one multivariate sequence.
        revin: reversible instance normalisation of the targets.
        revin_affine: learnable affine in RevIN.
    """

    channel_independent: bool = True
    revin: bool = True
    revin_affine: bool = True


@dataclass(frozen=True)
class ForecastOutput:
    """What the forecaster outputs and is trained on (``model.init_args.output``).

    Attributes:
        head: ``horizon``, ``query``, ``last`` or ``mean`` (see
            :class:`~pipelines.tasks.forecast.model.Forecaster`).
        loss: training loss on the scaled targets, ``mse`` or ``mae``.
        linear_path: the Transformer added to a fixed same-inputs ridge, its weight chosen on the
            validation windows (:mod:`pipelines.tasks.forecast.blend`); needs ``model.init_args.lookback``.
        plot_examples: test windows drawn in ``forecast.png`` (0: no figure).
    """

    head: Head = "query"
    loss: Loss = "mse"
    linear_path: bool = False
    plot_examples: int = 4

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise PosencError(f"model.init_args.output.head: must be one of {', '.join(HEADS)}, "
                              f"got {self.head!r}")
        if self.loss not in ("mse", "mae"):
            raise PosencError(f"model.init_args.output.loss: must be 'mse' or 'mae', got {self.loss!r}")
        at_least("output", "model", plot_examples=(self.plot_examples, 0))


#: the groups every task takes ({parameter: dataclass}; a task class's ``config_groups`` adds its own)
TASK_GROUPS: dict[str, type] = {"net": Net, "optim": Optim, "attention": AttentionSettings}
