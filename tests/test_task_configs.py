"""Every task YAML under configs/ parses and instantiates through the CLI (alone, or layered on its base).

The scheme files in configs/posenc/ are layered on every task by tests/posenc/test_scheme_configs.py,
tests/dna/ and tests/ts/; here they are only counted against the catalogue.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import posenc
from tests.helpers import workdir_with_store

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TOP = sorted(CONFIGS.glob("*.yaml"))
TASK_CONFIGS = [p for p in TOP if "class_path" in (yaml.safe_load(p.read_text()) or {}).get("model", {})]
FRAGMENTS = [p for p in TOP if p not in TASK_CONFIGS]  # overrides named <base>_<what>.yaml


def base_of(fragment: Path) -> Path:
    """The task config a fragment layers on: the longest task-config name its own name extends."""
    bases = [c for c in TASK_CONFIGS if fragment.stem.startswith(c.stem + "_")]
    assert bases, f"{fragment.name} is neither a task config nor named after one"
    return max(bases, key=lambda c: len(c.stem))
SCHEME_CONFIGS = sorted((CONFIGS / "posenc").glob("*.yaml"))
BASE = {"dna": CONFIGS / "dna_lm.yaml", "ts": CONFIGS / "ts_forecast.yaml"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working directory for the module, so the genome cache under outputs/ is built once."""
    with workdir_with_store(tmp_path_factory.mktemp("configs")) as tmp:
        yield tmp


def instantiate(*configs: Path):
    from pipelines.cli import make_cli

    args = [a for c in configs for a in ("--config", str(c))]
    return make_cli([*args, "--trainer.enable_progress_bar=false"], run=False)


def test_configs_are_found():
    assert BASE["dna"] in TASK_CONFIGS and BASE["ts"] in TASK_CONFIGS
    assert len(SCHEME_CONFIGS) >= len(posenc.all_schemes())


@pytest.mark.parametrize("config", TASK_CONFIGS, ids=lambda p: p.stem)
def test_task_config_instantiates(workdir, config):
    cli = instantiate(config)
    assert cli.model.__class__.__name__ in yaml.safe_load(config.read_text())["model"]["class_path"]
    assert isinstance(cli.model.pe, posenc.PositionalEncoding)


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda p: p.stem)
def test_fragment_config_layers_on_its_base(workdir, fragment):
    cli = instantiate(base_of(fragment), fragment)
    pe = (yaml.safe_load(fragment.read_text()).get("model") or {}).get("init_args", {}).get("pe")
    if pe:
        assert type(cli.model.pe).__name__ == pe["class_path"].rsplit(".", 1)[-1]

