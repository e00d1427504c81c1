"""The model: one pre-LN Transformer whose attention calls any scheme's hooks, and its kernels."""

from pipelines.model.transformer import Attention, AttentionSettings, Block, Transformer, build_mask, length_bucket

__all__ = ["Attention", "AttentionSettings", "Block", "Transformer", "build_mask", "length_bucket"]
