"""Helpers for the hostile-input tests (``test_untrusted``, ``test_no_imports``, ``test_safe_path``):
modules that leave a marker when imported, and real tiny checkpoints whose saved encoding is chosen."""

from __future__ import annotations

import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2}
EVIL = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n\nclass Bad:\n    pass\n"


def evil_folder(tmp: Path, module: str, marker_name: str = "imported") -> tuple[Path, Path]:
    """``tmp/<module>.py``, which writes ``tmp/<marker_name>`` when imported; returns (folder, marker)."""
    marker = tmp / marker_name
    (tmp / f"{module}.py").write_text(EVIL.format(marker=str(marker)))
    return tmp, marker


def model_checkpoint(path: Path, pe_class: str) -> Path:
    """A real tiny DNA LM checkpoint whose saved encoding spec names ``pe_class``."""
    from pipelines import DNALanguageModel
    from pipelines.inference.registry import RegisterModel
    from tests.helpers import task

    torch.manual_seed(0)
    model = task(DNALanguageModel, **TINY, pe={"class_path": "posenc.RoPE"})
    model.posenc_inference = {"data": {"kmer": 1, "kmer_stride": 1, "seq_len": 32}}
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    RegisterModel().on_save_checkpoint(None, model, ckpt)
    ckpt["hyper_parameters"]["pe"] = {"class_path": pe_class, "init_args": {}}
    torch.save(ckpt, path)
    return path


def serve(folder: Path, hits: list[str]) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 over ``folder`` that records every path asked for in ``hits``."""

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def process_children(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid`` now (read from ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
