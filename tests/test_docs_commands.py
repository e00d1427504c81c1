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
from tests.helpers import ROOT, run_cli_in, tiny_setup, workdir_with_store, write_fasta


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


# ------------------------------------------------------- make predict, evaluate and compare at tiny size
#: a layer after a documented DNA LM config: the tiny model, data and training of the fixture below
TINY_LAYER = """\
trainer: {max_epochs: 1, max_steps: 2, limit_val_batches: 2}
model: {init_args: {net: {d_model: 16, n_heads: 2, n_layers: 1}}}
data:
  init_args:
    genome: {fasta: g.fa}
    windows: {seq_len: 32, eval_lengths: [32, 64], eval_tokens: 256}
    loader: {batch_size: 8, samples_per_epoch: 16}
"""
RUNS_ON_THE_LM = {"predict": "models:/DNALanguageModel-", "evaluate": "", "compare": "configs/compare_dna_lm"}
NEEDS = {"predict": ("CKPT", "INPUT", "OUTPUT"), "evaluate": ("CKPT",), "compare": ("CONFIG", "SCHEMES")}


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> dict[str, str]:
    """A tiny DNA LM trained and registered once in a store of its own: the folder, its run id and
    registered model URI, the FASTA it read and the layer that makes a documented config tiny."""
    folder = tmp_path_factory.mktemp("documented")
    tiny_setup(folder)
    write_fasta(folder / "g.fa", n=24_000)  # test region long enough for the documented 64× lengths
    (folder / "layer.yaml").write_text(TINY_LAYER)
    code, cli = run_cli_in(folder, ["fit", "--config", "tiny.yaml", "--register.register=true",
                                    "--trainer.max_epochs=1", "--progress=false"])
    assert code == 0
    register = next(c for c in cli.trainer.callbacks if type(c).__name__ == "RegisterModel")
    return {"folder": str(folder), "run": cli.trainer.logger.run_id, "uri": register.model_uri,
            "fasta": str(folder / "g.fa"), "layer": str(folder / "layer.yaml")}


def documented_uses() -> list[tuple[Command, str | None]]:
    """Each distinct documented ``make predict|evaluate|compare`` command, with why it cannot run on the
    tiny DNA LM here (``None``: it can)."""
    _, found = documented(doc_pages())
    out, seen = [], set()
    for command in found:
        target = command.argv[1] if command.argv[0] == "make" else None
        if target not in RUNS_ON_THE_LM or command.reference or command.argv in seen:
            continue
        seen.add(command.argv)
        text = " ".join(command.argv)
        given = {a.partition("=")[0] for a in command.argv[2:] if "=" in a and "…" not in a.partition("=")[2]}
        why = None
        if missing := sorted(set(NEEDS[target]) - given - {"CKPT"}) or ("CKPT" in NEEDS[target]
                                                                      and "CKPT=" not in text):
            why = f"a fragment of a command (no {missing if isinstance(missing, list) else 'CKPT'})"
        elif "TRACKING_URI=" in text:
            why = "a tracking server elsewhere (tests/test_server.py)"
        elif "ddp.yaml" in text:
            why = "several processes (tests/test_ddp.py)"
        elif RUNS_ON_THE_LM[target] not in text:
            why = "another task's model (tests/test_predict.py runs each task's predictor)"
        out.append((command, why))
    return out


def tiny_make_args(command: Command, lm: dict[str, str], n: int) -> list[str]:
    """The documented make command's variables with its placeholders given the tiny model's values."""
    out, args = [], ""
    for arg in command.argv[2:]:
        name, sep, value = arg.removeprefix("[").removesuffix("]").partition("=")  # [OPTIONAL=…] too
        if not sep:
            continue  # the rest of a placeholder with a space: CKPT=<run id>
        if name == "CKPT":
            value = lm["uri"] if command.argv[1] == "predict" else lm["run"]
        elif name == "INPUT":
            value = lm["fasta"]
        elif name == "OUTPUT":
            value = str(Path(lm["folder"]) / f"out{n}{''.join(Path(value).suffixes) or '.tsv'}")
        elif name == "CONFIG" and command.argv[1] == "evaluate":
            continue  # a template's [CONFIG=…]: the run's own config is the documented default
        elif name == "CONFIG":
            value = str(ROOT / value)  # the command runs in the tiny model's folder, not the checkout
        elif name == "ARGS":
            args = value
            continue
        out.append(f"{name}={value}")
    if command.argv[1] == "compare":
        out.append("SEEDS=0")
        args += f" --config {lm['layer']} --factors 1 2 --out {lm['folder']}/compare{n}"
    return [*out, *([f"ARGS={args.strip()}"] if args.strip() else [])]


def run_documented(argv: tuple[str, ...], folder: Path) -> int:
    """``python -m <module> …`` run in-process in ``folder`` (its store); its exit status."""
    saved = sys.argv, list(sys.path)
    with workdir_with_store(folder), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported before
        sys.argv = [argv[2], *argv[3:]]
        try:
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            return int(exc.code or 0)
        finally:
            sys.argv, sys.path[:] = saved[0], saved[1]
    return 0


def run_uses(lm: dict[str, str], pages: set[str]) -> list[str]:
    """Run the documented uses shown on ``pages`` (README.md, docs/x.md) at tiny size; what failed."""
    failed = []
    for n, (command, why) in enumerate(documented_uses()):
        if why or str(command.snippet.page.relative_to(ROOT)) not in pages:
            continue
        tiny = Command(command.snippet, ("make", command.argv[1], *tiny_make_args(command, lm, n)), False)
        code, lines = make_commands(tiny)
        assert code == 0 and len(lines) == 1, (command.snippet.where, code, lines)
        if (status := run_documented(lines[0], Path(lm["folder"]))) != 0:
            failed.append(f"{command.snippet.where}: {' '.join(command.argv)}: exit {status}")
    return failed


def test_the_readme_predict_evaluate_and_compare_run_at_tiny_size(tiny_lm):
    """README.md's ``make predict``, ``make evaluate`` and ``make compare``, run as ``make -n`` says on
    a tiny DNA LM (its registered model, its run, the compared config made tiny by one more layer)."""
    assert {c.argv[1] for c, why in documented_uses() if c.snippet.page.name == "README.md" and not why} \
        == {"predict", "evaluate", "compare"}
    assert run_uses(tiny_lm, {"README.md"}) == []


@pytest.mark.slow
def test_every_documented_predict_evaluate_and_compare_runs_at_tiny_size(tiny_lm):
    pages = {str(p.relative_to(ROOT)) for p in doc_pages()} - {"README.md"}
    skipped = [f"{c.snippet.where}: {why}" for c, why in documented_uses() if why]
    print("skipped:", *skipped, sep="\n  ")
    assert run_uses(tiny_lm, pages) == []
