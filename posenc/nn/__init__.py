"""The model: one pre-LN Transformer whose attention calls any scheme's hooks, and its kernels."""

from posenc.nn.attention import Attention, AttentionSettings, build_mask
from posenc.nn.transformer import Block, Transformer, length_bucket

__all__ = ["Attention", "AttentionSettings", "Block", "Transformer", "build_mask", "length_bucket"]
