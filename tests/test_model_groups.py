"""The model's own settings as typed groups (net, optim, attention; the forecaster's series and output):
the flat keys of before still reach them (command line, config files, saved hyperparameters), and a bad
value deep in a group is one line naming its full key, through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipelines.tasks.base import CONFIG_VERSION
from pipelines.tasks.forecast.linear import DLinearForecaster
from pipelines.tasks.forecast.model import Forecaster
from pipelines.tasks.forecast.patchtst import PatchTSTForecaster
from pipelines.tasks.upgrade.legacy import legacy_keys
from posenc import PosencError
from tests.helpers import ROOT, run_cli_in, task, tiny_setup

FLAT = ROOT / "tests" / "fixtures" / "legacy_flat"
# the Forecaster's flat settings before the groups (commit 97b0e01), by the group they went to
BEFORE = {"net": "d_model n_heads n_layers d_ff dropout embedding_dropout scale_embedding log_scale_len",
          "optim": "lr weight_decay warmup_steps", "series": "channel_independent revin revin_affine",
          "output": "head loss linear_path plot_examples"}
LINKED = "n_targets n_covariates n_future lookback horizon patch_len pe_periods pe".split()  # stay top-level


def test_the_model_table_sends_every_flat_setting_of_before_to_one_group_field():
    table = legacy_keys(Forecaster)
    for group, names in BEFORE.items():
        assert all(table[name] == f"{group}.{name}" for name in names.split()), group
    assert not set(LINKED) & set(table)
    # DLinear's own ``revin`` and PatchTST's own ``linear_path`` of before: one key each now
    assert legacy_keys(DLinearForecaster)["revin"] == "series.revin"
    assert legacy_keys(PatchTSTForecaster)["linear_path"] == "output.linear_path"
    assert not {"d_model", "n_heads", "patch_len", "pe"} & set(legacy_keys(DLinearForecaster))


def test_dlinear_takes_no_transformer_setting():
    """DLinear is a ForecastModule without a Transformer: it takes none of the backbone's settings,
    keeps RevIN off by default (as the paper) and refuses what it cannot honour."""
    import inspect

    from pipelines.tasks.transformer import TransformerTask

    model = task(DLinearForecaster, lookback=16, horizon=4, n_targets=2, kernel_size=5)
    assert not isinstance(model, TransformerTask) and model.revin is None and not hasattr(model, "backbone")
    assert set(DLinearForecaster.config_groups) == {"optim", "series", "output"}
    assert {"pe", "net", "attention", "patch_len", "pe_periods"}.isdisjoint(model.hparams)
    assert "pe" not in inspect.signature(DLinearForecaster).parameters
    with pytest.raises(PosencError, match="DLinear reads every channel on its own"):
        task(DLinearForecaster, lookback=16, horizon=4, linear_path=True)


def test_flat_and_grouped_arguments_and_saved_hparams_build_the_same_model():
    """Flat settings moved into their groups (as the CLI and the checkpoint upgrade move them) and the
    groups give the same model; its saved hyperparameters are grouped and rebuild it; a flat key beats
    its group's field. The model itself takes its groups only."""
    flat = dict(d_model=16, n_heads=2, n_layers=2, lr=0.01, head="horizon", revin=False, horizon=4,
                pe={"class_path": "posenc.RoPE"})
    grouped = dict(net={"d_model": 16, "n_heads": 2, "n_layers": 2}, optim={"lr": 0.01},
                   output={"head": "horizon"}, series={"revin": False}, horizon=4,
                   pe={"class_path": "posenc.RoPE"})
    a, b = task(Forecaster, **flat), Forecaster(**grouped)
    assert dict(a.hparams) == dict(b.hparams) and a.hparams["net"]["d_model"] == 16
    assert a.hparams["output"]["head"] == "horizon" and "head" not in a.hparams
    assert (a.revin, a.head_kind, a.optim.lr) == (None, "horizon", 0.01)
    again = Forecaster(**dict(a.hparams))  # as a checkpoint is loaded
    assert dict(again.hparams) == dict(a.hparams)
    shapes = {k: v.shape for k, v in a.state_dict().items()}
    assert {k: v.shape for k, v in again.state_dict().items()} == shapes
    assert task(Forecaster, **grouped, d_model=8).net.d_model == 8
    with pytest.raises(PosencError, match=r"model.init_args.output.head: must be one of .*got 'first'"):
        Forecaster(output={"head": "first"})
    with pytest.raises(PosencError, match=r"model.init_args.output.hed: unknown key \(known: head, "):
        Forecaster(output={"hed": "query"})
    with pytest.raises(TypeError, match="d_model"):
        Forecaster(d_model=16)  # flat keys are translated where settings come in, not by the model


def test_the_flat_checkpoint_of_before_builds_the_grouped_model():
    """tests/fixtures/legacy_flat/forecaster.ckpt saved flat hyperparameters; read, it is upgraded once
    (grouped, stamped with the current version) and builds the grouped model its weights fit."""
    from pipelines.inference.loading import read_checkpoint

    hp = torch.load(FLAT / "forecaster.ckpt", map_location="cpu", weights_only=True)["hyper_parameters"]
    assert "d_model" in hp and "net" not in hp and "config_version" not in hp  # flat, as saved then
    ckpt = read_checkpoint(FLAT / "forecaster.ckpt")
    assert ckpt["config_version"] == CONFIG_VERSION and "d_model" not in ckpt["hyper_parameters"]
    model = Forecaster(**ckpt["hyper_parameters"])
    model.load_state_dict(ckpt["state_dict"])
    assert model.hparams["net"]["d_model"] == hp["d_model"] and model.optim.lr == hp["lr"]
    assert dict(Forecaster(**dict(model.hparams)).hparams) == dict(model.hparams)


D, M = "data.init_args.", "model.init_args."
CLI_ERRORS = {  # argument → the start of the one error line
    "data_group_value": (f"--{D}windows.seq_len=1", f"{D}windows.seq_len: must be ≥ 2, got 1"),
    "data_flat_value": (f"--{D}seq_len=1", f"{D}windows.seq_len: must be ≥ 2, got 1"),  # key of before
    "data_type": (f"--{D}windows.seq_len=abc", f"{D}windows.seq_len: Expected a <class"),
    "data_unknown": (f"--{D}windows.seq_lenx=3", f"{D}windows.seq_lenx: unknown key"),
    "model_group_value": (f"--{M}net.d_model=0", f"{M}net.d_model: must be ≥ 1, got 0"),
    "model_flat_value": (f"--{M}warmup_steps=-1", f"{M}optim.warmup_steps: must be ≥ 0, got -1"),
    "model_unknown": (f"--{M}net.dmodel=3", f"{M}net.dmodel: unknown key"),
    "attention_value": (f"--{M}attention.long_threshold=0",
                        f"{M}attention.long_threshold: must be ≥ 1, got 0"),
}


@pytest.mark.parametrize("case", sorted(CLI_ERRORS))
def test_a_bad_value_deep_in_a_group_is_one_line_naming_its_full_key(tmp_path, capsys, case):
    arg, want = CLI_ERRORS[case]
    config = tiny_setup(tmp_path)
    code, _ = run_cli_in(tmp_path, ["fit", "--config", str(config), "--trainer.logger=false", arg])
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert lines[0].startswith(f"error: {want}"), lines[0]


@pytest.mark.slow  # one real `python -m pipelines.train` process (~10 s of imports)
def test_the_train_command_names_the_group_field_and_exits_non_zero(tmp_path):
    config = tiny_setup(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-m", "pipelines.train", "fit", "--config", str(config),
                           "--model.init_args.net.n_heads=0"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert errors == ["error: model.init_args.net.n_heads: must be ≥ 1, got 0"]
    assert not (Path(tmp_path) / "outputs" / "runs").exists()
