"""The promoter benchmark: every set of a folder (or one pair of files), K folds × seeds, beside CNNProm.

Usage::

    python -m pipelines.studies.promoters --data ../shared/data/promoters --out outputs/promoters
    python -m pipelines.studies.promoters --data Ecoli_prom.fa Ecoli_non_prom.fa --quick
    make benchmark-promoters DATA=<folder or "pos.fa neg.fa"> [ARGS="--quick" | ARGS="--schemes none rope"]

The protocol (docs/promoters.md): stratified ``--folds``-fold cross-validation (default 5) repeated over
``--seeds`` (default 0 1 2; a seed draws its own folds), validation carved (stratified) from the training
folds, every record read whole. Each fold × seed is one child run of the training CLI on ``--config``
(default ``configs/dna_promoter.yaml``, the classification task with ``samples.class_fastas``), trained
by the sweep runner (:func:`pipelines.eval.sweep.train_run`) and tested once; the baselines
(:class:`~pipelines.tasks.dna.classify.ClassifyBaselines`) are fitted inside the same child on the same
folds. Every method reports test AUROC, AUPRC, and Sn, Sp, MCC at its own threshold of best validation
MCC. ``--quick``: fold 0 of the K and the first seed only (said in the table). ``--schemes a b …``:
the first config's encoding swapped for each ``configs/posenc/<name>.yaml`` (the encoding table).

One MLflow parent run per set (tag ``posenc.promoters=parent``) with its children; the first child of a
set registers its model with a card carrying CNNProm's published numbers. ``results.csv`` (a row per
method × fold × seed, written as each child finishes; ``--resume`` skips the children it has) and
``summary.md`` (:mod:`pipelines.studies.promoters.report`) go to ``--out`` (locked against a second
run writing there) and to every parent run.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pipelines.children import MAX_JOBS, stop_pool, worker_pool
from pipelines.console import configure, user_errors_exit
from pipelines.console.scrub import scrub_text
from pipelines.eval.evaluate import load_config
from pipelines.eval.sweep import config_key, read_layers, train_run
from pipelines.studies.compare.run import scheme_file, scheme_label
from pipelines.studies.promoters.report import (
    FIELDS,
    METRICS,
    methods,
    set_means,
    set_section,
    summary_markdown,
)
from pipelines.studies.promoters.sets import CNNPROM, PromoterSet, read_sets
from pipelines.studies.results_table import read_results
from pipelines.tracking.runlock import acquire
from pipelines.tracking.store import experiment_id, tracking_uri
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[3]
NAMESPACE = "posenc.promoters"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.promoters",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", required=True,
                   help="a folder of sets, or a positive and a negative FASTA")
    p.add_argument("--config", action="append", default=None,
                   help="task config(s), layered (default: configs/dna_promoter.yaml)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds; each draws its own folds")
    p.add_argument("--quick", action="store_true", help="fold 0 and the first seed only (said in the table)")
    p.add_argument("--schemes", nargs="*", default=[],
                   help="encodings (configs/posenc/<name>.yaml), a model each")
    p.add_argument("--max-epochs", type=int, default=None, help="override the config's trainer.max_epochs")
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu", "auto"))
    p.add_argument("--jobs", type=int, default=1,
                   help=f"children trained at once in worker processes (the Makefile's: {MAX_JOBS})")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (default: torch's)")
    p.add_argument("--experiment", default="posenc-promoters", help="MLflow experiment")
    p.add_argument("--out", default="outputs/promoters", help="folder for results.csv and summary.md")
    p.add_argument("--resume", action="store_true",
                   help="keep --out/results.csv and skip the children it has")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> list[Path]:
    """The config layers, after the checks that can fail before anything is read or trained."""
    if args.folds < 2:
        raise PosencError(f"--folds must be at least 2, got {args.folds}")
    if args.jobs < 1:
        raise PosencError(f"--jobs must be at least 1, got {args.jobs}")
    if len(set(args.seeds)) != len(args.seeds):
        raise PosencError(f"--seeds lists a seed twice: {args.seeds}")
    layers = [Path(c) for c in (args.config or [ROOT / "configs" / "dna_promoter.yaml"])]
    load_config([str(p) for p in layers])  # a missing or broken config: one line, now
    for name in args.schemes:
        scheme_file(name)
    return layers


def jobs(sets: list[PromoterSet], args: argparse.Namespace) -> list[tuple[PromoterSet, str, int, int]]:
    """(set, method, fold, seed) per child, in run order."""
    folds = [0] if args.quick else list(range(args.folds))
    seeds = args.seeds[:1] if args.quick else args.seeds
    return [(s, m, f, seed) for s in sets for seed in seeds for f in folds for m in methods(args)]


def child_overlay(pset: PromoterSet, method: str, fold: int, args: argparse.Namespace, config: dict[str, Any],
                  register: bool) -> dict[str, Any]:
    """The settings one child trains with over the config layers: the set's files, the fold, every
    record read whole, one device; the baselines only in the first method's children (the same folds);
    the registered model's card with the published numbers (``register``)."""
    length = pset.lengths[1]
    trainer: dict[str, Any] = {"accelerator": args.accelerator, "devices": 1, "enable_progress_bar": False}
    if args.max_epochs is not None:
        trainer["max_epochs"] = args.max_epochs
    if method != methods(args)[0]:
        trainer["callbacks"] = [c for c in (config.get("trainer") or {}).get("callbacks") or []
                                if not str((c or {}).get("class_path", "")).endswith("ClassifyBaselines")]
    return {"data": {"init_args": {
                "samples": {"class_fastas": {"promoter": str(pset.positive.resolve()),
                                             "non_promoter": str(pset.negative.resolve())},
                            "folds": args.folds, "fold": fold},
                "windows": {"seq_len": length, "eval_lengths": [length]}}},
            "trainer": trainer, "test_after_fit": True, "resume": False, "progress": False,
            "register": {"register": register, "name": f"promoters-{pset.name}", "published": pset.published,
                         "published_source": CNNPROM if pset.published else ""}}


def fold_counts(n: int, folds: int, fold: int) -> int:
    """Records of one class in test fold ``fold`` (dealt round-robin: ``fold_samples``)."""
    return len(range(fold, n, folds))


def rows_of(run: Any, pset: PromoterSet, method: str, fold: int, seed: int, folds: int,
            baselines: bool) -> list[dict[str, Any]]:
    """A child's rows: its model's metrics, and (``baselines``) each baseline's, as MLflow has them."""
    m, nan = run.metrics, float("nan")
    base = {"set": pset.name, "fold": fold, "seed": seed, "n_test_pos": fold_counts(pset.n_pos, folds, fold),
            "n_test_neg": fold_counts(pset.n_neg, folds, fold), "cpu_s": run.cpu_s, "wall_s": run.wall_s,
            "run_id": run.run_id}
    rows = [{**base, "method": method, **{k: m.get(f"test/{k}", nan) for k in METRICS}}]
    names = sorted({k[len("baseline/") : -len("_mcc")] for k in m
                    if k.startswith("baseline/") and k.endswith("_mcc")})
    if baselines:
        rows += [{**base, "method": b, **{k: m.get(f"baseline/{b}_{k}", nan) for k in METRICS}}
                 for b in names]
    return rows


def train_child(job: tuple[PromoterSet, str, int, int], layers: list[Path], args: argparse.Namespace,
                parent: str, register: bool) -> list[dict[str, Any]]:
    """Train one child (in this process or a ``--jobs`` worker): its rows."""
    pset, method, fold, seed = job
    configure(verbose=False, progress=False)
    scheme = [scheme_file(s) for s in args.schemes if scheme_label(s) == method]
    config = load_config([str(p) for p in [*layers, *scheme]])
    overlay = child_overlay(pset, method, fold, args, config, register)
    tags = {f"{NAMESPACE}.set": pset.name, f"{NAMESPACE}.method": method, f"{NAMESPACE}.fold": str(fold)}
    run = train_run([*layers, *scheme], overlay, seed, experiment=args.experiment, parent_run_id=parent,
                    run_name=f"{pset.name}-{method}-fold{fold}-seed{seed}", namespace=NAMESPACE,
                    key=config_key([read_layers([*layers, *scheme]), overlay]), tags=tags, reuse=False,
                    log_model=False)
    return rows_of(run, pset, method, fold, seed, args.folds, method == methods(args)[0])


def run_jobs(todo: list[tuple], layers: list[Path], args: argparse.Namespace, parents: dict[str, str],
             registered: set[str]) -> Iterator[tuple[tuple, list[dict[str, Any]]]]:
    """Each child with its rows: in this process (``--jobs 1``) or in worker processes, in order."""
    first = {}
    for job in todo:  # each set's first child registers its model (once per set and run)
        first.setdefault(job[0].name, job)
    calls = [(job, (job, layers, args, parents[job[0].name], first[job[0].name] is job
                    and job[0].name not in registered)) for job in todo]
    if args.jobs == 1:
        yield from ((job, train_child(*call)) for job, call in calls)
        return
    pool = worker_pool(args.jobs, args.threads or 1)
    try:
        futures = [(job, pool.submit(train_child, *call)) for job, call in calls]
        for job, future in futures:
            yield job, future.result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def append_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    new = not path.is_file()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def progress_line(job: tuple, rows: list[dict[str, Any]]) -> str:
    pset, method, fold, seed = job
    own = rows[0]
    best = max(rows[1:], key=lambda r: r["mcc"], default=None)
    other = f"; best baseline {best['method']} MCC {best['mcc']:.3f}" if best else ""
    return (f"{pset.name} {method} fold {fold} seed {seed}: MCC {own['mcc']:.3f} "
            f"AUROC {own['auroc']:.3f}{other} ({own['cpu_s']:.0f} CPU s, {own['wall_s']:.0f} s wall)")


def open_parents(client: Any, sets: list[PromoterSet], args: argparse.Namespace, argv: Sequence[str]) -> dict:
    exp_id = experiment_id(client, args.experiment)
    parents = {}
    for s in sets:
        parents[s.name] = client.create_run(exp_id, run_name=f"promoters-{s.name}",
                                            tags={NAMESPACE: "parent"}).info.run_id
        for key, value in (("command", " ".join(["python -m pipelines.studies.promoters", *argv])[:500]),
                           ("positive", s.positive.name), ("negative", s.negative.name), ("n_pos", s.n_pos),
                           ("n_neg", s.n_neg), ("folds", args.folds),
                           ("seeds", " ".join(map(str, args.seeds))), ("quick", args.quick)):
            client.log_param(parents[s.name], key, value)
    return parents


def run(argv: Sequence[str] | None = None) -> Path:
    import mlflow  # heavy: mlflow, loaded only when tracking

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    configure(verbose=False, progress=False)
    layers = check_args(args)
    sets = read_sets(args.data, args.folds)
    out = Path(args.out)
    lock = acquire(out)  # one benchmark writing --out at a time
    try:
        results = out / "results.csv"
        rows = read_results(results, FIELDS, integers=("fold", "seed", "n_test_pos", "n_test_neg"),
                            text=("set", "method", "run_id")) if args.resume and results.is_file() else []
        if not args.resume and results.exists():
            results.unlink()
        have = {(r["set"], r["method"], r["fold"], r["seed"]) for r in rows}
        todo = [j for j in jobs(sets, args) if (j[0].name, j[1], j[2], j[3]) not in have]
        client = mlflow.MlflowClient(tracking_uri())
        parents = open_parents(client, sets, args, argv)
        registered = {r["set"] for r in rows if r["fold"] == 0}  # a resumed set registered its model before
        for job, new in run_jobs(todo, layers, args, parents, registered):
            append_rows(results, new)
            rows += new
            print(progress_line(job, new), file=sys.stderr, flush=True)
        finish(client, parents, sets, rows, args, out)
    finally:
        lock.release()
    return out


def finish(client: Any, parents: dict[str, str], sets: list[PromoterSet], rows: list[dict[str, Any]],
           args: argparse.Namespace, out: Path) -> None:
    """summary.md, and both files, the set's summary and its means on every parent run."""
    summary = out / "summary.md"
    summary.write_text(summary_markdown(sets, rows, args))
    for s in sets:
        parent = parents[s.name]
        for f in (out / "results.csv", summary):
            if f.is_file():
                client.log_artifact(parent, str(f))
        client.set_tag(parent, "mlflow.note.content", set_section(s, rows, args)[:5000])
        for key, value in set_means(s, rows).items():
            client.log_metric(parent, key, value)
        client.set_terminated(parent, "FINISHED")
    print(summary.read_text())
    print(f"files: {out / 'results.csv'} {summary}\nMLflow parent runs {' '.join(parents.values())} in "
          f"{scrub_text(client.tracking_uri)}")


def main(argv: Sequence[str] | None = None) -> None:
    with user_errors_exit():
        run(argv)


__all__ = ["main", "run"]
