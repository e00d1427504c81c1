"""A forecaster against its baselines over seeds: train one config at several seeds (each a normal
``pipelines.train fit`` run, sequentially), read every run's test metrics and the baselines logged
beside it from MLflow, and print the paired comparison (mean ± 95 % Student-t interval over seeds).

    python -m pipelines.eval.forecast_seeds --config configs/ts_forecast.yaml --seeds 0 1 2
    python -m pipelines.eval.forecast_seeds --runs <run id> <run id> <run id>   # no training

Arguments after ``--`` go to every training run unchanged (e.g. ``-- --data.init_args.path=x.csv``).
The table has, for MSE and MAE, the model's mean ± CI and, for each baseline, its mean and the paired
difference model − baseline (± CI, and relative to the baseline's mean). A difference is *called*
only when its interval excludes 0. Wall and CPU seconds of each training run are logged too.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field

from pipelines.eval.statistics import estimate, paired_difference
from pipelines.tracking.store import tracking_uri
from posenc import PosencError

BASELINES = ("linear", "linear_ar", "seasonal_naive", "dlinear")
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
    import mlflow

    return mlflow.MlflowClient(tracking_uri())


def read_run(run_id: str, wall_s: float = float("nan"), cpu_s: float = float("nan")) -> SeedRun:
    """The test metrics and baselines of MLflow run ``run_id``."""
    run = _client().get_run(run_id)
    return SeedRun(run_id, dict(run.data.metrics), wall_s, cpu_s, dict(run.data.params))


def newest_run(experiment: str = "posenc") -> str | None:
    """The id of the most recently started run of ``experiment`` (``None``: none yet)."""
    client = _client()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def train_seed(config: list[str], seed: int, extra: list[str]) -> SeedRun:
    """Run ``pipelines.train fit`` at ``seed`` (initialisation and training-window order, as
    ``pipelines.eval.compare`` seeds them); its run read back with wall and CPU seconds."""
    before = newest_run()
    cmd = [sys.executable, "-m", "pipelines.train", "fit", *[a for c in config for a in ("--config", c)],
           f"--seed_everything={seed}", f"--data.init_args.seed={seed}", *extra]  # init and data order
    print("$", " ".join(cmd), flush=True)
    usage0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, env=os.environ.copy(), check=False)
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    after = newest_run()
    if done.returncode != 0 or after is None or after == before:
        raise PosencError(f"training at seed {seed} failed (exit status {done.returncode}); see its output")
    return read_run(after, wall, cpu)


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


def table(runs: list[SeedRun]) -> str:
    """The comparison as a Markdown table, then the runs with their seconds."""
    lines = ["| metric | baseline | model (mean ± CI) | baseline (mean ± CI) | model − baseline (± CI) "
             "| relative | CI excludes 0 |", "|---|---|---|---|---|---|---|"]
    for row in comparison(runs):
        d = decimals(row["base"].mean)
        lines.append(f"| {row['metric']} | {row['baseline']} | {row['model'].text(d)} "
                     f"| {row['base'].text(d)} | {row['diff'].text(d)} | {100 * row['relative']:+.1f} % | "
                     f"{'yes' if row['called'] else 'no'} |")
    lines += ["", "| run | wall s | CPU s |", "|---|---|---|"]
    lines += [f"| {r.run_id} | {r.wall_s:.0f} | {r.cpu_s:.0f} |" for r in runs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m pipelines.eval.forecast_seeds", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], help="training config (repeatable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", help="read these MLflow runs instead of training")
    args = parser.parse_args(own)
    try:
        if not args.runs and not args.config:
            raise PosencError("give --config (to train) or --runs (to read finished runs)")
        runs = [read_run(r) for r in args.runs] if args.runs else \
            [train_seed(args.config, s, extra) for s in args.seeds]
        print(table(runs))
    except PosencError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
