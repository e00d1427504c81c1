"""Guards for files and names that come from elsewhere: checkpoints, class paths, the working folder.

* :func:`check_local_checkpoint` — a ``ckpt_path`` must be a local file (or one of Lightning's
  ``best``/``last``/``hpc``): a URL would be downloaded and unpickled by Lightning with
  ``weights_only=False``. Every load is weights-only (:class:`pipelines.cli.PosencCLI`);
  :func:`unsafe_checkpoint` words what ``weights_only`` refused.
* :func:`add_trust_args` / :func:`apply_trust_args` — ``--trust-module`` for the commands that read
  class paths from checkpoints, saved configs and registered models (see
  :func:`posenc.registry.import_class`, which imports nothing outside the trusted modules).
* :func:`drop_working_folder` — ``python -m`` puts the working folder first on ``sys.path``; the
  inference entry points take it off, so a stray ``.py`` beside the data is never imported.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from datamodules.scrub import scrub_text
from posenc import PosencError
from posenc.registry import TRUST_ENV, check_trusted, trust_modules

#: ``ckpt_path`` values Lightning resolves to a local file itself
LOCAL_KEYWORDS = ("best", "last", "hpc")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def check_local_checkpoint(ckpt_path: Any) -> None:
    """Refuse a ``ckpt_path`` that is not a local checkpoint file, before anything is loaded.

    Raises:
        PosencError: a URL (``http://``, ``s3://``, ``file://``…), Lightning's ``registry`` form, or a
            local file that does not exist.
    """
    if ckpt_path is None or str(ckpt_path) in LOCAL_KEYWORDS:
        return
    text = str(ckpt_path)
    if _URL.match(text) or text.lower() == "registry" or text.lower().startswith("registry:"):
        raise PosencError(f"ckpt_path {scrub_text(text)!r}: only a local checkpoint file is loaded (a remote "
                          "one would be unpickled with weights_only=False); download it and give its path")
    if not Path(text).is_file():
        raise PosencError(f"ckpt_path {text}: checkpoint file not found")


def check_class_paths(value: Any, source: str) -> None:
    """Every ``class_path`` (or Lightning's ``_class_path``) inside ``value`` must be trusted, before the
    config parser that would import it sees it.

    Raises:
        PosencError: ``source`` and the first untrusted class.
    """
    if isinstance(value, dict):
        for key in ("class_path", "_class_path"):
            if isinstance(value.get(key), str):
                try:
                    check_trusted(value[key], "class")
                except PosencError as exc:
                    raise PosencError(f"{source}: {exc}") from None
        for item in value.values():
            check_class_paths(item, source)
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_class_paths(item, source)


def weights_only_reason(exc: BaseException) -> str:
    """What ``torch.load(weights_only=True)`` refused, in a few words (a damaged file gives its error)."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
    if found:
        return f"Unsupported global {found.group(1)} (it would be called while loading; refused)"
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"


def unsafe_checkpoint(ckpt_path: Any, exc: BaseException) -> str:
    """One line for a checkpoint that ``torch.load(weights_only=True)`` refused (it names a global such
    as a function to call, which only a crafted or foreign file does)."""
    reason = weights_only_reason(exc)
    return f"ckpt_path {ckpt_path}: cannot load the checkpoint safely (weights_only): {reason}"


def add_trust_args(parser: argparse.ArgumentParser) -> None:
    """``--trust-module MODULE`` (repeatable) for a command that imports classes a checkpoint or a saved
    config names."""
    parser.add_argument("--trust-module", action="append", default=[], metavar="MODULE",
                        help="also import classes from this module (and below it) when a checkpoint or "
                             f"saved config names them; default: posenc, pipelines, datamodules, torch, "
                             f"lightning and ${TRUST_ENV}")


def apply_trust_args(args: argparse.Namespace) -> None:
    """Trust the modules given with ``--trust-module``."""
    trust_modules(*getattr(args, "trust_module", []) or [])


def drop_working_folder() -> None:
    """Take the working folder (``''``, ``.`` or its path, put first by ``python -m``) off ``sys.path``.

    Call it first thing under ``if __name__ == "__main__":`` of a command that loads models, so a file
    beside the data named like a module (``evil.py``, ``pyarrow.py``) is never imported. The project's
    packages are already imported by then (or installed), so nothing of ours goes missing.
    """
    here = {"", ".", os.getcwd()}
    sys.path[:] = [p for p in sys.path if p not in here]


__all__ = ["LOCAL_KEYWORDS", "add_trust_args", "apply_trust_args", "check_class_paths",
           "check_local_checkpoint", "drop_working_folder", "unsafe_checkpoint", "weights_only_reason"]
