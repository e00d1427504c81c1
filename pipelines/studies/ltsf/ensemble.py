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

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.timeseries.ltsf import LTSFData, scaled_errors
from pipelines.studies.ltsf.models import Timer
from pipelines.studies.out_folder import check_entry, open_regular, real_folder, remove_folder, write_file
from posenc import PosencError

SPLITS = ("val", "test")


def ensemble_name(members: Sequence[str]) -> str:
    """The ensemble's model name in the rows: its members joined by ``+`` (``posenc+forecaster``)."""
    return "+".join(members)


def prediction_dir(out: str | Path, model: str, horizon: int, seed: int) -> Path:
    """Where a member's forecasts of one horizon and seed are saved (``val.npy``, ``test.npy``)."""
    return Path(out) / "predictions" / f"{model}-H{horizon}-seed{seed}"


def save_forecast(folder: str | Path, split: str, pred: np.ndarray) -> None:
    """Save one split's forecast (n, H, C) as float32, whole (a temporary file renamed over the name:
    :func:`~pipelines.studies.out_folder.write_file`), so a half-written file is never read as a
    forecast and a link planted at the name is replaced, not followed."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    check_entry(folder.parent, folder=True)
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(pred, dtype=np.float32))
    write_file(real_folder(folder.parent, folder.name) / f"{split}.npy", buffer.getvalue())


def expected_shape(data: LTSFData, split: str, lookback: int, horizon: int) -> tuple[int, int, int]:
    """The shape of a forecast of every window of ``split``: (windows, horizon, channels)."""
    return len(data.starts(split, lookback, horizon)), horizon, data.n_channels


def load_forecast(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A member's saved forecast, if it is one of ``shape``: a regular ``.npy`` file (no pickle) of
    float32 values, all finite — a planted or stale array is one line naming the file, never broadcast
    into the mean.

    Raises:
        PosencError: naming ``path`` and what is wrong.
    """
    try:
        with open_regular(path, binary=True) as fh:
            pred = np.load(fh, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise PosencError(f"{path}: cannot read the saved forecast ({type(exc).__name__}: "
                          f"{str(exc)[:120]}); run the benchmark again without --resume") from None
    if pred.shape != tuple(shape) or pred.dtype != np.float32 or not np.isfinite(pred).all():
        raise PosencError(f"{path}: not this split's forecast (shape {pred.shape}, {pred.dtype}; expected "
                          f"shape {tuple(shape)}, float32, finite): a file this run did not write; run the "
                          "benchmark again without --resume")
    return pred


def mean_forecast(folders: Sequence[Path], split: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The members' mean forecast of ``split`` (n, H, C), each checked (:func:`load_forecast`), or
    ``None`` when a member saved none."""
    paths = [f / f"{split}.npy" for f in folders]
    if not all(p.exists() for p in paths):
        return None
    total = np.zeros(shape, dtype=np.float64)
    for p in paths:
        total += load_forecast(p, shape)  # (n, H, C): the members forecast the same windows
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
        for split in ("val",) if args.val_only else SPLITS:  # --val-only: no test forecast is scored
            pred = mean_forecast(folders, split, expected_shape(data, split, args.lookback, horizon))
            if pred is None and split == "val":
                return None  # a member's forecasts are not saved yet
            if pred is not None:  # (n, H, C), scored against the split's targets
                scores[split] = scaled_errors(pred, data.windows(split, args.lookback, horizon)[1])
        for f in folders:
            remove_folder(f)
    row = {"model": ensemble_name(members), "horizon": horizon, "seed": seed,
           "n_test_windows": mine[members[0]]["n_test_windows"],
           "test/mse_scaled": scores["test"]["mse_scaled"], "test/mae_scaled": scores["test"]["mae_scaled"],
           "val/mse_scaled": scores["val"]["mse_scaled"],
           "time/cpu_s": took.cpu_s + sum(float(mine[m]["time/cpu_s"]) for m in members),
           "time/wall_s": took.wall_s + sum(float(mine[m]["time/wall_s"]) for m in members)}
    row.update({f"test/mse_scaled_L{n}": float("nan") for n in args.test_lookbacks})
    row["chosen"] = f"mean of {', '.join(members)} (equal weights)"
    return row


def _key(row: dict[str, Any]) -> tuple[str, int, int]:
    return row["model"], int(row["horizon"]), int(row["seed"])


def resumed_rows(rows: list[dict[str, Any]], data: LTSFData, args: Any) -> list[dict[str, Any]]:
    """``--resume``: the earlier run's rows, so that every ensemble row the run asks for and lacks can be
    finished: a member's row whose saved forecasts are gone is dropped (that member trains again); a
    saved forecast that is not its split's (shape, dtype, finite values) is one line naming it.

    Raises:
        PosencError: a saved forecast this run cannot have written.
    """
    if not args.ensemble:
        return rows
    have, drop = {_key(r) for r in rows}, set()
    for h, seed in ((h, s) for h in args.horizons for s in args.seeds):
        if (ensemble_name(args.ensemble), h, seed) in have:
            continue
        for member in (m for m in args.ensemble if (m, h, seed) in have):
            folder = prediction_dir(args.out, member, h, seed)
            splits = ("val",) if args.val_only else SPLITS
            if not all((folder / f"{s}.npy").exists() for s in splits):
                drop.add((member, h, seed))
                continue
            for split in splits:
                load_forecast(folder / f"{split}.npy", expected_shape(data, split, args.lookback, h))
    return [r for r in rows if _key(r) not in drop]


def pending(rows: list[dict[str, Any]], args: Any) -> list[tuple[int, int]]:
    """The (horizon, seed) of this run whose ensemble row is missing while every member has its row
    (a run stopped between a member's row and the ensemble's)."""
    have = {_key(r) for r in rows}
    return [(h, s) for h in args.horizons for s in args.seeds if args.ensemble
            and (ensemble_name(args.ensemble), h, s) not in have
            and all((m, h, s) in have for m in args.ensemble)]
