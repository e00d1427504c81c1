"""The tasks built on the project's Transformer: the network, its encoding and their settings.

:class:`TransformerTask` is the :class:`~pipelines.tasks.base.TaskModule` that owns a
:class:`posenc.nn.Transformer` with any positional encoding: the DNA tasks and the
:class:`~pipelines.tasks.forecast.model.Forecaster` extend it. A task without attention (DLinear)
extends :class:`~pipelines.tasks.base.TaskModule` alone and takes none of these settings.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

from datamodules.config import as_group
from pipelines.tasks.base import TaskModule
from pipelines.tasks.options import Net
from posenc import PositionalEncoding, build_encoding
from posenc.nn import AttentionSettings, Transformer
from posenc.registry import EncodingFactory


class TransformerTask(TaskModule):
    """A task whose network is the project's Transformer with a positional encoding.

    Args:
        pe: the positional encoding, given as a class (YAML ``class_path``/``init_args`` without
            d_model/n_heads, which come from this model); ``None`` means no encoding.
        net: the Transformer's shape (:class:`~pipelines.tasks.options.Net`).
        attention: how the attention runs (kernels, ``compile``; :class:`~posenc.nn.AttentionSettings`); a
            checkpoint from before it existed loads with the defaults.
        **kwargs: the groups of :class:`~pipelines.tasks.base.TaskModule` (``optim``).
    """

    config_groups: ClassVar[dict[str, type]] = {**TaskModule.config_groups, "net": Net,
                                                "attention": AttentionSettings}

    def __init__(
        self,
        pe: EncodingFactory | None = None,
        net: Net = Net(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        attention: AttentionSettings = AttentionSettings(),  # noqa: B008
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.net = n = as_group(Net, net, "net")
        attention = as_group(AttentionSettings, attention, "attention")
        self._base_hparams.update(net=asdict(n), attention=asdict(attention))
        encoding = build_encoding(pe, n.d_model, n.n_heads)
        self.backbone = Transformer(n.d_model, n.n_heads, n.n_layers, encoding, d_ff=n.d_ff,
                                    dropout=n.dropout, causal=self.causal, scale_embedding=n.scale_embedding,
                                    log_scale_len=n.log_scale_len, embedding_dropout=n.embedding_dropout,
                                    window=n.attention_window, settings=attention)

    def _save_hparams(self, **task_hparams: Any) -> None:
        """Save all hyperparameters, the encoding as its primitive spec (call once, from the task)."""
        super()._save_hparams(**task_hparams, pe=self.pe.spec() if self.pe is not None else None)

    @property
    def pe(self) -> PositionalEncoding | None:
        """The backbone's encoding (``None``: no encoding)."""
        return self.backbone.pe

    @property
    def d_model(self) -> int:
        """The model width D (of the backbone, its embeddings and its outputs)."""
        return int(self.net.d_model)
