"""The diagnostics CLI (``python -m pipelines.studies.diagnose <yaml> --out DIR``): the figures that apply to
a scheme written and readable; a bad config one ``error:`` line, exit status 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.studies import diagnose
from tests.helpers import ROOT, readable_png


@pytest.mark.parametrize("name, expected", [
    ("periodic_rope", {"heatmap", "similarity", "aliasing", "bands", "phase_mismatch"}),
    ("alibi", {"heatmap", "bias"}),
    ("learned", {"heatmap", "similarity", "aliasing"}),
])
def test_cli_writes_readable_figures(tmp_path, capsys, name, expected):
    cfg = ROOT / "configs" / "posenc" / f"{name}.yaml"
    args = [str(cfg), "--out", str(tmp_path), "--d_model", "32", "--n_heads", "2", "--length", "96"]
    assert diagnose.main(args) == 0
    written = {Path(p).stem for p in capsys.readouterr().out.split()}
    assert written == expected == {p.stem for p in tmp_path.glob("*.png")}
    for p in tmp_path.glob("*.png"):
        readable_png(p)


def test_cli_bad_config_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  init_args:\n    pe:\n      class_path: posenc.NoSuchScheme\n")
    with pytest.raises(SystemExit) as exc:
        diagnose.main([str(bad), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "NoSuchScheme" in err and "\n" not in err
    with pytest.raises(SystemExit) as exc:
        diagnose.main([str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert not (tmp_path / "o").exists()
