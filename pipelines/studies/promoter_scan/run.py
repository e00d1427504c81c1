"""Scanning a genome with a promoter classifier trained on short crops: the scanning table of one fold.

Usage::

    python -m pipelines.studies.promoter_scan --data Ecoli_prom.fa Ecoli_non_prom.fa --out <folder>
    make scan-promoters DATA="Ecoli_prom.fa Ecoli_non_prom.fa" [ARGS="--fold 1 --quick"]

Steps (docs/promoters.md, "Scanning a genome"):

1. The fold: the promoter / non-promoter files split as the benchmark splits them (``--folds`` stratified
   folds drawn by ``--seed``, fold ``--fold`` the test set, ``--val-fraction`` of the rest validation),
   and a model trained on it by the training CLI on ``--config`` (the benchmark's child settings; a
   finished run with the same settings is reused), or ``--ckpt`` (a checkpoint or run id of that fold).
2. Every promoter record of every split placed in the genome (``--genome``, default the shipped E. coli
   W3110) by its sequence, on both strands (:mod:`datamodules.dna.locate`): how many were placed, and
   what happened to the rest, goes to ``locate.json`` and the table.
3. Nested windows of ``--lengths`` bases around the test fold's placed promoters (``--promoters`` of
   them at most) and the validation split's, at random offsets, and ``--background`` windows with no
   placed promoter within ``--margin`` bases (:mod:`datamodules.dna.scan_windows`).
4. Every read of every window (:mod:`pipelines.eval.scan`): the model in one pass (pooled like a crop,
   and its raw token logits), the same model slid over training-length crops, and the position weight
   matrix and one-hot logistic regression fitted on the fold's training crops (chosen on its validation
   crops) slid the same way. Offsets and call thresholds are chosen on the validation windows.

Outputs in ``--out``: ``scan.csv`` (a row per read and length), ``scan.md`` (the table, the locator's
counts, the cost of each read), ``locate.json``, ``scan.png`` (hits within ±10 and false calls per kb by
length) and ``saliency.png`` (:mod:`pipelines.studies.promoter_scan.profiles`: where in a crop the model's
evidence sits, against the −35 and −10 boxes, for this model and every ``--profiles`` checkpoint).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.config import Loader
from datamodules.dna.classify import ClassificationDataModule
from datamodules.dna.config import CropWindows, LabelledSamples
from datamodules.dna.fasta import EncodeReport, iter_records
from datamodules.dna.genome_cache import default_genome, load_genome
from datamodules.dna.locate import GenomeIndex, Located, Site, locate_records
from datamodules.dna.samples import SPLITS
from datamodules.dna.scan_windows import background_windows, promoter_windows
from pipelines.console import configure, user_errors_exit
from pipelines.eval.evaluate import load_config
from pipelines.eval.scan import Reads, read_windows, score_table
from pipelines.eval.sweep import config_key, read_layers, train_run
from pipelines.inference.loading import load_model
from pipelines.studies.promoter_scan.profiles import profile_figure, saliency_profiles
from pipelines.studies.promoter_scan.report import scan_figure, scan_markdown, write_csv
from pipelines.tasks.dna.classify_baselines import OneHotLogistic, PositionWeightMatrix, crops, one_thread
from pipelines.tasks.dna.scan_reads import check_model
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[3]
NAMESPACE = "posenc.promoter_scan"
CLASSES = ("non_promoter", "promoter")  # class_fastas keys; sorted, the promoter class is 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.promoter_scan",
                                description=__doc__.splitlines()[0])
    add = p.add_argument
    add("--data", nargs=2, required=True, metavar=("PROMOTERS", "NON_PROMOTERS"), help="the two FASTA files")
    add("--genome", default=None, help="FASTA/GenBank the promoters are placed in (default: shipped E. coli)")
    add("--config", nargs="+", default=[str(ROOT / "configs/dna_promoter.yaml")], help="config layers")
    add("--ckpt", default=None, help="a checkpoint or MLflow run id trained on this fold (else: train)")
    add("--fold", type=int, default=0)
    add("--folds", type=int, default=5)
    add("--seed", type=int, default=0, help="draws the folds, seeds the training and the windows")
    add("--val-fraction", type=float, default=0.1)
    add("--lengths", type=int, nargs="+", default=[1000, 2000, 4000, 8000], help="window lengths (bases)")
    add("--promoters", type=int, default=None, help="windows around at most this many promoters per split")
    add("--background", type=int, default=10, help="background windows")
    add("--margin", type=int, default=1000, help="bases from a background window to any placed promoter")
    add("--tss-index", type=int, default=60, help="the TSS's index in a record (60: CNNProm's bacteria)")
    add("--boxes", type=int, nargs="*", default=[25, 48], help="box centres in a record marked in the figure "
        "(E. coli σ70: -35 at 25, -10 at 48)")
    add("--profiles", nargs="*", default=[], help="more checkpoints / run ids for the saliency figure")
    add("--max-epochs", type=int, default=None, help="override the config's trainer.max_epochs")
    add("--quick", action="store_true", help="20 promoters per split, 4 background windows (said so)")
    add("--experiment", default="promoter-scan", help="MLflow experiment of the training run")
    add("--out", default="outputs/promoter_scan")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    for f in args.data:
        if not Path(f).is_file():
            raise PosencError(f"{f}: FASTA file not found")
    for f in args.config:
        if not Path(f).is_file():
            raise PosencError(f"{f}: config file not found")
    if not 0 <= args.fold < args.folds:
        raise PosencError(f"--fold must be in 0..{args.folds - 1}, got {args.fold}")
    if min(args.lengths) < 1 or args.background < 1 or (args.promoters is not None and args.promoters < 1):
        raise PosencError("--lengths, --background and --promoters must be >= 1")
    if args.quick:
        args.promoters, args.background = min(args.promoters or 20, 20), min(args.background, 4)


def record_length(path: str) -> int:
    """The longest record of a FASTA file (every record read whole)."""
    return max(len(c) for _, c in iter_records(path, EncodeReport()))


def fold_overlay(args: argparse.Namespace, width: int) -> dict[str, Any]:
    """The settings the fold's model trains with over the config layers (the benchmark child's, less the
    benchmark's baselines: the scan fits the two it slides itself)."""
    callbacks = (load_config(args.config).get("trainer") or {}).get("callbacks") or []
    trainer: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False,
                               "callbacks": [c for c in callbacks if not str((c or {}).get("class_path", ""))
                                             .endswith("ClassifyBaselines")]}
    if args.max_epochs is not None:
        trainer["max_epochs"] = args.max_epochs
    fastas = dict(zip(CLASSES[::-1], (str(Path(f).resolve()) for f in args.data), strict=True))
    return {"data": {"init_args": {
                "samples": {"class_fastas": fastas, "folds": args.folds, "fold": args.fold,
                            "val_fraction": args.val_fraction},
                "windows": {"seq_len": width, "eval_lengths": [width]}}},
            "trainer": trainer, "test_after_fit": True, "resume": False, "progress": False,
            "register": {"register": False}}


def fold_model(args: argparse.Namespace, width: int) -> tuple[Any, str]:
    """The fold's model (trained, or a finished run with the same settings reused) and where it is."""
    if args.ckpt:
        return load_model(args.ckpt, "cpu"), args.ckpt
    overlay = fold_overlay(args, width)
    run = train_run(args.config, overlay, args.seed, experiment=args.experiment,
                    run_name=f"scan-fold{args.fold}-seed{args.seed}", namespace=NAMESPACE,
                    key=config_key([read_layers(args.config), overlay]), reuse=True, log_model=False)
    if not run.checkpoint:
        raise PosencError(f"run {run.run_id}: no checkpoint was saved")
    return load_model(run.checkpoint, "cpu"), run.checkpoint


def fold_sets(args: argparse.Namespace, width: int) -> ClassificationDataModule:
    """The fold's train / val / test records, split exactly as the training split them."""
    fastas = dict(zip(CLASSES[::-1], (str(Path(f).resolve()) for f in args.data), strict=True))
    samples = LabelledSamples(class_fastas=fastas, folds=args.folds, fold=args.fold,
                              val_fraction=args.val_fraction)
    dm = ClassificationDataModule(samples=samples, windows=CropWindows(seq_len=width, eval_lengths=[width]),
                                  loader=Loader(seed=args.seed))
    if list(dm.class_names) != list(CLASSES):
        raise PosencError(f"classes {dm.class_names}: expected {list(CLASSES)}")
    return dm


def place(dm: ClassificationDataModule, genome: Any, tss_index: int) -> tuple[Located, dict[str, list[Site]]]:
    """Every promoter record of every split placed in ``genome``: the result, and the sites per split."""
    split_of, records = {}, []
    for split in SPLITS:
        s = dm.sets[split]
        for i in np.flatnonzero(s.labels == 1).tolist():
            records.append((s.names[i], np.asarray(s.codes[s.starts[i] : s.ends[i]])))
            split_of[s.names[i]] = split
    shortest = min((len(c) for _, c in records), default=0)
    substitutions = max(0, min(3, shortest // GenomeIndex.KEY - 1))  # short records: fewer seeds
    found = locate_records(genome, records, tss_index, max_mismatches=substitutions)
    return found, {split: [x for x in found.sites if split_of[x.name] == split] for split in SPLITS}


def fit_scorers(dm: ClassificationDataModule, width: int) -> dict[str, Any]:
    """The position weight matrix and the one-hot logistic regression, fitted on the fold's training
    crops, each setting chosen on its validation crops."""
    train, val = crops(dm.sets["train"], width, width), crops(dm.sets["val"], width, width)
    with one_thread():
        return {"pwm": PositionWeightMatrix().fit(train, val, 2),
                "onehot_lr": OneHotLogistic().fit(train, val, 2)}


def windows_of(args: argparse.Namespace, sites: dict[str, list[Site]], all_sites: list[Site],
               contig_lengths: list[int]) -> dict[str, dict[int, list]]:
    """The validation, test and background windows."""
    out = {}
    for split in ("val", "test"):
        others = [s for s in all_sites if s not in set(sites[split])]
        out[split] = promoter_windows(sites[split], others, contig_lengths, args.lengths, seed=args.seed,
                                      limit=args.promoters)
    out["background"] = background_windows(all_sites, contig_lengths, args.lengths, args.background,
                                           args.margin, seed=args.seed)
    return out


def read_all(model: Any, scorers: dict[str, Any], contigs: list[np.ndarray], wins: dict[str, dict],
             width: int, tss_index: int) -> dict[str, Reads]:
    """Every read of every window set, with a progress line per window on stderr."""
    total = sum(len(w[max(w)]) for w in wins.values())
    done, t0, out = [0], time.perf_counter(), {}

    def tick(bases: int) -> None:
        done[0] += 1
        left = (time.perf_counter() - t0) / done[0] * (total - done[0])
        print(f"[scan] window {done[0]}/{total} read ({bases} bases); about {left / 60:.0f} min left",
              file=sys.stderr)

    for name, w in wins.items():
        out[name] = read_windows(model, scorers, contigs, w, width, tss_index, progress=tick)
    return out


def run(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(argv)
    configure(verbose=False, progress=False)
    check_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width = record_length(args.data[0])
    model, source = fold_model(args, width)
    check_model(model)
    dm = fold_sets(args, width)
    genome = load_genome(args.genome or default_genome(), None)
    contigs = [np.asarray(genome.codes[a:b]) for a, b in zip(genome.starts, genome.ends, strict=True)]
    found, sites = place(dm, genome, args.tss_index)
    (out / "locate.json").write_text(json.dumps({"summary": found.summary(), "ambiguous": found.ambiguous,
                                                 "not_found": found.missing}, indent=1))
    print(f"[scan] {found.describe()}", file=sys.stderr)
    wins = windows_of(args, sites, found.sites, genome.lengths.tolist())
    reads = read_all(model, fit_scorers(dm, width), contigs, wins, width, args.tss_index)
    rows = score_table(reads["val"], wins["val"], reads["test"], wins["test"], reads["background"],
                       wins["background"])
    write_csv(out / "scan.csv", rows)
    seconds = {k: sum(r.seconds.get(k, 0.0) for r in reads.values()) for k in ("whole", "sliding", "pwm")}
    profiles = saliency_profiles([(source, model), *((p, load_model(p, "cpu")) for p in args.profiles)],
                                 dm.sets["test"], width, args.boxes)
    (out / "scan.md").write_text(scan_markdown(rows, found, args, seconds, profiles, source))
    scan_figure(rows, out / "scan.png")
    profile_figure(profiles, args.boxes, args.tss_index, out / "saliency.png")
    print(f"[scan] wrote {out}/scan.md, scan.csv, scan.png, saliency.png", file=sys.stderr)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    with user_errors_exit():
        run(argv)
