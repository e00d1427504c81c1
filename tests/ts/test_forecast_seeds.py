"""``python -m pipelines.eval.forecast_seeds``: the paired comparison over seeds, from runs' metrics."""

from __future__ import annotations

import pytest

from pipelines.eval.forecast_seeds import SeedRun, comparison, decimals, table


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
