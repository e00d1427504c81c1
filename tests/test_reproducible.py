"""Same config + seed → identical metrics on CPU; another seed → different ones (so the check can fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import final_metrics, run_cli_in, runs, tiny_setup

ARGS = ["fit", "--config", "tiny.yaml", "--trainer.max_epochs=1"]


def metrics_of(tmp: Path, *extra: str) -> dict[str, float]:
    tmp.mkdir()
    tiny_setup(tmp)
    code, _ = run_cli_in(tmp, [*ARGS, *extra])
    assert code == 0
    _, (run,) = runs(tmp)
    assert run.info.status == "FINISHED"
    return final_metrics(run)


@pytest.mark.slow  # three real fits; the fast suite's resume test also asks for bit-identical metrics
def test_same_config_and_seed_give_identical_metrics(tmp_path):
    first, second = metrics_of(tmp_path / "a"), metrics_of(tmp_path / "b")
    other = metrics_of(tmp_path / "c", "--seed_everything=1", "--data.init_args.seed=1")
    assert {"train/loss", "val/bits_per_base", "test/bits_per_base"} <= set(first)
    assert first == second  # exact: bit-identical on CPU
    assert other["train/loss"] != first["train/loss"]
