"""DNA data: FASTA/GenBank parsing, the genome cache, tokenizers, windows, annotations (all Lightning-free)
and the DNA LightningDataModules (``genome``, ``segment``, ``classify``)."""
