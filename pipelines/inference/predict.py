"""``python -m pipelines.inference.predict --ckpt <path|run id|model URI> --input <file> --output <file>``.

Runs a trained model on a file it has not seen and writes one output file, atomically (a temporary
file renamed into place: an error leaves nothing behind). What is written depends on the task:

* DNA language models (FASTA/GenBank in, plain or gzip): per-base TSV/CSV (``record pos token p_A …
  prob bits``), or with ``--level record`` one row per record with its bits/base;
* segmentation: per-base labels as TSV/CSV, or CDS intervals as GFF3 (``.gff``/``.gff3``) or BED
  (``.bed``), chosen by the output's suffix;
* classification: one row per record with the class probabilities and the predicted class; a promoter
  classifier (two classes, per-base ``token_logits``) scans instead with a ``.bedgraph`` output (the
  per-base track) or a ``.bed`` one (the calls), both strands, and ``--track`` writes the track beside
  the calls in the same pass (:mod:`pipelines.tasks.dna.scan_track`);
* forecasting (CSV/parquet in, the training's columns): forecasts with timestamps after the end of
  the table, or with ``--every N`` at rolling origins every N rows (with the actual values where
  the table has them).

Long records go through windows of ``--window`` tokens (default: the training length; ``0``: whole
records, where the encoding defines those positions) overlapping by ``--overlap`` (default half a
window) and are stitched (see :mod:`pipelines.tasks.windows`). ``.gz`` outputs are gzip-compressed.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import sys
import warnings
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from datamodules.dna.annotation import label_intervals
from datamodules.dna.fasta import EncodeReport, iter_records
from datamodules.progress import progress_bar
from pipelines.console import add_console_args, configure, user_errors_exit
from pipelines.inference.loading import load_model
from pipelines.inference.outputs import atomic_output, check_output
from pipelines.safety import add_trust_args, apply_trust_args, drop_working_folder
from pipelines.tasks.dna.scan_track import ScanSettings, default_chunk, receptive_flank, scan_records
from pipelines.tracking.failure import stop_on_sigterm
from posenc import PosencError
from posenc.registry import without_working_folder

TABLE_SUFFIXES = (".tsv", ".csv", ".txt")
INTERVAL_SUFFIXES = (".gff", ".gff3", ".bed")
TRACK_SUFFIXES = (".bedgraph", ".bdg")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.inference.predict",
                                description=__doc__.splitlines()[0])
    add = p.add_argument
    add("--ckpt", required=True, help="checkpoint path, MLflow run id, or runs:/… / models:/… URI")
    add("--input", required=True, help="FASTA/GenBank (DNA tasks) or CSV/parquet (forecasting)")
    add("--output", required=True, help=".tsv/.csv (optionally .gz); .gff/.gff3/.bed for segmentation")
    add("--overwrite", action="store_true", help="replace an existing output file (its mode is kept)")
    add("--batch_size", type=int, default=32, help="windows (or forecasts) per forward pass")
    add("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    add("--window", type=int, default=None,
        help="tokens per window (default: the training length; 0: whole records); forecasting: lookback")
    add("--overlap", type=int, default=None, help="tokens shared by consecutive windows (default W/2)")
    add("--level", choices=("base", "record"), default="base", help="language models: per base or record")
    add("--mask_every", type=int, default=7, help="masked LM: mask every k-th token per pass")
    add("--every", type=int, default=None, help="forecasting: rolling origins every N rows")
    add("--min_length", type=int, default=0, help="segmentation GFF/BED: drop intervals shorter than this")
    add("--track", default=None, help="promoter scan: also write the per-base track (.bedgraph) here")
    add("--tss_index", type=int, default=None,
        help="promoter scan: the TSS's index in a training crop (default: its centre; 60 for 81-nt "
             "bacterial crops -60..+20, 200 for 251-nt -200..+50)")
    add("--threshold", type=float, default=0.0, help="promoter scan: smallest logit called (BED)")
    add("--chunk", type=int, default=None,
        help="promoter scan: bases scored per pass (default 4096 with local attention, else 1024)")
    add("--tracking_uri", default=None, help="MLflow store for run ids / URIs (default: sqlite:///mlflow.db)")
    add("--no_progress", action="store_true", help="no progress bar (the same as --progress false)")
    add_trust_args(p)
    add_console_args(p)
    return p.parse_args(argv)


def check_options(args: argparse.Namespace) -> None:
    """The numeric options in range: a one-line :class:`PosencError` naming the first one that is not."""
    least = {"batch_size": 1, "every": 1, "mask_every": 1, "window": 0, "overlap": 0, "min_length": 0,
             "tss_index": 0, "chunk": 1}
    for name, low in least.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise PosencError(f"--{name} must be ≥ {low}, got {value}")


def output_kind(path: Path) -> tuple[str, str]:
    """(kind, separator): ``table`` (tab or comma), ``gff`` or ``bed`` from the suffix."""
    suffix = Path(path.name.removesuffix(".gz")).suffix.lower()
    if suffix in (".gff", ".gff3"):
        return "gff", "\t"
    if suffix == ".bed":
        return "bed", "\t"
    if suffix in TRACK_SUFFIXES:
        return "bedgraph", "\t"
    if suffix in TABLE_SUFFIXES:
        return "table", "," if suffix == ".csv" else "\t"
    raise PosencError(f"{path}: unknown output format {suffix!r} (use .tsv, .csv, .gff, .gff3, .bed or "
                      ".bedgraph, optionally .gz)")


class TableWriter:
    """Frames appended to one delimited file, the header written once."""

    def __init__(self, fh: IO[str], sep: str) -> None:
        self.fh, self.sep, self.header, self.rows = fh, sep, True, 0

    def write(self, frame: pd.DataFrame) -> None:
        frame.to_csv(self.fh, sep=self.sep, index=False, header=self.header, float_format="%.6g", na_rep="")
        self.header = False
        self.rows += len(frame)


def write_intervals(fh: IO[str], kind: str, table: pd.DataFrame, first: bool, min_length: int = 0) -> int:
    """CDS intervals (of at least ``min_length`` bases) of one record's per-base labels as GFF3 or
    BED6 lines; returns their number."""

    rid = str(table["record"].iloc[0])
    labels, prob = table["label"].to_numpy(), table["prob"].to_numpy()
    if first and kind == "gff":
        fh.write("##gff-version 3\n")
    found = [iv for iv in label_intervals(labels) if iv[1] - iv[0] >= min_length]
    for n, (lo, hi, strand, phase) in enumerate(found, start=1):
        score = float(prob[lo:hi].mean())
        sign = "+" if strand > 0 else "-"
        if kind == "gff":
            fh.write(f"{rid}\tposenc\tCDS\t{lo + 1}\t{hi}\t{score:.3f}\t{sign}\t{phase}\tID={rid}_cds{n}\n")
        else:
            fh.write(f"{rid}\t{lo}\t{hi}\t{rid}_cds{n}\t{round(score * 1000)}\t{sign}\n")
    return len(found)


def predictor_options(model: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The command's options that the model's task predictor takes (by its signature)."""

    params = inspect.signature(type(model).predictor).parameters
    return {k: v for k, v in options.items() if k in params}


def predict_dna(model: Any, args: argparse.Namespace, out: Path) -> str:
    """Stream the records of a FASTA/GenBank file through the model into ``out``."""

    kind, sep = output_kind(out)
    if kind in ("bed", "bedgraph") and hasattr(model, "token_logits") and not model.writes_intervals:
        return predict_scan(model, args, out, kind)
    if kind == "bedgraph" or args.track:
        raise PosencError(f"{args.track or out}: a per-base track is for promoter classifiers (per-base "
                          f"token_logits); this model's task is {model.task_name!r}")
    if kind != "table" and not model.writes_intervals:
        raise PosencError(f"{out}: GFF/BED output is for segmentation models; this model's task is "
                          f"{model.task_name!r}")
    opts = predictor_options(model, {"window": args.window, "overlap": args.overlap,
                                     "batch_size": args.batch_size, "per_base": args.level == "base",
                                     "mask_every": args.mask_every,  # a predictor with a sink streams rows:
                                     "sink": (lambda frame: table.write(frame)) if kind == "table" else None})
    records = iter_records(args.input, EncodeReport())
    if model.batch_records:  # many short records: batched together
        records = [list(records)]
    else:
        records = ([r] for r in records)
    n_records = n_rows = 0
    with atomic_output(out, args.overwrite) as fh:
        table = TableWriter(fh, sep)
        for group in records:
            total, desc = sum(len(c) for _, c in group), group[0][0] if len(group) == 1 else "records"
            with progress_bar(total, f"predicting {desc}", unit="tok", unit_scale=True) as bar:
                frame = model.predict(group, progress=bar.update, **opts)
            if frame is None:  # streamed through the sink
                n_rows = table.rows
            elif kind == "table":
                table.write(frame)
                n_rows += len(frame)
            else:
                n_rows += write_intervals(fh, kind, frame, first=n_records == 0, min_length=args.min_length)
            n_records += len(group)
    what = "intervals" if kind != "table" else "rows"
    return f"{n_records} record(s) → {n_rows} {what} in {out}"


def predict_scan(model: Any, args: argparse.Namespace, out: Path, kind: str) -> str:
    """Scan every record of a FASTA/GenBank file on both strands: the calls (BED) and/or the per-base
    track (bedGraph) (:mod:`pipelines.tasks.dna.scan_track`)."""
    track_path = out if kind == "bedgraph" else None
    if args.track:
        if kind == "bedgraph" or output_kind(Path(args.track))[0] != "bedgraph":
            raise PosencError(f"{args.track}: --track names a .bedgraph file beside a .bed output")
        track_path = check_output(args.track, [args.input, args.ckpt, str(out)], args.overwrite)
    width = int((getattr(model, "posenc_inference", {}) or {}).get("data", {}).get("seq_len", 0) or 0)
    if width < 1:
        raise PosencError(f"{args.ckpt}: the checkpoint does not say its training length (data.seq_len)")
    tss = width // 2 if args.tss_index is None else args.tss_index
    chunk = args.chunk or default_chunk(model)
    cfg = ScanSettings(width, tss, chunk=chunk, flank=receptive_flank(model, width),
                       threshold=args.threshold)
    records = lambda: iter_records(args.input, EncodeReport())  # noqa: E731 - read once per strand
    total = 2 * sum(len(c) for _, c in records())
    with contextlib.ExitStack() as stack, progress_bar(total, "scanning", unit="bp", unit_scale=True) as bar:
        track = stack.enter_context(atomic_output(track_path, args.overwrite)) if track_path else None
        calls = stack.enter_context(atomic_output(out, args.overwrite)) if kind == "bed" else None
        done = scan_records(model, records, cfg, track, calls, progress=bar.update)
    wrote = [f"{done.calls} calls in {out}"] if kind == "bed" else []
    wrote += [f"the track of {done.bases} scored bases in {track_path}"] if track_path else []
    head = f"both strands scanned (TSS at crop index {tss} of {width}, calls at logit >= {cfg.threshold:g})"
    return f"{head}: " + "; ".join(wrote)


def predict_table(model: Any, args: argparse.Namespace, out: Path) -> str:
    """Forecasts for a CSV/parquet table into ``out``."""
    kind, sep = output_kind(out)
    if kind != "table":
        raise PosencError(f"{out}: forecasts are written as .csv or .tsv")
    with progress_bar(None, "forecasting", unit="forecast") as bar:
        frame = model.predict(Path(args.input), lookback=args.window, every=args.every,
                              batch_size=args.batch_size, progress=bar.update)
    with atomic_output(out, args.overwrite) as fh:
        TableWriter(fh, sep).write(frame)
    return f"{frame['origin'].nunique()} forecast(s) × {model.horizon} steps → {out}"


def main(argv: list[str] | None = None) -> int:
    """Run the command; a user mistake is one ``error: …`` line on stderr and exit status 2."""
    args = parse_args(argv)
    configure(args.verbose, args.progress and not args.no_progress)
    before, warnings.formatwarning = warnings.formatwarning, lambda message, *a, **k: f"warning: {message}\n"
    try:
        with user_errors_exit():
            check_options(args)
            apply_trust_args(args)
            if not Path(args.input).is_file():
                raise PosencError(f"{args.input}: input file not found")

            # called from a script too: nothing it imports comes from the caller's folder
            with stop_on_sigterm(), without_working_folder():
                out = check_output(args.output, [args.input, args.ckpt], args.overwrite)  # before any work
                model = load_model(args.ckpt, args.device, tracking_uri=args.tracking_uri)
                run = predict_table if model.predict_input == "table" else predict_dna
                print(run(model, args, out), file=sys.stderr)
    finally:
        warnings.formatwarning = before
    return 0

if __name__ == "__main__":
    drop_working_folder()  # nothing is imported from beside the data (python -m put it on sys.path)
    np.seterr(invalid="ignore")
    raise SystemExit(main())
