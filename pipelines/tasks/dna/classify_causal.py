"""Sequence classification with a causal encoder: :class:`~pipelines.tasks.dna.classify.SequenceClassifier`
with each position attending only to itself and earlier ones (then mean-pooled as before).

Under a causal mask a symmetric bias such as ALiBi's −m·|i − j| sees direction (only earlier keys
exist), and a model without positions still recovers order from the mask; the claim experiments use
it beside the bidirectional classifier (claim 1, and NoPE learning position from the mask).
"""

from __future__ import annotations

from pipelines.tasks.dna.classify import SequenceClassifier


class CausalSequenceClassifier(SequenceClassifier):
    """:class:`SequenceClassifier` with a causal mask (arguments: the same)."""

    causal = True
    task_name = "dna_classify_causal"
