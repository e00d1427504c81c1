"""The models of the LTSF benchmark (:mod:`pipelines.studies.ltsf`): the model configs, the pieces the
neural models' training uses around the Lightning loop (:mod:`pipelines.studies.ltsf.fit` trains them
through the sweep runner: the closed-form warm start, forecasting every window) and the baselines
fitted on the same windows.

Every baseline takes the protocol's data, lookback, horizon and seed and returns a :class:`Result`: the
forecast of every test window (scaled), the validation MSE the choices were made on, and what was
chosen. The test windows are forecast once, after every choice (epoch, penalty) is made on val.
"""

from __future__ import annotations

import importlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from datamodules.timeseries.ltsf import LTSFData, scaled_errors
from datamodules.timeseries.ltsf_data import LTSFDataModule
from datamodules.timeseries.windows import gather_windows
from pipelines.safety import check_class_paths
from pipelines.tasks.forecast.baselines import ridge_on_val, seasonal_naive
from pipelines.tasks.forecast.blend import channel_rows
from pipelines.tasks.upgrade.legacy import move_class_paths, regroup
from posenc import PosencError


@dataclass
class Result:
    """One model × horizon × seed: its test forecast (n, H, C) scaled, the val metrics it was chosen
    on, what was chosen (``params``) and how long it took (process CPU seconds, wall seconds)."""

    pred: np.ndarray
    val: dict[str, float]
    params: dict[str, Any] = field(default_factory=dict)
    cpu_s: float = 0.0
    wall_s: float = 0.0


class Timer:
    """Process CPU time (every thread) and wall time of a ``with`` block."""

    def __enter__(self) -> Timer:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cpu_s = time.process_time() - self.cpu0
        self.wall_s = time.perf_counter() - self.wall0


# ----------------------------------------------------------------------------- neural (see ltsf_fit)
PROTOCOL = "pipelines.studies.ltsf.fit.LTSFProtocol"  # the callback every model config carries
#: The ridge penalties the benchmark's linear models try on val, decades 0.1 … 10⁶. The files have
#: 10⁵–10⁶ training rows (windows × channels), and on Weather val chose the largest of the
#: 0.1 … 1000 grid for both the ridge baseline and the warm start: an edge is not a choice.
LTSF_ALPHAS = tuple(10.0**k for k in range(-1, 7))
#: How far past an end of :data:`LTSF_ALPHAS` val may take the penalty, a decade at a time
#: (:func:`~pipelines.tasks.forecast.baselines.ridge_on_val`): the 0.1 … 10⁶ grid still bound on
#: ETTh1 at 96 (0.1) and on Weather at 720 (10⁶).
LTSF_ALPHA_BOUNDS = (1e-4, 1e9)
LAYER_KEYS = {"model", "data", "trainer", "test_after_fit", "register"}  # what a model config may set
#: what a model config may set in data.init_args, per group (the rest of it is the protocol's overlay)
DATA_KEYS = {"loader": ("batch_size", "samples_per_epoch"), "windows": ("val_stride",)}


def missing_package(package: str) -> str | None:
    """Why an optional baseline cannot run here (``package`` is not importable), or ``None``."""
    try:
        importlib.import_module(package)
    except ImportError:
        return f"{package} is not installed (pip install -e '.[ltsf]')"
    return None


def load_model_config(path: str | Path) -> dict[str, Any]:
    """A benchmark model config: an ordinary CLI layer (``model``; ``data.init_args`` ``loader``'s
    batch_size and samples_per_epoch and ``windows.val_stride``, flat ones of before grouped; ``trainer``
    with its callbacks, :class:`~pipelines.studies.ltsf.fit.LTSFProtocol` among them, whose ``name``
    labels the model's rows) that :func:`~pipelines.studies.ltsf.fit.cli_config`
    completes with the protocol's overlay. ``{"name", "model", "layer"}``; a clear error naming the file
    and key when something is missing or unknown."""
    file = Path(path)
    if not file.is_file():
        raise PosencError(f"{file}: no such model config")
    layer = move_class_paths(yaml.safe_load(file.read_text()) or {})  # old spellings read as today's
    if not isinstance(layer.get("model"), dict) or "class_path" not in layer["model"]:
        raise PosencError(f"{file}: needs model.class_path (and model.init_args)")
    data = layer.get("data") if isinstance(layer.get("data"), dict) else {}
    given = regroup(LTSFDataModule, data.get("init_args") or {})  # the flat spelling of before, grouped
    layer = {**layer, "data": {**data, "init_args": given}} if given else layer
    unknown = sorted(set(layer) - LAYER_KEYS)
    for group, values in sorted(given.items()):
        if group not in DATA_KEYS or not isinstance(values, dict):
            unknown.append(f"data.init_args.{group}")
        else:
            unknown += [f"data.init_args.{group}.{k}" for k in sorted(set(values) - set(DATA_KEYS[group]))]
    if unknown:
        allowed = ", ".join(f"{g}.{k}" for g, keys in DATA_KEYS.items() for k in keys)
        raise PosencError(f"{file}: keys the benchmark sets or does not know: {', '.join(unknown)} (a model "
                          f"config sets {', '.join(sorted(LAYER_KEYS))}; data.init_args {allowed})")
    callbacks = (layer.get("trainer") or {}).get("callbacks") or []
    protocol = [c for c in callbacks if isinstance(c, dict) and c.get("class_path") == PROTOCOL]
    if len(protocol) != 1:
        raise PosencError(f"{file}: trainer.callbacks needs exactly one {PROTOCOL}")
    check_class_paths(layer, str(file))  # before anything imports what the file names
    name = str((protocol[0].get("init_args") or {}).get("name") or file.stem)
    return {"name": checked_name(name, f"{file}: LTSFProtocol's name"), "model": layer["model"],
            "layer": layer}


#: a model's name: one path component of letters, digits, ``_``, ``-`` and ``.`` (not first), so that
#: ``--out/predictions/<name>-H<h>-seed<s>`` stays inside ``--out``; ``+`` joins an ensemble's members
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def checked_name(name: str, where: str) -> str:
    """``name`` if it is a model name (:data:`MODEL_NAME`), else one line naming ``where``.

    Raises:
        PosencError: a name that is not one path component (``../../x``, ``a/b``, ``..``) or holds other
            characters.
    """
    if not MODEL_NAME.fullmatch(name):
        raise PosencError(f"{where} {name!r} is not a model name: it names files under --out, so it must be "
                          "one path component of letters, digits, '_', '-' and '.' (not first)")
    return name


def with_encoding(config: dict[str, Any], scheme_file: str | Path) -> dict[str, Any]:
    """``config`` with its encoding replaced by the one of ``configs/posenc/<scheme>.yaml`` (its
    ``model.init_args.pe``); a ``periods`` list there counts in the model's token positions."""
    scheme = (yaml.safe_load(Path(scheme_file).read_text()) or {}).get("model") or {}
    pe = (scheme.get("init_args") or {}).get("pe")
    model = {**config["model"], "init_args": {**config["model"].get("init_args", {}), "pe": pe}}
    check_class_paths(pe, str(scheme_file))
    name = checked_name(f"{config['name']}-{Path(scheme_file).stem}", f"{scheme_file}: the encoding's model")
    return {**config, "model": model, "name": name}


def forecast(model: Any, x: np.ndarray, batch: int = 256) -> np.ndarray:
    """The model's forecast (n, H, C) of lookbacks x (n, L, C), in eval mode, batched, on the
    model's device (a GPU when it was trained there)."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for i in range(0, len(x), batch):
            xb = torch.as_tensor(x[i : i + batch], dtype=torch.float32, device=device)  # (b, L, C)
            out.append(model(xb).cpu().numpy())
    return np.concatenate(out)


def longer_lookbacks(model: Any, data: LTSFData, lookbacks: tuple[int, ...], lookback: int,
                     horizon: int) -> dict[int, np.ndarray | str]:
    """``{n: forecast}`` of the test targets from ``n``-step lookbacks (the reason, when the model is
    undefined there: a learned table too short, a flatten head)."""
    out: dict[int, np.ndarray | str] = {}
    for n in lookbacks:
        try:
            out[n] = forecast(model, _test_lookback(data, n, lookback, horizon))
        except PosencError as exc:
            out[n] = str(exc)
    return out


def warm_start(model: Any, data: LTSFData, lookback: int, horizon: int) -> dict[str, Any]:
    """Fit the model's linear path in closed form before training
    (:meth:`~pipelines.tasks.forecast.patchtst.PatchTSTForecaster.fit_linear_path`: ridge from each
    channel's lookback to its horizon on every train window, the penalty the best of
    :data:`LTSF_ALPHAS` on val, past its ends as far as :data:`LTSF_ALPHA_BOUNDS`)."""
    if getattr(model, "linear", None) is None:
        raise PosencError("linear_warm_start needs a model with a linear path (model.linear_path: true)")
    return {"linear_alpha": model.fit_linear_path(data, alphas=LTSF_ALPHAS,
                                                          bounds=LTSF_ALPHA_BOUNDS)}


def _test_lookback(data: LTSFData, n: int, lookback: int, horizon: int) -> np.ndarray:
    """Lookbacks of ``n`` steps ending where the protocol's test windows (lookback ``lookback``) start."""

    starts = data.starts("test", lookback, horizon)
    if starts.min() < n:
        raise PosencError(f"test lookback {n} reaches before the first row")
    return gather_windows(data.values, starts, n, 0)


# ----------------------------------------------------------------------------- closed-form baselines
def seasonal_naive_run(data: LTSFData, lookback: int, horizon: int, seed: int,
                       period: int | None = None) -> Result:
    """The value ``period`` steps (default: a day in the file's rows, ``data.period``) earlier,
    repeated over the horizon."""
    period = int(period or data.period)
    with Timer() as clock:
        pred = {s: seasonal_naive(data.values, data.starts(s, lookback, horizon), horizon, period)
                for s in ("val", "test")}
    val = scaled_errors(pred["val"], data.windows("val", lookback, horizon)[1])
    return Result(pred["test"], val, {"period": period}, clock.cpu_s, clock.wall_s)


def _from_channels(rows: np.ndarray, c: int) -> np.ndarray:
    """(n·C, H) → (n, H, C)."""
    return rows.reshape(-1, c, rows.shape[1]).transpose(0, 2, 1)


def ridge_run(data: LTSFData, lookback: int, horizon: int, seed: int) -> Result:
    """Ridge from a channel's lookback to its horizon (the model's inputs), shared by every channel
    and fitted on every train window; the penalty the best of :data:`LTSF_ALPHAS` on val, past its
    ends as far as :data:`LTSF_ALPHA_BOUNDS` (:func:`~pipelines.tasks.forecast.baselines.ridge_on_val`)."""
    c = data.n_channels
    with Timer() as clock:
        (xt, yt), (xv, yv), (xs, _) = (data.windows(s, lookback, horizon) for s in ("train", "val", "test"))

        def val(fit: Any) -> dict[str, float]:
            return scaled_errors(_from_channels(fit.predict(channel_rows(xv))[..., 0], c), yv)

        fit, alpha = ridge_on_val((channel_rows(xt), channel_rows(yt)[:, :, None]),
                                  lambda f: val(f)["mse_scaled"], alphas=LTSF_ALPHAS,
                                  bounds=LTSF_ALPHA_BOUNDS)
        pred = _from_channels(fit.predict(channel_rows(xs))[..., 0], c)
    return Result(pred, val(fit), {"alpha": alpha}, clock.cpu_s, clock.wall_s)
