"""The LTSF summary: the lookback-extrapolation table (MSE at the training lookback and longer ones, the
paired change, the retained gain over seasonal naive as a ratio of mean gains), the paired differences,
and a choice among models made on val alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipelines.studies.ltsf.report import lookback_lines, summary_markdown


def rows(model: str, at_train: list[float], at_512: list[float], naive: float = 0.5) -> list[dict]:
    out = [{"model": "naive", "horizon": "96", "seed": "0", "test/mse_scaled": str(naive)}]  # no L column
    for seed, (a, b) in enumerate(zip(at_train, at_512, strict=True)):
        out.append({"model": model, "horizon": "96", "seed": str(seed), "test/mse_scaled": str(a),
                    "test/mse_scaled_L512": str(b)})
    return out


def cells(lines: list[str], model: str) -> list[str]:
    row = next(line for line in lines if line.startswith(f"| {model} |"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_retained_gain_is_the_ratio_of_mean_gains_over_naive():
    lines = lookback_lines(rows("m", [0.40, 0.42, 0.41], [0.44, 0.45, 0.46]), 336)
    assert "trained at 336, scored at 512" in lines[1]
    c = cells(lines, "m")
    gain_336, gain_512 = 0.5 - 0.41, 0.5 - 0.45  # naive 0.5 minus the model's mean MSE
    assert c[1] == "96" and float(c[5].split()[0]) == pytest.approx(gain_512 / gain_336, abs=0.005)
    assert c[4].startswith("+0.0400")  # the paired change 512 − 336


def test_retained_gain_is_undefined_when_the_model_does_not_beat_naive():
    c = cells(lookback_lines(rows("m", [0.52, 0.55, 0.51], [0.6, 0.6, 0.6]), 336), "m")
    assert c[5].startswith("undefined: gain over the trivial baseline")


def test_no_section_without_longer_lookbacks_and_none_without_naive():
    plain = [r for r in rows("m", [0.4, 0.4], [0.5, 0.5]) if r["model"] == "naive"]
    assert lookback_lines(plain, 336) == []
    no_naive = [r for r in rows("m", [0.4, 0.41], [0.5, 0.52]) if r["model"] != "naive"]
    assert cells(lookback_lines(no_naive, 336), "m")[5] == "no naive row"
    args = SimpleNamespace(data="x", lookback=336, seeds=[0, 1], configs=["m"])
    assert "## Lookback extrapolation" in summary_markdown(rows("m", [0.4, 0.41], [0.45, 0.46]), args, [])


def test_lookback_figure_is_drawn_only_with_longer_lookbacks(tmp_path):
    from pipelines.studies.ltsf.report import lookback_figure

    assert lookback_figure(rows("m", [0.4, 0.41], [0.45, 0.46]), 336, tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 0
    plain = [r for r in rows("m", [0.4], [0.5]) if r["model"] == "naive"]
    assert not lookback_figure(plain, 336, tmp_path / "b.png") and not (tmp_path / "b.png").exists()


def test_paired_differences_are_against_the_first_trained_config_not_a_seeded_baseline():
    mse = {"lightgbm": (0.30, 0.31, 0.29), "posenc": (0.20, 0.21, 0.20), "posenc-rope": (0.21, 0.22, 0.22)}
    table = [{"model": m, "horizon": "96", "seed": str(seed), "test/mse_scaled": str(v[seed])}
             for seed in range(3) for m, v in mse.items()]  # LightGBM has seeds too, and comes first
    args = SimpleNamespace(data="x", lookback=336, seeds=[0, 1, 2], configs=["posenc"])
    lines = summary_markdown(table, args, []).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Paired"))
    assert lines[start].startswith("## Paired MSE difference vs posenc ")
    paired = lines[start:]
    assert cells(paired, "posenc-rope")[1].startswith("+0.0133")
    assert cells(paired, "lightgbm")[1].startswith("+0.0967")


def test_paired_figure_is_drawn_only_when_a_model_pairs_with_the_reference(tmp_path):
    from pipelines.studies.ltsf.report import figures

    table = [{"model": m, "horizon": str(h), "seed": str(seed), "test/mse_scaled": str(0.2 + 0.01 * seed + d)}
             for h in (96, 336) for seed in range(3) for m, d in (("posenc", 0.0), ("posenc-rope", 0.003))]
    assert [p.name for p in figures(table, tmp_path, "weather.csv", 336)] == ["ltsf.png", "paired.png"]
    alone = [r for r in table if r["model"] == "posenc"]
    (tmp_path / "b").mkdir()
    assert [p.name for p in figures(alone, tmp_path / "b", "weather.csv", 336)] == ["ltsf.png"]


def test_the_val_choice_takes_the_lowest_mean_val_mse_and_reports_that_models_test():
    from pipelines.studies.ltsf.report import val_choice, val_choice_lines

    val = {("a", 96): (0.50, 0.52), ("b", 96): (0.49, 0.51),
           ("a", 192): (0.60, 0.60), ("b", 192): (0.61, 0.60)}
    test = {"a": (0.30, 0.32), "b": (0.40, 0.42)}  # test disagrees with val at 96: the choice never reads it
    table = [{"model": m, "horizon": str(h), "seed": str(s), "val/mse_scaled": str(v[s]),
              "test/mse_scaled": str(test[m][s])} for (m, h), v in val.items() for s in range(2)]
    assert val_choice(table, ["a", "b"], 96) == "b" and val_choice(table, ["a", "b"], 192) == "a"
    assert val_choice(table, ["a", "b", "c"], 96) is None  # c has no rows: no choice
    lines = val_choice_lines(table, ["a", "b"], [96, 192])
    assert lines[1].startswith("## Chosen on val among a, b")
    assert cells(lines, "96")[1:4] == ["0.5100", "0.5000", "b"] and cells(lines, "96")[4].startswith("0.410")
    assert cells(lines, "192")[3] == "a" and cells(lines, "192")[4].startswith("0.310")
    assert val_choice_lines(table, [], [96]) == []
    from types import SimpleNamespace

    from pipelines.studies.ltsf.report import summary_markdown

    args = SimpleNamespace(data="x.csv", lookback=336, seeds=[0, 1], choose_on_val=["a", "b"])
    first = summary_markdown(table, args, []).split("## Test MSE (scaled)")[1].splitlines()[4]
    assert cells([first], "**chosen on val** (of a, b)")[1:] == [
        f"{c}: {m}" for c, m in zip(cells(lines, "96")[4:] + cells(lines, "192")[4:], "ba", strict=True)]
    args.choose_on_val = []
    assert "chosen on val" not in summary_markdown(table, args, [])


def test_choose_on_val_names_a_model_the_results_do_not_have_in_one_line(tmp_path, capsys):
    from pipelines.studies.ltsf.report import main

    results = tmp_path / "results.csv"
    results.write_text("model,horizon,seed,test/mse_scaled,val/mse_scaled\nposenc,96,0,0.2,0.4\n")
    with pytest.raises(SystemExit, match=r"--choose-on-val: no rows of forecastr in the results"):
        main(["--results", str(results), "--out", str(tmp_path / "out"),
              "--choose-on-val", "posenc", "forecastr"])
    assert not (tmp_path / "out").exists()  # nothing written
