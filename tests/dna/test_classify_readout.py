"""The classifier's readout: per-token logits whose pooling is the crop's logit (exactly), the crop's
positions relative to its centre at 1×, 2× and 4×, and the readout settings' errors."""

from __future__ import annotations

import pytest
import torch

from pipelines import SequenceClassifier
from pipelines.tasks.dna.classify_readout import Readout, crop_positions
from posenc import PosencError, PositionOutOfRange
from tests.helpers import task

L = 32  # the training crop length of these tiny models
TINY = {"vocab_size": 6, "pad_id": 5, "num_classes": 2, "seq_len": L,
        "d_model": 16, "n_heads": 2, "n_layers": 2}


def tiny(readout: dict, pe: dict | None = None, **net) -> SequenceClassifier:
    torch.manual_seed(0)
    model = task(SequenceClassifier, **{**TINY, **net}, pe=pe, readout=readout).double().eval()
    if model.prior is not None:  # a non-uniform prior, so that the weights matter
        model.prior.theta.data = torch.randn(L, dtype=torch.float64) / model.prior.gain
    return model


@pytest.mark.parametrize("readout", [{"pool": "mean"}, {"pool": "tokens", "stem": 5},
                                     {"pool": "tokens", "positions": "centre", "stem": 3}])
def test_crop_logit_is_the_pooled_token_logits_in_float64(readout):
    model = tiny(readout, {"class_path": "posenc.RoPE"})
    tokens = torch.randint(0, 4, (3, L))
    tokens[2, L - 7:] = 5  # a shorter record, padded
    with torch.no_grad():
        crop = model(tokens)  # (B, 2)
        pos = model.positions(tokens)
        per_token = model.token_logits(tokens, pos)  # (B, T)
        pooled = (model.pool_weights(tokens, pos) * per_token).sum(-1)  # (B,)
    assert per_token.shape == tokens.shape and per_token.dtype == torch.float64
    torch.testing.assert_close(pooled, crop[:, 1] - crop[:, 0], rtol=1e-12, atol=1e-12)


def test_token_logits_read_any_length_in_one_pass_and_refuse_more_than_two_classes():
    model = tiny({"pool": "tokens", "stem": 5}, {"class_path": "posenc.RoPE"})
    long = torch.randint(0, 4, (1, 10 * L))
    with torch.no_grad():
        assert model.token_logits(long, torch.arange(10 * L)).shape == (1, 10 * L)
    three = task(SequenceClassifier, **{**TINY, "num_classes": 3})
    with pytest.raises(PosencError, match="two-class"):
        three.token_logits(long, torch.arange(10 * L))


def test_centre_positions_keep_the_training_crop_at_every_length():
    for factor in (1, 2, 4):
        pos = crop_positions(torch.zeros(2, factor * L, dtype=torch.long), 5, "centre", L)
        assert pos.shape == (factor * L,)
        centre = slice((factor - 1) * L // 2, (factor + 1) * L // 2)  # the crop's central L tokens
        assert pos[centre].tolist() == list(range(L))
    padded = torch.zeros(1, 2 * L, dtype=torch.long)
    padded[0, L:] = 5  # a record of L tokens read at 2×: its bases keep 0..L−1
    assert crop_positions(padded, 5, "centre", L)[0, :L].tolist() == list(range(L))
    assert crop_positions(padded, 5, "index", L).tolist() == list(range(2 * L))


@pytest.mark.parametrize("factor", [2, 4])
def test_a_longer_crop_pools_the_centre_the_model_was_trained_on(factor):
    """A pointwise stem, no attention layer: the crop's logit depends only on the tokens at the
    training positions, so flanks added around the centre change nothing; a learned table, defined only
    on the training positions, refuses the flanks' positions."""
    model = tiny({"pool": "tokens", "positions": "centre", "stem": 1}, {"class_path": "posenc.Sinusoidal"},
                 n_layers=0)
    crop = torch.randint(0, 4, (4, L))
    flank = (factor - 1) * L // 2
    longer = torch.cat([torch.randint(0, 4, (4, flank)), crop, torch.randint(0, 4, (4, flank))], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(longer), model(crop), rtol=1e-12, atol=1e-12)
    learned = tiny({"pool": "tokens", "positions": "centre"},
                   {"class_path": "posenc.Learned", "init_args": {"max_len": L}})
    learned(crop)
    with pytest.raises(PositionOutOfRange):
        learned(longer)


@pytest.mark.parametrize(("settings", "message"), [
    ({"stem": 4}, "readout.stem: must be 0 or an odd width"),
    ({"pool": "max"}, "readout.pool: must be one of mean, tokens"),
    ({"positions": "start"}, "readout.positions: must be one of index, centre"),
    ({"label_smoothing": 1.0}, "readout.label_smoothing: must be in"),
])
def test_bad_readout_settings_are_one_line_naming_the_key(settings, message):
    with pytest.raises(PosencError, match=message):
        Readout(**settings)


def test_token_pooling_needs_the_training_length():
    with pytest.raises(PosencError, match="needs model.init_args.seq_len"):
        task(SequenceClassifier, **{**TINY, "seq_len": None}, readout={"pool": "tokens"})


#: the encoding table of issue 53 (configs/posenc/<name>.yaml), each layered on the promoter model
TABLE = ["none", "learned", "sinusoidal", "rope", "periodic_rope", "alibi", "t5_bias", "gaussian_prior",
         "sinusoidal_rope"]


@pytest.mark.parametrize("scheme", TABLE)
def test_every_table_scheme_trains_with_the_promoter_model(tmp_path, scheme):
    """configs/dna_promoter.yaml with configs/posenc/<scheme>.yaml layered (tiny widths): the scheme is
    the model's, the crop length is linked, and a training step runs on padded crops."""
    from pathlib import Path

    import torch.nn.functional as F
    import yaml

    from pipelines.cli import make_cli
    from tests.helpers import random_bases, workdir_with_store, write_fasta

    root = Path(__file__).resolve().parents[2]
    pos = write_fasta(tmp_path / "p.fa", {f"p{i}": random_bases(30 + i % 3, i) for i in range(20)})
    neg = write_fasta(tmp_path / "n.fa", {f"n{i}": random_bases(32, 100 + i) for i in range(20)})
    with workdir_with_store(tmp_path):
        cli = make_cli(["--config", str(root / "configs/dna_promoter.yaml"),
                        "--config", str(root / f"configs/posenc/{scheme}.yaml"),
                        f"--data.init_args.samples.class_fastas={{promoter: {pos}, non_promoter: {neg}}}",
                        f"--data.init_args.windows.seq_len={L}", "--model.init_args.net.d_model=16",
                        "--model.init_args.net.n_heads=2"], run=False)
    model, dm = cli.model, cli.datamodule
    spec = yaml.safe_load((root / f"configs/posenc/{scheme}.yaml").read_text())["model"]["init_args"]["pe"]
    assert model.pe.spec()["class_path"] == spec["class_path"]
    assert model.seq_len == L and model.prior is not None and model.stem is not None
    batch = next(iter(dm.train_dataloader()))
    loss = F.cross_entropy(model(batch["tokens"]), batch["label"])
    loss.backward()
    assert torch.isfinite(loss) and model.prior.theta.grad is not None
