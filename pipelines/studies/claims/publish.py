"""The published claims run, run exactly as it must be: from a git worktree pinned at one commit, so that
nothing that lands on the checkout while it runs can touch it.

1. The commit (``--commit``, default the checkout's HEAD, which must then be clean) is checked out in a
   fresh detached worktree (``--worktree``, default ``outputs/published/<commit>``).
2. The suite runs there with ``--pinned <commit>`` (:mod:`pipelines.studies.claims.runner`: refused unless
   that tree is at the commit and clean; checked again after the last experiment, before any docs are
   written), importing the worktree's own code (``PYTHONPATH``; checked: the runner's files must be the
   worktree's), with this checkout's MLflow store and virtual environment, ``--jobs 2``.
3. A full run writes ``docs/claims.md``, the claims block of ``docs/results.md``, the stored results
   (``docs/claims_results/``) and the figures in the worktree; they are copied into this checkout to be
   committed as they are. ``--quick`` times the quick run at the same commit and writes no docs.

Usage::

    make publish-claims                   # the full published run at HEAD (clean tree)
    make publish-claims ARGS=--quick      # --quick at the same commit, timed
    python -m pipelines.studies.claims.publish --commit 1a2b3c4 [--worktree DIR] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pipelines.console import user_errors_exit
from pipelines.studies.claims.context import ROOT
from pipelines.studies.claims.render import BEGIN, END, STORED, with_block
from pipelines.studies.claims.report import git_state
from pipelines.tracking.store import tracking_uri
from posenc import PosencError

#: what a full run generates, relative to the worktree, copied back into the checkout (of docs/results.md
#: only its generated claims block)
GENERATED = ("docs/claims.md", f"docs/{STORED}")


def git(*args: str, cwd: Path | None = None) -> str:
    """``git args`` in ``cwd`` (default: this checkout); a failure is one line naming the command."""
    done = subprocess.run(["git", "-C", str(cwd or ROOT), *args], capture_output=True, text=True)
    if done.returncode:
        raise PosencError(f"git {' '.join(args)}: {(done.stderr or done.stdout).strip().splitlines()[-1]}")
    return done.stdout.strip()


def resolve_commit(commit: str | None) -> str:
    """The full commit to publish: ``commit``, or HEAD of a clean checkout."""
    if commit is None:
        sha, dirty = git_state(ROOT, full=True)
        if dirty:
            raise PosencError(f"{ROOT} has uncommitted changes: commit them (the rules a published run reads "
                              "must be committed) or name the commit with --commit")
        return sha
    return git("rev-parse", "--verify", f"{commit}^{{commit}}")


def pinned_worktree(sha: str, where: Path | None, root: Path | None = None) -> Path:
    """A detached worktree of ``root`` (default: this checkout) at ``sha`` (created, or an existing clean
    one at ``sha`` reused)."""
    root = root or ROOT
    tree = (where or root / "outputs" / "published" / sha[:12]).resolve()
    if tree.exists():
        at, dirty = git_state(tree, full=True)
        if at != sha or dirty:
            raise PosencError(f"{tree} exists and is not a clean checkout of {sha[:12]}: remove it "
                              f"(git worktree remove --force {tree}) or pass another --worktree")
        return tree
    tree.parent.mkdir(parents=True, exist_ok=True)
    git("worktree", "add", "--detach", str(tree), sha, cwd=root)
    return tree


def command(tree: Path, sha: str, quick: bool) -> tuple[list[str], dict[str, str]]:
    """The runner's command line and environment in the pinned worktree."""
    args = [sys.executable, "-m", "pipelines.studies.claims", "--pinned", sha, "--jobs", "2",
            "--out", str(tree / "outputs" / "claims" / ("quick" if quick else "published"))]
    args += ["--quick"] if quick else ["--docs", "docs/claims.md"]
    env = {**os.environ, "PYTHONPATH": str(tree), "MLFLOW_TRACKING_URI": absolute_store(),
           "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONSAFEPATH", None)
    return args, env


def absolute_store() -> str:
    """This checkout's MLflow store, as an absolute URI (the worktree writes into the same store)."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str((Path.cwd() / uri.removeprefix("sqlite:///")).resolve())
    return uri


def imports_from(tree: Path, env: dict[str, str]) -> None:
    """Refuse to run unless the runner the worktree's python imports is the worktree's own."""
    probe = "import pipelines.studies.claims.runner as r; print(r.__file__)"
    found = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True,
                           text=True).stdout.strip()
    if not found or not Path(found).resolve().is_relative_to(tree):
        raise PosencError(f"the pinned run would import {found or 'nothing'}, not the worktree {tree}")


def copy_back(tree: Path) -> list[str]:
    """The generated docs and figures of a full run, copied from the worktree into this checkout."""
    done = []
    for rel in GENERATED:
        src, dst = tree / rel, ROOT / rel
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        elif src.is_file():
            shutil.copyfile(src, dst)
        done.append(rel)
    page, made = ROOT / "docs" / "results.md", (tree / "docs" / "results.md").read_text()
    if BEGIN in made:
        page.write_text(with_block(page.read_text(), made[made.index(BEGIN):made.index(END) + len(END)]))
        done.append("docs/results.md (its claims block)")
    for fig in sorted((tree / "docs" / "figures").glob("claims_*.png")):
        shutil.copyfile(fig, ROOT / "docs" / "figures" / fig.name)
        done.append(f"docs/figures/{fig.name}")
    return done


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.claims.publish",
                                description=__doc__.splitlines()[0])
    p.add_argument("--commit", default=None,
                   help="the commit to publish (default: HEAD of this clean checkout)")
    p.add_argument("--worktree", type=Path, default=None,
                   help="where to check it out (default outputs/published/<commit>)")
    p.add_argument("--quick", action="store_true", help="time the quick run at that commit (no docs)")
    args = p.parse_args(argv)
    with user_errors_exit():
        sha = resolve_commit(args.commit)
        tree = pinned_worktree(sha, args.worktree)
        cmd, env = command(tree, sha, args.quick)
        imports_from(tree, env)
        print(f"[publish] {sha[:12]} in {tree}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        code = subprocess.run(cmd, cwd=tree, env=env).returncode
        if code:
            raise SystemExit(code)
        if not args.quick:
            copied = copy_back(tree)
            print(f"[publish] copied into {ROOT}: {', '.join(copied)} — commit them as they are "
                  "(tests/test_claims_docs.py checks docs/claims.md against docs/claims_results)")


if __name__ == "__main__":
    main()
