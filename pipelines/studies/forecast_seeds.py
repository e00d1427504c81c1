"""A forecaster against its baselines over seeds: train one config at several seeds (sequentially,
each a child of one parent run in experiment ``posenc-forecast-seeds``, through the sweep runner
:func:`pipelines.eval.sweep.train_run`), read every run's test metrics and the baselines logged
beside it from MLflow, and print the paired comparison (mean ± 95 % Student-t interval over seeds).

    python -m pipelines.studies.forecast_seeds --config configs/ts_forecast.yaml --seeds 0 1 2
    python -m pipelines.studies.forecast_seeds --runs <run id> <run id> <run id>   # no training

Arguments after ``--`` go to every training run unchanged (e.g. ``-- --data.init_args.path=x.csv``).
A seed already trained with the same configs and arguments (a FINISHED child of an earlier call in
the experiment) is reused unless ``--retrain``. The table has, for MSE and MAE, the model's mean ± CI
and, for each baseline, its mean and the paired difference model − baseline (± CI, and relative to
the baseline's mean). A difference is *called* only when its interval excludes 0. Wall and CPU
seconds of each run trained now are shown too; the table goes onto the parent run (``seeds.md``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.console import print_error
from pipelines.eval.evaluate import load_config
from pipelines.eval.statistics import estimate
from pipelines.eval.sweep import config_key, read_layers, train_run
from pipelines.studies.tables import md_table
from pipelines.studies.verdicts import paired_difference
from pipelines.tracking.store import experiment_id, tracking_uri
from posenc import PosencError

NAMESPACE = "posenc.forecast_seeds"  # the parent's and the children's tags
BASELINES = ("linear", "linear_ar", "seasonal_naive")
METRICS = ("mse", "mae")


@dataclass
class SeedRun:
    """One training run: its MLflow id, metrics, and the seconds it took (NaN when only read back)."""

    run_id: str
    metrics: dict[str, float]
    wall_s: float = float("nan")
    cpu_s: float = float("nan")
    params: dict[str, str] = field(default_factory=dict)


def _client():
    import mlflow  # heavy: mlflow, loaded only when tracking

    return mlflow.MlflowClient(tracking_uri())


def read_run(run_id: str, wall_s: float = float("nan"), cpu_s: float = float("nan")) -> SeedRun:
    """The test metrics and baselines of MLflow run ``run_id``."""
    run = _client().get_run(run_id)
    return SeedRun(run_id, dict(run.data.metrics), wall_s, cpu_s, dict(run.data.params))


def train_seeds(config: list[str], seeds: list[int], extra: list[str], experiment: str,
                retrain: bool) -> tuple[str, list[SeedRun]]:
    """Train ``config`` (+ ``extra`` CLI arguments) at every seed as children of a new parent run
    (initialisation and training-window order seeded as ``pipelines.studies.compare`` seeds them)."""

    client = _client()
    exp_id = experiment_id(client, experiment)
    names = "+".join(Path(c).stem for c in config)
    parent = client.create_run(exp_id, run_name=f"seeds-{names}", tags={NAMESPACE: "parent"}).info.run_id
    for name, value in (("configs", " ".join(config)), ("seeds", " ".join(map(str, seeds))),
                        ("arguments", " ".join(extra)[:6000])):
        client.log_param(parent, name, value)
    key = config_key([read_layers(config), extra])
    runs = []
    for seed in seeds:
        try:
            run = train_run(config, extra, seed, experiment=experiment, run_name=f"{names}-seed{seed}",
                            parent_run_id=parent, namespace=NAMESPACE, key=key, reuse=not retrain)
        except PosencError:
            client.set_terminated(parent, "FAILED")
            raise
        runs.append(SeedRun(run.run_id, run.metrics, run.wall_s, run.cpu_s))
    return parent, runs


def comparison(runs: list[SeedRun]) -> list[dict[str, object]]:
    """One row per (metric, baseline): model and baseline means, the paired difference."""
    rows = []
    for metric in METRICS:
        model = [r.metrics[f"test/{metric}"] for r in runs]
        for name in BASELINES:
            key = f"baseline/{name}_{metric}"
            if not all(key in r.metrics for r in runs):
                continue
            base = [r.metrics[key] for r in runs]
            diff = paired_difference(model, base)
            rows.append({"metric": metric, "baseline": name, "model": estimate(model), "base": estimate(base),
                         "diff": diff, "relative": diff.mean / estimate(base).mean,
                         "called": diff.excludes_zero})
    return rows


def decimals(value: float) -> int:
    """Decimals that show about four significant digits of ``value`` (at least one): 195.8, 3.712."""
    if not math.isfinite(value) or value == 0:
        return 1
    return max(1, 3 - math.floor(math.log10(abs(value))))


def _seconds(value: float) -> str:
    """Whole seconds, or ``–`` for a run not trained now (read or reused)."""
    return "–" if math.isnan(value) else f"{value:.0f}"


def table(runs: list[SeedRun]) -> str:
    """The comparison as a Markdown table, then the runs with their seconds."""
    body = []
    for row in comparison(runs):
        d = decimals(row["base"].mean)
        body.append([row["metric"], row["baseline"], row["model"].text(d), row["base"].text(d),
                     row["diff"].text(d), f"{100 * row['relative']:+.1f} %",
                     "yes" if row["called"] else "no"])
    head = ["metric", "baseline", "model (mean ± CI)", "baseline (mean ± CI)", "model − baseline (± CI)",
            "relative", "CI excludes 0"]
    times = [[r.run_id, _seconds(r.wall_s), _seconds(r.cpu_s)] for r in runs]
    return md_table(head, body) + "\n" + md_table(["run", "wall s", "CPU s"], times).rstrip("\n")


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(own, extra)``: this command's options, and the training arguments after ``--``."""
    argv = list(argv)
    return (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])


def main(argv: list[str] | None = None) -> int:
    own, extra = split_passthrough(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m pipelines.studies.forecast_seeds", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], help="training config (repeatable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", help="read these MLflow runs instead of training")
    parser.add_argument("--experiment", default="posenc-forecast-seeds", help="MLflow experiment")
    parser.add_argument("--retrain", action="store_true", help="train every seed, reusing no finished run")
    args = parser.parse_args(own)
    try:
        if not args.runs and not args.config:
            raise PosencError("give --config (to train) or --runs (to read finished runs)")
        if args.runs:
            print(table([read_run(r) for r in args.runs]))
            return 0

        load_config(args.config)  # a missing or broken file: one line, before any run
        parent, runs = train_seeds(args.config, args.seeds, extra, args.experiment, args.retrain)
        text = table(runs)
        _client().log_text(parent, text, "seeds.md")
        _client().set_terminated(parent, "FINISHED")
        print(f"{text}\n\nMLflow parent run {parent} (experiment {args.experiment})")
    except PosencError as exc:
        print_error(exc)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
