"""Nothing a file names is imported unless trusted (issue 42): a checkpoint's plain-string hyperparameter,
a ``__main__`` module under a trusted prefix, a config's class path outside the trusted modules."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.helpers import run_cli_in, tiny_setup
from tests.hostile import evil_folder, model_checkpoint


def plain_pe_checkpoint(folder, value: str):
    """A real tiny DNA LM checkpoint whose saved ``pe`` is the plain string ``value``."""
    path = model_checkpoint(folder / "model.ckpt", "posenc.RoPE")
    ckpt = torch.load(path, weights_only=True)
    ckpt["hyper_parameters"]["pe"] = value
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize(("sub", "value"), [("fit", "evil.f"), ("validate", "this.x"), ("test", "evil.f"),
                                             ("predict", "this.x")])
def test_a_plain_string_for_a_callable_in_a_checkpoint_is_refused_before_import(tmp_path, monkeypatch, capsys,
                                                                              sub, value):
    """``pe: "evil.f"`` with ``evil.py`` beside the checkpoint (and the folder first on ``sys.path``, as
    ``python -m`` puts it), or ``"this.x"`` (the standard library's ``this`` prints at import): one line
    naming the file and the key, exit 2, nothing imported."""
    folder, marker = evil_folder(tmp_path, "evil")
    tiny_setup(folder)
    plain_pe_checkpoint(folder, value)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "this", raising=False)
    code, _ = run_cli_in(folder, [sub, "--config", "tiny.yaml", "--ckpt_path", "model.ckpt"])
    out, err = capsys.readouterr()
    assert code == 2, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line.startswith("error: ckpt_path model.ckpt: model.init_args.pe"), err
    assert f"plain string {value!r}" in line
    assert not marker.exists() and "evil" not in sys.modules and "this" not in sys.modules
    assert "Beautiful is better" not in out


def test_main_modules_are_never_trusted_even_under_a_trusted_prefix(monkeypatch):
    """``torch.utils.model_dump.__main__`` runs a command-line tool when imported: never trusted."""
    from posenc import PosencError
    from posenc.registry import TRUST_ENV, check_trusted, is_trusted

    monkeypatch.setenv(TRUST_ENV, "this antigravity")
    for name in ("torch.utils.model_dump.__main__", "pipelines.studies.bench.__main__", "__main__", "this",
                 "antigravity.x"):
        assert not is_trusted(name), name
        with pytest.raises(PosencError, match="runs a program when imported"):
            check_trusted(f"{name}.Thing")
    assert is_trusted("torch.utils") and is_trusted("pipelines.studies.bench.run")


def test_the_config_parser_imports_no_untrusted_or_main_module(tmp_path, monkeypatch, capsys):
    """A ``class_path`` in a config (here a callback) naming a ``__main__`` module under ``torch``, or a
    module in the working folder, is denied by the parser before import: one line, exit 2."""
    folder, marker = evil_folder(tmp_path, "evil")
    tiny_setup(folder)
    monkeypatch.syspath_prepend(str(folder))
    for target in ("evil.Bad", "torch.utils.model_dump.__main__.main"):
        code, _ = run_cli_in(folder, ["fit", "--config", "tiny.yaml", f"--trainer.callbacks+={target}"])
        err = capsys.readouterr().err
        assert code == 2, err[-3000:]
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: "), err
        assert target.rpartition(".")[0] in err.strip().splitlines()[-1], err
    assert not marker.exists() and "evil" not in sys.modules
    assert "torch.utils.model_dump.__main__" not in sys.modules
