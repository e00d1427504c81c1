"""LightningDataModules for DNA and time series.

Parsing lives in Lightning-free modules (``datamodules.dna.fasta``, ``datamodules.dna.windows``); the
datamodules are imported lazily here so that importing the parsers never pulls in Lightning.
"""

from importlib import import_module

_LAZY = {"DNADataModule": "datamodules.dna.genome", "default_genome": "datamodules.dna.genome",
         "GenomeDataModule": "datamodules.dna.genome", "MaskedDNADataModule": "datamodules.dna.genome",
         "SegmentationDataModule": "datamodules.dna.segment",
         "ClassificationDataModule": "datamodules.dna.classify",
         "TimeSeriesDataModule": "datamodules.timeseries.datamodule"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'datamodules' has no attribute {name!r}")
