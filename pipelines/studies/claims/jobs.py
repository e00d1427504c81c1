"""The claims' children trained in worker processes (``--jobs N``) and the suite's cost plan (``--plan``).

``--jobs N`` (N > 1): before any experiment runs, every child the experiments will ask for
(``Experiment.children``, in run order) is handed to N spawned worker processes, one torch thread each,
which train it through the sweep runner (:func:`pipelines.studies.claims.context.fit_child`, i.e.
:func:`pipelines.eval.sweep.train_run`) into the same MLflow store, under the same parent run and with
the same run name and tags as the main process would. The experiments then run one after another in the
main process as before; :meth:`~pipelines.studies.claims.context.Context.train` waits for the worker's run
(sent back as bytes, tensors by value: metrics, module, datamodule, length sweep; see
:func:`~pipelines.studies.claims.context.fit_packed`) instead of training it, so an experiment's
own evaluation overlaps the training of the later ones. A child planned by several experiments is
trained once, by the first, and aliased by the others, as in one process. Every child starts from its
own seed, so the numbers are those of ``--jobs 1``.

``--plan`` prints, per experiment, the children it asks for (conditions × seeds), how many of them are
new (not trained by an earlier experiment of the run) and — with ``--measure`` — the CPU seconds of
its first new child, trained here with one torch thread: the cost of the suite before it runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pipelines.children import stop_pool, worker_pool
from pipelines.studies.claims.base import Experiment
from pipelines.studies.claims.context import Context, fit_child, fit_packed
from pipelines.studies.tables import md_table


class ChildPool:
    """``jobs`` spawned worker processes (one torch thread each) training planned children; started
    with the first child queued (none when nothing is trained)."""

    def __init__(self, jobs: int) -> None:
        self.jobs, self.executor = jobs, None

    def _pool(self) -> ProcessPoolExecutor:
        if self.executor is None:
            self.executor = worker_pool(self.jobs)
        return self.executor

    def _submit(self, kwargs: dict[str, Any]) -> Any:
        return self._pool().submit(fit_packed, kwargs)

    def submit(self, planned: Sequence[tuple[Experiment, Context]]) -> int:
        """Queue every new child of ``planned`` (experiment, its context), in run order; returns how
        many. The contexts share one ``pool`` (and ``cache``): each child is queued once."""
        queued = 0
        for experiment, ctx in planned:
            for child in experiment.children(ctx):
                key, kwargs = ctx.request(child)
                if (key, child.seed) in ctx.pool or (key, child.seed) in ctx.cache:
                    continue
                ctx.pool[key, child.seed] = (ctx.name, self._submit(kwargs))
                queued += 1
        return queued

    def terminate(self) -> None:
        """Stop the workers now (``SIGTERM``: a child in training marks its run KILLED), the queued
        children dropped: what a stopped main process does instead of waiting for them."""
        if self.executor is not None:
            stop_pool(self.executor)

    def close(self, cancel: bool = False) -> None:
        """Wait for the workers to finish (``cancel``: drop the children not started yet first)."""
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=cancel)


def cost_rows(planned: Sequence[tuple[Experiment, Context]], measure: bool) -> list[dict[str, Any]]:
    """Per experiment: children asked for, new ones, and (``measure``) one new child's CPU seconds."""
    seen: set[tuple[str, int]] = set()
    rows = []
    for experiment, ctx in planned:
        requests = [(child, *ctx.request(child)) for child in experiment.children(ctx)]
        new = [(child, kwargs) for child, key, kwargs in requests if (key, child.seed) not in seen]
        seen.update((key, child.seed) for child, key, _ in requests)
        labels = list(dict.fromkeys(child.label for child, *_ in requests))
        seeds = list(dict.fromkeys(child.seed for child, *_ in requests))
        cpu = math.nan
        if measure and new:
            print(f"[claims] measuring {ctx.name}: {new[0][0].label}, seed {new[0][0].seed}", flush=True)
            cpu = fit_child(new[0][1]).cpu_s
        rows.append({"name": ctx.name, "conditions": len(labels), "seeds": len(seeds),
                     "children": len(requests), "new": len(new), "cpu_per_child": cpu})
    return rows


def cost_table(rows: Sequence[dict[str, Any]], jobs: int) -> str:
    """The cost plan as Markdown: per experiment and in total, with the predicted wall time at ``jobs``
    workers on an idle machine (CPU / (0.95 · jobs); the main process's own evaluation not counted)."""
    body, total, unmeasured = [], 0.0, 0
    for r in rows:
        est = r["new"] * r["cpu_per_child"] if r["new"] else 0.0
        unmeasured += int(r["new"] > 0 and not math.isfinite(est))
        total += est if math.isfinite(est) else 0.0
        per = f"{r['cpu_per_child']:.0f}" if math.isfinite(r["cpu_per_child"]) else "—"
        body.append([r["name"], f"{r['conditions']} × {r['seeds']}", r["children"], r["new"], per,
                     f"{est / 60:.1f}" if math.isfinite(est) else "—"])
    children = sum(r["new"] for r in rows)
    body.append(["**total**", "", sum(r["children"] for r in rows), children, "", f"{total / 60:.1f}"])
    out = md_table(["experiment", "conditions × seeds", "children", "new (trained)", "CPU s / child",
                    "CPU min"], body)
    wall = total / (0.95 * max(1, jobs)) / 60
    if not any(math.isfinite(r["cpu_per_child"]) for r in rows):
        return out + f"\n{children} children to train; --measure shows CPU seconds per child.\n"
    out += (f"\n{children} children to train, {total / 60:.0f} CPU min measured"
            + (f" ({unmeasured} experiment(s) not measured)" if unmeasured else "")
            + f"; predicted wall with --jobs {jobs} on an idle machine ≈ {wall:.0f} min "
            "(training only; each experiment's own evaluation in the main process overlaps it). CPU s / "
            "child is the first new child's, which also draws the task's synthetic windows (later "
            "children of a seed reuse them).\n")
    return out
