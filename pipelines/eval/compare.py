"""Compare positional encodings on one task: train once per scheme (and seed), test at every length.

Usage::

    python -m pipelines.eval.compare --config configs/compare_dna_lm.yaml --schemes none sinusoidal rope alibi
    make compare CONFIG=configs/compare_ts.yaml SCHEMES="none rope alibi" [SEEDS="0 1 2"]

Scheme names are files ``configs/posenc/<name>.yaml`` (or paths to such files). Every child run uses
the same config, data, budget and seed; only the encoding differs. All runs are nested under one
parent MLflow run, which receives ``comparison.md``, ``comparison.csv`` (mean ± std over seeds),
``comparison_long.csv`` (every run and length) and ``comparison.png`` (one curve per scheme).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from datamodules.progress import progress_bar
from pipelines.console import add_console_args, configure
from pipelines.eval.compare_child import launches_processes, run_in_subprocess
from pipelines.eval.compare_report import Child, figure, markdown, rows, write_csvs
from pipelines.eval.evaluate import ExtrapolationEval, load_config
from pipelines.eval.extrapolation import DEFAULT_FACTORS, adapter_for, check_factors, with_lengths
from pipelines.tracking.store import mlflow_loggers, tracking_uri
from pipelines.tracking.ui_url import run_url
from posenc import PosencError
from posenc.registry import import_class

ROOT = Path(__file__).resolve().parents[2]


def scheme_file(name: str) -> Path:
    """``configs/posenc/<name>.yaml`` (repo or cwd), or ``name`` itself if it is a YAML file."""
    for cand in (
        Path(name),
        Path("configs/posenc") / f"{name}.yaml",
        ROOT / "configs/posenc" / f"{name}.yaml",
    ):
        if cand.is_file() and cand.suffix in (".yaml", ".yml"):
            return cand
    known = sorted(p.stem for p in (ROOT / "configs/posenc").glob("*.yaml"))
    raise PosencError(f"unknown scheme {name!r}: no configs/posenc/{name}.yaml; known: {' '.join(known)}")


def scheme_label(name: str) -> str:
    """The scheme's name in runs and tables: ``name``, or the file stem when a path was given."""
    return Path(name).stem if name.endswith((".yaml", ".yml")) else name


def train_child(
    configs: list[str],
    scheme: str,
    seed: int,
    parent: str,
    experiment: str,
    callbacks: list[dict[str, Any]],
    workdir: Path,
    test_after_fit: bool,
) -> Child:
    """Train one scheme with the CLI (a nested MLflow run) and sweep it; failures are recorded."""
    from pipelines.cli import main as cli_main

    path, scheme = scheme_file(scheme), scheme_label(scheme)
    overlay = workdir / f"{scheme}-seed{seed}.yaml"
    logger = {
        "class_path": "lightning.pytorch.loggers.MLFlowLogger",
        "init_args": {
            "experiment_name": experiment,
            "tracking_uri": tracking_uri(),
            "run_name": f"{scheme}-seed{seed}",
            "log_model": True,
            "tags": {
                "mlflow.parentRunId": parent,
                "posenc.compare.scheme": scheme,
                "posenc.compare.seed": str(seed),
            },
        },
    }
    overlay.write_text(
        yaml.safe_dump(
            {
                "seed_everything": seed,
                "test_after_fit": test_after_fit,
                "trainer": {"logger": logger, "callbacks": callbacks},
            }
        )
    )
    args = [
        "fit",
        *[a for c in configs for a in ("--config", c)],
        "--config",
        str(path),
        "--config",
        str(overlay),
    ]
    command = " ".join(["python -m pipelines.train", *args[:-2], f"--seed_everything={seed}"])
    merged = load_config([*configs, str(path), str(overlay)])
    if launches_processes(merged):  # DDP re-runs the command per rank: the child gets its own command
        return run_in_subprocess(scheme, seed, args, merged, workdir)
    try:
        cli = cli_main(args, command=command)  # the card: how to retrain this child alone
    except SystemExit as exc:  # a config error, already printed as one line by the CLI
        return Child(scheme, seed, None, None, f"exit status {exc.code}")
    run_id = next((lg.run_id for lg in mlflow_loggers(cli.trainer)), None)
    hook = next(c for c in cli.trainer.callbacks if isinstance(c, ExtrapolationEval))
    result = hook.result if hook.result is not None else hook.run(cli.trainer, cli.model)
    return Child(scheme, seed, run_id, result, module=cli.model, datamodule=cli.datamodule)


# ----------------------------------------------------------------------------- entry point
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.eval.compare", description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", required=True, help="task config(s), layered in order")
    p.add_argument("--schemes", nargs="+", required=True, help="names of configs/posenc/<name>.yaml")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="seeds (one child run per scheme and seed)"
    )
    p.add_argument(
        "--factors",
        type=float,
        nargs="+",
        default=None,
        help="test lengths as multiples of the training length (default: the config's "
        "pipelines.eval.evaluate.ExtrapolationEval factors, else 1 2 4 8 16)",
    )
    p.add_argument("--experiment", default="posenc-compare", help="MLflow experiment")
    p.add_argument(
        "--out",
        default=None,
        help="local folder for the table and figure (default outputs/compare/<parent run id>)",
    )
    p.add_argument(
        "--test-after-fit", action="store_true", help="also run the task's own test pass per child"
    )
    add_console_args(p)
    return p.parse_args(argv)


def sweep_callbacks(config: dict[str, Any], factors: list[float] | None) -> list[dict[str, Any]]:
    """The config's ``trainer.callbacks`` with one :class:`ExtrapolationEval` (added if missing),
    its ``factors`` replaced by ``factors`` when given."""
    out, found = [], False
    for cb in (config.get("trainer") or {}).get("callbacks") or []:
        path = cb.get("class_path", "") if isinstance(cb, dict) else ""
        if path and issubclass(import_class(path, what="callback class"), ExtrapolationEval):
            found = True
            if factors is not None:
                cb = {
                    "class_path": path,
                    "init_args": {
                        **(cb.get("init_args") or {}),
                        "lengths": None,
                        "factors": check_factors(factors),
                    },
                }
        out.append(cb)
    if not found:
        out.append(
            {
                "class_path": "pipelines.eval.evaluate.ExtrapolationEval",
                "init_args": {"factors": check_factors(factors or DEFAULT_FACTORS)},
            }
        )
    return out


def run(argv: Sequence[str] | None = None) -> tuple[str, list[Child], Path]:
    import mlflow

    args = parse_args(argv)
    configure(args.verbose, args.progress)  # the children's trainings inherit both
    config = load_config(args.config)
    for name in args.schemes:
        scheme_file(name)  # fail before anything is trained
    if len({scheme_label(n) for n in args.schemes}) != len(args.schemes):
        raise PosencError(f"--schemes lists a scheme twice: {args.schemes}")
    callbacks = sweep_callbacks(config, args.factors)
    client = mlflow.MlflowClient(tracking_uri())
    exp = client.get_experiment_by_name(args.experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(args.experiment)
    names = "+".join(Path(c).stem for c in args.config)
    parent = client.create_run(
        exp_id, run_name=f"compare-{names}", tags={"posenc.compare": "parent"}
    ).info.run_id
    client.log_param(parent, "configs", " ".join(args.config))
    client.log_param(parent, "schemes", " ".join(args.schemes))
    client.log_param(parent, "seeds", " ".join(map(str, args.seeds)))
    children: list[Child] = []
    n_runs = len(args.seeds) * len(args.schemes)
    with tempfile.TemporaryDirectory() as tmp, progress_bar(n_runs, "compare", "run", live=False) as bar:
        for seed in args.seeds:
            for scheme in args.schemes:
                print(f"[compare] training {scheme} (seed {seed})", file=sys.stderr)
                children.append(
                    train_child(
                        args.config,
                        scheme,
                        seed,
                        parent,
                        args.experiment,
                        callbacks,
                        Path(tmp),
                        args.test_after_fit,
                    )
                )
                bar.update(1)  # a line per run: runs done, elapsed, time to go
    ok = [c for c in children if c.result is not None]
    if not ok:
        client.set_terminated(parent, "FAILED")
        raise PosencError(f"every run failed (first: {children[0].scheme}: {children[0].error})")
    out = Path(args.out or Path("outputs") / "compare" / parent)
    finish(client, parent, children, out)
    return parent, children, out


def finish(client: Any, parent: str, children: list[Child], out: Path) -> None:
    """Table, CSVs and figure into ``out`` and onto the parent run; summary metrics on the parent."""
    import matplotlib.pyplot as plt

    ok = [c for c in children if c.result is not None]
    first = ok[0]
    adapter = adapter_for(first.module)
    dm = with_lengths(first.datamodule, adapter, first.result.lengths)
    baselines = adapter.baselines(dm)
    table = rows(children)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "comparison.md"
    md.write_text(markdown(table, baselines))
    files = [md, *write_csvs(table, children, out)]
    fig = figure(table, children, baselines)
    fig.savefig(out / "comparison.png", dpi=110)
    plt.close(fig)
    files.append(out / "comparison.png")
    for f in files:
        client.log_artifact(parent, str(f))
    for r in table:
        key = r["scheme"].replace("+", "/")
        for n, v in r["curve"].items():
            if v is not None:
                client.log_metric(parent, f"{key}/{r['metric']}_by_length", v[0], step=n)
        if r["ratio"] is not None:
            client.log_metric(parent, f"{key}/extrapolation_ratio", r["ratio"])
    for name, value in baselines.items():
        client.log_metric(parent, f"baseline/{name}", value)
    failed = [f"{c.scheme}(seed {c.seed}): {c.error}" for c in children if c.result is None]
    if failed:
        client.set_tag(parent, "posenc.compare.failed", "; ".join(failed))
    client.set_terminated(parent, "FINISHED" if not failed else "FAILED")
    print(md.read_text())
    print(f"files: {' '.join(map(str, files))}\nMLflow parent run {parent} in {client.tracking_uri}")
    print(f"see it: make ui, then {run_url(client.get_run(parent).info.experiment_id, parent)}")


def main(argv: Sequence[str] | None = None) -> None:
    try:
        run(argv)
    except PosencError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
