"""What README.md and docs/*.md tell a user to type, read back for tests/test_docs_commands.py.

* :func:`snippets`: the code a page shows — each line of its fenced blocks (``\\`` continuations
  joined, ``# comments`` cut) and each inline ```code``` span (which may wrap across lines);
* :func:`commands`: the ``make <target> …`` and ``python -m <module> …`` commands in them, as argv
  lists; one with a placeholder (``…``, ``<run id>``, ``[OPTIONAL]``, ``$VAR``) is a *template*, whose
  keys and config files are checked but which is not parsed;
* :func:`config_keys`: the dotted config keys shown (``data.init_args.windows.lookback``,
  ``model.init_args.net.d_model``, ``--trainer.max_epochs``, ``net.attention_window``), each checked by
  :func:`key_problem` against the constructor signatures of its section's classes;
* :func:`make_commands`: what ``make -n`` says a documented ``make`` command runs.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")  # a span may wrap onto the next line
PLACEHOLDER = re.compile(r"…|\.\.\.|[<>\[\]$|]|^[A-Z]+$")  # …, <run id>, [OPTIONAL], $VAR, N, DIR
CONFIG_FILE = re.compile(r"(?<![\w/])configs/[\w./-]+\.ya?ml")
KEY = re.compile(r"^(?:--)?([a-z_]+(?:\.[a-z_][a-z0-9_]*)+)(?:\s*[:=]\s*(.*))?$", re.S)


@dataclass(frozen=True)
class Snippet:
    """Code shown on a page: ``fenced`` (a code block line) or an inline span."""

    page: Path
    line: int
    text: str
    fenced: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"


@dataclass(frozen=True)
class Command:
    """A documented command: ``argv`` starts with ``make`` or ``python -m <module>``."""

    snippet: Snippet
    argv: tuple[str, ...]
    template: bool

    @property
    def reference(self) -> bool:
        """A bare ``make <target>`` or ``python -m <module>`` in prose: it names the entry point."""
        return not self.snippet.fenced and len(self.argv) == (2 if self.argv[0] == "make" else 3)


def doc_pages(root: Path = ROOT) -> list[Path]:
    """README.md and every docs/*.md page."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def snippets(page: Path) -> list[Snippet]:
    """Every fenced code line and inline code span of ``page``, in order of appearance."""
    out: list[Snippet] = []
    prose: list[str] = []
    fenced, pending, start = False, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            prose.append("")
            continue
        if not fenced:
            prose.append(line)
            continue
        prose.append("")
        start = start or number
        pending += re.sub(r"(^|\s)#\s.*$", "", line)
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            out.append(Snippet(page, start, pending.strip(), True))
        pending, start = "", 0
    text = "\n".join(prose)
    for match in INLINE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        out.append(Snippet(page, line, " ".join(match.group(1).split()), False))
    return out


def _words(text: str) -> list[str] | None:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: not a command
        return None


def commands(snippet: Snippet) -> list[Command]:
    """The ``make …`` and ``python -m …`` commands in ``snippet`` (``.venv/bin/python`` counts as python)."""
    words = _words(snippet.text) if re.search(r"\bmake [a-z]|python3? -m ", snippet.text) else None
    found: list[Command] = []
    for i, word in enumerate(words or []):
        if word == "make" and i + 1 < len(words) and re.fullmatch(r"[a-z][\w-]*", words[i + 1]):
            argv = ["make", *_until_separator(words[i + 1:])]
        elif re.fullmatch(r"(\S*/)?python3?", word) and words[i + 1:i + 2] == ["-m"] and i + 2 < len(words):
            argv = ["python", "-m", *_until_separator(words[i + 2:])]
        else:
            continue
        template = any(PLACEHOLDER.search(a) for a in argv)
        found.append(Command(snippet, tuple(argv), template))
    return found


def _until_separator(words: list[str]) -> list[str]:
    out = []
    for word in words:
        if word in (";", "&", "&&", "|", "||", "(", ")") or set(word) <= set(";&()"):
            break
        out.append(word)
    return out


def config_keys(snippet: Snippet, commands_in: list[Command]) -> list[tuple[str, str]]:
    """``(key, shown text)`` of each dotted config key: the whole span (``data.seed``,
    ``model.init_args.net.d_model: 64``) or a ``--section.key=…`` option of a command in it."""
    out = []
    match = KEY.match(snippet.text)
    if match and match.group(1).split(".")[0] in key_roots() and "(" not in match.group(1):
        if not (match.group(2) or "").startswith("unknown key"):  # an error message the page shows
            out.append((match.group(1), snippet.text))
    for command in commands_in:
        for arg in _options(command):
            option = re.match(r"--([a-z_]+(?:\.[a-z_][a-z0-9_]*)+)(?:[=+]|$)", arg)
            if option and option.group(1).split(".")[0] in key_roots():
                out.append((option.group(1), arg, layered_classes(command)))
    return [item if len(item) == 3 else (*item, {}) for item in out]


def layered_classes(command: Command) -> dict[str, str]:
    """``{section: class_path}`` the command's ``--config`` files name for ``data`` and ``model`` (the last
    file that names one wins, as in the CLI): a key given beside them belongs to that class."""
    import yaml

    args, found = _options(command), {}
    for flag, value in zip(args, args[1:], strict=False):
        path = ROOT / value
        if flag == "--config" and path.is_file():
            layer = yaml.safe_load(path.read_text()) or {}
            for section in ("data", "model"):
                if isinstance(layer.get(section), dict) and layer[section].get("class_path"):
                    found[section] = layer[section]["class_path"]
    return found


def _options(command: Command) -> list[str]:
    """The command's arguments, with those a ``make`` command passes in ``ARGS="…"`` split out."""
    out = []
    for arg in command.argv:
        inner = _words(arg[len("ARGS="):]) if command.argv[0] == "make" and arg.startswith("ARGS=") else None
        out.extend(inner if inner is not None else [arg])
    return out


def key_roots() -> set[str]:
    from tests.docs_keys import group_names

    return {"data", "model", "trainer", "register", *group_names()}


def make_commands(command: Command, root: Path = ROOT) -> tuple[int, list[tuple[str, ...]]]:
    """``(make -n's exit status, the python -m commands it would run)`` for a ``make`` command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    done = subprocess.run(["make", "-n", "--no-print-directory", *command.argv[1:]], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    runs = []
    for line in done.stdout.replace("\\\n", " ").splitlines():  # a recipe's continued lines: one command
        words = _words(line.strip().lstrip("@")) or []
        for i, word in enumerate(words[:-2]):
            if word.endswith(("/python", "python3")) and words[i + 1] == "-m" \
                    and words[i + 2].startswith("pipelines."):
                runs.append(("python", "-m", *_until_separator(words[i + 2:])))
    return done.returncode, runs


def run_make(make: tuple[str, ...], store: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """``make …`` run as ``make -n`` says (its one command, with this interpreter, from the checkout), its
    MLflow store under ``store``: the way a user's make target runs, at whatever size the test gives it."""
    code, runs = make_commands(Command(Snippet(ROOT / "Makefile", 0, " ".join(make), True), make, False))
    assert code == 0 and len(runs) == 1, f"make -n {' '.join(make[1:])}: exit {code}, {runs}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *runs[0][1:]], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)
