"""The mean of trained models' forecasts as one more model of the LTSF benchmark (``--ensemble``).

Forecast combination (Bates & Granger 1969; the simple mean is the combination the M-competitions
found hard to beat): two models that err in different places average to one that errs less than
either on most files. With ``--ensemble A B`` each member's :class:`~pipelines.studies.ltsf.fit.LTSFProtocol`
saves its val and test forecasts (float32 ``.npy``, the reported model's: best val epoch or warm
start) under ``--out/predictions/<model>-H<h>-seed<s>/``. Once every member of a horizon and seed
has its row, the benchmark scores the mean of their forecasts on the same windows, adds it as the row
of the model ``A+B`` (so ``--choose-on-val`` can name it) and deletes the saved forecasts (a Weather
seed at 720 is about 0.9 GB per model). Nothing is fitted: the weights are equal, fixed in advance.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.timeseries.ltsf import LTSFData, scaled_errors
from pipelines.studies.ltsf.models import Timer

SPLITS = ("val", "test")


def ensemble_name(members: Sequence[str]) -> str:
    """The ensemble's model name in the rows: its members joined by ``+`` (``posenc+forecaster``)."""
    return "+".join(members)


def prediction_dir(out: str | Path, model: str, horizon: int, seed: int) -> Path:
    """Where a member's forecasts of one horizon and seed are saved (``val.npy``, ``test.npy``)."""
    return Path(out) / "predictions" / f"{model}-H{horizon}-seed{seed}"


def save_forecast(folder: str | Path, split: str, pred: np.ndarray) -> None:
    """Save one split's forecast (n, H, C) as float32; written to a temporary name, then renamed, so a
    half-written file is never read as a forecast."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{split}.npy"
    np.save(tmp, np.asarray(pred, dtype=np.float32))
    tmp.replace(folder / f"{split}.npy")


def mean_forecast(folders: Sequence[Path], split: str) -> np.ndarray | None:
    """The members' mean forecast of ``split`` (n, H, C), or ``None`` when a member saved none (a
    ``--val-only`` run has no test forecasts)."""
    paths = [f / f"{split}.npy" for f in folders]
    if not all(p.is_file() for p in paths):
        return None
    total = np.load(paths[0]).astype(np.float64)
    for p in paths[1:]:
        total += np.load(p, mmap_mode="r")  # (n, H, C): the members forecast the same windows
    return total / len(paths)


def ensemble_row(members: Sequence[str], horizon: int, seed: int, rows: list[dict[str, Any]],
                 data: LTSFData, args: Any) -> dict[str, Any] | None:
    """The results row of the mean of ``members`` at ``horizon`` and ``seed`` once each has a row and
    its saved val forecast (else ``None``); the saved forecasts are deleted. CPU and wall seconds: the
    members' plus the combination's, the cost of the forecast run one model at a time."""
    mine = {r["model"]: r for r in rows if int(r["horizon"]) == horizon and int(r["seed"]) == seed}
    folders = [prediction_dir(args.out, m, horizon, seed) for m in members]
    if any(m not in mine for m in members):
        return None
    scores = dict.fromkeys(SPLITS, {"mse_scaled": float("nan"), "mae_scaled": float("nan")})
    with Timer() as took:
        for split in SPLITS:
            pred = mean_forecast(folders, split)
            if pred is None and split == "val":
                return None  # a member's forecasts are not saved yet
            if pred is not None:  # (n, H, C), scored against the split's targets
                scores[split] = scaled_errors(pred, data.windows(split, args.lookback, horizon)[1])
        for f in folders:
            shutil.rmtree(f, ignore_errors=True)
    row = {"model": ensemble_name(members), "horizon": horizon, "seed": seed,
           "n_test_windows": mine[members[0]]["n_test_windows"],
           "test/mse_scaled": scores["test"]["mse_scaled"], "test/mae_scaled": scores["test"]["mae_scaled"],
           "val/mse_scaled": scores["val"]["mse_scaled"],
           "time/cpu_s": took.cpu_s + sum(float(mine[m]["time/cpu_s"]) for m in members),
           "time/wall_s": took.wall_s + sum(float(mine[m]["time/wall_s"]) for m in members)}
    row.update({f"test/mse_scaled_L{n}": float("nan") for n in args.test_lookbacks})
    row["chosen"] = f"mean of {', '.join(members)} (equal weights)"
    return row
