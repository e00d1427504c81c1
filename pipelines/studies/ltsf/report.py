"""The LTSF benchmark's summary: mean ± 95 % CI over seeds per model and horizon beside the published
numbers, paired differences against the reference model, and CPU time."""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipelines.eval.statistics import estimate
from pipelines.studies.bootstrap import Arm
from pipelines.studies.out_folder import write_file
from pipelines.studies.tables import md_lines
from pipelines.studies.verdicts import paired_difference, retained

#: the baselines fitted in the benchmark's process (every other model is a trained config)
BASELINES = ("naive", "ridge", "lightgbm", "ets")
FIELDS = ["model", "horizon", "seed", "n_test_windows", "test/mse_scaled", "test/mae_scaled",
          "val/mse_scaled", "time/cpu_s", "time/wall_s"]

#: ETTh1 MSE, PatchTST paper Table 3 (drop_last test loader) and the all-windows re-runs (FITS README)
PUBLISHED = {
    "PatchTST/64 (paper)": {96: 0.370, 192: 0.413, 336: 0.422, 720: 0.447},
    "PatchTST/42 (paper)": {96: 0.375, 192: 0.414, 336: 0.431, 720: 0.449},
    "DLinear (paper)": {96: 0.375, 192: 0.405, 336: 0.439, 720: 0.472},
    "PatchTST (all windows)": {96: 0.385, 192: 0.413, 336: 0.440, 720: 0.456},
    "DLinear (all windows)": {96: 0.384, 192: 0.443, 336: 0.446, 720: 0.504},
}
#: Weather MSE, PatchTST paper Table 3 (../shared/data/weather/README.md)
PUBLISHED_WEATHER = {
    "PatchTST/64 (paper)": {96: 0.149, 192: 0.194, 336: 0.245, 720: 0.314},
    "PatchTST/42 (paper)": {96: 0.152, 192: 0.197, 336: 0.249, 720: 0.320},
    "DLinear (paper)": {96: 0.176, 192: 0.220, 336: 0.265, 720: 0.323},
}
PUBLISHED_BY_FILE = {"etth1": PUBLISHED, "weather": PUBLISHED_WEATHER}


def published_for(data: Any) -> dict[str, dict[int, float]]:
    """The published MSE of the file ``data`` names (by its stem, e.g. ``ETTh1``, ``weather``); none
    for a file the project has no published table of."""
    return PUBLISHED_BY_FILE.get(Path(str(data)).stem.lower(), {})


def _group(rows: list[dict[str, Any]], key: str) -> dict[tuple[str, int], dict[int, float]]:
    out: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r.get(key) not in ("", None):  # a row from a run without that column (merged results)
            out[(r["model"], int(r["horizon"]))][int(r["seed"])] = float(r[key])
    return out


def _row(model: str, table: dict, horizons: list[int], cell: Any) -> list[str]:
    """The model's cells over the horizons (``–`` where the model has no run)."""
    return [model, *(cell(table[(model, h)]) if table.get((model, h)) else "–" for h in horizons)]


def _cell(values: dict[int, float]) -> str:
    est = estimate(list(values.values()))
    return est.text(3) + (f" (n={est.n})" if est.n > 1 else "")


def summary_markdown(rows: list[dict[str, Any]], args: Any, skipped: list[str]) -> str:
    """The tables of ``summary.md``: test MSE/MAE (scaled) mean ± 95 % CI per model and horizon, the
    published numbers, CPU seconds per run, and (encoding tables) paired MSE differences against the
    first model config."""
    horizons = sorted({int(r["horizon"]) for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    mse, mae, cpu = (_group(rows, k) for k in ("test/mse_scaled", "test/mae_scaled", "time/cpu_s"))
    cols = ["model", *(f"H={h}" for h in horizons)]
    published = [[f"*{name}*", *(f"{nums[h]:.3f}" if h in nums else "–" for h in horizons)]
                 for name, nums in published_for(args.data).items()]
    chosen = chosen_row(rows, getattr(args, "choose_on_val", None) or [], horizons, mse)
    lines = [f"# LTSF benchmark on {args.data}", "",
             f"Lookback {args.lookback}; seeds {' '.join(map(str, args.seeds))}; every test window; "
             "metrics on the train-scaled data; mean ± 95 % Student-t half-width over seeds.", "",
             "## Test MSE (scaled)", "",
             *md_lines(cols, chosen + [_row(m, mse, horizons, _cell) for m in models] + published)]
    lines += ["", "## Test MAE (scaled)", "",
              *md_lines(cols, [_row(m, mae, horizons, _cell) for m in models])]
    mean_cpu = [_row(m, cpu, horizons, lambda v: f"{sum(v.values()) / len(v):.0f}") for m in models]
    lines += ["", "## CPU seconds per run (mean over seeds; process time, all threads)", "",
              *md_lines(cols, mean_cpu)]
    lines += _paired(mse, models, horizons, args)
    lines += val_choice_lines(rows, getattr(args, "choose_on_val", None) or [], horizons)
    lines += lookback_lines(rows, args.lookback)
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- {s}" for s in skipped]
    return "\n".join(lines) + "\n"


def paired_against_reference(mse: dict, models: list[str], horizons: list[int]) -> tuple[str | None, dict]:
    """The reference (the first trained model with seeds; a baseline such as LightGBM's seeds is
    compared, never the reference) and every other seeded model's paired (same seed) MSE difference
    against it, keyed by ``(model, horizon)``; a horizon with fewer than two shared seeds is left out."""
    seeded = [m for m in models if any(len(mse.get((m, h), {})) > 1 for h in horizons)]
    ref = next((m for m in seeded if m not in BASELINES), None)
    diffs = {}
    for m in seeded if ref else []:
        for h in horizons:
            a, b = mse.get((m, h), {}), mse.get((ref, h), {})
            seeds = sorted(set(a) & set(b))
            if m != ref and len(seeds) > 1:
                diffs[(m, h)] = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
    return ref, diffs


def _paired(mse: dict, models: list[str], horizons: list[int], args: Any) -> list[str]:
    """The paired-difference table of ``summary.md`` (encoding tables: every model against the first)."""
    if not getattr(args, "configs", None) or len(args.seeds) < 2:
        return []
    ref, diffs = paired_against_reference(mse, models, horizons)

    def cell(d: Any) -> str:
        mark = "" if not d.excludes_zero or math.isnan(d.lo) else ("▲" if d.mean > 0 else "▼")
        return f"{d.mean:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]{mark}"

    named = dict.fromkeys(m for m, _ in diffs)
    rows = [[m, *(cell(diffs[(m, h)]) if (m, h) in diffs else "–" for h in horizons)] for m in named]
    if not rows:
        return []
    title = f"## Paired MSE difference vs {ref} (same seeds; 95 % CI; ▲/▼ when it excludes 0)"
    return ["", title, "", *md_lines(["model", *(f"H={h}" for h in horizons)], rows)]


def _val_means(val: dict, candidates: list[str], horizon: int) -> list[float | None]:
    """Each candidate's mean val MSE over its seeds at ``horizon`` (``None`` without rows there)."""
    return [sum(v.values()) / len(v) if (v := val.get((m, horizon))) else None for m in candidates]


def _lowest(candidates: list[str], means: list[float | None]) -> str | None:
    if not candidates or None in means:
        return None
    return candidates[min(range(len(means)), key=lambda i: (means[i], i))]


def val_choice(rows: list[dict[str, Any]], candidates: list[str], horizon: int) -> str | None:
    """The one of ``candidates`` that val chooses at ``horizon``: the lowest mean val MSE over its seeds
    (ties: the first named); ``None`` unless every candidate has val rows there."""
    return _lowest(candidates, _val_means(_group(rows, "val/mse_scaled"), candidates, horizon))


def _val_choices(rows: list[dict[str, Any]], candidates: list[str],
                 horizons: list[int]) -> dict[int, tuple[list[float | None], str | None]]:
    """Per horizon: each candidate's mean val MSE and the one :func:`val_choice` takes (val grouped once)."""
    val = _group(rows, "val/mse_scaled")
    out = {}
    for h in horizons:
        means = _val_means(val, candidates, h)
        out[h] = (means, _lowest(candidates, means))
    return out


def val_choice_lines(rows: list[dict[str, Any]], candidates: list[str], horizons: list[int]) -> list[str]:
    """The ``summary.md`` table of a choice among ``candidates`` made on val alone, per horizon: each
    candidate's mean val MSE, the one chosen (:func:`val_choice`) and its test MSE."""
    if not candidates:
        return []
    mse, body = _group(rows, "test/mse_scaled"), []
    for h, (means, chosen) in _val_choices(rows, candidates, horizons).items():
        test = _cell(mse[(chosen, h)]) if chosen and mse.get((chosen, h)) else "–"
        body.append([str(h), *("–" if m is None else f"{m:.4f}" for m in means), chosen or "–", test])
    cols = ["H", *(f"val MSE, {m}" for m in candidates), "chosen on val", "its test MSE"]
    title = f"## Chosen on val among {', '.join(candidates)} (lowest mean val MSE over seeds)"
    return ["", title, "", *md_lines(cols, body)]


def chosen_row(rows: list[dict[str, Any]], candidates: list[str], horizons: list[int],
               mse: dict) -> list[list[str]]:
    """The MSE table's first row with ``--choose-on-val``: per horizon, the test MSE of the model val
    chooses (:func:`val_choice`), named in its cell; no row without candidates."""
    if not candidates:
        return []
    cells = [f"{_cell(mse[(pick, h)])}: {pick}" if pick and mse.get((pick, h)) else "–"
             for h, (_, pick) in _val_choices(rows, candidates, horizons).items()]
    return [[f"**chosen on val** (of {', '.join(candidates)})", *cells]]


def paired_figure(rows: list[dict[str, Any]], path: Any) -> bool:
    """Each model's paired test-MSE difference against the reference (mean and 95 % CI over seeds), one
    panel per horizon, a line at 0; False (nothing drawn) when no model pairs with a reference."""
    horizons = sorted({int(r["horizon"]) for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    ref, diffs = paired_against_reference(_group(rows, "test/mse_scaled"), models, horizons)
    horizons = [h for h in horizons if any(k[1] == h for k in diffs)]
    if not diffs:
        return False
    plt = _pyplot()

    named = list(dict.fromkeys(m for m, _ in diffs))
    fig, axes = plt.subplots(1, len(horizons), figsize=(3.6 * len(horizons) + 1.6, 0.42 * len(named) + 1.4),
                             squeeze=False, sharey=True)
    for ax, h in zip(axes[0], horizons, strict=True):
        ys = [i for i, m in enumerate(named) if (m, h) in diffs]
        ds = [diffs[(named[i], h)] for i in ys]
        ax.errorbar([d.mean for d in ds], ys, xerr=[[d.mean - d.lo for d in ds], [d.hi - d.mean for d in ds]],
                    fmt="o", capsize=3)
        ax.axvline(0, color="k", lw=0.8)
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
        ax.set(title=f"H={h}", xlabel=f"test MSE − {ref}'s (same seed)")
    axes[0][0].set_yticks(range(len(named)), named)
    axes[0][0].invert_yaxis()
    _save(plt, fig, path)
    return True


def _lookbacks(rows: list[dict[str, Any]]) -> list[int]:
    """The longer test lookbacks the rows were scored at (``test/mse_scaled_L<n>`` with a number)."""
    found = set()
    for r in rows:
        for k, v in r.items():
            if k.startswith("test/mse_scaled_L") and v not in ("", None) and math.isfinite(float(v)):
                found.add(int(k.removeprefix("test/mse_scaled_L")))
    return sorted(found)


def lookback_lines(rows: list[dict[str, Any]], lookback: int) -> list[str]:
    """Lookback extrapolation (``--test-lookbacks``): per model and horizon, test MSE at the training
    lookback and each longer one (mean ± 95 % CI over seeds), the paired change from the training
    lookback, and the retained gain over seasonal naive (the ``naive`` row of that horizon: its forecast
    reads the last day only, so it is the same at every lookback) — a ratio of mean gains with a paired
    bootstrap interval, undefined unless the gain at the training lookback is clearly above 0."""

    longer = _lookbacks(rows)
    if not longer:
        return []
    naive = {int(r["horizon"]): float(r["test/mse_scaled"]) for r in rows if r["model"] == "naive"}
    head = ["model", "H", *(f"L={n}" for n in [lookback, *longer])]
    head += [c for n in longer for c in (f"L={n} − L={lookback}", f"retained at {n}")]
    body = []
    by_lookback = {n: _group(rows, f"test/mse_scaled_L{n}") for n in longer}
    for (model, h), at_train in sorted(_group(rows, "test/mse_scaled").items(), key=lambda kv: kv[0][1]):
        curves = {n: by_lookback[n].get((model, h), {}) for n in longer}
        if not any(v and all(math.isfinite(x) for x in v.values()) for v in curves.values()):
            continue
        seeds = sorted(at_train)
        cells = [_cell(at_train)] + [_cell(curves[n]) if curves[n] else "–" for n in longer]
        for n in longer:
            xs, x0 = [curves[n].get(s, math.nan) for s in seeds], [at_train[s] for s in seeds]
            d = paired_difference(xs, x0)
            cells.append(f"{d.mean:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]" if len(seeds) > 1 else f"{d.mean:+.4f}")
            if h not in naive or len(seeds) < 2:
                cells.append("no naive row" if h not in naive else "one seed")
                continue
            triv = Arm.from_values([naive[h]] * len(seeds))
            r = retained(Arm.from_values(xs), Arm.from_values(x0), triv, triv, False, "mse")
            cells.append(f"{r.mean:.2f} [{r.lo:.2f}, {r.hi:.2f}]" if r.defined else f"undefined: {r.why}")
        body.append([model, h, *cells])
    title = (f"## Lookback extrapolation: trained at {lookback}, scored at " + ", ".join(map(str, longer))
             + " (test MSE, same test windows)")
    return ["", title, "", *md_lines(head, body)]


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib  # optional: matplotlib, figures only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: matplotlib, figures only

    return plt


def _save(plt: Any, fig: Any, path: Any) -> None:
    """The figure as a PNG at ``path``, written whole (a link planted there is replaced, not followed)."""
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=120, format="png")
    plt.close(fig)
    write_file(path, buffer.getvalue())


def figure(rows: list[dict[str, Any]], path: Any, data: Any = "ETTh1.csv", lookback: int = 336) -> None:
    """Test MSE per horizon: each model's mean with its 95 % CI (bars where it has several seeds), and
    the published PatchTST/64 and all-windows re-run numbers as dashed lines."""
    plt = _pyplot()

    mse = _group(rows, "test/mse_scaled")
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, m in enumerate(models):
        hs = sorted(h for (name, h) in mse if name == m)
        ests = [estimate(list(mse[(m, h)].values())) for h in hs]
        err = [[e.mean - e.lo if e.n > 1 else 0 for e in ests],
               [e.hi - e.mean if e.n > 1 else 0 for e in ests]]
        ax.errorbar([h * (1 + 0.012 * (i - len(models) / 2)) for h in hs], [e.mean for e in ests], yerr=err,
                    marker="o", capsize=3, label=m)
    published = published_for(data)
    for name, style in (("PatchTST/64 (paper)", "k--"), ("PatchTST (all windows)", "k:"),
                        ("DLinear (paper)", "k-.")):
        if name in published:
            hs = sorted(published[name])
            ax.plot(hs, [published[name][h] for h in hs], style, label=name, linewidth=1)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks([96, 192, 336, 720], ["96", "192", "336", "720"])
    ax.set_xlabel("horizon (steps)")
    ax.set_ylabel("test MSE (scaled), every window")
    ax.set_title(f"{Path(str(data)).stem}, lookback {lookback}")
    ax.legend(fontsize=7)
    _save(plt, fig, path)


def lookback_figure(rows: list[dict[str, Any]], lookback: int, path: Any) -> bool:
    """Test MSE against the lookback the model reads (trained at ``lookback``), mean and 95 % CI over
    seeds per model, seasonal naive dashed; one panel per horizon. False (nothing drawn) without
    ``--test-lookbacks`` columns."""
    longer = _lookbacks(rows)
    if not longer:
        return False
    plt = _pyplot()

    horizons = sorted({int(r["horizon"]) for r in rows})
    curves = {n: _group(rows, f"test/mse_scaled_L{n}") for n in longer}
    at_train = _group(rows, "test/mse_scaled")
    fig, axes = plt.subplots(1, len(horizons), figsize=(5.6 * len(horizons), 3.8), squeeze=False)
    for ax, h in zip(axes[0], horizons, strict=True):
        for model in dict.fromkeys(r["model"] for r in rows if int(r["horizon"]) == h):
            pts = [(lookback, at_train.get((model, h)))] + [(n, curves[n].get((model, h))) for n in longer]
            pts = [(n, estimate(list(v.values()))) for n, v in pts if v]
            if model == "naive" or len(pts) < 2:
                continue
            ax.errorbar([n for n, _ in pts], [e.mean for _, e in pts], marker="o", capsize=3, label=model,
                        yerr=[[e.mean - e.lo if e.n > 1 else 0 for _, e in pts],
                              [e.hi - e.mean if e.n > 1 else 0 for _, e in pts]])
        naive = at_train.get(("naive", h))
        if naive:
            ax.axhline(estimate(list(naive.values())).mean, color="k", ls="--", lw=1, label="seasonal naive")
        ax.axvline(lookback, color="grey", lw=0.8)
        ax.set_xticks([lookback, *longer], [str(n) for n in [lookback, *longer]])
        ax.set(xlabel=f"lookback read at test (trained at {lookback})", ylabel="test MSE (scaled)",
               title=f"H={h}")
        ax.legend(fontsize=7)
    _save(plt, fig, path)
    return True


def figures(rows: list[dict[str, Any]], out: Path, data: Any, lookback: int) -> list[Path]:
    """The benchmark's figures in ``out``: ``ltsf.png`` (MSE per horizon), ``lookbacks.png`` (with
    ``--test-lookbacks``) and ``paired.png`` (with models paired against a reference); the files drawn."""
    figure(rows, out / "ltsf.png", data, lookback)
    drawn = [out / "ltsf.png"]
    if lookback_figure(rows, lookback, out / "lookbacks.png"):
        drawn.append(out / "lookbacks.png")
    if paired_figure(rows, out / "paired.png"):
        drawn.append(out / "paired.png")
    return drawn


def main(argv: list[str] | None = None) -> None:
    """``python -m pipelines.studies.ltsf.report --results A.csv [B.csv …] --out DIR``: one ``results.csv``,
    ``summary.md`` and the figures (:func:`figures`) from the results of several benchmark runs (e.g.
    horizons or seeds run as separate commands); a row repeated (same model, horizon, seed) keeps its
    last copy."""

    p = argparse.ArgumentParser(prog="python -m pipelines.studies.ltsf.report", description=main.__doc__)
    p.add_argument("--results", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--data", default="ETTh1.csv", help="the data's name, for the title")
    p.add_argument("--lookback", type=int, default=336)
    p.add_argument("--choose-on-val", nargs="+", metavar="MODEL", default=[],
                   help="add a table: per horizon, the one of these models with the lowest mean val MSE")
    args = p.parse_args(argv)
    rows: dict[tuple, dict[str, Any]] = {}
    for path in args.results:
        if not Path(path).is_file():
            raise SystemExit(f"error: {path}: no such results file")
        with open(path) as f:
            for r in csv.DictReader(f):
                rows[(r["model"], int(r["horizon"]), int(r["seed"]))] = r
    merged = list(rows.values())
    absent = sorted(set(args.choose_on_val) - {r["model"] for r in merged})
    if absent:
        raise SystemExit(f"error: --choose-on-val: no rows of {', '.join(absent)} in the results given")
    args.seeds = sorted({int(r["seed"]) for r in merged})
    args.configs = [r["model"] for r in merged]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in merged for k in r))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(merged)
    write_file(out / "results.csv", text.getvalue())  # whole files: a link there is replaced, not followed
    write_file(out / "summary.md", summary_markdown(merged, args, []))
    drawn = figures(merged, out, args.data, args.lookback)
    print(f"files: {out / 'results.csv'} {out / 'summary.md'} {' '.join(map(str, drawn))}")


if __name__ == "__main__":
    main()
