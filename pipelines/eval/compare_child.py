"""A comparison child in its own process, for trainers that start several processes (DDP).

``pipelines.eval.compare`` trains its children in-process. Lightning's DDP launcher starts the
other ranks by re-running the *current command* (``python -m <module> <argv>``) — for an in-process
child that would be the whole comparison, once more per rank. So when a child's trainer launches
processes (:func:`launches_processes`), the comparison runs it as ``python -m
pipelines.eval.compare_child --result <file> -- <fit arguments>``: a command whose re-runs are
exactly the other ranks of that one fit. Rank 0 writes the MLflow run id, the length sweep of
:class:`~pipelines.eval.evaluate.ExtrapolationEval` and the best checkpoint's path into ``<file>``;
the comparison reads it back and rebuilds the model and its datamodule from the checkpoint (for the
baselines), so the report is the same as with in-process children.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any


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
    import torch

    return torch.cuda.device_count() > 1


def run_in_subprocess(scheme: str, seed: int, fit_args: list[str], config: dict[str, Any], workdir: Path):
    """Train one child as its own process group; returns a :class:`compare_report.Child`."""
    from pipelines.eval.compare_report import Child
    from pipelines.eval.evaluate import build_from_checkpoint
    from pipelines.inference.loading import read_checkpoint

    out = workdir / f"{scheme}-seed{seed}.result"
    cmd = [sys.executable, "-m", "pipelines.eval.compare_child", "--result", str(out), "--", *fit_args]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0 or not out.is_file():
        return Child(scheme, seed, None, None, f"exit status {done.returncode}")
    with open(out, "rb") as fh:
        found = pickle.load(fh)  # written just now by our own child process
    if found["result"] is None:
        return Child(scheme, seed, found["run_id"], None, "training was interrupted")
    ckpt = found["checkpoint"]
    module, dm = build_from_checkpoint(read_checkpoint(Path(ckpt)), config, ckpt)
    return Child(scheme, seed, found["run_id"], found["result"], module=module, datamodule=dm)


def main(argv: list[str] | None = None) -> None:
    """``--result FILE -- <fit arguments>``: run the fit; rank 0 writes what the comparison needs."""
    from pipelines.cli import main as cli_main
    from pipelines.eval.evaluate import ExtrapolationEval
    from pipelines.tracking.store import mlflow_loggers

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[0] != "--result" or argv[2] != "--":
        raise SystemExit("usage: python -m pipelines.eval.compare_child --result FILE -- <fit arguments>")
    out, fit_args = Path(argv[1]), argv[3:]
    cli = cli_main(fit_args)
    trainer = cli.trainer
    if not trainer.is_global_zero:
        return
    hook = next(c for c in trainer.callbacks if isinstance(c, ExtrapolationEval))
    best = getattr(trainer.checkpoint_callback, "best_model_path", "") or ""
    if not (best and Path(best).is_file()):
        best = str(out.with_suffix(".ckpt"))
        trainer.save_checkpoint(best, weights_only=True)  # the process group is gone: rank 0 alone
    found = {"run_id": next((lg.run_id for lg in mlflow_loggers(trainer)), None),
             "result": hook.result, "checkpoint": best}
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(found, fh)
    tmp.replace(out)


if __name__ == "__main__":
    main()
