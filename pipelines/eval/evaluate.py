"""Evaluate a trained model at many test lengths: an after-fit callback and a command.

Usage::

    python -m pipelines.eval.evaluate outputs/.../best.ckpt [--config configs/dna_lm.yaml]
    python -m pipelines.eval.evaluate <mlflow-run-id> --factors 1 2 4 8 16
    python -m pipelines.eval.evaluate <checkpoint or run id> --split val   # choose on validation
    make evaluate CKPT=<checkpoint path or run id> [CONFIG=...] [ARGS="--split val --window"]

The checkpoint is found by :mod:`pipelines.inference.resolve` (a path, a run id, ``runs:/`` or
``models:/`` URIs). When the source names a run, its ``config.yaml`` supplies the datamodule and the
results are logged into that run; a checkpoint path gets a new run ``<Model>-<Scheme>-extrapolation``.
See :mod:`pipelines.eval.extrapolation` for what is measured. ``--split val`` scores the validation
windows instead of the test windows (:mod:`pipelines.eval.splits`), to choose a variant or scheme on
validation before reading test once: its metrics, tags and artifacts go under ``val/extrapolation/``
(the test sweep's under ``extrapolation/``), its files under ``outputs/extrapolation/<name>-val``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml

from datamodules.config import build_groups
from pipelines.console import add_console_args, configure, user_errors_exit
from pipelines.console.scrub import scrub_text
from pipelines.eval.extrapolation import ROPE_VARIANTS, Extrapolation, evaluate
from pipelines.eval.lengths import DEFAULT_FACTORS, check_factors, check_lengths
from pipelines.eval.report import format_table, log_to_mlflow, prefix, save_all
from pipelines.eval.splits import SPLITS, init_args
from pipelines.inference.loading import model_from_checkpoint, read_checkpoint
from pipelines.inference.resolve import resolve
from pipelines.safety import add_trust_args, apply_trust_args, drop_working_folder
from pipelines.tasks.upgrade.legacy import moved, regroup
from pipelines.tracking.store import experiment_id, mlflow_loggers, tracking_uri
from pipelines.tracking.ui_url import run_url
from posenc import PosencError
from posenc.registry import import_class


@contextmanager
def best_weights(module: L.LightningModule, ckpt_path: str | None) -> Iterator[None]:
    """Temporarily load the weights of ``ckpt_path`` (if given) into ``module``, then restore them."""
    if not ckpt_path:
        yield
        return
    current = {k: v.detach().clone() for k, v in module.state_dict().items()}
    state = torch.load(ckpt_path, map_location=module.device, weights_only=True)["state_dict"]
    module.load_state_dict(state)
    try:
        yield
    finally:
        module.load_state_dict(current)


class ExtrapolationEval(L.Callback):
    """After fit, score the best checkpoint at ``factors`` × the training length (or at ``lengths``)
    and log metrics (step = length), summary, tables and figure to every MLflow logger.

    Args:
        factors: multiples of the training length (increasing); ignored when ``lengths`` is set.
        lengths: absolute test lengths (increasing), instead of ``factors``.
        rope_variants: inference-time RoPE variants to add for RoPE-family schemes (``null``: all
            of pi, ntk, dynamic_ntk, yarn; ``[]``: none).
        retain: the extrapolation ratio is the longest length up to which retained gain over the
            task's trivial baseline stays ≥ ``retain`` (one run: its value, no interval).
        tolerance: also report the relative ratio (every length within ``tolerance`` of the
            metric at the training length, e.g. 0.05); ``null``: not reported.
        max_batches: score at most this many test batches per length (``null``: all).
        baselines: also score the task's reference baselines on the test data (e.g. the best Markov chain,
            ridge; the trivial baseline is always scored). ``make compare`` asks one run for them.
        window: also score with a local attention window of the training length (variant ``window``:
            each query attends only its L0 nearest keys; LM-Infinite's local branch).
        log_scale: also score with the log-length attention temperature of the training length
            (variant ``logscale``; training at L0 is unchanged by it, :mod:`posenc.nn.temperature`).
        use_best: evaluate the checkpoint callback's best model rather than the last weights.
    """

    def __init__(
        self,
        factors: list[float] = list(DEFAULT_FACTORS),  # noqa: B006 - jsonargparse default
        lengths: list[int] | None = None,
        rope_variants: list[str] | None = None,
        retain: float = 0.9,
        tolerance: float | None = None,
        max_batches: int | None = None,
        use_best: bool = True,
        baselines: bool = False,
        window: bool = False,
        log_scale: bool = False,
    ) -> None:
        check_lengths(lengths) if lengths is not None else check_factors(factors)
        check_retain(retain, tolerance)
        bad = set(rope_variants or ()) - set(ROPE_VARIANTS)
        if bad:
            raise PosencError(f"unknown RoPE variant(s) {sorted(bad)}; choose from {sorted(ROPE_VARIANTS)}")
        self.factors, self.lengths, self.rope_variants = list(factors), lengths, rope_variants
        self.retain, self.tolerance = retain, tolerance
        self.max_batches, self.use_best, self.baselines = max_batches, use_best, baselines
        self.window, self.log_scale = window, log_scale
        self.result: Extrapolation | None = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.interrupted or trainer.datamodule is None:
            return
        self.result = self.run(trainer, pl_module)

    def run(self, trainer: L.Trainer, module: L.LightningModule) -> Extrapolation:
        """Evaluate ``module`` (best checkpoint weights when available) and log the results."""
        best = getattr(trainer.checkpoint_callback, "best_model_path", "") if self.use_best else ""
        with best_weights(module, best or None):
            result = evaluate(
                module,
                trainer.datamodule,
                self.factors,
                self.lengths,
                self.rope_variants,
                self.tolerance,
                self.max_batches,
                retain=self.retain,
                baselines=self.baselines,
                window=self.window,
                log_scale=self.log_scale,
            )
        if trainer.is_global_zero:  # under DDP every rank sweeps (same weights, same result); rank 0 logs
            for logger in mlflow_loggers(trainer):
                log_to_mlflow(result, logger.experiment, logger.run_id)
            print(format_table(result), file=sys.stderr)
        return result


def check_retain(retain: float, tolerance: float | None) -> None:
    """:class:`PosencError` unless 0 < ``retain`` ≤ 1 and ``tolerance`` (if set) is ≥ 0."""
    if not 0 < retain <= 1:
        raise PosencError(f"retain must be in (0, 1] (the share of the gain over the trivial baseline "
                          f"to keep), got {retain}")
    if tolerance is not None and tolerance < 0:
        raise PosencError(f"tolerance must be ≥ 0 (relative), got {tolerance}")


# ----------------------------------------------------------------------------- standalone
def load_config(paths: Sequence[str]) -> dict[str, Any]:
    """Deep-merge YAML configs in order (later files win), like repeated ``--config``."""
    merged: dict[str, Any] = {}
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise PosencError(f"{p}: config file not found")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise PosencError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise PosencError(f"{p}: expected a mapping at the top level")
        merged = _merge(merged, data)
    return merged


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build_from_checkpoint(
    ckpt: dict[str, Any], config: dict[str, Any], source: str
) -> tuple[L.LightningModule, L.LightningDataModule]:
    """The model (weights loaded; its class from the checkpoint's task) and its datamodule (the
    config's ``data`` over the (upgraded, grouped) checkpoint's saved datamodule arguments; class: the
    config's or the task's default). The config is read here: old spellings (a moved class path, flat
    ``data.init_args``) are translated as the CLI translates them."""
    module = model_from_checkpoint(ckpt, source)
    data_cfg = config.get("data") or {}
    dm_path = moved(data_cfg.get("class_path")) or type(module).default_datamodule
    dm_cls = import_class(dm_path, L.LightningDataModule, "datamodule class")
    saved = init_args(ckpt.get("datamodule_hyper_parameters"))
    given = regroup(dm_cls, data_cfg.get("init_args") or {})
    return module, dm_cls(**build_groups(dm_cls, _merge(saved, given)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.eval.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("ckpt", help="checkpoint file, MLflow run id, or runs:/… / models:/… URI")
    p.add_argument("--config", action="append", default=[], help="training config(s), layered in order")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--factors",
        type=float,
        nargs="+",
        default=list(DEFAULT_FACTORS),
        help="test lengths as multiples of the training length (increasing)",
    )
    g.add_argument("--lengths", type=int, nargs="+", help="absolute test lengths (increasing)")
    p.add_argument(
        "--variants",
        nargs="*",
        default=None,
        help=f"RoPE inference-time variants (default all: {' '.join(ROPE_VARIANTS)}; none: no value)",
    )
    p.add_argument(
        "--retain",
        type=float,
        default=0.9,
        help="extrapolation ratio: longest length with retained gain over the trivial baseline ≥ this",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="also report the relative-tolerance ratio (e.g. 0.05: every length within 5%% of the 1× metric)",
    )
    p.add_argument("--split", choices=SPLITS, default="test",
                   help="whose windows score every length: test (default) or val, the validation split "
                        "(to choose a variant/scheme before reading test once; DNA LMs only); val results "
                        "are logged under val/extrapolation/… (test: extrapolation/…)")
    p.add_argument("--max-batches", type=int, default=None, help="batches per length (default all)")
    p.add_argument("--window", action="store_true",
                   help="also score with a local attention window of the training length (variant 'window')")
    p.add_argument("--log-scale", action="store_true",
                   help="also score with the log-length attention temperature of the training length "
                        "(variant 'logscale'; the weights a model trained with it at L0 would have)")
    p.add_argument("--baselines", action="store_true",
                   help="also score the task's baselines (the best Markov chain, ridge; can be slow)")
    p.add_argument(
        "--out", default=None,
        help="folder for tables and figure (default outputs/extrapolation/<name>; --split val: <name>-val)",
    )
    p.add_argument("--no-mlflow", action="store_true", help="write files only, log nothing to MLflow")
    p.add_argument("--experiment", default="posenc", help="MLflow experiment for checkpoint-path runs")
    add_trust_args(p)
    add_console_args(p)
    return p.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> Extrapolation:
    import mlflow  # heavy: mlflow, loaded only when tracking

    args = parse_args(argv)
    configure(args.verbose, args.progress)
    apply_trust_args(args)
    check_lengths(args.lengths) if args.lengths is not None else check_factors(args.factors)
    check_retain(args.retain, args.tolerance)
    client = mlflow.MlflowClient(tracking_uri())
    with resolve(args.ckpt, tracking_uri(), with_config=True) as found:
        ckpt, run_id, stem = read_checkpoint(found.checkpoint), found.run_id, found.checkpoint.stem
        config = load_config(args.config or ([str(found.config)] if found.config else []))
    module, dm = build_from_checkpoint(ckpt, config, args.ckpt)
    result = evaluate(
        module, dm, args.factors, args.lengths, args.variants, args.tolerance, args.max_batches, args.retain,
        args.baselines, args.window, args.split, args.log_scale,
    )
    name = (run_id or stem) + ("" if args.split == "test" else f"-{args.split}")
    out = Path(args.out or Path("outputs") / "extrapolation" / name)
    files = save_all(result, out)
    print(format_table(result))
    print("files: " + " ".join(map(str, files)))
    if not args.no_mlflow:
        if run_id is None:
            run_id = client.create_run(
                experiment_id(client, args.experiment),
                run_name=f"{type(module).__name__}-{result.scheme}-{prefix(result).replace('/', '-')}",
                tags={"posenc.checkpoint": scrub_text(str(Path(args.ckpt).resolve()))},
            ).info.run_id
            log_to_mlflow(result, client, run_id)
            client.set_terminated(run_id)
        else:
            log_to_mlflow(result, client, run_id)
        print(f"MLflow run {run_id} in {scrub_text(client.tracking_uri)} (keys {prefix(result)}/…)")
        print(f"see it: make ui, then {run_url(client.get_run(run_id).info.experiment_id, run_id)}")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    with user_errors_exit():
        run(argv)


if __name__ == "__main__":
    drop_working_folder()  # nothing is imported from the working folder (python -m put it on sys.path)
    main()
