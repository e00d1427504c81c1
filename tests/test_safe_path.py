"""The working folder is never on the import path of a documented command (issue 42): each
``python -m pipelines.…`` command run from a folder holding ``secrets.py``, ``yaml.py``, ``numpy.py``
and ``evil.py`` (each leaves a marker when imported) imports none of them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

BAIT = ("secrets", "yaml", "numpy", "evil")


def documented_commands() -> list[str]:
    """Every ``-m pipelines…`` module the Makefile, README and docs name (read from them, so a command
    that is added or moved is checked under its new name)."""
    texts = [ROOT / "Makefile", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = {m for path in texts if path.exists()
             for m in re.findall(r"-m (pipelines(?:\.\w+)*)", path.read_text())}
    exists = lambda m: (ROOT / f"{m.replace('.', '/')}.py").exists() or (  # noqa: E731
        ROOT / m.replace(".", "/") / "__main__.py").exists()
    return sorted(m for m in found if exists(m))


def bait_folder(tmp: Path) -> Path:
    """``tmp`` holding a module per :data:`BAIT`, each writing ``tmp/marker-<name>`` when imported."""
    for name in BAIT:
        (tmp / f"{name}.py").write_text(f"open({str(tmp / f'marker-{name}')!r}, 'w').write('imported')\n")
    return tmp


def run_from(folder: Path, module: str) -> subprocess.CompletedProcess:
    """``python -m module --help`` with ``folder`` as the working folder (no PYTHONSAFEPATH: the
    commands themselves must keep the folder off the import path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", module, "--help"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def test_train_imports_nothing_from_the_working_folder(tmp_path):
    folder = bait_folder(tmp_path)
    done = run_from(folder, "pipelines.train")
    assert sorted(p.name for p in folder.glob("marker-*")) == [], done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("module", [m for m in documented_commands() if m != "pipelines.train"])
def test_no_documented_command_imports_from_the_working_folder(tmp_path, module):
    folder = bait_folder(tmp_path)
    done = run_from(folder, module)
    assert sorted(p.name for p in folder.glob("marker-*")) == [], done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]  # (some print usage and exit 1 or 2)


def test_every_documented_command_is_found():
    expected = {"pipelines.train", "pipelines.inference.predict", "pipelines.studies.bench"}
    assert expected <= set(documented_commands())


def test_the_makefile_runs_every_command_with_a_safe_path():
    """``make`` runs its commands with ``PYTHONSAFEPATH=1`` (Python ≥ 3.11: no working folder on the path)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    assert any(line.strip() == "export PYTHONSAFEPATH := 1" for line in lines)
