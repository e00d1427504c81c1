"""Synthetic testbeds with known positional structure (retrieval at a distance, a period, a motif
spacing): Lightning-free generators in :mod:`datamodules.synthetic.generators`, datamodules in
:mod:`datamodules.synthetic.datamodule`."""
