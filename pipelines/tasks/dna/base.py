"""What the DNA tasks share: the token embedding, the data description and the input example."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from pipelines.tasks.base import TaskModule


class DNATask(TaskModule):
    """A task over k-mer tokens of DNA records: ``predict`` takes sequences (a string, records, a
    DataFrame with ``sequence``, or a FASTA/GenBank path; see :mod:`pipelines.tasks.dna.predict`)."""

    predict_input: ClassVar[str] = "sequences"

    def embed_tokens(self, vocab_size: int) -> nn.Embedding:
        """The token embedding (V → D) every DNA task starts with."""
        return nn.Embedding(vocab_size, self.d_model)

    def per_class_head(self, vocab_size: int, pad_id: int, num_classes: int, **hparams: Any) -> None:
        """The token embedding, a linear head to ``num_classes`` logits (D → C) and the padding id of the
        labelling tasks; their settings (and the task's own ``hparams``) saved with the model's."""
        self.embedding = self.embed_tokens(vocab_size)
        self.head = nn.Linear(self.d_model, num_classes)
        self.pad_id, self.num_classes = pad_id, num_classes
        self._save_hparams(vocab_size=vocab_size, pad_id=pad_id, num_classes=num_classes, **hparams)

    def padding(self, tokens: Tensor) -> Tensor | None:
        """The key-padding mask (B, T) of ``tokens``, or ``None`` when nothing is padding."""
        pad = tokens == self.pad_id
        return pad if pad.any() else None

    def describe_data(self, dm: Any) -> dict[str, Any]:
        """Tokenizer (k-mer, stride) and training length of a DNA datamodule, and its source file."""
        if dm is None or not hasattr(dm, "tokenizer"):
            return {}
        tok = dm.tokenizer
        return {"data": {"kmer": tok.k, "kmer_stride": tok.stride, "seq_len": int(dm.seq_len)},
                "source": str(getattr(dm, "fasta", "") or "")}

    def input_example(self, dm: Any) -> Any:
        """One short sequence (at least four k-mer tokens) as a DataFrame with ``id``/``sequence``."""
        import pandas as pd  # heavy: pandas

        k = int(self.posenc_inference.get("data", {}).get("kmer", 1))
        return pd.DataFrame({"id": ["example"], "sequence": ["ACGTTGCA" * max(4, k)]})
