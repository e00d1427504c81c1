"""The CLI builds only the subcommand parser its arguments start with (``fit …``), and that one parser
reads a config exactly as the full build of all four does (pipelines.cli.PosencCLI._add_subcommands)."""

from __future__ import annotations

import pytest

import pipelines.cli
from tests.helpers import run_cli_in, tiny_setup, workdir_with_store

ARGS = ["--config", "tiny.yaml", "--model.init_args.d_model=32", "--data.init_args.seq_len=64",
        "--config", "alibi.yaml", "--print_config"]


def printed_config(tmp_path, capsys, subcommand: str) -> str:
    code, _ = run_cli_in(tmp_path, [subcommand, *ARGS])
    out = capsys.readouterr().out
    assert code == 0 and "d_model: 32" in out and "seq_len: 64" in out, out[-2000:]
    return out


@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_one_subcommand_parser_reads_a_config_as_all_four_do(tmp_path, capsys, monkeypatch, subcommand):
    tiny_setup(tmp_path)
    (tmp_path / "alibi.yaml").write_text("model:\n  init_args:\n    pe:\n      class_path: posenc.ALiBi\n")
    built = []
    add = pipelines.cli.LightningCLI._add_subcommands

    def spy(self, parser, **kwargs):
        add(self, parser, **kwargs)
        built.append(sorted(self._subcommand_parsers))

    monkeypatch.setattr(pipelines.cli.LightningCLI, "_add_subcommands", spy)
    one = printed_config(tmp_path, capsys, subcommand)
    monkeypatch.setattr(pipelines.cli, "named_subcommand", lambda args: None)  # the full build
    every = printed_config(tmp_path, capsys, subcommand)
    assert built == [[subcommand], ["fit", "predict", "test", "validate"]]
    assert one == every and "posenc.ALiBi" in one


def test_a_command_line_without_a_subcommand_still_offers_all_four(capsys):
    with pytest.raises(SystemExit) as info:
        pipelines.cli.main(["--help"])
    assert info.value.code == 0
    assert "{fit,validate,test,predict}" in capsys.readouterr().out


def test_named_subcommand_is_only_the_first_argument():
    assert pipelines.cli.named_subcommand(["fit", "--config", "a.yaml"]) == "fit"
    assert pipelines.cli.named_subcommand(("predict",)) == "predict"
    for args in (["--config", "fit"], ["--help"], ["fitt"], [], None, {"fit": {}}):
        assert pipelines.cli.named_subcommand(args) is None, args


def test_the_hyperparameters_dump_is_lightnings_and_the_logged_config_unchanged(tmp_path):
    """PosencCLI._dump_config skips a second validation and reads back with libyaml: the same
    hyperparameters as Lightning's own; the config logged to MLflow is the same text unvalidated."""
    from pipelines.cli import LightningCLI, make_cli

    tiny_setup(tmp_path)
    with workdir_with_store(tmp_path):
        cli = make_cli(["--config", "tiny.yaml", "--model.init_args.d_model=32"], run=False)
    ours = cli.config_dump
    assert ours["model"]["init_args"]["net"]["d_model"] == 32 and cli.model.hparams["net"]["d_model"] == 32
    del cli.config_dump
    LightningCLI._dump_config(cli)
    assert cli.config_dump == ours
    text = cli.parser.dump(cli.config, skip_none=False, skip_validation=True)
    assert text == cli.parser.dump(cli.config, skip_none=False) and "d_model: 32" in text
