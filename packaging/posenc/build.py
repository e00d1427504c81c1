"""Build the posenc-only wheel: stage ``posenc/`` beside this folder's pyproject and run pip wheel.

Usage: ``python packaging/posenc/build.py [OUT_DIR]`` (default ``dist/``); prints the wheel's path.
Offline: no build isolation, so the running interpreter's setuptools builds it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def root_version() -> str:
    """The ``version`` of the root pyproject.toml's [project] table."""
    match = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit("no version in the root pyproject.toml")
    return match.group(1)


def stage(into: Path) -> None:
    """Copy posenc/ (without caches), this README, the repository's LICENSE (the MIT text the metadata
    names, shipped in the wheel's ``.dist-info/licenses/``) and the pyproject with the root version into
    ``into``."""
    shutil.copytree(ROOT / "posenc", into / "posenc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(HERE / "README.md", into / "README.md")
    shutil.copy(ROOT / "LICENSE", into / "LICENSE")
    text = (HERE / "pyproject.toml").read_text()
    text = re.sub(r'^version = "[^"]*"', f'version = "{root_version()}"', text, count=1, flags=re.MULTILINE)
    (into / "pyproject.toml").write_text(text)


def build(out: Path) -> Path:
    """Build the wheel into ``out`` and return its path."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="posenc-wheel-") as tmp:
        src = Path(tmp) / "src"
        stage(src)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
               "--quiet", "--wheel-dir", str(out), str(src)]
        subprocess.run(cmd, check=True)
    wheels = sorted(out.glob(f"posenc-{root_version()}-*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise SystemExit(f"pip wheel wrote no posenc wheel into {out}")
    return wheels[-1]


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "dist"))
