"""``--resume`` checks ``results.csv`` up front (issue 42): a bad cell is one line naming the row and
column, exit 2, before any job runs and before any MLflow run is created; formula cells are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers import runs, workdir_with_store

HEADER = ("model,horizon,seed,n_test_windows,test/mse_scaled,test/mae_scaled,val/mse_scaled,time/cpu_s,"
          "time/wall_s,chosen\n")
GOOD = "naive,96,0,2785,0.5,0.4,0.6,1.0,1.0,lag=24\n"


def ett(path):
    n = 14400
    t = np.arange(n)
    dates = pd.date_range("2016-07-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    pd.DataFrame({"date": dates, "OT": np.sin(2 * np.pi * t / 24)}).to_csv(path, index=False)
    return path


MSE = "row 2 (line 3), column 'test/mse_scaled'"


@pytest.mark.parametrize("bad, message", [
    ("naive,96,0,2785,abc,0.4,0.6,1.0,1.0,x\n", f"{MSE}: expected a number, got 'abc'"),
    ("naive,96.5,0,2785,0.5,0.4,0.6,1.0,1.0,x\n",
     "row 2 (line 3), column 'horizon': expected a whole number"),
    ("naive,96,0,2785,inf,0.4,0.6,1.0,1.0,x\n", f"{MSE}: 'inf' is not finite"),
    ('"=HYPERLINK(""http://x"")",96,0,2785,0.5,0.4,0.6,1.0,1.0,x\n',
     "row 2 (line 3), column 'model' starts like a spreadsheet formula"),
    ("naive,96,0,2785,0.5,0.4,0.6,1.0,1.0,@SUM(A1)\n",
     "row 2 (line 3), column 'chosen' starts like a spreadsheet"),
    # issue 56: ranges, digits that are not 0-9, and a row given twice
    ("naive,96,0,2785,-0.5,0.4,0.6,1.0,1.0,x\n", f"{MSE}: -0.5 is negative"),
    ("naive,96,0,2785,1e308,0.4,0.6,1.0,1.0,x\n", f"{MSE}: 1e+308 is beyond any float32 forecast's error"),
    ("naive,\u00b2,0,2785,0.5,0.4,0.6,1.0,1.0,x\n",
     "row 2 (line 3), column 'horizon': expected a whole number"),
    ("naive,96,0,2785,0.5,0.4,0.6,1.0,1.0,lag=24\n",
     "row 2 (line 3) repeats row 1 (naive, horizon 96, seed 0)"),
])
def test_a_bad_results_csv_is_one_line_before_any_job(tmp_path, capsys, bad, message):
    from pipelines.studies.ltsf.run import main

    data = ett(tmp_path / "ett.csv")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.csv").write_text(HEADER + GOOD + bad)
    with workdir_with_store(tmp_path), pytest.raises(SystemExit) as exc:
        main(["--data", str(data), "--out", str(tmp_path / "out"), "--resume", "--baselines", "naive",
              "--horizons", "96", "--seeds", "0", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1] and "results.csv" in err[-1], err
    assert not any(line.startswith(("naive H=", "skipped")) for line in err)  # no job ran
    _, found = runs(tmp_path)
    assert found == []  # no parent run was created (none left RUNNING)


def test_a_results_csv_of_another_command_is_refused_by_column(tmp_path):
    from pipelines.studies.results_table import read_results
    from posenc import PosencError

    (tmp_path / "r.csv").write_text("a,b\n1,2\n")
    with pytest.raises(PosencError, match=r"r.csv: no column 'model' \(columns: a, b\)"):
        read_results(tmp_path / "r.csv", ["model", "horizon"])
