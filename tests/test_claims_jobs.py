"""``python -m pipelines.studies.claims --jobs N`` and ``--plan``: children trained in worker processes
give the same table as one process; the cost plan counts every experiment's children before training."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from tests.helpers import flat_dm, workdir_with_store

GATE = "gate: {control: none, min_gain: 0.2, max_width: 0.5}\n"
TINY = "{model: {init_args: {net: {d_model: 16, n_heads: 2}}}, data: {init_args: {eval_lengths: [32, 64]}}}"


def _configs(folder):
    """Two tiny experiments on the retrieval LM; the second shares its ``none`` children with the first."""
    folder.mkdir()
    head = ("class_path: pipelines.studies.claims.controlled.ControlledComparison\ninit_args:\n"
            "  claim_text: a tiny claim\n  task: configs/experiments/tasks/copy_lm.yaml\n"
            "  metric: bits_per_base\n  higher_is_better: false\n  seeds: [0, 1]\n  control: none\n")
    (folder / "first.yaml").write_text(
        "claim: '1'\nprimary: {a: rope, b: none, min_effect: 0.05}\n" + GATE + head
        + f"  conditions:\n    rope: {{scheme: rope, overrides: {TINY}}}\n"
        f"    none: {{scheme: none, overrides: {TINY}}}\n")
    (folder / "second.yaml").write_text(
        "claim: '2'\nprimary: {a: sinusoidal, b: none, min_effect: 0.05}\n" + GATE + head
        + f"  conditions:\n    sinusoidal: {{scheme: sinusoidal, overrides: {TINY}}}\n"
        f"    none: {{scheme: none, overrides: {TINY}}}\n")
    return folder


def _run(tmp_path, jobs: int):
    """Run both experiments under ``--smoke`` with ``jobs`` workers in a store of their own; returns
    (the table without its time column and totals, each result without times and run ids, child runs)."""
    import mlflow

    from pipelines.studies.claims.runner import run

    root = tmp_path / f"jobs{jobs}"
    root.mkdir()
    folder = _configs(root / "configs")
    with workdir_with_store(root):
        results = run(["--configs", str(folder), "--smoke", "--out", "res", "--jobs", str(jobs)])
        client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
        exp = client.get_experiment_by_name("posenc-claims")
        runs = client.search_runs([exp.experiment_id])
    table = (root / "res/claims.md").read_text()
    rows = [re.sub(r"\| [\d.]+ / [\d.]+ \|$", "|", row) for row in table.splitlines() if row.startswith("| ")]
    saved = []
    for r in results:
        d = json.loads((root / "res" / r.name / "result.json").read_text())
        saved.append({k: v for k, v in d.items() if k not in ("wall_s", "cpu_s", "children")})
    kids = [r for r in runs if r.data.tags.get("posenc.claims") != "parent"]
    children = sorted((r.info.run_name, "posenc.claims.trained_in" in r.data.tags,
                       r.data.metrics.get("val/bits_per_base")) for r in kids)
    return rows, saved, children


@pytest.mark.slow
def test_two_workers_give_the_table_of_one_process(tmp_path, capfd):
    one, two = _run(tmp_path, 1), _run(tmp_path, 2)
    assert "not planned" not in capfd.readouterr().err  # every child was trained by a worker
    assert two[0] == one[0]  # the table, row for row (time column aside)
    assert two[1] == one[1]  # every measured number, verdict and detail
    assert two[2] == one[2]  # the same child runs, the shared ones aliased in the second experiment
    assert sum(aliased for _, aliased, _ in one[2]) == 2  # "none" at seeds 0 and 1
    assert all(loss is not None for _, aliased, loss in one[2] if not aliased)


def test_plan_counts_children_and_trains_nothing(tmp_path, capsys):
    from pipelines.studies.claims.runner import run

    folder = _configs(tmp_path / "configs")
    with workdir_with_store(tmp_path):
        assert run(["--configs", str(folder), "--plan", "--out", "res"]) == []
    plan = (tmp_path / "res/plan.md").read_text()
    assert "| first | 2 × 2 | 4 | 4 |" in plan  # rope and none, seeds 0 and 1: all new
    assert "| second | 2 × 2 | 4 | 2 |" in plan  # none is the first experiment's: only sinusoidal is new
    assert "6 children to train" in plan and plan in capsys.readouterr().out
    assert not (tmp_path / "res/first").exists()  # nothing ran


def test_quick_plan_has_fewer_children_than_the_full_one(tmp_path):
    from pipelines.studies.claims.runner import run

    with workdir_with_store(tmp_path):
        run(["--plan", "--out", "full"])
        run(["--plan", "--quick", "--out", "quick"])
    total = {k: int(re.search(r"(\d+) children to train", (tmp_path / k / "plan.md").read_text())[1])
             for k in ("full", "quick")}
    assert 0 < total["quick"] < total["full"]
    quick = (tmp_path / "quick/plan.md").read_text()
    assert "| periodic_lm |" in (tmp_path / "full/plan.md").read_text() and "| periodic_lm |" not in quick
    assert "| order_task | 6 × 3 |" in quick  # three seeds


def test_a_quick_key_that_is_not_a_boolean_is_a_one_line_error(tmp_path):
    from pipelines.studies.claims.runner import read_config
    from posenc import PosencError

    path = tmp_path / "x.yaml"
    path.write_text("claim: '1'\nquick: sometimes\nclass_path: a.B\n")
    with pytest.raises(PosencError, match="x.yaml: quick must be true or false"):
        read_config(path)


@pytest.mark.parametrize("args, message", [(["--jobs", "0"], "--jobs: expected at least 1, got 0"),
                                           (["--measure"], "--measure: only with --plan")])
def test_bad_jobs_options_are_one_line_errors(args, message, capsys):
    from pipelines.studies.claims.runner import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code != 0 and message in capsys.readouterr().err


def test_synthetic_windows_are_drawn_once_per_process_and_unchanged(tmp_path):
    from datamodules.synthetic.datamodule import SyntheticMotifDataModule
    from pipelines.studies.claims.order_data import OrderDataModule

    with workdir_with_store(tmp_path):
        order = flat_dm(OrderDataModule, seq_len=16, batch_size=8, samples_per_epoch=64, eval_samples=64,
                        seed=3)
    motif = flat_dm(SyntheticMotifDataModule, seq_len=32, batch_size=8, samples_per_epoch=64, eval_samples=64,
                    seed=3)
    for dm in (order, motif):
        ds = dm.test_dataloader()[0].dataset
        first, again = ds[5], dm.test_dataloader()[0].dataset[5]  # a new loader: the memo, not a copy
        assert first["tokens"] is again["tokens"]
        fresh = ds._draw(5) if dm is order else ds._draw(5, dm.test_region)
        assert torch.equal(first["tokens"], fresh["tokens"]) and torch.equal(first["label"], fresh["label"])
        other = flat_dm(type(dm), **{**dm.hparams, "seed": 4}) if dm is motif else None
        if other is not None:  # another seed: other windows
            assert not torch.equal(other.test_dataloader()[0].dataset[5]["tokens"], first["tokens"])


def test_a_worker_run_is_its_planners_child_an_alias_elsewhere_and_a_dead_worker_one_line(tmp_path):
    """The fast twin of the two-worker run: how ``Context.train`` takes a worker's (finished) run."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    import mlflow

    from pipelines.eval.sweep import TrainedRun
    from pipelines.studies.claims.context import EXPERIMENT, Child, Context, pack
    from pipelines.tracking.store import experiment_id
    from posenc import PosencError

    with workdir_with_store(tmp_path) as root:
        client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
        exp = experiment_id(client, EXPERIMENT)
        trained = client.create_run(exp, run_name="a:rope:seed0").info.run_id  # what a worker logged
        client.log_metric(trained, "test/acc", 0.75)
        shared = Context("", client, exp, "", root)
        a, b = (Context(n, client, exp, client.create_run(exp, run_name=n).info.run_id, root / n,
                        cache=shared.cache, pool=shared.pool, workers=True) for n in ("a", "b"))
        child = Child("configs/experiments/tasks/order.yaml", "rope", 0, "rope")
        done = Future()
        done.set_result(pack(TrainedRun(trained, 0, "trained", {"test/acc": 0.75}, cpu_s=12.0)))
        a.pool[a.request(child)[0], 0] = ("a", done)
        assert a.fit(child).run_id == trained and a.children == [trained] and a.pooled_cpu_s == 12.0
        assert not a.pool  # taken
        b.fit(Child(child.task, "rope", 0, "rope again"))  # the same training asked for by b: an alias
        alias = client.get_run(b.children[0]).data
        assert alias.tags["posenc.claims.trained_in"] == trained and alias.metrics["test/acc"] == 0.75
        assert b.pooled_cpu_s == 0.0
        dead = Future()
        dead.set_exception(BrokenProcessPool("terminated abruptly"))
        other = Child(child.task, "alibi", 0, "alibi")
        a.pool[a.request(other)[0], 0] = ("a", dead)
        with pytest.raises(PosencError, match="a:alibi:seed0: its --jobs worker process died"):
            a.fit(other)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd (Linux)")
def test_a_worker_run_crosses_the_pool_pipe_as_bytes_and_holds_no_descriptor():
    """Issue 39's ``--jobs`` crash: sent as an object, a child's tensors crossed the pool's pipe
    (multiprocessing's pickler with torch's reductions) as shared memory, each holding a file descriptor
    in the main process for as long as the suite kept the child; packed, they cross as bytes."""
    from multiprocessing.reduction import ForkingPickler

    from pipelines.eval.sweep import TrainedRun
    from pipelines.studies.claims.context import pack, unpack

    def child() -> TrainedRun:
        net = torch.nn.Sequential(*(torch.nn.Linear(3, 3) for _ in range(20)))  # 40 tensors
        table = torch.arange(12.0)
        return TrainedRun("r", 0, "trained", module=net, sweep=(table, table[4:]))  # a view of it

    def through_pipe(obj):  # what the pool does to a worker's result
        return ForkingPickler.loads(ForkingPickler.dumps(obj))

    before = _open_descriptors()
    kept = unpack(through_pipe(pack(child())))
    assert _open_descriptors() - before < 5
    assert not any(t.is_shared() for t in kept.module.state_dict().values())
    table, view = kept.sweep
    assert view.untyped_storage().data_ptr() == table.untyped_storage().data_ptr()  # still one storage
    assert torch.equal(view, torch.arange(4.0, 12.0))
    old = through_pipe(child())  # the object itself, as before the fix: one descriptor per tensor
    assert _open_descriptors() - before >= 40 and old.module[0].weight.is_shared()


@pytest.mark.slow
def test_a_child_trained_in_a_worker_arrives_with_its_tensors_in_this_process(tmp_path):
    """The same through a real worker: :class:`ChildPool` trains one tiny child, :meth:`Context.fit`
    takes it, and none of its tensors is in shared memory (before the fix every one was)."""
    import mlflow

    from pipelines.studies.claims.context import Context
    from pipelines.studies.claims.jobs import ChildPool
    from pipelines.studies.claims.runner import open_experiment, parse_args
    from pipelines.tracking.store import experiment_id

    folder = _configs(tmp_path / "configs")
    with workdir_with_store(tmp_path) as root:
        client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
        exp = experiment_id(client, "posenc-claims")
        suite = Context("", client, exp, "", root)  # the child cache and pool the suite shares
        planned = open_experiment("first", folder / "first.yaml", client, exp, root / "res",
                                  parse_args(["--smoke", "--jobs", "2"]), suite)
        experiment, ctx = planned
        pool = ChildPool(1)
        try:
            assert pool.submit([planned]) == 4
            before = _open_descriptors()
            found = ctx.fit(experiment.children(ctx)[0])
            tensors = list(found.module.state_dict().values())
            assert len(tensors) > 10 and not any(t.is_shared() for t in tensors)
            assert _open_descriptors() - before < len(tensors)
        finally:
            pool.close(cancel=True)
