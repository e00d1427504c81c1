"""The MLflow UI opens on training runs: the project's experiments carry MLflow's experiment-kind tag
for model training (pipelines.tracking.store), and the links it prints ask for the training view."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_cli_in, store_client, tiny_setup, workdir_with_store

KIND = ("mlflow.experimentKind", "custom_model_development")


def test_a_tiny_fit_marks_its_experiment_as_model_training(tmp_path: Path, capsys) -> None:
    tiny_setup(tmp_path)
    code, cli = run_cli_in(tmp_path, ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1",
                                      "--trainer.limit_val_batches=1", "--test_after_fit=false"])
    assert code == 0
    exp = store_client(tmp_path).get_experiment(cli.trainer.logger.experiment_id)
    assert exp.name == "posenc" and exp.tags.get(KIND[0]) == KIND[1]
    err = capsys.readouterr().err  # the run summary's link opens the runs table in the training view
    assert f"#/experiments/{exp.experiment_id}/runs/" in err and "?workflowType=machine_learning" in err


def test_parent_experiments_are_marked_new_or_old_and_a_chosen_kind_is_kept(tmp_path: Path) -> None:
    from pipelines.tracking.store import experiment_id

    client = store_client(tmp_path)
    old = client.create_experiment("posenc-compare")  # made by code from before the tag
    chosen = client.create_experiment("mine", tags={KIND[0]: "genai_development"})
    with workdir_with_store(tmp_path):
        new = experiment_id(client, "posenc-claims")
        assert experiment_id(client, "posenc-compare") == old
        assert experiment_id(client, "mine") == chosen
    assert client.get_experiment(new).tags[KIND[0]] == KIND[1]
    assert client.get_experiment(old).tags[KIND[0]] == KIND[1]
    assert client.get_experiment(chosen).tags[KIND[0]] == "genai_development"  # a person's choice


def test_ui_url_opens_the_runs_table_in_the_training_view(tmp_path: Path, capsys) -> None:
    from pipelines.tracking.ui_url import main

    client = store_client(tmp_path)
    exp = client.create_experiment("posenc")
    client.create_run(exp)
    main(["--db", str(tmp_path / "mlflow.db"), "--port", "5123"])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith(f"http://127.0.0.1:5123/#/experiments/{exp}/runs?workflowType=machine_learning")
    # every link inside an experiment, in the training view: the registry's own page (#/models) drops the
    # view and opens in the GenAI one with a pop-up (docs/ui.md)
    links = [word for line in lines for word in line.split() if word.startswith("http://")]
    training = "?workflowType=machine_learning"
    assert len(links) == 2 and all(f"/#/experiments/{exp}/" in ln and ln.endswith(training) for ln in links)
    assert links[1] == f"http://127.0.0.1:5123/#/experiments/{exp}/models?workflowType=machine_learning"
