"""Every command and config key README.md and docs/*.md show works today (tests/docs_commands.py).

Fast: each dotted config key resolves by its current name (tests/docs_keys.py), each ``configs/…``
file named exists, each ``make`` command is one ``make -n`` accepts (its ``python -m`` lines are then
checked like the documented ones), and each concrete ``python -m`` command parses with its module's own
parser (``pipelines.train``: the project's CLI with ``--print_config``; the others: their argparse
parser, stopped once it has parsed). Slow: the documented ``make train`` commands run at tiny size.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import runpy
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.docs_commands import (
    CONFIG_FILE,
    PLACEHOLDER,
    Command,
    commands,
    config_keys,
    doc_pages,
    make_commands,
    snippets,
)
from tests.docs_keys import key_problem
from tests.helpers import ROOT, run_cli_in


def documented(pages: list[Path]) -> tuple[list, list[Command]]:
    """(every snippet, every command) of ``pages``."""
    shown = [s for page in pages for s in snippets(page)]
    return shown, [c for s in shown for c in commands(s)]


def stale_keys(pages: list[Path]) -> list[str]:
    shown, _ = documented(pages)
    out = []
    for snippet in shown:
        for key, text, layered in config_keys(snippet, commands(snippet)):
            problem = key_problem(key, layered)
            if problem:
                out.append(f"{snippet.where}: `{text}`: {problem}")
    return out


def missing_configs(pages: list[Path]) -> list[str]:
    shown, _ = documented(pages)
    return [f"{s.where}: {path}" for s in shown for path in CONFIG_FILE.findall(s.text)
            if not PLACEHOLDER.search(path) and "*" not in path and not (ROOT / path).is_file()]


def expanded(pages: list[Path]) -> tuple[list[str], dict[tuple[str, ...], str]]:
    """(make commands make -n refuses, {concrete python -m argv: where it is documented})."""
    _, found = documented(pages)
    bad, runs = [], {}
    for command in found:
        if command.argv[0] == "make":
            concrete = not (command.template or command.reference)  # else: the target alone
            target = Command(command.snippet, command.argv[:2], False)
            code, lines = make_commands(command if concrete else target)
            if code != 0:
                bad.append(f"{command.snippet.where}: `{' '.join(command.argv)}`: make -n exit {code}")
            for argv in lines if concrete else []:
                runs.setdefault(argv, command.snippet.where)
        elif command.reference and importlib.util.find_spec(command.argv[2]) is None:
            bad.append(f"{command.snippet.where}: `{' '.join(command.argv)}`: no module {command.argv[2]}")
        elif not (command.template or command.reference):
            runs.setdefault(command.argv, command.snippet.where)
    return bad, runs


class Parsed(Exception):
    """Raised by the patched ``parse_args`` once a module's parser accepted its arguments."""


@contextlib.contextmanager
def stop_after_parsing() -> Iterator[None]:
    """``argparse.ArgumentParser.parse_args`` parses for real, then stops the program (no work runs)."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise Parsed

    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def parse_problem(argv: tuple[str, ...]) -> str | None:
    """Why ``python -m …`` ``argv`` does not parse (``None``: it does); nothing beyond parsing runs."""
    module, args = argv[2], list(argv[3:])
    if importlib.util.find_spec(module) is None:
        return f"no module {module}"
    if not module.startswith("pipelines."):  # a tool's (pytest, pip): there, not ours to parse
        return None
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if module == "pipelines.train":
                from pipelines.cli import make_cli

                make_cli([*args, "--print_config"])
            else:
                with stop_after_parsing(), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported before
                    saved, sys.argv = sys.argv, [module, *args]
                    try:
                        runpy.run_module(module, run_name="__main__", alter_sys=True)
                    finally:
                        sys.argv = saved
        except Parsed:
            return None
        except SystemExit as exc:
            said = (err.getvalue().strip().splitlines() or [f"exit {exc.code}"])[-1]
            if not exc.code or ("needs a CUDA GPU" in said and not torch.cuda.is_available()):
                return None  # parsed; or a GPU-only tool here without one (it says so before parsing)
            return said
        except Exception as exc:  # a parse error the CLI raises instead of exiting
            return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "ran past its parser without stopping"


def unparsed(pages: list[Path]) -> list[str]:
    bad, runs = expanded(pages)
    return bad + [f"{where}: `{' '.join(argv)}`: {problem}" for argv, where in runs.items()
                  if (problem := parse_problem(argv))]


# ------------------------------------------------------------------------------------------- fast
PAGES = pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.name)


@PAGES
def test_every_documented_config_key_is_taken_by_its_current_name(page: Path):
    assert stale_keys([page]) == []


@PAGES
def test_every_documented_config_file_exists(page: Path):
    assert missing_configs([page]) == []


@PAGES
def test_every_documented_command_is_a_make_target_or_parses(page: Path):
    assert unparsed([page]) == []


def test_every_documented_entry_point_answers_help():
    """``--help`` of each ``pipelines`` module the pages run (directly or through ``make``) exits 0."""
    _, found = documented(doc_pages())
    modules = {c.argv[2] for c in found if c.argv[0] == "python"}
    for target in {c.argv[1] for c in found if c.argv[0] == "make"}:  # templates too: the target's module
        modules |= {argv[2] for argv in make_commands(Command(found[0].snippet, ("make", target), False))[1]}
    ours = sorted(m for m in modules if m.startswith("pipelines."))
    assert {"pipelines.train", "pipelines.eval.evaluate", "pipelines.inference.predict",
            "pipelines.tracking.server"} <= set(ours)
    unanswered = {m: p for m in ours if (p := parse_problem(("python", "-m", m, "--help")))}
    assert {m: p for m, p in unanswered.items() if f"usage: python -m {m}" not in p} == {}  # a usage line


def test_the_checks_find_a_planted_stale_key_config_and_command(tmp_path: Path):
    page = tmp_path / "planted.md"
    page.write_text("Set `data.duplicates: first` or `model.init_args.net.dmodel: 64`, not `net.d_model`.\n\n"
                    "```\nmake nosuchtarget\nmake train ARGS=\"--data.init_args.windows.lookbak=4\"  # typo\n"
                    "python -m pipelines.eval.compare --config configs/nope.yaml\n```\n"
                    "Also `python -m pipelines.studies.val_choice --no-such-flag` and\n"
                    "`make train CONFIG=configs/dna_lm.yaml ARGS=\"--data.path=x.csv\"`.\n")
    keys = "\n".join(stale_keys([page]))
    for key in ("data.duplicates", "net.dmodel", "windows.lookbak", "--data.path"):
        assert key in keys, key
    assert "net.d_model`" not in keys and "flat spelling: data.init_args.source.path" in keys
    assert [m.split(": ")[1] for m in missing_configs([page])] == ["configs/nope.yaml"]
    problems = "\n".join(unparsed([page]))
    assert "make nosuchtarget" in problems and "no module pipelines.eval.compare" in problems
    assert "--no-such-flag" in problems and "lookbak" in problems


# ------------------------------------------------------------------------------------------- slow
TINY = ["--trainer.max_steps=2", "--trainer.max_epochs=1", "--trainer.limit_val_batches=2",
        "--trainer.limit_test_batches=2", "--register.register=false", "--progress=false",
        "--model.init_args.net.d_model=16", "--model.init_args.net.n_heads=2",
        "--model.init_args.net.n_layers=1", "--test_after_fit=false", "--trainer.accelerator=cpu"]


def cannot_run_here(args: tuple[str, ...]) -> str | None:
    """Why a documented fit cannot run at tiny size on this machine (``None``: it can)."""
    text = " ".join(args)
    if not torch.cuda.is_available() and ("gpu.yaml" in text or "num_nodes" in text):
        return "needs a GPU"
    if "ddp" in text:
        return "several processes (tests/test_ddp.py runs DDP)"
    for arg in args:  # a user's own file the page names as an example
        value = arg.split("=", 1)[-1]
        own = "/" not in value and value.endswith((".csv", ".fa", ".fa.gz", ".parquet"))
        if own and not Path(value).exists():
            return f"needs the user's file {value}"
    return None


@pytest.mark.slow
def test_documented_training_commands_run_at_tiny_size(tmp_path: Path):
    """Each distinct ``pipelines.train fit`` command the pages show (through ``make`` or not) trains
    two steps of a tiny model in a folder of its own with its own MLflow store."""
    runs: dict[tuple[str, ...], str] = {}
    for page in doc_pages():
        runs.update({a: w for a, w in expanded([page])[1].items() if a[2:4] == ("pipelines.train", "fit")})
    assert len(runs) >= 5
    failed, skipped = [], []
    for n, (argv, where) in enumerate(sorted(runs.items())):
        reason = cannot_run_here(argv)
        if reason:
            skipped.append(f"{where}: {reason}")
            continue
        folder = tmp_path / f"run{n}"
        folder.mkdir()
        args = [str(ROOT / a) if a.startswith("configs/") else a for a in argv[3:]]
        code, _ = run_cli_in(folder, [*args, *TINY])
        if code != 0:
            failed.append(f"{where}: {' '.join(argv)}: exit {code}")
    print("skipped:", *skipped, sep="\n  ")
    assert not failed
