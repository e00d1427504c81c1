"""Building schemes from specs and listing them: no hand-kept name→class table to drift."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from posenc.base import PUBLIC, PosencError, PositionalEncoding, SchemeMeta, public_class_path

EncodingFactory = Callable[[int, int], PositionalEncoding]


#: the packages a class path (in a checkpoint, a saved config, a registered model) may name: the
#: library and torch; an application adds its own packages with :func:`trust_modules` at import (the
#: the project's training code adds its own), a user with ``--trust-module`` or ``$POSENC_TRUSTED_MODULES``.
#: Nothing else is imported.
DEFAULT_TRUSTED = ("posenc", "torch")
_TRUSTED: set[str] = set(DEFAULT_TRUSTED)
TRUST_ENV = "POSENC_TRUSTED_MODULES"
#: modules whose import runs a program (a ``__main__`` module anywhere, even under a trusted prefix such
#: as ``torch.utils.model_dump.__main__``; the standard library's ``this`` and ``antigravity``): never
#: trusted, whatever the prefixes say
NEVER_TRUSTED = ("this", "antigravity")
RUNS_AT_IMPORT = "__main__"
#: the folder this library is imported from (a development checkout's root, or site-packages)
_SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trust_modules(*prefixes: str) -> None:
    """Allow class paths under these dotted module prefixes (``mypkg`` or ``mypkg.encodings``).

    Raises:
        PosencError: a prefix that is not a dotted module name.
    """
    for prefix in prefixes:
        if not _is_module_name(prefix):
            raise PosencError(f"trusted module {prefix!r} is not a dotted module name (package.module)")
        _TRUSTED.add(prefix)


def trusted_modules() -> list[str]:
    """Every trusted prefix: the defaults, those given to :func:`trust_modules` and those in
    ``$POSENC_TRUSTED_MODULES`` (comma- or space-separated)."""
    extra = [p for p in os.environ.get(TRUST_ENV, "").replace(",", " ").split() if _is_module_name(p)]
    return sorted({*_TRUSTED, *extra})


def is_trusted(module_name: str) -> bool:
    """Whether ``module_name`` is a trusted prefix or below one, matched by whole dotted components
    (``posenc.rotary`` is under ``posenc``; ``posenc_evil`` is not)."""
    parts = module_name.split(".")
    if not _is_module_name(module_name) or runs_at_import(module_name):
        return False
    return any(parts[: len(p.split("."))] == p.split(".") for p in trusted_modules())


def runs_at_import(module_name: str) -> bool:
    """Whether importing ``module_name`` runs a program: a ``__main__`` module (at any depth) or one of
    :data:`NEVER_TRUSTED` (or below it)."""
    parts = module_name.split(".")
    return RUNS_AT_IMPORT in parts or parts[0] in NEVER_TRUSTED


def check_trusted(class_path: str, what: str = "class") -> None:
    """Raise unless the module of ``class_path`` is trusted (:func:`is_trusted`); imports nothing.

    Raises:
        PosencError: naming the class, its module and how to trust it.
    """
    module_name = str(class_path).rpartition(".")[0]
    if runs_at_import(module_name):
        raise PosencError(f"{what} {class_path!r}: module {module_name!r} runs a program when imported, so "
                          "it is never imported")
    if not is_trusted(module_name):
        raise PosencError(f"{what} {class_path!r}: module {module_name!r} is not trusted, so it was not "
                          f"imported (trusted: {', '.join(trusted_modules())}; to allow it, set "
                          f"{TRUST_ENV}={module_name.split('.')[0]} or pass --trust-module)")


def _is_module_name(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def import_class(class_path: str, base: type | None = None, what: str = "class") -> type:
    """The class a dotted ``class_path`` names (the project's one importer for config class paths).

    The module must be trusted (:func:`is_trusted`), checked *before* anything is imported, and it is
    never looked up in the working folder.

    Args:
        class_path: ``package.module.Name``.
        base: if given, the class must be a subclass of it.
        what: how the error message names the class (e.g. "positional encoding class").

    Raises:
        PosencError: not a dotted path, an untrusted module, not importable, or not a subclass of ``base``.
    """
    module_name, _, name = str(class_path).rpartition(".")
    if not module_name:
        raise PosencError(f"{what} {class_path!r} is not a dotted path (package.module.Name)")
    check_trusted(class_path, what)
    try:
        with without_working_folder():
            cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        raise PosencError(f"unknown {what} {class_path!r} (cannot import it)") from None
    if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
        raise PosencError(f"{class_path!r} is not a {base.__module__.split('.')[0]}.{base.__name__} subclass"
                          if base is not None else f"{class_path!r} is not a class")
    return cls


def trusted_class(class_path: Any) -> type | None:
    """The class a dotted ``class_path`` names when its module is trusted (:func:`is_trusted`, checked
    before anything is imported) and imports without the working folder on the path; ``None``
    otherwise. For code that only looks a class up (to translate a config) and leaves refusing it to
    the one that imports it: an untrusted name is never imported here either."""
    module_name, _, name = str(class_path or "").rpartition(".")
    if not module_name or not is_trusted(module_name):
        return None
    try:
        with without_working_folder():
            cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return None
    return cls if isinstance(cls, type) else None


@contextmanager
def without_working_folder() -> Iterator[None]:
    """``sys.path`` without the working folder ('' or its path, which ``python -m`` and ``python -c`` put
    first) while inside, so a file of the same name beside the data cannot stand in for a module.
    Inside the project's own source tree (a development checkout) the working folder is the project
    and is kept."""
    cwd = os.getcwd()
    here = set() if cwd == _SOURCE_TREE else {"", ".", cwd}
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if p not in here]
    try:
        yield
    finally:
        sys.path[:] = saved


def build_encoding(
    spec: PositionalEncoding | EncodingFactory | dict[str, Any] | None, d_model: int, n_heads: int
) -> PositionalEncoding:
    """Build a scheme for a model of width ``d_model`` with ``n_heads`` heads.

    Args:
        spec: a ``{class_path, init_args}`` dict (from YAML or a checkpoint), a factory called as
            ``factory(d_model, n_heads)`` (what LightningCLI passes), a built scheme (returned
            as is after a size check), or ``None`` for no positional encoding.
    """
    if spec is None:
        return PositionalEncoding(d_model, n_heads)
    if isinstance(spec, PositionalEncoding):
        pe = spec
    elif isinstance(spec, dict):
        if "class_path" not in spec:
            raise PosencError(f"positional encoding spec needs a 'class_path' key, got keys {sorted(spec)}")
        cls = import_class(spec["class_path"], PositionalEncoding, "positional encoding class")
        try:
            pe = cls(d_model, n_heads, **dict(spec.get("init_args") or {}))
        except TypeError as exc:
            raise PosencError(f"bad init_args for {spec['class_path']}: {exc}") from None
    elif callable(spec):
        pe = spec(d_model, n_heads)
    else:
        raise PosencError(f"cannot build a positional encoding from {type(spec).__name__}")
    if (pe.d_model, pe.n_heads) != (d_model, n_heads):
        raise PosencError(
            f"{type(pe).__name__} was built for d_model={pe.d_model}, n_heads={pe.n_heads}; "
            f"the model has d_model={d_model}, n_heads={n_heads}"
        )
    return pe


def all_schemes() -> list[type[PositionalEncoding]]:
    """Every concrete scheme re-exported from ``posenc`` (NoPE included), sorted by name."""

    out = {PositionalEncoding}
    for obj in PUBLIC.values():
        if issubclass(obj, PositionalEncoding) and not _is_abstract(obj):
            out.add(obj)
    return sorted(out, key=lambda c: c.__name__)


def _is_abstract(cls: type) -> bool:
    """Family bases (AbsoluteEncoding, BiasEncoding, …) say ``abstract = True`` in their own body."""
    return bool(cls.__dict__.get("abstract", False))


def _source(cls: type) -> str:
    """The first quoted title in the opening paragraph of a docstring (the paper), else that paragraph."""

    first = (cls.__doc__ or "").strip().split("\n\n")[0]  # the opening paragraph only
    doc = " ".join(first.split())
    m = re.search(r'"([^"]+)"', doc)
    return m.group(1) if m else doc.rstrip(".")


def scheme_table() -> str:
    """Markdown table of every scheme's metadata (:class:`~posenc.base.SchemeMeta`), for the docs.

    Built from the classes themselves, so the README table can be regenerated with
    ``python -c "import posenc; print(posenc.scheme_table())"``. ``Compose`` shows its class-level
    metadata (what a composition *may* do); an instance reports its children's combination.
    """

    yes = lambda flag: "yes" if flag else "no"  # noqa: E731
    lines = [
        "| scheme | acts on | defined past training length | O(L²) bias memory | attention path | source |",
        "|---|---|---|---|---|---|",
    ]
    for cls in all_schemes():
        m = cls.meta
        if not isinstance(cls.__dict__.get("meta", m), SchemeMeta):  # per-instance meta (Compose)
            lines.append(f"| `{public_class_path(cls)}` | its children's | if all children are | "
                         f"if any child is | the most general child's | {_source(cls)} |")
            continue
        acts = ", ".join(m.acts_on) or "nothing (NoPE)"
        past = yes(m.extrapolates) + ("" if cls.max_len is None else f" (max_len {cls.max_len})")
        lines.append(
            f"| `{public_class_path(cls)}` | {acts} | {past} | {yes(m.quadratic_memory)} | "
            f"{m.attention_path} | {_source(cls)} |"
        )
    return "\n".join(lines)
