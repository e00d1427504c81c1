"""The posenc-only wheel (``make posenc-wheel``): posenc alone, needing torch and numpy, and the
README's "Use it in your own model" snippet runs from it in a fresh virtual environment.

The fresh environment is made without pip and gets the wheel with ``--no-index --no-deps``; torch and
numpy are not downloaded but made visible by a ``.pth`` line naming this interpreter's site-packages
(appended after the environment's own, whose ``.pth`` files are not read: the project's editable
posenc stays out). What got *installed* is read from the environment's own site-packages only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.helpers import PIPELINE_STACK, readme_snippet

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("posenc_wheel_build", ROOT / "packaging/posenc/build.py")
posenc_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(posenc_wheel)  # packaging/posenc/build.py: not a package, loaded by path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return posenc_wheel.build(tmp_path_factory.mktemp("dist"))


def test_wheel_holds_posenc_alone_and_needs_only_torch_and_numpy(wheel):
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
        info = next(t for t in tops if t.endswith(".dist-info"))
        meta = zf.read(f"{info}/METADATA").decode()
        shipped = {n for n in zf.namelist() if n.startswith("posenc/") and n.endswith(".py")}
    assert tops == {"posenc", info}
    assert info == f"posenc-{posenc_wheel.root_version()}.dist-info"
    requires = sorted(line.split(":", 1)[1].strip() for line in meta.splitlines()
                      if line.startswith("Requires-Dist:"))
    assert requires == ["numpy", "torch>=2.4"]
    here = {str(p.relative_to(ROOT)) for p in (ROOT / "posenc").rglob("*.py")}
    assert shipped == here  # every module of the library, nothing else


def test_wheel_carries_the_license_its_metadata_names(wheel):
    with zipfile.ZipFile(wheel) as zf:
        info = next(n.split("/")[0] for n in zf.namelist() if n.split("/")[0].endswith(".dist-info"))
        meta = zf.read(f"{info}/METADATA").decode().splitlines()
        text = zf.read(f"{info}/licenses/LICENSE").decode()
    assert "License-Expression: MIT" in meta and "License-File: LICENSE" in meta
    assert text == (ROOT / "LICENSE").read_text() and text.startswith("MIT License")


def test_wheel_installs_alone_and_runs_the_readme_snippet(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    pip = [sys.executable, "-m", "pip", "--python", str(py)]
    subprocess.run([*pip, "install", "--no-index", "--no-deps", "--no-compile", "--quiet", str(wheel)],
                   check=True)
    listed = subprocess.run([*pip, "list", "--format=json", "--path", str(site)], capture_output=True,
                            text=True, check=True).stdout
    assert [d["name"] for d in json.loads(listed)] == ["posenc"]
    (site / "zz_torch_from_project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    check = ("\nimport sys, posenc\n"
             "assert y.shape == z.shape == (8, 256, 64), (y.shape, z.shape)\n"
             f"assert posenc.__file__.startswith({str(site)!r}), posenc.__file__\n"
             f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(PIPELINE_STACK)!r}))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel's posenc, not the tree's
    run = subprocess.run([py, "-c", readme_snippet() + check], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "[]"
