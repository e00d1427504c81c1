"""Data paths: a file on disk, or ``package:<package>/<path inside it>`` for a data file shipped inside
an installed package (located without importing the package, so it works offline and fast)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from posenc import PosencError

PACKAGE_PREFIX = "package:"


def packaged_file(package: str, relative: str) -> Path:
    """A data file shipped inside an installed package, located without importing it.

    Raises:
        PosencError: the package is not installed, or has no such file.
    """
    spec = importlib.util.find_spec(package) if package.isidentifier() else None
    if spec is None or not spec.submodule_search_locations:
        raise PosencError(f"package {package!r} is not installed (it ships the data file {relative})")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise PosencError(f"{path}: expected data file missing from package {package!r}")
    return path


def resolve_path(text: str | Path) -> Path:
    """A path, or ``package:<package>/<relative path>`` for a file shipped by an installed package
    (e.g. ``package:bio_test_artifacts/prebuilt/artifacts/yeast_chr01.fasta``,
    ``package:tsdata/fpppy/EPF_FR_BE.csv``)."""
    text = str(text)
    if text.startswith(PACKAGE_PREFIX):
        package, _, relative = text[len(PACKAGE_PREFIX) :].partition("/")
        if not package or not relative:
            raise PosencError(f"{text!r}: expected package:<package>/<path inside the package>")
        return packaged_file(package, relative)
    return Path(text).expanduser()
