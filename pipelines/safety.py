"""Guards for files and names that come from elsewhere: checkpoints, class paths, the working folder.

* :func:`check_local_checkpoint` — a ``ckpt_path`` must be a local file (or one of Lightning's
  ``best``/``last``/``hpc``): a URL or an fsspec chain (``simplecache::http://…``) would be downloaded
  by Lightning; :func:`local_checkpoint_path` is what Lightning is given (the resolved file). Every
  load is weights-only (:class:`pipelines.cli.PosencCLI`); :func:`unsafe_checkpoint` words what
  ``weights_only`` refused.
* :func:`enforce_import_policy` — the config parser (jsonargparse) imports only trusted modules, never
  a ``__main__`` one, whatever a config, checkpoint or option names; :func:`check_plain_names` refuses
  a checkpoint's plain string where a class or callable is expected (``pe: "evil.f"``).
* :func:`add_trust_args` / :func:`apply_trust_args` — ``--trust-module`` for the commands that read
  class paths from checkpoints, saved configs and registered models (see
  :func:`posenc.registry.import_class`, which imports nothing outside the trusted modules).
* :func:`drop_working_folder` — ``python -m`` puts the working folder first on ``sys.path``; the
  inference entry points take it off, so a stray ``.py`` beside the data is never imported.
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import importlib.util
import inspect
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from jsonargparse import set_parsing_settings

from pipelines.console.scrub import scrub_text
from posenc import PosencError
from posenc.registry import NEVER_TRUSTED, TRUST_ENV, check_trusted, trust_modules, trusted_modules

#: ``ckpt_path`` values Lightning resolves to a local file itself
LOCAL_KEYWORDS = ("best", "last", "hpc")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def check_local_checkpoint(ckpt_path: Any) -> None:
    """Refuse a ``ckpt_path`` that is not a local checkpoint file, before anything is loaded.

    Raises:
        PosencError: a URL (``http://``, ``s3://``, ``file://``…), an fsspec chain (``simplecache::http://…``,
            refused even when a local file of that name exists: fsspec would follow the chain), Lightning's
            ``registry`` form, or a local file that does not exist.
    """
    if ckpt_path is None or str(ckpt_path) in LOCAL_KEYWORDS:
        return
    text = str(ckpt_path)
    if (_URL.match(text) or "::" in text or "://" in text or text.lower() == "registry"
            or text.lower().startswith("registry:")):
        raise PosencError(f"ckpt_path {scrub_text(text)!r}: only a local checkpoint file is loaded (a remote "
                          "one would be unpickled with weights_only=False); download it and give its path")
    if not Path(text).is_file():
        raise PosencError(f"ckpt_path {text}: checkpoint file not found")


def local_checkpoint_path(ckpt_path: Any) -> Any:
    """The path Lightning is given for a checked ``ckpt_path``: a local file's resolved absolute path (so no
    spelling of it reaches fsspec's URL parsing); a keyword (``best``, ``last``…) or ``None`` as given."""
    if ckpt_path is None or str(ckpt_path) in LOCAL_KEYWORDS or not Path(str(ckpt_path)).is_file():
        return ckpt_path
    return str(Path(str(ckpt_path)).resolve())


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


def imports_a_name(annotation: Any) -> bool:
    """Whether a value of this type hint may be given as a dotted name that the config parser imports: a
    callable, a class (``type[...]``), or a class to instantiate (anything but primitives, containers of
    them and dataclasses), alone or inside a union/optional."""
    if annotation in (inspect.Parameter.empty, Any, type(None), str, int, float, bool, bytes):
        return False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, tuple, dict, set,
                  typing.Literal, collections.abc.Sequence, collections.abc.Mapping):
        return any(imports_a_name(arg) for arg in typing.get_args(annotation) if arg is not Ellipsis)
    if origin is not None:
        return origin in (collections.abc.Callable, type)
    return annotation in (type, collections.abc.Callable) or (
        isinstance(annotation, type) and not dataclasses.is_dataclass(annotation))


def init_hints(cls: type) -> dict[str, Any]:
    """The type hints of every constructor argument of ``cls``, its bases' included (a task passes
    ``pe``, ``net``… on to :class:`~pipelines.tasks.base.TaskModule` through ``**kwargs``)."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if "__init__" not in klass.__dict__ or klass is object:
            continue
        try:
            hints.update(typing.get_type_hints(klass.__init__))
        except Exception:  # an annotation that does not resolve (a third-party base): the raw ones
            hints.update({k: p.annotation for k, p in inspect.signature(klass.__init__).parameters.items()})
    return hints


def check_plain_names(cls: type, init_args: dict[str, Any], source: str) -> None:
    """Refuse a plain string where ``cls`` takes a class or callable (``pe: "evil.f"``): the config parser
    would import the module it names to check it. Such a value must be ``{class_path, init_args}``,
    whose module :func:`check_class_paths` checks before anything is imported.

    Raises:
        PosencError: ``source``, the key and the string, in one line.
    """
    hints = init_hints(cls)
    for key, value in init_args.items():
        if isinstance(value, str) and imports_a_name(hints.get(key, inspect.Parameter.empty)):
            raise PosencError(f"{source}: model.init_args.{key} is the plain string {scrub_text(value)!r}: a "
                              "class or callable is read from a file only as {class_path, init_args} under a "
                              "trusted module; nothing was imported")


def modules_run_at_import(prefixes: list[str]) -> list[str]:
    """Every ``__main__`` module inside the packages of ``prefixes`` (found on disk, nothing imported):
    importing one runs a program, so a trusted prefix never covers it."""
    found: set[str] = set()
    for top in sorted({p.split(".")[0] for p in prefixes}):
        spec = importlib.util.find_spec(top) if top not in NEVER_TRUSTED else None
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in Path(root).rglob("__main__.py"):
                found.add(".".join((top, *path.relative_to(root).parent.parts, "__main__")))
    return sorted(found)


def enforce_import_policy() -> None:
    """Let the config parser (jsonargparse) import only what is trusted when a value names it (a
    ``class_path``, a callable, a type, from a config file, a checkpoint or the command line): every
    other path is denied before anything is imported, ``__main__`` modules and :data:`NEVER_TRUSTED`
    included. Call it before parsing (it reads the trusted prefixes as they are then)."""
    prefixes = trusted_modules()
    set_parsing_settings(import_path_denylist=["*", *NEVER_TRUSTED, *modules_run_at_import(prefixes)],
                         import_path_allowlist=prefixes)


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
    trust_here_and_below(getattr(args, "trust_module", []) or [])


def trust_here_and_below(modules: list[str]) -> None:
    """Trust ``modules`` in this process and in the processes it starts (workers, DDP ranks, compare's
    children: through ``$POSENC_TRUSTED_MODULES``, which they read)."""
    trust_modules(*modules)
    if modules:
        given = os.environ.get(TRUST_ENV, "").replace(",", " ").split()
        os.environ[TRUST_ENV] = " ".join(dict.fromkeys([*given, *modules]))


def take_trust_args(argv: list[str]) -> list[str]:
    """``argv`` without its ``--trust-module MODULE`` (or ``--trust-module=MODULE``) options, whose modules
    are trusted now: the training CLI's, taken out before its parser (whose import policy reads the
    trusted modules as they are when it is built) sees them.

    Raises:
        PosencError: a module that is not a dotted name, or the option without one.
    """
    out: list[str] = []
    modules: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg == "--trust-module":
            module = next(rest, None)
            if module is None:
                raise PosencError("--trust-module: expected a module name (e.g. --trust-module mypkg)")
            modules.append(module)
        elif arg.startswith("--trust-module="):
            modules.append(arg.split("=", 1)[1])
        else:
            out.append(arg)
    trust_here_and_below(modules)
    return out


def drop_working_folder() -> None:
    """Take the working folder (``''``, ``.`` or its path, put first by ``python -m``) off ``sys.path``.

    Call it first thing under ``if __name__ == "__main__":`` of a command that loads models, so a file
    beside the data named like a module (``evil.py``, ``pyarrow.py``) is never imported. The project's
    packages are already imported by then (or installed), so nothing of ours goes missing.
    """
    here = {"", ".", os.getcwd()}
    sys.path[:] = [p for p in sys.path if p not in here]


__all__ = ["LOCAL_KEYWORDS", "add_trust_args", "apply_trust_args", "check_class_paths",
           "check_local_checkpoint", "check_plain_names", "drop_working_folder", "enforce_import_policy",
           "imports_a_name", "local_checkpoint_path", "take_trust_args", "trust_here_and_below",
           "unsafe_checkpoint", "weights_only_reason"]
