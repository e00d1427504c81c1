"""LightningDataModules for DNA and time series.

Parsing lives in Lightning-free modules (``datamodules.fasta``, ``datamodules.windows``); the
datamodules are imported lazily here so that importing the parsers never pulls in Lightning.
"""

from importlib import import_module

_LAZY = {"DNADataModule": "datamodules.dna", "default_genome": "datamodules.dna",
         "GenomeDataModule": "datamodules.dna", "MaskedDNADataModule": "datamodules.dna",
         "SegmentationDataModule": "datamodules.segment", "ClassificationDataModule": "datamodules.classify",
         "TimeSeriesDataModule": "datamodules.ts"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'datamodules' has no attribute {name!r}")
