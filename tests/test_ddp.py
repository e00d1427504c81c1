"""Distributed data parallel on CPU: two processes (gloo).

Fast: the samplers (disjoint training shards whose union is the single-process draw, unpadded
evaluation blocks), a real two-process gloo group reducing metrics exactly, the compare launcher's
decision. Slow (``make test-all``): a 2-process ``fit`` through the CLI — one MLflow run, no
traceback on any rank, Markov baselines logged once, each rank on its own windows, test and
validation metrics equal to a single process on the same checkpoint — then ``kill -9`` of the
launcher and a resume that ends with the metrics of the uninterrupted run, and a ``compare`` whose
child trains with DDP.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch

from datamodules.sampling import EpochSampler, ShardSampler, draw_epoch, eval_shard
from posenc import PosencError

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------- samplers
@pytest.mark.parametrize(("n", "total", "world"), [(10_000, 96, 2), (50, 120, 3), (7, 7, 2)])
def test_epoch_sampler_shards_are_disjoint_and_make_up_the_single_process_epoch(n, total, world):
    for epoch in (0, 1):
        one = EpochSampler(n, total, seed=3)
        one.set_epoch(epoch)
        shards = []
        for rank in range(world):
            s = EpochSampler(n, total, seed=3, rank=rank, world_size=world)
            s.set_epoch(epoch)
            shards.append(list(s))
            assert len(shards[-1]) == len(s) == total // world  # every rank runs as many batches
        positions = [list(range(r, (total // world) * world, world)) for r in range(world)]
        assert [[list(one)[i] for i in pos] for pos in positions] == shards
        if total <= n:  # distinct within an epoch, so no window is on two ranks
            flat = [i for s in shards for i in s]
            assert len(set(flat)) == len(flat)
    a, b = EpochSampler(n, total, seed=3), EpochSampler(n, total, seed=3)
    b.set_epoch(1)
    assert list(a) != list(b) and list(a) == list(EpochSampler(n, total, seed=3))  # seeded, new per epoch


def test_epoch_draw_without_replacement_scales_to_a_large_genome():
    idx = draw_epoch(3_000_000_000, 8192, seed=0, epoch=5)  # no permutation of 3e9 items is built
    assert len(np.unique(idx)) == 8192 and idx.max() < 3_000_000_000
    assert np.array_equal(idx, draw_epoch(3_000_000_000, 8192, seed=0, epoch=5))


def test_shard_sampler_partitions_in_order_without_repeats():
    for n, world in ((10, 3), (9, 2), (4, 4)):
        blocks = [list(ShardSampler(n, r, world)) for r in range(world)]
        assert [i for b in blocks for i in b] == list(range(n))
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
    with pytest.raises(PosencError, match="3 test windows cannot be shared by 4 processes"):
        ShardSampler(3, 0, 4, what="test windows")


def test_eval_loaders_are_sharded_only_while_the_trainer_evaluates():
    t = SimpleNamespace(global_rank=1, world_size=2, testing=False, validating=False, sanity_checking=False)
    assert eval_shard(t) == (0, 1) and eval_shard(None) == (0, 1)  # e.g. the after-fit length sweep
    for flag in ("testing", "validating", "sanity_checking"):
        assert eval_shard(SimpleNamespace(**{**vars(t), flag: True})) == (1, 2)


def test_genome_loaders_shard_windows_between_ranks(tmp_path):
    from datamodules import DNADataModule
    from tests.helpers import flat_dm, write_fasta

    dm = flat_dm(DNADataModule, fasta=str(write_fasta(tmp_path / "g.fa")), seq_len=32, batch_size=8,
                       samples_per_epoch=96, eval_lengths=[32, 64], eval_tokens=512, cache_dir=None)

    def windows(loader, epoch=0):
        loader.sampler.set_epoch(epoch)
        return [tuple(w.tolist()) for batch in loader for w in batch]

    single_train, single_test = windows(dm.train_dataloader(), 1), windows(dm.test_dataloader()[1])
    ranks = []
    for rank in (0, 1):
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=2, testing=True)
        ranks.append((windows(dm.train_dataloader(), 1), windows(dm.test_dataloader()[1])))
    dm.trainer = None
    (train0, test0), (train1, test1) = ranks
    assert len(train0) == len(train1) == 48 and not set(train0) & set(train1)
    assert sorted(train0 + train1) == sorted(single_train)  # the union is the single-process epoch
    assert test0 + test1 == single_test  # test windows: contiguous blocks, nothing repeated


# ----------------------------------------------------------------------------------- a real gloo group
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batches() -> list[tuple[float, int]]:
    """Per-batch (bits, scored bases): uneven counts, odd total, so means of means are wrong."""
    rng = np.random.default_rng(0)
    return [(float(rng.uniform(10, 200)), int(c)) for c in rng.integers(1, 60, size=11)]


def _gloo_worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from pipelines.tasks.distributed import EpochMeans, sum_tables, union
    from pipelines.tasks.forecast.metrics import ForecastErrors, merge_ranks

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        batches, means = _batches(), EpochMeans()
        mine = list(ShardSampler(len(batches), rank, world))
        for i in mine:
            bits = torch.tensor(batches[i][0], dtype=torch.float64)
            means.add("val/bits_per_base", bits, torch.tensor(batches[i][1]))
        err = ForecastErrors(2)
        err.se, err.ae, err.n = np.array([rank + 1.0, 2.0]), np.array([1.0, rank + 0.5]), np.array([3.0, 1.0])
        errors, starts = merge_ranks({24: err, 48: None if rank else ForecastErrors(2)}, [rank * 10 + 1])
        result = {"means": means.compute(), "tables": sum_tables({32: [batches[i][0] for i in mine[:1]]}),
                  "union": sorted(union({rank, 7})), "starts": starts, "undefined48": errors[48] is None,
                  "se": errors[24].se.tolist(), "n": errors[24].n.tolist(), "shard": mine}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_reduce_sums_exactly(tmp_path):
    """The reductions of pipelines.tasks.distributed between two real processes: each rank ends
    with Σ bits / Σ bases of *all* batches (not the mean of the two ranks' means)."""
    # fork: the workers start with this process's imports (spawn would import torch and Lightning twice)
    torch.multiprocessing.start_processes(_gloo_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2,
                                          start_method="fork")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    batches = _batches()
    exact = sum(b for b, _ in batches) / sum(c for _, c in batches)
    assert r0["means"] == r1["means"] and r0["means"]["val/bits_per_base"] == pytest.approx(exact, rel=1e-12)
    halves = [[batches[i] for i in r["shard"]] for r in (r0, r1)]
    mean_of_means = np.mean([sum(b for b, _ in h) / sum(c for _, c in h) for h in halves])
    assert abs(mean_of_means - exact) > 1e-3  # the data would expose a mean of per-rank means
    assert r0["tables"] == r1["tables"] == {"32": [batches[0][0] + batches[r1["shard"][0]][0]]}
    assert r0["union"] == r1["union"] == [0, 1, 7]
    assert r0["starts"] == r1["starts"] == [1, 11] and r0["undefined48"] and r1["undefined48"]
    assert r0["se"] == r1["se"] == [3.0, 4.0] and r0["n"] == [6.0, 2.0]


def test_compare_launches_ddp_children_as_their_own_command():
    from pipelines.eval.sweep_child import launches_processes

    assert not launches_processes({"trainer": {"accelerator": "cpu"}})
    assert not launches_processes({"trainer": {"devices": 1, "accelerator": "gpu"}})
    assert launches_processes({"trainer": {"strategy": "ddp", "devices": 1}})
    assert launches_processes({"trainer": {"devices": 2, "accelerator": "cpu"}})
    assert launches_processes({"trainer": {"devices": "0,1"}})
    assert launches_processes({"trainer": {"devices": 1, "num_nodes": 2}})
    ddp = {"class_path": "lightning.pytorch.strategies.DDPStrategy"}
    assert launches_processes({"trainer": {"strategy": ddp}})


def test_trainer_configs_layer_on_a_task(tmp_path):
    from tests.helpers import workdir_with_store

    with workdir_with_store(tmp_path):
        from pipelines.cli import make_cli

        base = ["--config", str(ROOT / "configs/dna_lm.yaml"), "--trainer.enable_progress_bar=false"]
        cli = make_cli([*base, "--config", str(ROOT / "configs/trainer/ddp.yaml"),
                        "--trainer.accelerator=cpu"], run=False)
        assert type(cli.trainer.strategy).__name__ == "DDPStrategy" and cli.trainer.num_devices == 2
        gpu = str(ROOT / "configs/trainer/gpu.yaml")  # bf16-mixed also runs on CPU (autocast)
        cli = make_cli([*base, "--config", gpu, "--trainer.accelerator=cpu", "--trainer.devices=1"],
                       run=False)
        assert cli.trainer.precision == "bf16-mixed"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: configs/trainer/gpu.yaml as written")
def test_gpu_config_instantiates_on_cuda(tmp_path):
    from tests.helpers import workdir_with_store

    with workdir_with_store(tmp_path):
        from pipelines.cli import make_cli

        cli = make_cli(["--config", str(ROOT / "configs/dna_lm.yaml"), "--config",
                        str(ROOT / "configs/trainer/gpu.yaml")], run=False)
        assert cli.trainer.precision == "bf16-mixed" and cli.trainer.strategy.root_device.type == "cuda"


# ----------------------------------------------------------------------------------- 2-process fits
class RecordWindows(L.Callback):
    """Test probe: with ``$POSENC_RECORD`` set, each rank writes the windows it trained on, per
    epoch, to ``windows-rank<r>.json``."""

    def __init__(self) -> None:
        self.seen: dict[int, list[list[int]]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.setdefault(trainer.current_epoch, []).extend(batch.tolist())

    def on_train_end(self, trainer, pl_module) -> None:
        if os.environ.get("POSENC_RECORD"):
            Path(f"windows-rank{trainer.global_rank}.json").write_text(json.dumps(self.seen))


class KillLauncherAt(L.Callback):
    """Test fault: with ``$POSENC_FAULT`` set, rank 0 — the process that launched the others —
    SIGKILLs itself after optimizer step ``step``."""

    def __init__(self, step: int = 9) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if os.environ.get("POSENC_FAULT") and trainer.global_rank == 0 and trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


DDP_ARGS = ["--trainer.devices=2", "--trainer.strategy=ddp", "--data.init_args.samples_per_epoch=96",
            "--trainer.callbacks+=pipelines.MarkovBaselines", "--trainer.callbacks.orders=[0, 2]",
            "--trainer.callbacks+=tests.test_ddp.RecordWindows",
            "--trainer.callbacks+=tests.test_ddp.KillLauncherAt", "--trainer.callbacks.step=9"]
# 96 windows per epoch, 48 per rank, batches of 8: 6 steps per epoch, 12 in all; resume
# checkpoints every 4 steps (4, 6 = epoch end, 8, 12): a kill at step 9 resumes from step 8.


def run_fit(tmp: Path, *extra: str, env: dict | None = None, timeout: int = 900):
    """``pipelines.train fit`` of tests/helpers.py's tiny config in ``tmp``, in a new session
    (so a rank left behind can be ended by its process group)."""
    base = {k: v for k, v in os.environ.items() if k not in ("POSENC_FAULT", "POSENC_RECORD")}
    env = {**base, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
           **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.train", "fit", "--config", "tiny.yaml", *extra],
                            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # any rank still alive (none when all went well)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def ddp_fit(tmp_path_factory):
    """One uninterrupted 2-process fit (recording the windows each rank trained on)."""
    from tests.helpers import tiny_setup

    tmp = tmp_path_factory.mktemp("ddp")
    tiny_setup(tmp)
    code, out, err = run_fit(tmp, *DDP_ARGS, env={"POSENC_RECORD": "1"})
    assert code == 0, err[-3000:]
    return tmp, out, err


def only_run(tmp: Path):
    from tests.helpers import runs

    client, found = runs(tmp)
    assert len(found) == 1, [r.info.run_name for r in found]
    return client, found[0]


@pytest.mark.slow
def test_ddp_fit_logs_one_run_from_rank_zero_without_tracebacks(ddp_fit):
    tmp, out, err = ddp_fit
    for bad in ("Traceback", "terminate called", "Error"):
        assert bad not in err + out
    assert err.count("MLflow run ") == 1  # the run summary, printed by rank 0 only
    client, run = only_run(tmp)
    assert run.info.status == "FINISHED"
    for key in ("baseline/markov0_bits_per_base", "baseline/markov2_bits_per_base", "test/bits_per_base"):
        assert len(client.get_metric_history(run.info.run_id, key)) == 1, key  # computed and logged once


@pytest.mark.slow
def test_ddp_ranks_train_on_disjoint_shards_of_the_single_process_epoch(ddp_fit, tmp_path):
    from datamodules import DNADataModule
    from tests.helpers import flat_dm

    tmp, _, _ = ddp_fit
    seen = [json.loads((tmp / f"windows-rank{r}.json").read_text()) for r in (0, 1)]
    dm = flat_dm(DNADataModule, fasta=str(tmp / "g.fa"), seq_len=32, batch_size=8, samples_per_epoch=96,
                       eval_lengths=[32, 64], eval_tokens=256, cache_dir=None)
    loader = dm.train_dataloader()  # one process: what the epoch holds
    for epoch in ("0", "1"):
        loader.sampler.set_epoch(int(epoch))
        single = sorted(tuple(w) for batch in loader for w in batch.tolist())
        r0, r1 = ({tuple(w) for w in s[epoch]} for s in seen)
        assert len(seen[0][epoch]) == len(seen[1][epoch]) == 48 and not r0 & r1
        assert sorted(map(tuple, seen[0][epoch] + seen[1][epoch])) == single


@pytest.mark.slow
def test_ddp_test_and_val_metrics_equal_one_process_on_the_same_checkpoint(ddp_fit, monkeypatch):
    """Every rank scored its own block of the test span; the sums over ranks give exactly the
    per-length bits/base one process gets from the same checkpoint (float rounding aside)."""
    from pipelines.eval.evaluate import build_from_checkpoint
    from pipelines.inference.loading import read_checkpoint

    tmp, _, _ = ddp_fit
    _, run = only_run(tmp)
    (best,) = (tmp / "outputs").rglob("best.ckpt")
    ckpt = read_checkpoint(best)
    monkeypatch.chdir(tmp)
    module, dm = build_from_checkpoint(ckpt, {}, str(best))
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False)
    trainer.test(module, datamodule=dm, verbose=False)
    single = module.length_results()
    assert sorted(single) == [32, 64]
    for length, value in single.items():
        assert run.data.metrics[f"test/bits_per_base_L{length}"] == pytest.approx(value, rel=1e-6, abs=0)
    (val,) = trainer.validate(module, datamodule=dm, verbose=False)
    best_score = next(float(s["best_model_score"]) for k, s in ckpt["callbacks"].items()
                      if k.startswith("ModelCheckpoint"))
    assert val["val/bits_per_base"] == pytest.approx(best_score, rel=1e-6, abs=0)


@pytest.mark.slow
def test_ddp_resume_after_kill_of_the_launcher_matches_the_uninterrupted_run(ddp_fit, tmp_path):
    from tests.helpers import final_metrics, tiny_setup

    reference_dir, _, _ = ddp_fit
    tiny_setup(tmp_path)
    code, out, err = run_fit(tmp_path, *DDP_ARGS, env={"POSENC_FAULT": "1"})
    assert code == -signal.SIGKILL, err[-3000:]
    assert "error: rank 1: another process of this distributed run stopped" in err, err[-3000:]
    assert "Traceback" not in err  # rank 1 ends with one line
    (run_json,) = (tmp_path / "outputs/runs").glob("*/run.json")
    run_id = json.loads(run_json.read_text())["run_id"]
    code, out, err = run_fit(tmp_path, *DDP_ARGS)
    assert code == 0, err[-3000:]
    assert err.count(f"resuming MLflow run {run_id}") == 1 and "Traceback" not in err
    (_, resumed), (_, reference) = only_run(tmp_path), only_run(reference_dir)
    assert resumed.info.run_id == run_id and resumed.info.status == "FINISHED"
    assert final_metrics(resumed) == final_metrics(reference)


@pytest.mark.slow
def test_resume_from_an_epoch_end_checkpoint_draws_the_next_epochs_windows(tmp_path, monkeypatch):
    """One process, a SIGTERM at step 7 whose last checkpoint is the end of epoch 1 (step 6): the
    resumed run must start epoch 2 with epoch 2's draw (the sampler's order depends on its epoch,
    which Lightning sets only after the resumed iterator exists) and end like a clean run."""
    from tests.helpers import FAULT, final_metrics, run_cli_in, runs, tiny_setup

    clean, broken = tmp_path / "clean", tmp_path / "broken"
    for d in (clean, broken):
        d.mkdir()
        tiny_setup(d)
    args = ["fit", "--config", "tiny.yaml", *FAULT[:1], "--trainer.callbacks.step=7",
            "--trainer.callbacks.how=term"]
    assert run_cli_in(clean, args)[0] == 0
    monkeypatch.setenv("POSENC_FAULT", "1")
    assert run_cli_in(broken, args)[0] == 143  # stopped (KILLED), so the same command resumes it
    monkeypatch.delenv("POSENC_FAULT")
    ckpt = torch.load(next((broken / "outputs/runs").glob("*/last.ckpt")), weights_only=True)
    assert ckpt["global_step"] == 6  # the epoch-end checkpoint
    assert run_cli_in(broken, args)[0] == 0
    (_, (resumed,)), (_, (reference,)) = runs(broken), runs(clean)
    assert final_metrics(resumed) == final_metrics(reference)


@pytest.mark.slow
def test_compare_child_trains_with_ddp(tmp_path):
    """``compare`` with a DDP trainer: its child runs as its own command, whose ranks Lightning
    starts; the child run, its sweep and the comparison report all come back."""
    from tests.helpers import runs, tiny_setup

    tiny_setup(tmp_path)
    (tmp_path / "ddp.yaml").write_text("trainer: {devices: 2, strategy: ddp, max_epochs: 1}\n"
                                       "data: {init_args: {samples_per_epoch: 32}}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run([sys.executable, "-m", "pipelines.studies.compare", "--config", "tiny.yaml",
                           "--config", "ddp.yaml", "--schemes", "alibi", "--seeds", "0",
                           "--factors", "1", "2", "--out", "report"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Initializing distributed: GLOBAL_RANK: 1" in proc.stderr
    _, found = runs(tmp_path)
    parent = next(r for r in found if r.data.tags.get("posenc.compare") == "parent")
    (child,) = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == child.info.status == "FINISHED"
    assert "extrapolation/bits_per_base_by_length" in child.data.metrics
    assert "alibi" in (tmp_path / "report/comparison.md").read_text()
