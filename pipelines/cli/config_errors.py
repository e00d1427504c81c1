"""A config mistake as one line: the project's own error, or the dotted config key jsonargparse
complained about and its innermost reason (what the CLI prints instead of a traceback)."""

from __future__ import annotations

import re
from argparse import ArgumentError

from pipelines.tasks.options import TASK_GROUPS
from pipelines.tracking.failure import exception_chain
from posenc import PosencError
from posenc.registry import check_trusted

_DENIED = re.compile(r"Importing '([\w.]+)' is not allowed")


def user_error(exc: BaseException) -> str | None:
    """One line for a user mistake (a :class:`PosencError` or a config error), else ``None``.

    jsonargparse nests the real reason several exceptions deep: report the project's own error
    if there is one, otherwise the dotted config key and the innermost reason.
    """
    chain = list(exception_chain(exc))
    for e in chain:
        if isinstance(e, PosencError):
            return from_the_top(str(e))
    if not any(isinstance(e, ArgumentError) for e in chain):
        return None
    keys: list[str] = []
    for e in chain:
        m = re.match(r'Parser key "([^"]+)"', str(e))
        if m and m.group(1) not in keys:
            keys.append(m.group(1))
    reason = denied_import(chain) or str(chain[-1]).strip().splitlines()[0]
    if not keys:
        return reason
    unknown = re.match(r"(?:unrecognized arguments: --|Option ')([\w.]+)", reason)
    if unknown:  # a key of no group or class: named in full, like the others
        keys, reason = [*keys, unknown.group(1)], "unknown key"
    return f"{config_key(keys)}: {reason}"


def from_the_top(message: str) -> str:
    """A library error naming a key within a model group (:class:`posenc.nn.AttentionSettings`:
    ``attention.long_threshold: …``) named from the config's top (``model.init_args.attention.…``)."""
    group, dot, _ = message.partition(".")
    return f"model.init_args.{message}" if dot and group in TASK_GROUPS else message


def config_key(keys: list[str]) -> str:
    """The dotted key a config writes for jsonargparse's nested parser keys: ``["model", "net.d_model"]``
    → ``model.init_args.net.d_model`` (the model and the datamodule are given as class + init_args)."""
    head, rest = keys[0], ".".join(keys[1:])
    if head in ("model", "data") and rest and not rest.startswith(("init_args", "class_path")):
        rest = f"init_args.{rest}"
    return f"{head}.{rest}" if rest else head


def denied_import(chain: list[BaseException]) -> str | None:
    """Why the parser's import policy (:func:`pipelines.safety.enforce_import_policy`) refused a path a
    value named, in the words of :func:`posenc.registry.check_trusted`; ``None`` if none was refused."""
    for exc in chain:
        found = _DENIED.search(str(exc))
        if found:
            try:
                check_trusted(found.group(1), "class or callable")
            except PosencError as why:
                return str(why)
            return f"{found.group(1)!r} is denied by the config parser's import policy; nothing was imported"
    return None
