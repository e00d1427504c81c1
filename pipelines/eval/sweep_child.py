"""A sweep's run in its own process, for trainers that start several processes (DDP).

:func:`pipelines.eval.sweep.train_run` (compare, claims, forecast_seeds) trains in-process.
Lightning's DDP launcher starts the other ranks by re-running the *current command* (``python -m
<module> <argv>``) — for an in-process run that would be the whole comparison, once more per rank.
So when a run's trainer launches processes (:func:`launches_processes`), the runner starts it as
``python -m pipelines.eval.sweep_child --result <file> -- <fit arguments>``: a command whose
re-runs are exactly the other ranks of that one fit. Rank 0 runs the length sweep of
:class:`~pipelines.eval.evaluate.ExtrapolationEval` if the config has one (logged to the run's
MLflow run, like any run's) and writes the run id and best checkpoint into ``<file>``; the caller
reads everything else back from MLflow, so the report is the same as with in-process runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from pipelines.children import child_environment, die_with_parent_from_env, terminate
from pipelines.cli import main as cli_main
from pipelines.eval.evaluate import ExtrapolationEval
from pipelines.tracking.store import mlflow_loggers


def _devices(value: Any) -> int | None:
    """Number of devices a ``trainer.devices`` value names (``None``: "auto" or -1, i.e. all)."""
    if isinstance(value, (list, tuple)):
        return len(value)
    text = str(value).strip().lower()
    if "," in text:
        return len([p for p in text.split(",") if p.strip()])
    if text.lstrip("-").isdigit():
        return None if int(text) == -1 else int(text)
    return None


def launches_processes(config: dict[str, Any]) -> bool:
    """Whether the merged config's trainer starts more than one process: a DDP-family strategy,
    ``num_nodes > 1``, more than one device, or every device (``auto``/-1) of a machine with
    several GPUs (Lightning then picks DDP itself)."""
    trainer = config.get("trainer") or {}
    strategy = trainer.get("strategy", "auto")
    name = str(strategy.get("class_path", "") if isinstance(strategy, dict) else strategy).lower()
    if any(k in name for k in ("ddp", "fsdp", "deepspeed")):
        return True
    if int(trainer.get("num_nodes", 1) or 1) > 1:
        return True
    count = _devices(trainer.get("devices", "auto"))
    if count is not None:
        return count > 1
    if str(trainer.get("accelerator", "auto")).lower() == "cpu":
        return False

    return torch.cuda.device_count() > 1


def run_in_subprocess(fit_args: list[str], result: Path) -> tuple[str | None, str, str | None]:
    """Train one run as its own process group: (its MLflow run id, "", its best checkpoint or
    ``None``), or (None, the reason, None).

    The run's length sweep (:class:`~pipelines.eval.evaluate.ExtrapolationEval`) is logged to that
    run by rank 0, where the caller reads it back like any other run's.
    """
    cmd = [sys.executable, "-m", "pipelines.eval.sweep_child", "--result", str(result), "--", *fit_args]
    child = subprocess.Popen(cmd, env=child_environment())  # it dies with this process (killed too)
    try:
        code = child.wait()
    except BaseException:  # stopped (SIGTERM, Ctrl-C): the child is stopped too and marks its run KILLED
        terminate([child.pid])
        child.wait()
        raise
    if code != 0 or not result.is_file():
        return None, f"exit status {code}", None
    found = json.loads(result.read_text())
    if not found["swept"]:
        return None, "training was interrupted", None
    return found["run_id"], "", found.get("checkpoint")


def main(argv: list[str] | None = None) -> None:
    """``--result FILE -- <fit arguments>``: run the fit; rank 0 writes what the runner needs."""

    die_with_parent_from_env()  # started by run_in_subprocess: stop when the runner stops or is killed
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[0] != "--result" or argv[2] != "--":
        raise SystemExit("usage: python -m pipelines.eval.sweep_child --result FILE -- <fit arguments>")
    out, fit_args = Path(argv[1]), argv[3:]
    cli = cli_main(fit_args)
    trainer = cli.trainer
    if not trainer.is_global_zero:
        return
    hook = next((c for c in trainer.callbacks if isinstance(c, ExtrapolationEval)), None)
    if hook is not None and hook.result is None:
        hook.run(trainer, cli.model)
    run_id = next((lg.run_id for lg in mlflow_loggers(trainer)), None)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    best = str(Path(best).resolve()) if best else None  # absolute: the caller may run elsewhere
    swept = not trainer.interrupted if hook is None else hook.result is not None
    found = {"run_id": run_id, "swept": swept, "checkpoint": best}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(found))
    tmp.replace(out)


if __name__ == "__main__":
    main()
