"""``python -m pipelines.studies.forecast_seeds``: the paired comparison over seeds, from runs' metrics."""

from __future__ import annotations

import pytest

from pipelines.studies.forecast_seeds import SeedRun, comparison, decimals, table


def seed_run(i: int, mse: float, mae: float) -> SeedRun:
    metrics = {"test/mse": mse, "test/mae": mae, "baseline/linear_mse": 10.0, "baseline/linear_mae": 3.0,
               "baseline/seasonal_naive_mse": mse + 1.0 + 0.1 * i, "baseline/seasonal_naive_mae": 2.0}
    return SeedRun(f"run{i}", metrics, wall_s=20.0 + i, cpu_s=30.0)


def test_paired_differences_are_called_only_when_their_interval_excludes_zero():
    runs = [seed_run(0, 8.0, 2.9), seed_run(1, 8.5, 3.2), seed_run(2, 9.0, 2.8)]
    rows = {(r["metric"], r["baseline"]): r for r in comparison(runs)}
    assert set(rows) == {(m, b) for m in ("mse", "mae") for b in ("linear", "seasonal_naive")}
    linear = rows["mse", "linear"]
    assert linear["diff"].mean == pytest.approx(-1.5) and linear["relative"] == pytest.approx(-0.15)
    assert linear["called"]  # 8, 8.5, 9 against a fixed 10
    assert not rows["mae", "linear"]["called"]  # 2.9, 3.2, 2.8 against 3: interval holds 0
    naive = rows["mse", "seasonal_naive"]["diff"]  # paired: the same run's baseline
    assert naive.mean == pytest.approx(-1.1)


def test_the_table_shows_about_four_significant_digits():
    assert [decimals(v) for v in (69874.5, 195.8, 25.4, 3.71, 0.0123)] == [1, 1, 2, 3, 5]
    text = table([seed_run(i, 8.0 + i, 2.9) for i in range(3)])
    assert "| mse | linear | 9.00 ± 2.48 | 10.00 ± 0.00 | -1.00 ± 2.48 | -10.0 % | no |" in text
    assert "| run2 | 22 | 30 |" in text


@pytest.mark.slow  # three tiny forecaster fits through the sweep runner
def test_seeds_are_children_of_one_parent_and_a_rerun_trains_only_new_seeds(tmp_path, series_csv, capsys):
    from pipelines.studies.forecast_seeds import NAMESPACE, main
    from tests.helpers import ROOT, store_client, workdir_with_store

    small = [f"--data.path={series_csv}", "--data.time_col=when", "--data.target_cols=[load]",
             "--data.covariate_cols=[temp]", "--data.timezone=null", "--data.lookback=24", "--data.horizon=6",
             "--data.patch_len=4", "--data.eval_stride=8", "--data.batch_size=16",
             "--data.samples_per_epoch=32",
             "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1",
             "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false", "--register.register=false"]
    config = ["--config", str(ROOT / "configs" / "ts_forecast.yaml")]
    with workdir_with_store(tmp_path):
        assert main([*config, "--seeds", "0", "1", "--", *small]) == 0
        assert main([*config, "--seeds", "0", "1", "2", "--", *small]) == 0
    out = capsys.readouterr().out
    assert "| mse | linear | " in out and "| – | – |" in out  # reused seeds: no seconds of their own
    client = store_client(tmp_path)
    runs = client.search_runs([client.get_experiment_by_name("posenc-forecast-seeds").experiment_id])
    parents = sorted((r for r in runs if r.data.tags.get(NAMESPACE) == "parent"),
                     key=lambda r: r.info.start_time)
    assert [p.info.status for p in parents] == ["FINISHED", "FINISHED"]
    seeds = [sorted(r.data.tags[f"{NAMESPACE}.seed"] for r in runs
                    if r.data.tags.get("mlflow.parentRunId") == p.info.run_id) for p in parents]
    assert seeds == [["0", "1"], ["2"]]  # seeds 0 and 1 of the first call reused by the second
    assert {a.path for a in client.list_artifacts(parents[1].info.run_id)} == {"seeds.md"}
