"""Figures of one positional-encoding config: ``python -m pipelines.studies.diagnose <yaml> --out DIR``.

Builds the scheme of a ``configs/posenc/<scheme>.yaml`` and writes every diagnostic figure of
:mod:`posenc.diagnostic_plots` that applies to it (position features, similarity against offset,
aliasing, rotary band periods, phase mismatch, bias against distance).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import yaml

from pipelines.console import print_error
from posenc import PosencError, PositionalEncoding, build_encoding, diagnostic_plots


def load_scheme(
    path: str | Path, d_model: int | None = None, n_heads: int | None = None
) -> PositionalEncoding:
    """Build the scheme of a ``configs/posenc/*.yaml`` (or a bare ``{class_path, init_args}`` YAML).

    ``d_model`` / ``n_heads`` default to the YAML's ``model.init_args.net`` values (or flat
    ``model.init_args`` ones), else 128 / 8.
    """

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PosencError(f"{path}: cannot read the scheme YAML ({exc})") from None
    init = (doc or {}).get("model", {}).get("init_args", {}) if isinstance(doc, dict) else {}
    spec = init.get("pe", doc) if isinstance(init, dict) else doc
    if not isinstance(spec, dict) or "class_path" not in spec:
        raise PosencError(f"{path}: no model.init_args.pe.class_path (nor a top-level class_path)")
    net = {**(init.get("net") or {}), **init}  # model.init_args.net, or flat keys of before (which win)
    torch.manual_seed(0)
    return build_encoding(spec, d_model or net.get("d_model", 128), n_heads or net.get("n_heads", 8))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pipelines.studies.diagnose <scheme yaml> --out DIR``: write every figure that applies."""
    ap = argparse.ArgumentParser(prog="python -m pipelines.studies.diagnose", description=main.__doc__)
    ap.add_argument("config", help="configs/posenc/<scheme>.yaml")
    ap.add_argument("--out", required=True, help="folder for the PNG files")
    ap.add_argument("--d_model", type=int, default=None, help="model width (default: YAML's or 128)")
    ap.add_argument("--n_heads", type=int, default=None, help="heads (default: YAML's or 8)")
    ap.add_argument("--length", type=int, default=512, help="positions shown (default 512)")
    ap.add_argument("--train_len", type=int, default=128, help="training length marked on plots")
    args = ap.parse_args(argv)
    try:
        pe = load_scheme(args.config, args.d_model, args.n_heads).eval()
        written = diagnostic_plots.write_all(pe, Path(args.out), args.length, args.train_len)
    except PosencError as exc:
        print_error(exc)
        return 2
    if not written:
        print(f"{type(pe).__name__}: no position features or bias to plot (no positional encoding)",
              file=sys.stderr)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
