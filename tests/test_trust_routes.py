"""Trust before import, by every route a class path comes in (issue 56): a model ``class_path`` from a
``--config`` file, ``--model=…``, ``--model.class_path=…`` or an LTSF ``--configs`` file is checked
against the trusted prefixes before anything imports it — ``this`` (which prints the Zen of Python) and
``torch.utils.model_dump.__main__`` (which runs torch's command-line tool) are never imported, and a
module beside the caller's script is not imported through the Python API. ``--trust-module`` works on
the training CLI. Real commands throughout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, run_cli_in, runs, tiny_setup, workdir_with_store
from tests.hostile import evil_folder

#: modules whose import runs a program: the Zen of Python, torch's model_dump tool
PROGRAMS = {"this.X": "this", "torch.utils.model_dump.__main__.X": "torch.utils.model_dump.__main__"}
ZEN = "Beautiful is better than ugly"


def config_with_model(tmp, class_path: str) -> str:
    """``tiny.yaml`` with its model's class path replaced."""
    tiny = tiny_setup(tmp)
    text = tiny.read_text().replace("class_path: pipelines.DNALanguageModel", f"class_path: {class_path}")
    (tmp / "named.yaml").write_text(text)
    return "named.yaml"


def routes(tmp, class_path: str) -> dict[str, list[str]]:
    """The training CLI's arguments that name ``class_path`` as the model, by route."""
    tiny_setup(tmp)
    return {"config-file": ["fit", "--config", config_with_model(tmp, class_path)],
            "model-flag": ["fit", "--config", "tiny.yaml", f"--model={class_path}"],
            "class-path-flag": ["fit", "--config", "tiny.yaml", f"--model.class_path={class_path}"]}


def forget(module: str) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        del sys.modules[name]


@pytest.mark.parametrize("route", ["config-file", "model-flag", "class-path-flag"])
@pytest.mark.parametrize("class_path", list(PROGRAMS))
def test_a_model_class_path_that_runs_a_program_is_never_imported(tmp_path, capfd, route, class_path):
    module = PROGRAMS[class_path]
    forget(module)
    code, _ = run_cli_in(tmp_path, routes(tmp_path, class_path)[route])
    out, err = capfd.readouterr()
    assert module not in sys.modules, f"{module} was imported (its program ran) before the trust check"
    assert ZEN not in out and "usage:" not in out + err, (out + err)[-2000:]
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and class_path in last, err[-2000:]
    assert not (tmp_path / "outputs").exists()


def test_an_ltsf_model_config_is_checked_before_any_run_or_import(tmp_path, capfd):
    """``--configs`` file naming ``this.X``: refused in one line before the parent run exists."""
    from pipelines.studies.ltsf.run import main
    from tests.helpers import small_csv

    forget("this")
    data = small_csv(tmp_path / "series.csv")
    (tmp_path / "m.yaml").write_text(
        "model: {class_path: this.X, init_args: {}}\n"
        "trainer: {callbacks: [{class_path: pipelines.studies.ltsf.fit.LTSFProtocol}]}\n")
    with workdir_with_store(tmp_path), pytest.raises(SystemExit) as exc:
        main(["--data", str(data), "--configs", str(tmp_path / "m.yaml"), "--baselines", "naive",
              "--horizons", "8", "--lookback", "32", "--seeds", "0", "--out", str(tmp_path / "out")])
    out, err = capfd.readouterr()
    assert exc.value.code == 2 and "this" not in sys.modules and ZEN not in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "m.yaml" in last and "'this'" in last, err[-2000:]
    _, found = runs(tmp_path)
    assert found == []  # refused before the parent run was created


def test_trust_module_works_on_the_training_cli(tmp_path):
    """``--trust-module mypkg`` (the refusal's own advice) lets the training CLI import a callback of an
    installed package; without it the same command is refused, naming the option."""
    pkg = tmp_path / "site" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import lightning as L\n\nclass Hello(L.Callback):\n    pass\n")
    tiny_setup(tmp_path)
    args = ["fit", "--config", "tiny.yaml", "--trainer.callbacks+=mypkg.Hello", "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1", "--test_after_fit=false",
            "--trainer.logger.init_args.log_model=false"]
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        refused, _ = run_cli_in(tmp_path, args)
        code, cli = run_cli_in(tmp_path, [*args, "--trust-module", "mypkg"])
    finally:
        sys.path.remove(str(tmp_path / "site"))
        forget("mypkg")
    assert refused == 2
    assert code == 0 and any(type(c).__name__ == "Hello" for c in cli.trainer.callbacks)


@pytest.mark.slow  # an interpreter that imports torch and lightning (~10 s)
def test_the_python_api_imports_no_model_module_beside_the_caller(tmp_path):
    """``pipelines.train.main`` called from a script (``python -c``: the working folder first on
    ``sys.path``) with ``--model=evil.Bad``: ``evil.py`` beside it is never imported."""
    folder, marker = evil_folder(tmp_path, "evil")
    tiny_setup(folder)
    code = ("import sys; from pipelines.train import main\n"
            "main(['fit', '--config', 'tiny.yaml', '--model=evil.Bad'])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}
    env.pop("PYTHONSAFEPATH", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    assert not marker.exists(), "evil.py beside the caller was imported"
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")
