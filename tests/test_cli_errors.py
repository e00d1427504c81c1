"""User mistakes on the command line end as one ``error: …`` line, exit status 2, and nothing written."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.helpers import run_cli_in

ROOT = Path(__file__).resolve().parents[1]
DNA = str(ROOT / "configs/dna_lm.yaml")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


CASES = {
    "missing_fasta": (["--data.init_args.fasta=nope.fa"], ["nope.fa", "not found"]),
    "empty_fasta": (["--data.init_args.fasta=empty.fa"], ["empty.fa"]),
    "empty_gz": (["--data.init_args.fasta=empty.fa.gz"], ["empty.fa.gz"]),
    "unknown_key": (["--model.init_args.d_modle=16"], ["d_modle"]),
    "wrong_type": (["--model.init_args.d_model=big"], ["d_model", "big"]),
    "unknown_scheme": (["--model.init_args.pe.class_path=posenc.NoSuchScheme"], ["NoSuchScheme"]),
    "heads_do_not_divide": (["--model.init_args.d_model=100", "--model.init_args.n_heads=8"], ["100", "8"]),
    "odd_rope_head_dim": (["--model.init_args.d_model=24", "--model.init_args.n_heads=8"], ["RoPE", "3"]),
    "empty_eval_lengths": (["--data.init_args.eval_lengths=[]"], ["eval_lengths"]),
    "missing_config": (["--config", "no_such.yaml"], ["no_such.yaml"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_mistake_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    write(tmp_path / "empty.fa", "")
    with gzip.open(tmp_path / "empty.fa.gz", "wt") as fh:
        fh.write("")
    extra, must_name = CASES[case]
    before = set(tmp_path.rglob("*"))
    code, _ = run_cli_in(tmp_path, ["fit", "--config", DNA, *extra], migrated=False)  # no store either
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in must_name:
        assert word in lines[0], lines[0]
    # the datamodule is built before the model (its vocabulary is linked into it), so a model error may
    # come after the genome was encoded: the content-hashed cache is complete and reusable, nothing else
    left = {p.relative_to(tmp_path) for p in set(tmp_path.rglob("*")) - before}
    left -= {Path("outputs"), Path("outputs/cache")}
    assert all(p.parent == Path("outputs/cache") and p.suffix in {".u8", ".json"} for p in left), left

