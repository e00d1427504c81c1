"""The model: one pre-LN Transformer whose attention calls any scheme's hooks, and its kernels."""

from pipelines.model.attention import Attention, AttentionSettings, build_mask
from pipelines.model.transformer import Block, Transformer, length_bucket

__all__ = ["Attention", "AttentionSettings", "Block", "Transformer", "build_mask", "length_bucket"]
