"""Run the claim experiments: one MLflow parent run per experiment in ``posenc-claims``, a results
folder, and the claims table.

Usage::

    python -m pipelines.studies.claims                     # every configs/experiments/*.yaml, in claim order
    python -m pipelines.studies.claims --only order_task   # one (or several) by name
    python -m pipelines.studies.claims --smoke             # two training batches per child: a wiring check
    python -m pipelines.studies.claims --docs docs/claims.md # also write the write-up (table + details)
    python -m pipelines.studies.claims --jobs 2              # children trained by 2 worker processes
    python -m pipelines.studies.claims --plan [--measure]    # the cost plan: children per experiment
    make experiments [ONLY=order_task]

Each experiment's wall time and CPU seconds (``resource.getrusage`` of this process, plus the CPU seconds
of its children trained in workers) are logged on its parent run and in the table; an idle 2-core estimate
is CPU s / 1.9.
"""

from __future__ import annotations

import argparse
import math
import re
import resource
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import yaml

from pipelines.children import MAX_JOBS, default_jobs
from pipelines.console import user_errors_exit
from pipelines.console.scrub import scrub_text
from pipelines.safety import add_trust_args, apply_trust_args
from pipelines.studies.claims.base import ClaimResult, Experiment
from pipelines.studies.claims.context import EXPERIMENT, ROOT, Context
from pipelines.studies.claims.gates import Gate, parse_gate
from pipelines.studies.claims.jobs import ChildPool, cost_rows, cost_table
from pipelines.studies.claims.judge import CLAIM_SEEDS, INCONCLUSIVE, parse_primary
from pipelines.studies.claims.render import render_docs, store
from pipelines.studies.claims.report import (
    DRAFT,
    claims_markdown,
    pinned_at_start,
    provenance,
    recheck,
    refuse_dirty,
    started,
    summary_table,
)
from pipelines.tracking.failure import Terminated, stop_on_sigterm
from pipelines.tracking.store import experiment_id, tracking_uri
from posenc import PosencError
from posenc.registry import import_class

CONFIG_DIR = ROOT / "configs" / "experiments"


def idle_factor(threads: int) -> float:
    """CPU seconds per wall second on an idle 2-core machine: 1 for one thread, 1.9 for two."""
    return 1.0 if threads <= 1 else 1.9


def experiment_configs(folder: Path = CONFIG_DIR) -> dict[str, Path]:
    """``{name: path}`` of the experiment configs in ``folder``, in claim order."""
    found = {}
    for path in folder.glob("*.yaml"):
        found[path.stem] = (str(read_config(path).get("claim", "99")), path)
    return {name: p for name, (_, p) in sorted(found.items(), key=lambda kv: (_claim_key(kv[1][0]), kv[0]))}


def _claim_key(claim: str) -> tuple[int, str]:
    digits = "".join(ch for ch in claim if ch.isdigit())
    return int(digits or 99), claim


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise PosencError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or "class_path" not in data:
        raise PosencError(f"{path}: expected a mapping with class_path (and init_args, claim)")
    if not isinstance(data.get("quick", True), bool):
        raise PosencError(f"{path}: quick must be true or false (false: --quick skips this experiment)")
    return data


def quick_skips(configs: dict[str, Path]) -> list[str]:
    """The experiments ``--quick`` leaves out: those whose config says ``quick: false``."""
    return [name for name, path in configs.items() if read_config(path).get("quick", True) is False]


def build(path: Path) -> Experiment:
    """The experiment of a config: ``class_path`` built with ``init_args`` (and its declared
    ``primary`` checked: every claim names its primary comparison before anything runs)."""
    data = read_config(path)
    if "primary" not in data:
        raise PosencError(f"{path}: no 'primary' (the claim's one primary comparison, declared before "
                          "the run: {a: <label>, b: <label>, length: <int>} or a sentence)")
    parse_primary(data["primary"], str(path))
    cls = import_class(str(data["class_path"]), Experiment, "experiment class")
    declared_gate(data, path, cls)
    try:
        return cls(**(data.get("init_args") or {}))
    except TypeError as exc:
        raise PosencError(f"{path}: init_args do not fit {cls.__name__} ({exc})") from None


def declared_gate(data: dict[str, Any], path: Path, cls: type[Experiment]) -> Gate | None:
    """The config's gate: required unless the experiment is exempt (trains nothing or measures an exact
    identity), refused on an exempt one."""
    if cls.power_exempt:
        if "gate" in data:
            raise PosencError(f"{path}: a gate on an exempt experiment ({cls.power_exempt})")
        return None
    if "gate" not in data:
        raise PosencError(f"{path}: no 'gate' (declared before the run: {{control: <position-free arm>, "
                          "min_gain: <number>, max_width: <number>})")
    return parse_gate(data["gate"], str(path))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def open_experiment(
    name: str, path: Path, client: Any, exp_id: str, out: Path, args: argparse.Namespace, shared: Context,
) -> tuple[Experiment, Context]:
    """The experiment of ``path`` and its context: a parent run of its own (none under ``--plan``:
    ``shared.parent`` is used) with the config, flags and declared primary comparison logged on it;
    ``shared`` gives the suite's child cache and worker pool."""
    experiment = build(path)
    config = read_config(path)
    number, primary = str(config.get("claim", "")), parse_primary(config["primary"], str(path))
    parent = shared.parent
    if not args.plan:
        tags = {"posenc.claims": "parent", "posenc.claims.experiment": name}
        parent = client.create_run(exp_id, run_name=f"claim-{number}-{name}", tags=tags).info.run_id
        config = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else scrub_text(str(path))
        flags = (("smoke", args.smoke), ("quick", args.quick), ("jobs", args.jobs))
        for key, value in (("config", config), *flags,
                           ("primary", primary if isinstance(primary, str) else primary.text())):
            client.log_param(parent, key, str(value))
    gate = declared_gate(read_config(path), path, type(experiment))
    ctx = Context(name, client, exp_id, parent, out / name, args.smoke, shared.cache, quick=args.quick,
                  primary=primary, gate=gate, pool=shared.pool, workers=args.jobs > 1 and not args.plan,
                  pilot_seeds=args.seeds)
    return experiment, ctx


def run_one(experiment: Experiment, ctx: Context, path: Path, factor: float = 1.0) -> ClaimResult:
    """Run one experiment under its parent run; wall and CPU seconds (this process's and, with
    ``--jobs``, its children's in the workers) logged on the parent; the verdict passed through the
    power gate (:func:`gated`)."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    try:
        result = experiment.run(ctx)
    except BaseException:
        ctx.client.set_terminated(ctx.parent, "FAILED")
        raise
    result.wall_s, result.cpu_s = time.perf_counter() - wall0, cpu_seconds() - cpu0 + ctx.pooled_cpu_s
    config = read_config(path)
    result.name, result.claim, result.number = ctx.name, experiment.claim, str(config.get("claim", ""))
    result.short = " ".join(str(config.get("short", "")).split())
    if config.get("neighbour"):  # a neighbour of its source's claim says so in its own row
        result.claim = f"*Neighbour of the source's claim* ({' '.join(str(config['neighbour']).split())}): " \
                       f"{result.claim}"
    gated(result, experiment)
    note = config.get("note")
    if note:
        result.details = f"{result.details}\n**Note.** {' '.join(str(note).split())}\n"
    result.command = f"make experiments ONLY={ctx.name}"
    result.children = [c for c in ctx.children if c]
    finish(ctx.client, ctx.parent, ctx, result, factor)
    return result


def finish(client: Any, parent: str, ctx: Context, result: ClaimResult, factor: float) -> None:
    """The result's files and numbers onto the parent run (artifacts, metrics, verdict tags); a line
    on stderr."""
    result.to_json(ctx.out / "result.json")
    (ctx.out / "details.md").write_text(claims_markdown([result], figures_dir=None))
    for f in [ctx.out / "result.json", ctx.out / "details.md", *map(Path, result.figures)]:
        client.log_artifact(parent, str(f))
    metrics = {
        **result.metrics,
        **({"power": result.power} if result.power is not None and math.isfinite(result.power) else {}),
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "idle_wall_estimate_s": result.cpu_s / factor,
    }
    for k, v in metrics.items():
        client.log_metric(parent, metric_name(k), float(v))
    client.set_tag(parent, "posenc.claims.holds", result.holds)
    client.set_tag(parent, "posenc.claims.raw_holds", result.raw_holds)
    client.set_terminated(parent, "FINISHED")
    print(
        f"[claims] {ctx.name}: holds={result.holds} ({result.why or 'rule: ' + result.raw_holds}; "
        f"{result.power_text or 'no power'}); {result.measured}\n  wall {result.wall_s:.0f} s, "
        f"CPU {result.cpu_s:.0f} s (idle ≈ {result.cpu_s / factor:.0f} s)",
        file=sys.stderr,
    )


def gated(result: ClaimResult, experiment: Experiment) -> None:
    """Keep the rule's verdict in ``raw_holds``; a claim that is not exempt and misses its declared gate
    (or did not measure it) reports ``inconclusive``, with the reason in ``why``."""
    result.raw_holds = result.holds
    if type(experiment).power_exempt:
        result.gate = f"no gate: {type(experiment).power_exempt}"
        return
    if result.gate_failed is None:
        result.gate_failed = "the gate was not measured"
    if result.gate_failed:
        result.holds, result.why = INCONCLUSIVE, f"gate missed: {result.gate_failed}"


def metric_name(key: str) -> str:
    """``key`` with every character MLflow refuses in a metric name replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_\-./ :]", "_", key).replace(" ", "_")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.studies.claims",
                                description=__doc__.splitlines()[0])
    p.add_argument(
        "--only", nargs="+", default=None, help="experiment names (configs/experiments/<name>.yaml)"
    )
    p.add_argument("--smoke", action="store_true", help="tiny budget: checks the wiring, measures nothing")
    p.add_argument("--quick", action="store_true",
                   help="a quick look: 3 seeds instead of 5, half the training steps, the experiments marked "
                   "'quick: false' left out; the table says its verdicts are provisional")
    p.add_argument("--out", default=None, help="results folder (default outputs/claims/<UTC time>)")
    p.add_argument("--docs", default=None, help="also write the write-up here (e.g. docs/claims.md)")
    p.add_argument("--configs", default=str(CONFIG_DIR), help="folder of experiment configs")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the models are tiny, and on a loaded machine two "
        "spinning threads can be many times slower than one)",
    )
    p.add_argument("--jobs", type=int, default=default_jobs(),
                   help=f"worker processes training the children, one torch thread each (default "
                   f"{default_jobs()}: the CPUs here, at most {MAX_JOBS}; 1: everything in this process)")
    p.add_argument("--plan", action="store_true",
                   help="print the cost plan (children per experiment) and exit without training")
    p.add_argument("--measure", action="store_true",
                   help="with --plan: train one new child per experiment here and show its CPU seconds")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--allow-dirty", action="store_true",
                   help=f"run from a tree with uncommitted changes: a draft, marked {DRAFT!r} in the output "
                   "(a published run needs a clean tree: its commit is recorded when it starts)")
    p.add_argument("--pinned", default=None, metavar="COMMIT",
                   help="a published run: refuse unless this checkout is at COMMIT with a clean tree, and "
                   "check both again when the last experiment ends (make publish-claims runs it from a "
                   "worktree)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="pilot seeds for every experiment instead of its declared ones (to size a testbed "
                   "on seeds that are not reported); the table says PILOT")
    add_trust_args(p)
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs: expected at least 1, got {args.jobs}")
    if args.measure and not args.plan:
        p.error("--measure: only with --plan")
    if args.seeds and set(args.seeds) & set(CLAIM_SEEDS):
        p.error(f"--seeds: pilot seeds must not be the reported ones {list(CLAIM_SEEDS)}")
    return args


def run(argv: Sequence[str] | None = None) -> list[ClaimResult]:
    import mlflow  # heavy: mlflow, loaded only when tracking

    args = parse_args(argv)
    apply_trust_args(args)  # before any config is read; the workers inherit it
    torch.set_num_threads(max(1, args.threads))
    configs = experiment_configs(Path(args.configs))
    if args.list:
        for name, path in configs.items():
            print(f"{name:<24} {read_config(path).get('claim', '')}: {build(path).claim}")
        return []
    skipped = quick_skips(configs) if args.quick and not args.only else []
    names = args.only or [n for n in configs if n not in skipped]
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise PosencError(f"unknown experiment(s) {unknown}; known: {' '.join(configs)}")
    for n in names:
        build(configs[n])  # every config instantiates before anything is trained
    start = started()  # the commit the run's rules were frozen in, recorded before anything trains
    refuse_dirty(args)
    sha0 = pinned_at_start(args)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out or Path("outputs") / "claims" / stamp)
    client = mlflow.MlflowClient(tracking_uri())
    exp_id = experiment_id(client, EXPERIMENT)
    if args.plan:
        return plan(names, configs, client, exp_id, out, args)
    shared = Context("", client, exp_id, "", out)
    planned = [open_experiment(n, configs[n], client, exp_id, out, args, shared) for n in names]
    wall0, cpu0, factor = time.perf_counter(), cpu_seconds(), idle_factor(max(args.threads, args.jobs))
    results = run_all(planned, [configs[n] for n in names], args.jobs, factor)
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0  # the workers have exited: counted
    where = provenance(start)
    table = summary_table(results, wall, cpu, args.smoke, factor, args.threads, quick=args.quick,
                          jobs=args.jobs, skipped=skipped, where=where, pilot=args.seeds)
    (out / "claims.md").write_text(table)
    print(table)
    recheck(args, sha0)  # nothing may have changed the code under the run: no docs from a moved tree
    if args.docs:
        suite = dict(wall=wall, cpu=cpu, smoke=args.smoke, factor=factor, threads=args.threads,
                     quick=args.quick, jobs=args.jobs, skipped=skipped, where=where, pilot=args.seeds)
        write_docs(Path(args.docs), results, suite)
    print(f"results: {out}  (MLflow experiment {EXPERIMENT} in {scrub_text(client.tracking_uri)})")
    return results


def run_all(planned: list[tuple[Experiment, Context]], paths: list[Path], jobs: int,
            factor: float) -> list[ClaimResult]:
    """Run the experiments in order, their children trained by ``jobs`` workers when ``jobs`` > 1
    (queued before the first runs); on a failure the parents not run yet are marked KILLED."""
    results: list[ClaimResult] = []
    workers = ChildPool(jobs) if jobs > 1 else None
    try:
        if workers is not None:
            print(f"[claims] {workers.submit(planned)} children queued for {jobs} workers", file=sys.stderr)
        for (experiment, ctx), path in zip(planned, paths, strict=True):
            results.append(run_one(experiment, ctx, path, factor))
    except BaseException:
        if workers is not None:  # stopped or failed: the workers stop too, never left training
            workers.terminate()
        for _, ctx in planned[len(results) + 1:]:
            ctx.client.set_terminated(ctx.parent, "KILLED")
        raise
    finally:
        if workers is not None:
            workers.close(cancel=True)
    return results


def plan(names: list[str], configs: dict[str, Path], client: Any, exp_id: str, out: Path,
         args: argparse.Namespace) -> list[ClaimResult]:
    """``--plan``: the cost table (``--measure``: one child per experiment trained, under a parent run
    ``cost-plan``), printed and written to ``<out>/plan.md``; nothing else runs."""
    parent = ""
    if args.measure:
        tags = {"posenc.claims": "cost-plan"}
        parent = client.create_run(exp_id, run_name="cost-plan", tags=tags).info.run_id
    shared = Context("", client, exp_id, parent, out)
    planned = [open_experiment(n, configs[n], client, exp_id, out, args, shared) for n in names]
    try:
        table = cost_table(cost_rows(planned, args.measure), args.jobs)
    finally:
        if parent:
            client.set_terminated(parent)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.md").write_text(table)
    print(table)
    return []


def write_docs(path: Path, results: list[ClaimResult], suite: dict[str, Any]) -> None:
    """The write-up: figures copied to ``docs/figures``, the run's results stored beside the write-up
    (:func:`~pipelines.studies.claims.render.store`), and the write-up (and the claims block of
    ``results.md`` beside it, where it has one) generated from what was stored — never by hand."""
    figures = path.parent / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    for r in results:
        moved = []
        for f in r.figures:
            target = figures / f"claims_{Path(f).name}"
            shutil.copyfile(f, target)
            moved.append(str(target.relative_to(path.parent)))
        r.figures = moved
    store(path, results, suite)
    render_docs(path)


def main(argv: Sequence[str] | None = None) -> None:
    """The command; SIGTERM stops it (its workers too, see :func:`run_all`): one line, exit 143."""
    with user_errors_exit():
        try:
            with stop_on_sigterm():
                run(argv)
        except Terminated as exc:
            print(f"error: stopped by signal {signal.Signals(exc.signum).name}", file=sys.stderr)
            raise SystemExit(exc.code) from None
