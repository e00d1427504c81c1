"""The attention that carries any ``posenc`` scheme, its kernels, and a pre-LN Transformer built on it.

The encoding is given when a module is built, ``Attention(d_model, n_heads, pe)`` or
``Transformer(d_model, n_heads, n_layers, pe)``; forwards take only the inputs and their positions.
"""

from posenc.nn.attention import Attention, AttentionSettings
from posenc.nn.mask import build_mask
from posenc.nn.transformer import Block, Transformer, length_bucket

__all__ = ["Attention", "AttentionSettings", "Block", "Transformer", "build_mask", "length_bucket"]
