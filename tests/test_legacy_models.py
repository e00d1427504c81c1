"""Models saved before ``pipelines/`` became sub-packages still load and predict identically.

``tests/fixtures/legacy`` holds an MLflow store (sqlite + artifacts) with a tiny DNA LM and a tiny
forecaster, trained and registered by the code of commit c6c898e, and the predictions that code gave
(``make_fixture.sh`` and ``expected.py`` say how). The store is copied into ``tmp_path`` and its
absolute root rewritten, as a user moving a store to another folder would.
"""

from __future__ import annotations

import gzip
import importlib
import inspect
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
import torch

from pipelines import DNALanguageModel, load_model
from pipelines.inference.loading import read_checkpoint
from pipelines.tasks.base import CONFIG_VERSION
from pipelines.tasks.options import Net
from pipelines.tasks.upgrade.legacy import MOVED, moved, translate_cli
from posenc import PosencError
from tests.helpers import write_fasta

FIXTURE = Path(__file__).parent / "fixtures" / "legacy"
OLD_ROOT = "/tmp/posenc-legacy-root"


def relocate(store: Path) -> None:
    """Replace the store's old absolute root by ``store`` in every text column of every table."""
    with sqlite3.connect(store / "mlflow.db") as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for col in [r[1] for r in con.execute(f"PRAGMA table_info({table})") if "CHAR" in r[2].upper()
                        or "TEXT" in r[2].upper()]:
                con.execute(f"UPDATE {table} SET {col} = replace({col}, ?, ?) WHERE {col} LIKE ?",
                            (OLD_ROOT, str(store), f"%{OLD_ROOT}%"))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("legacy-store")
    shutil.copytree(FIXTURE / "mlruns", root / "mlruns")
    with gzip.open(FIXTURE / "mlflow.db.gz") as src, open(root / "mlflow.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    relocate(root)
    return f"sqlite:///{root / 'mlflow.db'}"


def expected(name: str) -> pd.DataFrame:
    return pd.read_csv(FIXTURE / name)


def same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got = pd.read_csv(__import__("io").StringIO(got.to_csv(index=False, float_format="%.6g")))
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-5)


def test_registered_dna_lm_predicts_as_before(store):
    model = load_model("models:/legacy-dna-lm/1", "cpu", tracking_uri=store)
    same(model.predict(FIXTURE / "input.fa"), expected("expected_lm.csv"))


def test_legacy_run_checkpoint_predicts_as_before(store):
    ckpts = sorted((FIXTURE / "mlruns" / "1").glob("*/artifacts/best/best.ckpt"))  # full checkpoints
    tasks = set()
    for ckpt in ckpts:
        model = load_model(ckpt, "cpu")
        tasks.add(model.task_name)
        if model.task_name == "dna_lm":
            same(model.predict(FIXTURE / "input.fa"), expected("expected_lm.csv"))
        else:
            same(model.predict(FIXTURE / "input_ts.csv", every=24), expected("expected_forecast.csv"))
    assert tasks == {"dna_lm", "ts_forecast"}


def test_registered_forecaster_predicts_as_before(store):
    model = load_model("models:/legacy-forecaster/1", "cpu", tracking_uri=store)
    same(model.predict(FIXTURE / "input_ts.csv", every=24), expected("expected_forecast.csv"))


def test_legacy_pyfunc_loads_through_mlflow(store):
    import mlflow

    before = mlflow.get_tracking_uri()  # MLflow's own loader reads the store from its global setting
    mlflow.set_tracking_uri(store)
    try:
        pyfunc = mlflow.pyfunc.load_model("models:/legacy-dna-lm/1")
    finally:
        mlflow.set_tracking_uri(before)
    seq = "".join(line.strip() for line in (FIXTURE / "input.fa").read_text().splitlines()[1:])
    out = pyfunc.predict(pd.DataFrame({"id": ["legacy1"], "sequence": [seq]}))
    same(out, expected("expected_lm.csv"))


# ------------------------------------------------- flat datamodule settings (before the typed groups)
FLAT = Path(__file__).parent / "fixtures" / "legacy_flat"


def test_flat_checkpoint_predicts_and_rebuilds_its_datamodule_as_before():
    """tests/fixtures/legacy_flat/forecaster.ckpt keeps flat datamodule hyperparameters (commit abe6580):
    it predicts, and the datamodule rebuilt from them scores the same windows, as that code did."""
    import json
    import sys

    sys.path.insert(0, str(FLAT))
    try:
        from expected_now import measure
    finally:
        sys.path.remove(str(FLAT))
    got, want = measure(FLAT, FLAT), json.loads((FLAT / "expected.json").read_text())
    assert got["n_test_windows"] == want["n_test_windows"]
    assert got["test_mse_scaled"] == pytest.approx(want["test_mse_scaled"], rel=1e-5)
    for column, values in want["forecast"].items():
        assert got["forecast"][column] == pytest.approx(values, rel=1e-5, nan_ok=True), column


def test_flat_config_and_flat_overrides_reach_the_groups(tmp_path):
    """The flat config of that commit (model and data flat) and flat ``--data.init_args.*`` / ``--data.*``
    / ``--model.*`` overrides still parse; each setting lands in its group, an override beating the config."""
    from pipelines.cli import make_cli
    from pipelines.tasks.upgrade.legacy import translate_args
    from tests.helpers import workdir_with_store

    shutil.copy(FLAT / "series.csv", tmp_path)
    args = ["--config", str(FLAT / "config.yaml"), "--data.init_args.lookback=48", "--data.seed=3",
            "--data.init_args.eval_lookbacks", "[48]", "--data.timezone", "null", "--trainer.logger=false",
            "--model.init_args.dropout=0.2", "--model.head=horizon", "--model.init_args.optim.warmup_steps=7"]
    want = ["--data.init_args.windows.lookback=48", "--data.init_args.loader.seed=3",
            "--data.init_args.windows.eval_lookbacks"]
    assert translate_args(args)[2:5] == want
    with workdir_with_store(tmp_path):
        cli = make_cli(args, run=False)
    dm, model = cli.datamodule, cli.model  # the model's flat keys (config and overrides) in its groups too
    assert (model.net.d_model, model.net.n_layers, model.net.dropout) == (16, 2, 0.2)
    assert (model.optim.lr, model.optim.warmup_steps, model.head_kind) == (0.01, 7, "horizon")
    assert (dm.lookback, dm.horizon, dm.patch_len, dm.seed, dm.eval_lookbacks) == (48, 6, 4, 3, [48])
    assert dm.hparams["windows"]["lookback"] == 48 and dm.hparams["seasonality"]["calendar"] == ["hour"]
    assert dm.hparams["source"]["covariate_cols"] == ["temp"] and "lookback" not in dm.hparams
    assert dm.hparams["source"]["timezone"] is None  # a null on the command line is null, not 'None'


# ------------------------------------------- the old spelling, upgraded where a checkpoint is read
RBF_NEW = "pipelines.studies.claims.rbf.RBFFeatureScores"
RBF_OLD = "pipelines.eval.claims.rbf.RBFFeatureScores"  # its home before the studies moved out


def fresh_checkpoint(path: Path) -> dict:
    """A tiny DNA LM's checkpoint as this code writes it (grouped, ``config_version`` stamped), its
    encoding a claims study's class (a class path that moved)."""
    torch.manual_seed(0)
    model = DNALanguageModel(vocab_size=6, pad_id=5, net=Net(d_model=16, n_heads=2, n_layers=2),
                             pe={"class_path": RBF_NEW, "init_args": {"train_len": 32, "n_centres": 8}})
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
            "posenc_inference": {"data": {"kmer": 1, "kmer_stride": 1, "seq_len": 32}}}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return ckpt


def old_spelling(ckpt: dict) -> dict:
    """``ckpt`` as the code before the groups and the move wrote it: the groups' fields flat, the
    encoding's class under its old module, no ``config_version``."""
    hp = dict(ckpt["hyper_parameters"])
    for group in ("net", "optim", "attention"):
        hp.update(hp.pop(group))
    hp["pe"] = {**hp["pe"], "class_path": RBF_OLD}
    return {**{k: v for k, v in ckpt.items() if k != "config_version"}, "hyper_parameters": hp}


def test_a_checkpoint_in_the_old_spelling_loads_and_predicts_as_the_new(tmp_path):
    new = fresh_checkpoint(tmp_path / "new.ckpt")
    assert new["config_version"] == CONFIG_VERSION and "d_model" not in new["hyper_parameters"]
    old = old_spelling(new)
    assert "net" not in old["hyper_parameters"] and old["hyper_parameters"]["d_model"] == 16
    torch.save(old, tmp_path / "old.ckpt")
    upgraded = read_checkpoint(tmp_path / "old.ckpt")  # upgraded once, here
    assert upgraded["config_version"] == CONFIG_VERSION
    assert upgraded["hyper_parameters"] == read_checkpoint(tmp_path / "new.ckpt")["hyper_parameters"]
    fasta = write_fasta(tmp_path / "in.fa", n=200)
    want = load_model(tmp_path / "new.ckpt", "cpu").predict(fasta)
    got = load_model(tmp_path / "old.ckpt", "cpu").predict(fasta)
    pd.testing.assert_frame_equal(got, want)


def test_a_checkpoint_of_a_newer_version_is_one_line(tmp_path):
    ckpt = fresh_checkpoint(tmp_path / "new.ckpt")
    torch.save({**ckpt, "config_version": CONFIG_VERSION + 1}, tmp_path / "newer.ckpt")
    newer = (rf"newer\.ckpt: checkpoint config_version {CONFIG_VERSION + 1}; "
             rf"this code reads 1 to {CONFIG_VERSION}")
    with pytest.raises(PosencError, match=newer):
        load_model(tmp_path / "newer.ckpt", "cpu")


def test_moved_class_paths_are_read_at_their_new_home_without_importing_anything():
    assert moved(RBF_OLD) == RBF_NEW
    assert moved("pipelines.bench.gpu_attention.run") == "pipelines.studies.bench.gpu_attention.run"
    assert moved("pipelines.benchmark.Nowhere") == "pipelines.benchmark.Nowhere"  # whole components only
    assert moved("pipelines.eval.compare_child.Missing") == "pipelines.eval.sweep_child.Missing"  # no import
    config = "trainer:\n  callbacks:\n  - class_path: pipelines.tracking.registry.RegisterModel\n"
    args = translate_cli(["fit", "--config", config, f"--model.init_args.pe.class_path={RBF_OLD}",
                          "--trainer.callbacks+", "pipelines.tracking.pyfunc.Anything"])
    assert "pipelines.inference.registry.RegisterModel" in args[2] and "tracking" not in args[2]
    assert args[3:] == [f"--model.init_args.pe.class_path={RBF_NEW}", "--trainer.callbacks+",
                        "pipelines.inference.pyfunc.Anything"]


def resolve(path: str) -> object:
    """The module or class a dotted path names (imported)."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def test_every_moved_path_resolves_to_its_new_class():
    """Each entry of :data:`MOVED`, read through the one translation (:func:`moved`), lands on code that
    exists: a moved module on its new module, every class defined there under the old path on that very
    class; a moved class path on the class. And a path already at its new home stays where it is."""
    for old, _ in MOVED:
        target = resolve(moved(old))
        if inspect.isclass(target):
            assert moved(old).rpartition(".")[2] == old.rpartition(".")[2], old
            assert moved(moved(old)) == moved(old)
            continue
        for name, cls in vars(target).items():
            if not inspect.isclass(cls) or cls.__module__ != target.__name__:
                continue
            assert resolve(moved(f"{old}.{name}")) is cls, (old, name)
            assert moved(f"{target.__name__}.{name}") == f"{target.__name__}.{name}"  # the new path stays


def test_the_family_folders_keep_old_class_paths():
    """The class paths configs and checkpoints named before the families became folders (issue 55),
    one of them moved twice."""
    from pipelines import DNALanguageModel, Forecaster
    from pipelines.studies.ltsf.fit import LTSFProtocol
    from pipelines.tasks.dna.base import DNATask
    from pipelines.tasks.forecast.patchtst import PatchTSTForecaster

    assert resolve(moved("pipelines.tasks.forecast.Forecaster")) is Forecaster
    assert resolve(moved("pipelines.tasks.forecast_patchtst.PatchTSTForecaster")) is PatchTSTForecaster
    assert resolve(moved("pipelines.tasks.lm.DNALanguageModel")) is DNALanguageModel
    assert resolve(moved("pipelines.tasks.dna.DNATask")) is DNATask
    assert resolve(moved("pipelines.studies.ltsf_fit.LTSFProtocol")) is LTSFProtocol
    assert resolve(moved("pipelines.eval.ltsf_fit.LTSFProtocol")) is LTSFProtocol
    assert moved("pipelines.tasks.forecast.baselines.ForecastBaselines") == (
        "pipelines.tasks.forecast.baselines.ForecastBaselines")  # the new sibling is no old class path


def test_a_config_naming_the_retired_dlinear_baselines_parses_as_forecast_baselines(tmp_path):
    """Configs saved before DLinear left the ts_forecast callback name ``DLinearBaselines`` (with its
    ``epochs``/``lr``): they parse, reading it as ``ForecastBaselines`` with its other settings kept."""
    import yaml

    from pipelines.cli import make_cli
    from pipelines.tasks.forecast.baselines import ForecastBaselines
    from tests.helpers import workdir_with_store

    doc = yaml.safe_load((Path(__file__).parents[1] / "configs" / "ts_forecast.yaml").read_text())
    (cb,) = [c for c in doc["trainer"]["callbacks"] if c["class_path"].endswith("ForecastBaselines")]
    cb["class_path"] = "pipelines.tasks.forecast_linear.DLinearBaselines"
    cb["init_args"] = {**cb["init_args"], "epochs": 3, "lr": 0.005, "ridge_alpha": 10.0}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(doc))
    with workdir_with_store(tmp_path):
        cli = make_cli(["--config", str(tmp_path / "old.yaml"), "--trainer.logger=false"], run=False)
    (got,) = [c for c in cli.trainer.callbacks if isinstance(c, ForecastBaselines)]
    assert got.ridge_alpha == 10.0


def test_weight_renames_of_before_touch_forecasters_only():
    """Step 3 → 4 renames a forecaster's ``head.weight`` of before; a DNA LM's ``head.weight`` is its
    own output layer today and stays."""
    from pipelines.tasks.upgrade.checkpoint import upgrade_checkpoint

    w = torch.zeros(2, 2)
    lm = {"state_dict": {"head.weight": w}, "posenc_task": "dna_lm", "config_version": 3}
    lm = upgrade_checkpoint(lm, "x")
    old = {"state_dict": {"head.weight": w, "query": w}, "posenc_task": "ts_forecast", "config_version": 3}
    assert list(lm["state_dict"]) == ["head.weight"]
    assert sorted(upgrade_checkpoint(old, "x")["state_dict"]) == ["head.out.weight", "head.query"]
