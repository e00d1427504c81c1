"""The sweep runner (:func:`pipelines.eval.sweep.train_run`): a tiny config trained through it as a child
run of a parent in the real sqlite MLflow store, reused by key, seeded by its ``seed``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipelines.eval.sweep import TrainingFailed, config_key, read_layers, seed_overlay, train_run
from tests.helpers import store_client, tiny_setup, workdir_with_store

EXPERIMENT = "sweep-test"
NS = "posenc.test"
#: the tiny DNA LM cut to one short epoch: seconds per run
SHORT = {"trainer": {"max_epochs": 1, "limit_val_batches": 2},
         "data": {"init_args": {"samples_per_epoch": 16}}}


def test_seed_overlay_seeds_the_data_only_where_the_datamodule_takes_a_seed():
    assert seed_overlay("datamodules.DNADataModule", 3) == {"seed_everything": 3,
                                                            "data": {"init_args": {"loader": {"seed": 3}}}}
    no_seed = "lightning.pytorch.demos.boring_classes.BoringDataModule"
    assert seed_overlay(no_seed, 3) == {"seed_everything": 3}
    assert seed_overlay(None, 3) == {"seed_everything": 3}


def test_config_key_reads_the_parsed_layers_not_their_text(tmp_path):
    (tmp_path / "a.yaml").write_text("# a comment\nmodel: {init_args: {d_model: 16}}\n")
    (tmp_path / "b.yaml").write_text("model:\n  init_args:\n    d_model: 16\n")
    (tmp_path / "c.yaml").write_text("model: {init_args: {d_model: 32}}\n")
    a, b, c = (read_layers([tmp_path / f"{n}.yaml"]) for n in "abc")
    assert config_key([a, SHORT]) == config_key([b, SHORT]) != config_key([c, SHORT])
    assert config_key([a, SHORT]) != config_key([a, {}])
    assert len(config_key(a)) == 16


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Seed 0 trained, asked again (reused), trained again (reuse off); seed 1 from CLI arguments."""
    tmp = tmp_path_factory.mktemp("sweep")
    layers = [tiny_setup(tmp)]
    key = config_key([read_layers(layers), SHORT])
    with workdir_with_store(tmp):
        client = store_client(tmp)
        parent = client.create_run(client.create_experiment(EXPERIMENT), run_name="parent").info.run_id
        kw = {"experiment": EXPERIMENT, "parent_run_id": parent, "namespace": NS, "key": key,
              "tags": {f"{NS}.scheme": "rope"}}
        first = train_run(layers, SHORT, 0, run_name="rope-seed0", **kw)
        n_before = len(client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id]))
        again = train_run(layers, SHORT, 0, run_name="rope-seed0", **kw)
        n_after = len(client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id]))
        retrained = train_run(layers, SHORT, 0, run_name="rope-seed0", reuse=False, **kw)
        args = ["--trainer.max_epochs=1", "--trainer.limit_val_batches=2",
                "--data.init_args.samples_per_epoch=16"]
        other = train_run(layers, args, 1, run_name="rope-seed1", **kw)
    return {"tmp": tmp, "parent": parent, "key": key, "first": first, "again": again, "retrained": retrained,
            "other": other, "runs_before": n_before, "runs_after": n_after}


def weights(run) -> dict[str, torch.Tensor]:
    return torch.load(run.checkpoint, map_location="cpu", weights_only=False)["state_dict"]


def scores(run) -> dict[str, float]:
    return {k: v for k, v in run.metrics.items() if k.startswith(("test/", "val/"))}


@pytest.mark.slow
def test_a_tiny_config_trains_as_a_tagged_child_of_its_parent(swept):
    first = swept["first"]
    assert first.source == "trained" and first.seed == 0 and first.wall_s > 0
    assert first.module is not None and first.sweep is None  # trained here; no ExtrapolationEval in tiny.yaml
    assert Path(first.checkpoint).is_file() and "test/bits_per_base" in first.metrics
    run = store_client(swept["tmp"]).get_run(first.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "rope-seed0"
    tags = run.data.tags
    assert tags["mlflow.parentRunId"] == swept["parent"] and tags[f"{NS}.scheme"] == "rope"
    assert (tags[f"{NS}.key"], tags[f"{NS}.seed"], tags[f"{NS}.complete"]) == (swept["key"], "0", "true")
    assert run.data.metrics == first.metrics  # read back from MLflow


@pytest.mark.slow
def test_a_second_call_with_the_same_key_reuses_the_finished_child(swept):
    first, again = swept["first"], swept["again"]
    assert again.source == "reused" and again.run_id == first.run_id and again.module is None
    assert swept["runs_after"] == swept["runs_before"]  # no new run in the store
    assert again.metrics == first.metrics and again.checkpoint == first.checkpoint
    assert swept["retrained"].source == "trained" and swept["retrained"].run_id != first.run_id


@pytest.mark.slow
def test_the_seed_decides_the_weights_and_the_same_seed_gives_the_same_numbers(swept):
    first, retrained, other = swept["first"], swept["retrained"], swept["other"]
    assert other.source == "trained" and other.seed == 1  # seed 1: not the seed-0 child
    assert other.tags[f"{NS}.seed"] == "1" and other.datamodule.seed == 1  # data order seeded too
    w0, w0_again, w1 = weights(first), weights(retrained), weights(other)
    assert all(torch.equal(w0[k], w0_again[k]) for k in w0)
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)
    assert scores(first) == scores(retrained) and scores(first) != scores(other)


def test_a_config_the_cli_refuses_is_one_line_and_writes_no_run(tmp_path):
    layers = [tiny_setup(tmp_path)]
    broken = {"model": {"init_args": {"pe": {"class_path": "posenc.Learned", "init_args": {"max_len": 0}}}}}
    with workdir_with_store(tmp_path, migrated=False), pytest.raises(TrainingFailed) as exc:
        train_run(layers, broken, 0, experiment=EXPERIMENT, run_name="broken", namespace=NS)
    assert exc.value.reason == "Learned max_len must be a positive integer, got 0"
    assert str(exc.value) == "training broken failed: Learned max_len must be a positive integer, got 0"
    assert not (tmp_path / "mlflow.db").exists()  # refused before any run was opened
