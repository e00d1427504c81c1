"""The long-horizon forecasting benchmark: ETT, Weather and the rest of the family, each under its rule.

Usage::

    python -m pipelines.studies.ltsf --data ETTh1.csv --horizons 96 192 336 720 --seeds 0 1 2 \\
        --configs configs/ltsf/posenc.yaml configs/ltsf/patchtst_etth1.yaml \\
                  configs/ltsf/forecaster_extrapolate.yaml configs/ltsf/dlinear.yaml \\
        --baselines naive ridge lightgbm ets --choose-on-val posenc forecaster --jobs 2 --threads 1 \\
        --out docs/ltsf_results
    make benchmark-ltsf DATA=path/to/ETTh1.csv

The protocol (:mod:`datamodules.timeseries.ltsf`), recognised from the file (``--protocol`` overrides):
the ETT rule (rows 8640 / 2880 / 2880 for the hourly files, ×4 for 15-minute ones) or the ``custom``
rule of Weather and the rest (0.7 / 0.1 / 0.2 of the rows); a train-only scaler, all
columns in and out, every test window scored; MSE and MAE on the scaled data (``test/mse_scaled``,
``test/mae_scaled``). Each model config (``configs/ltsf/*.yaml``) is trained per horizon and seed by
the sweep runner (:func:`pipelines.eval.sweep.train_run`: the Lightning CLI on the config
:mod:`pipelines.studies.ltsf.fit` makes of it), early-stopped on val; baselines are fitted on the same
windows, their choices made on val. ``--schemes`` swaps the encoding of the first config
(``configs/posenc/<name>.yaml``) for an encoding table, ``--test-lookbacks`` also scores the trained
models at longer lookbacks, ``--choose-on-val`` adds the choice among some of the models made on val
alone (the Makefile's: the posenc default, the last-token Forecaster or their mean, per horizon),
``--ensemble`` adds the mean of some configs' forecasts as a model
(:mod:`~pipelines.studies.ltsf.ensemble`), ``--jobs N`` trains the configs' children in N worker
processes while the baselines are fitted here (same rows).

One MLflow parent run, one nested child per model × horizon × seed (metrics with their unit in the
name; tags ``posenc.ltsf.model``, ``.horizon``, ``.seed``, ``.complete`` and ``.chosen``, what was
chosen on val); ``results.csv`` (one row per child, written as each finishes: ``--resume`` skips the
rows it has), ``summary.md`` (mean ± 95 % CI over seeds, CPU time) and ``ltsf.png`` (MSE per horizon
beside the published numbers) go to ``--out`` and the parent run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.cache import DEFAULT_CACHE_DIR
from datamodules.timeseries.ltsf import PROTOCOLS, LTSFData, detect_protocol, load_ltsf, scaled_errors
from pipelines.children import MAX_JOBS, stop_pool, worker_pool
from pipelines.console import configure, scrub_library_lines, user_errors_exit
from pipelines.console.scrub import scrub_text
from pipelines.safety import add_trust_args, apply_trust_args
from pipelines.studies.compare.run import scheme_file
from pipelines.studies.ltsf import models as ltsf_models
from pipelines.studies.ltsf import stats as ltsf_stats
from pipelines.studies.ltsf import trees as ltsf_trees
from pipelines.studies.ltsf.ensemble import ensemble_name, ensemble_row, pending
from pipelines.studies.ltsf.fit import NAMESPACE, child_tags, train_child
from pipelines.studies.ltsf.models import Result, load_model_config, with_encoding
from pipelines.studies.ltsf.out import OUT_FILES, PREDICTIONS, append_row, prepare_out, write_summary
from pipelines.studies.ltsf.report import BASELINES, FIELDS
from pipelines.studies.out_folder import open_out
from pipelines.tracking.store import experiment_id, tracking_uri
from posenc import PosencError


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.ltsf", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the series (e.g. ETTh1.csv)")
    p.add_argument("--time-col", default="date", help="timestamp column (default: date)")
    p.add_argument("--protocol", choices=PROTOCOLS, default=None,
                   help="split rule: ett (12/4/4 months) or custom (0.7/0.1/0.2 of the rows); "
                        "default: ett for ETTh*/ETTm* files, custom otherwise")
    p.add_argument("--horizons", type=int, nargs="+", default=[96, 192, 336, 720])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lookback", type=int, default=336)
    p.add_argument("--configs", nargs="*", default=[], help="model configs (configs/ltsf/*.yaml)")
    p.add_argument("--schemes", nargs="*", default=[],
                   help="encodings (configs/posenc/<name>.yaml) swapped into the first config, a model each")
    p.add_argument("--baselines", nargs="*", default=list(BASELINES), help=f"of {' '.join(BASELINES)}")
    p.add_argument("--test-lookbacks", type=int, nargs="*", default=[],
                   help="also score the trained models at these longer lookbacks (same test targets)")
    p.add_argument("--choose-on-val", nargs="+", metavar="MODEL", default=[],
                   help="summary.md adds the choice among these models (config names or baselines) made "
                        "on val alone: per horizon, the lowest mean val MSE over seeds")
    p.add_argument("--ensemble", nargs="*", metavar="MODEL", default=[],
                   help="add the mean of these model configs' forecasts (names) as the model A+B, per "
                        "horizon and seed; --choose-on-val can name it")
    p.add_argument("--max-epochs", type=int, default=None, help="override every config's train.max_epochs")
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu", "auto"),
                   help="where the neural models train (default: cpu; gpu/auto use a GPU where there is one, "
                        "float32 as on CPU)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's; 1 is faster on a busy machine)")
    p.add_argument("--jobs", type=int, default=1,
                   help="train the model configs' children in this many worker processes at once, "
                        "--threads (default 1) torch threads each, while this one fits the baselines "
                        f"(default 1: all in this process; the Makefile's: {MAX_JOBS}, the budget's cores)")
    p.add_argument("--experiment", default="posenc-ltsf", help="MLflow experiment")
    p.add_argument("--out", required=True, help="folder for results.csv and summary.md")
    p.add_argument("--val-only", action="store_true",
                   help="model selection: train and score on val only; the test windows are never forecast")
    p.add_argument("--resume", action="store_true", help="keep --out/results.csv and skip the rows it has")
    add_trust_args(p)
    return p.parse_args(argv)


def model_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The neural models: every ``--configs`` file, then the first one once per ``--schemes`` encoding."""

    configs = [load_model_config(c) for c in args.configs]
    if args.schemes and not configs:
        raise PosencError("--schemes needs a model config (--configs) to swap the encoding of")
    configs += [with_encoding(configs[0], scheme_file(s)) for s in args.schemes]
    for c in configs:
        if args.max_epochs is not None:
            trainer = {**(c["layer"].get("trainer") or {}), "max_epochs": args.max_epochs}
            c["layer"] = {**c["layer"], "trainer": trainer}
    names = [c["name"] for c in configs]
    if len(set(names)) < len(names):
        raise PosencError(f"two model configs share a name: {' '.join(names)} "
                          "(set the LTSFProtocol callback's name: in one of them)")
    if args.ensemble and (len(args.ensemble) < 2 or set(args.ensemble) - set(names)):
        raise PosencError(f"--ensemble {' '.join(args.ensemble)}: needs two or more of this run's model "
                          f"configs (their names: {' '.join(names) or 'none'})")
    names += [ensemble_name(args.ensemble)] if args.ensemble else []
    absent = [m for m in args.choose_on_val if m not in names and m not in args.baselines]
    if absent:
        raise PosencError(f"--choose-on-val {' '.join(absent)}: not a model of this run "
                          f"(its configs' names: {' '.join(names) or 'none'}; baselines: "
                          f"{' '.join(args.baselines) or 'none'})")
    return configs


def check_args(args: argparse.Namespace) -> None:
    unknown = sorted(set(args.baselines) - set(BASELINES))
    if unknown:
        raise PosencError(f"unknown --baselines {' '.join(unknown)}; known: {' '.join(BASELINES)}")
    for name, values in (("--horizons", args.horizons), ("--test-lookbacks", args.test_lookbacks),
                         ("--lookback", [args.lookback])):
        if any(v < 1 for v in values):
            raise PosencError(f"{name} must be positive, got {values}")
    if args.jobs < 1:
        raise PosencError(f"--jobs must be at least 1, got {args.jobs}")
    if args.accelerator == "gpu":

        if not torch.cuda.is_available():
            raise PosencError("--accelerator gpu: no CUDA GPU is visible here (use cpu, or auto)")


def baseline_runner(name: str) -> Any:
    """``(data, lookback, horizon, seed) → Result``, or a reason string when its package is missing."""

    if name == "naive":
        return ltsf_models.seasonal_naive_run
    if name == "ridge":
        return ltsf_models.ridge_run
    if name == "ets":

        return ltsf_models.missing_package("statsmodels") or ltsf_stats.ets_run

    return ltsf_models.missing_package("lightgbm") or ltsf_trees.lightgbm_run


def jobs(args: argparse.Namespace, configs: list[dict[str, Any]]) -> list[tuple[str, int, int, Any]]:
    """(model, horizon, seed, runner) in run order: per horizon, the baselines then every config."""
    out = []
    for h in args.horizons:
        for b in args.baselines:
            seeds = args.seeds if b == "lightgbm" else args.seeds[:1]  # naive, ridge, ets: deterministic
            out += [(b, h, s, baseline_runner(b)) for s in seeds]
        for c in configs:
            out += [(c["name"], h, s, c) for s in args.seeds]
    return out


MEASURED = ("n_test_windows", "time/cpu_s", "time/wall_s")  # a trained row's; the rest the run logged itself


def run_one(job: tuple[str, int, int, Any], data: LTSFData, args: argparse.Namespace, client: Any,
            parent: str) -> dict[str, Any] | str:
    """Train (a model config, through the sweep runner) or fit (a baseline) one job as a nested child
    of ``parent``; its results row, or the reason it was skipped."""
    name, h, seed, runner = job
    if isinstance(runner, str):
        return runner
    if isinstance(runner, dict):
        run = train_child(runner, h, seed, args, parent)
        row = neural_row(job, run, len(data.starts("test", args.lookback, h)), args)
        log_metrics(client, run.run_id, {k: row[k] for k in MEASURED})
        return row
    row = row_for(job, runner(data, args.lookback, h, seed), data, args)
    log_child(client, parent, row, args.val_only)
    return row


def train_job(job: tuple[str, int, int, Any], n_test: int, args: argparse.Namespace,
              parent: str) -> tuple[dict[str, Any], str]:
    """A model config's job trained in a ``--jobs`` worker process: its results row and MLflow run id."""
    configure(verbose=False, progress=False)
    run = train_child(job[3], job[1], job[2], args, parent)
    return neural_row(job, run, n_test, args), run.run_id


def run_jobs(todo: list[tuple[str, int, int, Any]], data: LTSFData, args: argparse.Namespace, client: Any,
             parent: str) -> Iterator[tuple[tuple, dict[str, Any] | str]]:
    """Each job with its row (or the reason it was skipped). With ``--jobs 1`` in ``todo``'s order, in
    this process; with ``--jobs N > 1`` every model config's job is queued to N worker processes first,
    the baselines are fitted here meanwhile, then the trained rows follow in ``todo``'s order (a
    worker's failure stops the others and is raised here)."""
    if args.jobs == 1:
        yield from ((job, run_one(job, data, args, client, parent)) for job in todo)
        return
    pool = worker_pool(args.jobs, args.threads or 1)
    try:
        trained = [(job, pool.submit(train_job, job, len(data.starts("test", args.lookback, job[1])), args,
                                     parent)) for job in todo if isinstance(job[3], dict)]
        yield from ((job, run_one(job, data, args, client, parent)) for job in todo
                    if not isinstance(job[3], dict))
        for job, future in trained:
            row, run_id = future.result()
            log_metrics(client, run_id, {k: row[k] for k in MEASURED})
            yield job, row
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def neural_row(job: tuple, run: Any, n_test: int, args: argparse.Namespace) -> dict[str, Any]:
    """A trained model config's row: its metrics as its MLflow run has them (NaN where it has none)
    and the runner's CPU and wall seconds."""
    name, h, seed, _ = job
    m, nan = run.metrics, float("nan")
    row = {"model": name, "horizon": h, "seed": seed, "n_test_windows": n_test,
           "test/mse_scaled": m.get("test/mse_scaled", nan), "test/mae_scaled": m.get("test/mae_scaled", nan),
           "val/mse_scaled": m.get("val/mse_scaled", nan),
           "time/cpu_s": run.cpu_s, "time/wall_s": run.wall_s}
    for n in args.test_lookbacks:
        row[f"test/mse_scaled_L{n}"] = m.get(f"test/mse_scaled_L{n}", nan)
    row["chosen"] = run.tags.get(f"{NAMESPACE}.chosen", "")
    return row


def row_for(job: tuple, result: Result, data: LTSFData, args: argparse.Namespace) -> dict[str, Any]:
    """A baseline's row: test/val metrics (scaled), CPU and wall seconds, what was chosen on val."""
    name, h, seed, _ = job
    truth = data.windows("test", args.lookback, h)[1]
    nan = {"mse_scaled": float("nan"), "mae_scaled": float("nan")}
    test = nan if args.val_only else scaled_errors(result.pred, truth)
    row = {"model": name, "horizon": h, "seed": seed, "n_test_windows": len(truth),
           "test/mse_scaled": test["mse_scaled"], "test/mae_scaled": test["mae_scaled"],
           "val/mse_scaled": result.val["mse_scaled"], "time/cpu_s": result.cpu_s,
           "time/wall_s": result.wall_s}
    row.update({f"test/mse_scaled_L{n}": float("nan") for n in args.test_lookbacks})  # no longer lookbacks
    row["chosen"] = "; ".join(f"{k}={v}" for k, v in result.params.items())
    return row


def metric_name(column: str) -> str:
    """A column name as an MLflow metric key (letters, digits, ``_-./`` and spaces only)."""
    return "".join(ch if ch.isalnum() and ch.isascii() or ch in "_-./ " else "_" for ch in column)


def log_metrics(client: Any, run_id: str, values: dict[str, Any]) -> None:
    """The finite numbers of ``values`` as metrics of ``run_id``."""
    for k, v in values.items():
        if isinstance(v, (int, float)) and np.isfinite(v):
            client.log_metric(run_id, k, float(v))


def log_child(client: Any, parent: str, row: dict[str, Any], val_only: bool = False) -> None:
    """A baseline's nested MLflow run, tagged as the sweep runner tags a trained model's: its metrics
    (units in their names) and what was chosen on val."""
    model, h, seed = row["model"], row["horizon"], row["seed"]
    tags = {"mlflow.parentRunId": parent, **child_tags(model, h), f"{NAMESPACE}.seed": str(seed),
            f"{NAMESPACE}.chosen": row.get("chosen", "")[:5000]}
    exp_id = client.get_run(parent).info.experiment_id
    rid = client.create_run(exp_id, run_name=f"{model}-H{h}-seed{seed}", tags=tags).info.run_id
    log_metrics(client, rid, {k: v for k, v in row.items() if k not in ("model", "horizon", "seed", "chosen")
                              and not (val_only and k.startswith("test/"))})
    client.set_tag(rid, f"{NAMESPACE}.complete", "true")
    client.set_terminated(rid, "FINISHED")


def combined(row: dict[str, Any], rows: list[dict[str, Any]], data: LTSFData,
             args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ``--ensemble`` row that ``row`` completes (its horizon and seed), if it completes one."""
    key = (ensemble_name(args.ensemble), int(row["horizon"]), int(row["seed"]))
    if row["model"] not in args.ensemble or any((r["model"], int(r["horizon"]), int(r["seed"])) == key
                                                 for r in rows):  # --resume: the row is there already
        return []
    done = ensemble_row(args.ensemble, int(row["horizon"]), int(row["seed"]), [*rows, row], data, args)
    return [done] if done else []


def progress_line(row: dict[str, Any], val_only: bool) -> str:
    test = "" if val_only else f"test MSE {row['test/mse_scaled']:.4f} MAE {row['test/mae_scaled']:.4f}; "
    return (f"{row['model']} H={row['horizon']} seed={row['seed']}: {test}"
            f"val MSE {row['val/mse_scaled']:.4f} "
            f"({row['time/cpu_s']:.0f} CPU s, {row['time/wall_s']:.0f} s wall)")


def describe_data(data: LTSFData) -> str:
    """One line on what the benchmark reads: protocol, split rows, channels, and the sentinel values
    kept as the protocol keeps them (per channel)."""
    b = data.bounds
    rows = " / ".join(f"{s} [{lo}, {hi})" for s, (lo, hi) in b.items())
    kept = ", ".join(f"{c}: {n}" for c, n in data.sentinels.items())
    note = f"; sentinel -9999 values kept and scaled as the protocol does: {kept}" if kept else ""
    return f"{data.source}: {data.protocol} protocol, {data.n_channels} channels, {rows}{note}"


def run(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(argv)
    configure(verbose=False, progress=False)
    check_args(args)
    apply_trust_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = model_configs(args)
    out = Path(args.out)
    lock = open_out(out, OUT_FILES, (PREDICTIONS,), [("--data", args.data)])
    try:
        args.protocol = args.protocol or detect_protocol(args.data)  # the children read it so too
        args.cache_dir = str(Path(DEFAULT_CACHE_DIR).resolve())  # parsed once here; each child loads it there
        data = load_ltsf(args.data, time_col=args.time_col, protocol=args.protocol, cache_dir=args.cache_dir)
        print(describe_data(data), file=sys.stderr)
        fields = FIELDS + [f"test/mse_scaled_L{n}" for n in args.test_lookbacks] + ["chosen"]
        rows = prepare_out(out, data, args, fields)
        with parent_run(args, data, argv) as (client, parent):
            skipped = run_all(configs, data, rows, fields, args, client, parent)
            files = write_summary(out, rows, args, skipped)
            for f in files:
                client.log_artifact(parent, str(f))
    finally:
        lock.release()
    store = scrub_text(client.tracking_uri)
    print(f"files: {' '.join(map(str, files))}\nMLflow parent run {parent} in {store}")
    return out


@contextmanager
def parent_run(args: argparse.Namespace, data: LTSFData, argv: Sequence[str] | None) -> Iterator[tuple]:
    """The benchmark's MLflow parent run, FINISHED at the end; FAILED (KILLED when stopped) if anything
    raises, never left RUNNING."""
    import mlflow  # heavy: mlflow, loaded only when tracking

    scrub_library_lines()  # MLflow's own log lines, now that it is loaded
    client = mlflow.MlflowClient(tracking_uri())
    exp_id = experiment_id(client, args.experiment)
    parent = client.create_run(exp_id, run_name=f"ltsf-{Path(args.data).stem}",
                               tags={"posenc.ltsf": "parent"}).info.run_id
    try:
        command = " ".join(["python -m pipelines.studies.ltsf", *(argv or sys.argv[1:])])
        client.log_param(parent, "command", scrub_text(command)[:500])
        client.log_param(parent, "protocol", data.protocol)
        for column, count in data.sentinels.items():  # e.g. Weather's -9999 values, kept as published
            client.log_metric(parent, f"data/sentinels/{metric_name(column)}", count)
        yield client, parent
    except BaseException as exc:
        stopped = isinstance(exc, KeyboardInterrupt | SystemExit)  # Ctrl-C, SIGTERM
        client.set_terminated(parent, "KILLED" if stopped else "FAILED")
        raise
    client.set_terminated(parent, "FINISHED")


def run_all(configs: list[dict[str, Any]], data: LTSFData, rows: list[dict[str, Any]], fields: list[str],
            args: argparse.Namespace, client: Any, parent: str) -> list[str]:
    """Every job not in ``rows`` yet, each row written as it comes (and the ensemble rows it completes,
    or that an earlier run left unfinished); the reasons of the jobs skipped."""
    results, skipped = Path(args.out) / "results.csv", []
    have = {(r["model"], int(r["horizon"]), int(r["seed"])) for r in rows}

    def record(row: dict[str, Any], ensemble: bool = False) -> None:
        append_row(results, row, fields)
        rows.append(row)
        if ensemble:  # the ensemble: a nested run as a baseline's
            log_child(client, parent, row, args.val_only)
        print(progress_line(row, args.val_only), file=sys.stderr, flush=True)

    todo = [job for job in jobs(args, configs) if job[:3] not in have]
    for job, row in run_jobs(todo, data, args, client, parent):
        if isinstance(row, str):
            skipped.append(f"{job[0]}: {row}")
            client.set_tag(parent, f"posenc.ltsf.skipped.{job[0]}", row[:250])
            print(f"skipped {job[0]}: {row}", file=sys.stderr)
            continue
        record(row)
        for done in combined(row, rows[:-1], data, args):
            record(done, ensemble=True)
    for h, seed in pending(rows, args):  # --resume: members done, their mean not yet
        done = ensemble_row(args.ensemble, h, seed, rows, data, args)
        if done:
            record(done, ensemble=True)
    return sorted(set(skipped))


def main(argv: Sequence[str] | None = None) -> None:
    with user_errors_exit():
        run(argv)


if __name__ == "__main__":
    main()
