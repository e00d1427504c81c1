"""Choosing a configuration on validation sweeps (pipelines.studies.val_choice)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from pipelines.studies.val_choice import choose, main, read_runs, run


def write_sweep(folder: Path, rows: dict[str, dict[int, float]], split: str = "val") -> None:
    """An ``evaluate --split val`` results.csv: variant → length → bits/base."""
    folder.mkdir(parents=True)
    with (folder / "results.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "length", "factor", "bits_per_base", "retained_gain", "status", "split"])
        for variant, by_length in rows.items():
            for n, v in by_length.items():
                w.writerow([variant, n, n / 8, v, 1.0, "ok", split])


def sweeps(tmp_path: Path) -> list[Path]:
    """rope: trained worse long, window better long; alibi flat but worse; kerple best, one seed only."""
    out = []
    for seed in range(3):
        e = 0.001 * seed
        write_sweep(tmp_path / f"rope-{seed}", {"trained": {8: 1.90 + e, 64: 1.99 + e},
                                                "window": {8: 1.90 + e, 64: 1.89 + e}})
        write_sweep(tmp_path / f"alibi-{seed}", {"trained": {8: 1.93 + e, 64: 1.93 + e}})
        out += [tmp_path / f"rope-{seed}", tmp_path / f"alibi-{seed}"]
    write_sweep(tmp_path / "kerple-0", {"trained": {8: 1.80, 64: 1.80}})
    return [*out, tmp_path / "kerple-0"]


def test_the_rule_picks_the_lowest_mean_at_the_selection_lengths_among_seeded_configurations(tmp_path):
    scores, metric = read_runs(sweeps(tmp_path))
    assert metric == "bits_per_base"
    assert choose(scores, [64], min_seeds=3) == ("rope", "window")
    assert choose(scores, [8], min_seeds=3) == ("rope", "trained")  # tie at 8: the first in order
    assert choose(scores, [64], min_seeds=1) == ("kerple", "trained")  # one seed counts only when allowed
    assert choose(scores, [64], min_seeds=3, higher_is_better=True) == ("rope", "trained")
    assert choose(scores, [16], min_seeds=1) is None  # no configuration scored there


def test_the_table_marks_the_choice_and_shows_every_configuration(tmp_path):
    out = tmp_path / "choice.md"
    chosen = run([*map(str, sweeps(tmp_path)), "--select", "64", "--out", str(out)])
    text = out.read_text()
    assert chosen == ("rope", "window")
    assert "| rope **(chosen)** | window | 3 | 1.9010 ± 0.0025 | 1.8910 ± 0.0025 |" in text
    assert "| kerple | trained | 1 | 1.8000 | 1.8000 |" in text


@pytest.mark.parametrize("case, message", [
    ("badname", "folder name must be <scheme>-<seed>"),
    ("test", "not a validation sweep"),
    ("missing", "no results.csv"),
])
def test_bad_folders_are_one_line_errors(tmp_path, capsys, case, message):
    folder = tmp_path / {"badname": "rope", "test": "rope-0", "missing": "rope-1"}[case]
    if case == "missing":
        folder.mkdir()
    else:
        write_sweep(folder, {"trained": {8: 1.9}}, split="test" if case == "test" else "val")
    with pytest.raises(SystemExit) as exit_:
        main([str(folder), "--select", "8"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and message in err and str(folder) in err
