"""Shared test helpers (plain functions; fixtures live in the conftest.py files).

Test modules import from here, never from each other (tests/test_architecture.py checks it):
synthetic DNA and time-series files, running the CLI in a temporary folder with its own MLflow store,
the tiny DNA LM config the fault tests share, and the schemes built from their ``configs/posenc`` YAML.
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from datamodules.timeseries.ltsf import scale_protocol
from posenc.nn import AttentionSettings

ROOT = Path(__file__).resolve().parents[1]
D, H = 16, 2  # the tiny model's width and heads


@functools.cache
def shared_data() -> Path:
    """The benchmark files no package ships (ETTh1, Weather): ``$POSENC_SHARED_DATA``, else the
    ``shared/data`` folder beside this checkout, else beside the local repository it was cloned from
    (CI tests a clean clone of main made elsewhere; without this its real-data tests would skip)."""
    if os.environ.get("POSENC_SHARED_DATA"):
        return Path(os.environ["POSENC_SHARED_DATA"])
    near = [ROOT.parent / "shared" / "data"]
    got = subprocess.run(["git", "-C", str(ROOT), "remote", "get-url", "origin"],
                         capture_output=True, text=True, check=False)
    origin = Path(got.stdout.strip()) if got.returncode == 0 and got.stdout.strip() else None
    if origin is not None and origin.is_dir():
        near.append(origin.resolve().parent / "shared" / "data")
    return next((d for d in near if d.is_dir()), near[0])


# ----------------------------------------------------------------------------------- DNA files
def random_bases(n: int, seed: int = 0) -> str:
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), size=n))


def fasta_text(records: dict[str, str], width: int = 60) -> str:
    out = []
    for rid, seq in records.items():
        out.append(f">{rid} synthetic record")
        out.extend(seq[i : i + width] for i in range(0, len(seq), width))
    return "\n".join(out) + "\n"


def write_fasta(
    path: Path, records: dict[str, str] | None = None, compress: str | None = None, *, n: int = 6000,
    seed: int = 0,
) -> Path:
    """Write ``records`` as FASTA (plain, ``compress="gzip"`` or ``compress="bgzip"``).

    Without ``records``: one record ``chr1`` of ``n`` random bases drawn with ``seed``.
    """
    text = fasta_text(records if records is not None else {"chr1": random_bases(n, seed)}).encode()
    if compress == "gzip":
        path.write_bytes(gzip.compress(text))
    elif compress == "bgzip":
        from Bio import bgzf

        with bgzf.BgzfWriter(str(path), "wb") as fh:
            fh.write(text)
    else:
        path.write_bytes(text)
    return path


def write_genbank(path: Path, records: dict[str, str]) -> Path:
    from Bio import SeqIO
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    recs = [SeqRecord(Seq(s), id=rid, name=rid, annotations={"molecule_type": "DNA"})
            for rid, s in records.items()]
    SeqIO.write(recs, str(path), "genbank")
    return path


def write_gff(path: Path, cds: list[tuple[str, int, int, str, int | str]]) -> Path:
    """GFF3 with one gene + one CDS line per ``(record, start, end, strand, phase)`` (1-based, inclusive)."""
    lines = ["##gff-version 3"]
    for n, (rid, start, end, strand, phase) in enumerate(cds):
        lines.append(f"{rid}\ttest\tgene\t{start}\t{end}\t.\t{strand}\t.\tID=gene{n}")
        lines.append(f"{rid}\ttest\tCDS\t{start}\t{end}\t.\t{strand}\t{phase}\tID=cds{n};Parent=gene{n}")
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- time-series files
def seasonal_frame(n: int = 960, period: int = 24, seed: int = 0, freq: str = "1h") -> pd.DataFrame:
    """Hourly ``load`` = daily sine + weekly-ish sine + noise, a ``temp`` covariate, ISO timestamps."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    load = 10 + 3 * np.sin(2 * np.pi * t / period) + np.sin(2 * np.pi * t / (4 * period))
    return pd.DataFrame({
        "when": pd.date_range("2024-01-01", periods=n, freq=freq).strftime("%Y-%m-%d %H:%M:%S"),
        "load": load + 0.1 * rng.normal(size=n),
        "temp": 20 + np.cos(2 * np.pi * t / period) + 0.1 * rng.normal(size=n),
    })


def write_csv(path: Path, df: pd.DataFrame) -> Path:
    df.to_csv(path, index=False)
    return path


def dm_kwargs(path: Path, **over) -> dict:
    """A small TimeSeriesDataModule config over ``path`` (lookback 24, horizon 6, patches of 4): flat
    settings (``over`` too), given to the datamodule as its groups (:func:`nest`)."""
    from datamodules.timeseries.datamodule import TimeSeriesDataModule

    kw = dict(path=str(path), time_col="when", target_cols=["load"], covariate_cols=["temp"],
              lookback=24, horizon=6, patch_len=4, batch_size=16, split=(0.6, 0.1, 0.3))
    kw.update(over)
    return nest(TimeSeriesDataModule, kw)


def ts_cli_args(csv: Path) -> list[str]:
    """CLI overrides that shrink configs/ts_forecast.yaml to :func:`seasonal_frame`'s CSV and a tiny model."""
    return [f"--data.path={csv}", "--data.time_col=when", "--data.target_cols=[load]",
            "--data.covariate_cols=[temp]", "--data.timezone=null", "--data.lookback=24", "--data.horizon=6",
            "--data.patch_len=4", "--data.eval_stride=8", "--data.batch_size=16",
            "--data.samples_per_epoch=64",
            "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1"]


def flat_dm(cls: type, **flat):
    """A datamodule built from flat settings of before its typed groups (:func:`nest`)."""
    return cls(**nest(cls, flat))


def nest(cls: type, settings: dict, section: str = "data") -> dict:
    """Constructor arguments of ``cls`` from flat and/or grouped settings (a test's shorthand: the flat
    keys moved into their groups as the CLI moves them, each group built over its default)."""
    from datamodules.config import build_groups
    from pipelines.tasks.upgrade.legacy import regroup

    return build_groups(cls, regroup(cls, settings), section)


def task(cls: type, **settings):
    """A task model from flat and/or grouped settings (a test's shorthand: ``task(Forecaster,
    d_model=16, head="last")``; the model itself takes its groups only, :func:`nest`)."""
    return cls(**nest(cls, settings, "model"))


def flatten(settings: dict, cls: type) -> dict:
    """One flat view of grouped settings of ``cls`` (a config's ``init_args``, saved hyperparameters), each
    group's fields lifted to the top level, for tests that read a field wherever its group is."""
    from datamodules.config import as_mapping, groups_of

    groups, out = groups_of(cls), {}
    for key, value in settings.items():
        out.update(as_mapping(value) if key in groups and value is not None else {key: value})
    return out


# ------------------------------------------------------------------ the CLI in a temporary folder
@functools.cache
def _migrated_template() -> Path:
    """An MLflow sqlite store with every table migrated and no experiment; built once per process."""
    import mlflow

    folder = Path(tempfile.mkdtemp(prefix="posenc-store-"))
    db = folder / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{db}").search_experiments()  # MLflow's own migrations
    con = sqlite3.connect(db)
    with con:
        con.execute("DELETE FROM experiments")  # MLflow adds Default (artifacts under cwd) on first open
    con.close()
    return db


def migrated_store(db: Path) -> Path:
    """Put an empty MLflow sqlite store at ``db`` (unless one is there) whose tables are already migrated.

    A new store costs MLflow ~2 CPU s of schema migrations, more than a tiny fit, on every test
    that opens one; a copy of one migrated per process costs milliseconds. MLflow still creates the
    Default experiment itself when it first opens the copy, as it would in a new file.
    """
    if not db.exists():
        shutil.copyfile(_migrated_template(), db)
    return db


@contextmanager
def workdir_with_store(tmp: Path, migrated: bool = True) -> Iterator[Path]:
    """cwd = ``tmp`` and an absolute sqlite MLflow store inside it, both restored afterwards.

    The URI must be absolute: MLflow caches stores by URI, so a relative ``sqlite:///mlflow.db``
    would let one test reuse another test's database. ``migrated``: the store file is there from the
    start (:func:`migrated_store`); ``False`` for a test that checks whether anything creates it.
    """
    cwd, uri = os.getcwd(), os.environ.get("MLFLOW_TRACKING_URI")
    if migrated:
        migrated_store(tmp / "mlflow.db")
    os.chdir(tmp)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"
    try:
        yield tmp
    finally:
        os.chdir(cwd)
        if uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = uri


def run_cli_in(tmp: Path, args: list[str], migrated: bool = True) -> tuple[int, object]:
    """``pipelines.cli.main(args)`` in-process inside :func:`workdir_with_store` ``(tmp, migrated)``.

    Returns ``(exit status, the CLI object)``: ``(0, cli)`` when it returns, ``(code, None)`` when it exits.
    """
    from pipelines.cli import main

    with workdir_with_store(tmp, migrated):
        try:
            return 0, main(args)
        except SystemExit as exc:
            return int(exc.code or 0), None


def store_client(tmp: Path, db: str = "mlflow.db"):
    """An MLflow client on the sqlite store ``tmp/db`` (where there is none yet, a migrated empty one,
    :func:`migrated_store`: opening a client creates the store either way)."""
    import mlflow

    return mlflow.MlflowClient(f"sqlite:///{migrated_store(tmp / db)}")


def runs(tmp: Path, db: str = "mlflow.db"):
    """``(client, every run of every experiment)`` in the sqlite store ``tmp/db``."""
    client = store_client(tmp, db)
    exps = [e.experiment_id for e in client.search_experiments()]
    return client, client.search_runs(exps) if exps else []


def final_metrics(run) -> dict[str, float]:
    return {k: v for k, v in run.data.metrics.items() if k != "epoch"}


# -------------------------------------------------------------------- the tiny DNA LM and faults
TINY_CONFIG = """\
seed_everything: 0
trainer:
  max_epochs: 2
  accelerator: cpu
  log_every_n_steps: 1
  enable_model_summary: false
  enable_progress_bar: false
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {monitor: val/bits_per_base, mode: min, save_top_k: 1, filename: best}
model:
  class_path: pipelines.DNALanguageModel
  init_args: {d_model: 16, n_heads: 2, n_layers: 2, lr: 0.01, warmup_steps: 2, pe: {class_path: posenc.RoPE}}
data:
  class_path: datamodules.DNADataModule
  init_args: {fasta: g.fa, seq_len: 32, batch_size: 8, samples_per_epoch: 48, eval_lengths: [32, 64],
              eval_tokens: 256}
register: {register: false}
checkpoint_every_n_steps: 4  # 6 steps per epoch: resume checkpoints at steps 4, 6 (epoch end), 8, 12
"""


def tiny_setup(tmp: Path) -> Path:
    """A tiny DNA LM config (``tiny.yaml``) and its FASTA (``g.fa``) in ``tmp``."""
    write_fasta(tmp / "g.fa")
    (tmp / "tiny.yaml").write_text(TINY_CONFIG)
    return tmp / "tiny.yaml"


# the CLI arguments that add tests/toy/faults.py's FailAtStep (armed by $POSENC_FAULT) at step 9
FAULT = ["--trainer.callbacks+=tests.toy.faults.FailAtStep", "--trainer.callbacks.step=9"]


# ---------------------------------------------------------------------------------- the schemes
def scheme_specs() -> dict[str, dict]:
    """class_path → pe spec, from every YAML under configs/posenc/ (the first naming each class)."""
    out = {}
    for path in sorted((ROOT / "configs" / "posenc").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())["model"]["init_args"]["pe"]
        out.setdefault(spec["class_path"], spec)
    return out


SCHEME_SPECS = scheme_specs()


def scheme(cls, heads: int = H, d_model: int = D):
    """``cls`` built from its configs/posenc spec at (``d_model``, ``heads``), parameters moved off their
    initial values (zero-initialised ones included) so every scheme acts."""
    from posenc import build_encoding
    from posenc.base import public_class_path

    torch.manual_seed(0)
    pe = build_encoding(SCHEME_SPECS[public_class_path(cls)], d_model, heads)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return pe


def readable_png(path: Path) -> None:
    """``path`` is a PNG of a real figure: decodable, at least 400×200, not a blank canvas."""
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 400
    assert img[..., :3].std() > 0.05


# ------------------------------------------------------- attention paths against a dense reference
ATTN_T = 40  # blocked runs split these rows into blocks of 16, 16 and 8
# Transformer keywords: the attention settings of each path family
DENSE = {"settings": AttentionSettings(long_threshold=10**9, toeplitz=False, clipped=False)}
BLOCKED = {"settings": AttentionSettings(long_threshold=8, block_elements=1, toeplitz=False,  # 16 rows
                                         clipped=False)}
TOEPLITZ = {}  # the default (CPU): translation-invariant biases as a table view, Shaw's far keys fused


def biased_schemes() -> list[type]:
    """Every scheme that adds an attention bias (Compose aside)."""
    from posenc import all_schemes

    return [c for c in all_schemes() if "bias" in c.meta.acts_on and c.__name__ != "Compose"]


def other_schemes() -> list[type]:
    """NoPE, RoPE and Sinusoidal: one per non-bias path."""
    from posenc import all_schemes

    return [c for c in all_schemes() if c.__name__ in ("PositionalEncoding", "RoPE", "Sinusoidal")]


def reference_attention(attn, x, pos, pe, kpm, causal, train_len: int | None = None,
                        window: int | None = None):
    """Plain softmax attention from the hooks alone, in the input's dtype (float64 in the tests):
    softmax(s_i·(q·kᵀ/√Dh + bias) + mask)·v plus the value-side term, independent of posenc.nn.attention.
    ``train_len`` = L0 of the log-length temperature s_i = max(1, ln n_i / ln L0), n_i = the keys row i
    may attend; ``None``: s_i = 1. ``window`` = w: row i may attend only keys j with |i − j| < w."""
    import math

    B, L, C = x.shape
    h = attn.n_heads
    q, k, v = attn.qkv(x).view(B, L, 3, h, C // h).permute(2, 0, 3, 1, 4)  # 3 × (B, H, L, Dh)
    q, k = pe.rotate(q, k, pos, pos)
    scores = q @ k.transpose(-1, -2) / math.sqrt(C // h)  # (B, H, L, L)
    bias = pe.bias(q, pos, pos, k=k)
    if bias is not None:
        scores = scores + bias
    dev = x.device
    keep = torch.ones(B, 1, L, L, dtype=torch.bool, device=dev)
    if causal:
        keep &= torch.ones(L, L, dtype=torch.bool, device=dev).tril()
    if kpm is not None:
        keep &= ~kpm[:, None, None, :]
    if window is not None:
        rows, cols = torch.meshgrid(torch.arange(L, device=dev), torch.arange(L, device=dev), indexing="ij")
        keep &= (rows - cols).abs() < window
    if train_len is not None:
        n = keep.sum(-1, keepdim=True).clamp(min=1).to(scores.dtype)  # (B, 1, L, 1) keys per row
        scores = scores * (n.log() / math.log(train_len)).clamp(min=1.0)
    w = scores.masked_fill(~keep, torch.finfo(scores.dtype).min).softmax(-1)
    y = w @ v
    if pe.meta.value_term:
        y = y + pe.value_term(w, pos, pos)
    return attn.out(y.transpose(1, 2).reshape(B, L, C))  # (B, L, C)


def attention_inputs(padded: bool, width: int = D):
    """``(x, pos, key padding mask)`` in float64: 2 rows of ATTN_T, ``width`` features; padded: row 0
    ends at 30."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, ATTN_T, width, generator=g, dtype=torch.float64)
    kpm = None
    if padded:
        kpm = torch.zeros(2, ATTN_T, dtype=torch.bool)
        kpm[0, 30:] = True  # one padded row, one full row
    return x, torch.arange(ATTN_T) + 5, kpm


#: what the posenc library must never import (the README snippet and the posenc-only wheel are checked)
PIPELINE_STACK = ("lightning", "mlflow", "pandas", "matplotlib", "pipelines", "datamodules")


def readme_snippet() -> str:
    """The code block of the README's "Use it in your own model" section."""
    section = (ROOT / "README.md").read_text().split("## Use it in your own model", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def small_protocol(n_channels: int = 2) -> object:
    """A 1,000-row series under the protocol's arithmetic with borders 600 / 800 / 1000."""
    t = np.arange(1000)[:, None]
    raw = np.sin(2 * np.pi * t / 24) * (1 + np.arange(n_channels)) + 0.05 * np.cos(2 * np.pi * t / 7)
    return scale_protocol(raw, [f"c{i}" for i in range(n_channels)], borders=(600, 800, 1000))


def small_csv(path: Path, n_channels: int = 2) -> Path:
    """:func:`small_protocol`'s series as an hourly CSV file."""
    t = np.arange(1000)[:, None]
    raw = np.sin(2 * np.pi * t / 24) * (1 + np.arange(n_channels)) + 0.05 * np.cos(2 * np.pi * t / 7)
    frame = pd.DataFrame(raw, columns=[f"c{i}" for i in range(n_channels)])
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=1000, freq="h").strftime("%Y-%m-%d %H:%M:%S"))
    frame.to_csv(path, index=False)
    return path


def token_classifier(prior: torch.Tensor | None = None, layers: int = 0, window: int | None = None,
                     seed: int = 0):
    """A tiny two-class :class:`~pipelines.tasks.dna.classify.SequenceClassifier` (D 16, 2 heads) in eval
    mode, pooling its token logits uniformly, or with ``prior`` (weights over a crop's positions, summing
    to 1) as its learned position prior. ``layers`` 0: a token sees only itself, so a long window read
    once scores every crop as the crop alone."""
    from pipelines.tasks.dna.classify import SequenceClassifier  # heavy: the task, only where used
    from pipelines.tasks.dna.classify_readout import Readout
    from pipelines.tasks.options import Net

    torch.manual_seed(seed)
    net = Net(d_model=D, n_heads=H, n_layers=layers, attention_window=window)
    if prior is None:
        return SequenceClassifier(net=net).eval()
    model = SequenceClassifier(net=net, seq_len=len(prior), readout=Readout(pool="tokens"))
    with torch.no_grad():  # the prior's logits are gain x theta
        model.prior.theta.copy_(torch.log(prior) / model.prior.gain)
    return model.eval()


def exit_status(main: Callable[[list[str]], object], argv: list[str]) -> int:
    """What an entry point's ``main(argv)`` ends with: its return value, or the code it exits with (a user
    mistake leaves through :func:`pipelines.console.user_errors_exit` as ``SystemExit(2)``)."""
    try:
        return int(main(argv) or 0)
    except SystemExit as exc:
        return int(exc.code or 0)
