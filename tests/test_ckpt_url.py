"""``--ckpt_path`` downloads nothing (issue 42): an fsspec chain (``simplecache::http://…``) is refused
even when a local file of that name exists, and Lightning is given the resolved local path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli_in, tiny_setup
from tests.hostile import model_checkpoint, serve


def test_a_url_chain_is_refused_even_beside_a_local_file_of_its_name(tmp_path, capsys):
    chain = "simplecache::http"
    served, hits = tmp_path / "served", []
    served.mkdir()
    model_checkpoint(served / "m.ckpt", "posenc.RoPE")
    server = serve(served, hits)
    try:
        tiny_setup(tmp_path)
        url = f"{chain}://127.0.0.1:{server.server_address[1]}/m.ckpt"
        local = tmp_path / Path(url)  # the same name as a local path: "simplecache::http:/127.0.0.1:…"
        local.parent.mkdir(parents=True)
        model_checkpoint(local, "posenc.RoPE")
        code, _ = run_cli_in(tmp_path, ["validate", "--config", "tiny.yaml", "--ckpt_path", url])
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line.startswith("error: ckpt_path") and "only a local" in line, err
    assert hits == []


def test_lightning_is_given_the_resolved_local_path(tmp_path, monkeypatch):
    """What the Trainer loads is the checked file's absolute path, not the text given."""
    from pipelines.cli import PosencCLI

    seen = []
    model_checkpoint(tmp_path / "m.ckpt", "posenc.RoPE")
    monkeypatch.chdir(tmp_path)
    PosencCLI._weights_only(lambda **kw: seen.append(kw["ckpt_path"]), {"ckpt_path": "m.ckpt"})
    assert seen == [str((tmp_path / "m.ckpt").resolve())]


@pytest.mark.parametrize("text", ["filecache::http://h/m.ckpt", "blockcache::s3://b/m.ckpt", "a::b",
                                  "zip://m.ckpt::file:///tmp/x.zip", "./sub/http://h/m.ckpt"])
def test_every_chain_or_url_spelling_is_refused(tmp_path, monkeypatch, text):
    from pipelines.safety import check_local_checkpoint
    from posenc import PosencError

    monkeypatch.chdir(tmp_path)
    (tmp_path / Path(text)).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / Path(text)).write_bytes(b"x")  # a local file of that name does not make it local
    with pytest.raises(PosencError, match="only a local checkpoint file is loaded"):
        check_local_checkpoint(text)
