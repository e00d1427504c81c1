"""Randomized training positions (Ruoss et al., 2023): the sampler in ``posenc.positions``, the LM's
``train_positions`` option (training_step passes the draws, evaluation uses the documented positions),
its checkpoint round trip, and its errors through the real CLI."""

from __future__ import annotations

import pytest
import torch
import yaml

from pipelines.tasks.dna.lm import DNALanguageModel
from posenc import PosencError, RandomizedPositions, sample_positions
from tests.helpers import ROOT, random_bases, task, workdir_with_store, write_fasta

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2}
T = 32


def lm(**kw) -> DNALanguageModel:
    torch.manual_seed(0)
    return task(DNALanguageModel, **TINY, **kw)


def spy_positions(model: DNALanguageModel) -> list[torch.Tensor]:
    """Record the positions every backbone forward is given."""
    seen: list[torch.Tensor] = []
    forward = model.backbone.forward

    def spy(x, pos, key_padding_mask=None):
        seen.append(pos)
        return forward(x, pos, key_padding_mask)

    model.backbone.forward = spy
    return seen


# ----------------------------------------------------------------------------- the sampler
def test_sample_is_sorted_distinct_in_range_and_shaped():
    g = torch.Generator().manual_seed(3)
    pos = sample_positions(T, 100, batch=50, generator=g)
    assert pos.shape == (50, T) and pos.dtype == torch.int64
    assert (pos.diff(dim=-1) > 0).all()  # strictly increasing: sorted and distinct
    assert pos.min() >= 0 and pos.max() < 100
    one = sample_positions(T, 100, generator=g)
    assert one.shape == (T,) and (one.diff() > 0).all()
    assert torch.equal(sample_positions(5, 5), torch.arange(5))  # the only subset of size L_max


def test_sample_is_reproducible_with_its_seed():
    def draw(seed):
        return sample_positions(T, 4096, batch=4, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(7), draw(7))
    assert not torch.equal(draw(7), draw(8))


def test_sample_is_uniform_over_subsets():
    """Each position is in a draw with probability T/L and the sample mean is (L − 1)/2."""
    L, k, n = 64, 8, 4000
    pos = sample_positions(k, L, batch=n, generator=torch.Generator().manual_seed(0))  # (n, k)
    counts = torch.bincount(pos.flatten(), minlength=L).double()  # (L,)
    expected = n * k / L  # 500
    sd = (n * (k / L) * (1 - k / L)) ** 0.5  # ~21
    assert ((counts - expected).abs() < 5 * sd).all()
    assert abs(pos.double().mean().item() - (L - 1) / 2) < 0.5
    # the smallest of k draws from L has mean (L − k)/(k + 1) (order statistics without replacement)
    assert abs(pos[:, 0].double().mean().item() - (L - k) / (k + 1)) < 0.3


@pytest.mark.parametrize("length, max_position, batch", [(0, 10, None), (11, 10, None), (3, 10, 0)])
def test_sample_refuses_impossible_requests(length, max_position, batch):
    with pytest.raises(PosencError, match="sample|batch"):
        sample_positions(length, max_position, batch)


@pytest.mark.parametrize("value, match", [
    ({"max_position": 1}, "max_position must be an integer >= 2"),
    ({"max_position": 8192.5}, "max_position must be an integer >= 2"),
    ({"max_position": 64, "eval": "random"}, "eval must be 'sampled' or 'contiguous'"),
    ({"max_position": 64, "seed": "x"}, "seed must be an integer or null"),
    ({"max_len": 64}, "takes max_position"),
    (8192, "must be a mapping"),
])
def test_bad_settings_are_one_line_errors(value, match):
    with pytest.raises(PosencError, match=match):
        RandomizedPositions.coerce(value)


# ----------------------------------------------------------------------------- the LM option
def test_training_step_passes_sampled_positions():
    model = lm(train_positions={"max_position": 256, "seed": 1})
    seen = spy_positions(model)
    batch = torch.randint(0, 4, (4, T + 1))
    model.training_step(batch, 0)
    (pos,) = seen
    assert pos.shape == (4, T) and (pos.diff(dim=-1) > 0).all()
    assert 0 <= pos.min() and pos.max() < 256
    assert pos.max() >= T  # positions the model would never see at 0..T−1 (P(fail) = C(32,32)/C(256,32))
    assert torch.equal(pos, model.training_positions(batch, 0))  # a function of (seed, step, batch, rank)
    assert not torch.equal(pos, model.training_positions(batch, 1))


def test_without_the_option_training_and_eval_use_contiguous_positions():
    model = lm()
    seen = spy_positions(model)
    batch = torch.randint(0, 4, (2, T + 1))
    model.training_step(batch, 0)
    model.eval()
    model(batch[:, :-1])
    assert all(torch.equal(p, torch.arange(T)) for p in seen)


def test_evaluation_uses_one_fixed_draw_per_length():
    """The paper's protocol: outside training a window of length M sits at a sorted random subset of
    [0, L_max), the same draw every time; M ≥ L_max gives 0..M − 1."""
    model = lm(train_positions={"max_position": 128, "seed": 5}).eval()
    seen = spy_positions(model)
    x = torch.randint(0, 4, (3, T))
    first = model(x)
    torch.testing.assert_close(model(x), first)  # reproducible scores
    a, b = seen
    assert a.shape == (T,) and torch.equal(a, b) and (a.diff() > 0).all() and a.max() < 128
    assert not torch.equal(a, torch.arange(T))
    model(torch.randint(0, 4, (1, 128)))
    assert torch.equal(seen[-1], torch.arange(128))
    model.validation_step(torch.randint(0, 4, (2, T + 1)), 0)
    assert torch.equal(seen[-1], a)  # validation scores the same way as test


def test_contiguous_evaluation():
    model = lm(train_positions={"max_position": 128, "eval": "contiguous"}).eval()
    seen = spy_positions(model)
    model(torch.randint(0, 4, (2, T)))
    assert torch.equal(seen[0], torch.arange(T))


def test_seed_defaults_to_the_run_seed_and_survives_the_checkpoint():
    torch.manual_seed(1234)
    model = task(DNALanguageModel, **TINY, train_positions=RandomizedPositions(64))
    assert model.train_positions.seed == 1234
    hp = dict(model.hparams)
    assert hp["train_positions"] == {"max_position": 64, "eval": "sampled", "seed": 1234}
    torch.manual_seed(99)
    again = task(DNALanguageModel, **hp)  # what loading a checkpoint does
    batch = torch.randint(0, 4, (2, T + 1))
    assert torch.equal(again.training_positions(batch, 3), model.training_positions(batch, 3))


def test_learned_table_shorter_than_max_position_is_refused():
    with pytest.raises(PosencError, match=r"max_position=8192 .* Learned defines only 0\.\.511"):
        lm(pe={"class_path": "posenc.Learned", "init_args": {"max_len": 512}},
           train_positions={"max_position": 8192})
    lm(pe={"class_path": "posenc.Learned", "init_args": {"max_len": 512}},
       train_positions={"max_position": 512})  # a table covering [0, L_max) is fine


@pytest.mark.parametrize("scheme", ["posenc.RoPE", "posenc.ALiBi", "posenc.Kerple", "posenc.FIRE",
                                    "posenc.T5Bias", "posenc.Sinusoidal", "posenc.PeriodicRoPE"])
def test_every_position_taking_scheme_trains_on_sampled_positions(scheme):
    model = lm(pe={"class_path": scheme}, train_positions={"max_position": 1024})
    loss = model.training_step(torch.randint(0, 4, (2, T + 1)), 0)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ----------------------------------------------------------------------------- configs and the CLI
@pytest.mark.slow  # ~15 s each on the shared 2-core host (the CLI builds the datamodule)
@pytest.mark.parametrize("name", ["dna_lm_rope_randomized", "dna_lm_alibi_randomized"])
def test_config_layers_set_the_option(tmp_path, name):
    from pipelines.cli import make_cli

    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(20000)})
    with workdir_with_store(tmp_path):
        cli = make_cli(["--config", str(ROOT / "configs" / "dna_lm.yaml"), "--config",
                        str(ROOT / "configs" / f"{name}.yaml"), f"--data.init_args.fasta={fasta}",
                        "--data.init_args.cache_dir=null", "--model.init_args.d_model=16",
                        "--model.init_args.n_heads=2", "--model.init_args.n_layers=1"], run=False)
    doc = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())["model"]["init_args"]
    assert cli.model.train_positions.max_position == doc["train_positions"]["max_position"] == 8192
    assert cli.model.train_positions.seed == 0  # dna_lm.yaml's seed_everything
    assert type(cli.model.pe).__name__ == doc["pe"]["class_path"].rsplit(".", 1)[-1]


@pytest.mark.parametrize("extra, message", [
    (["--model.init_args.train_positions.max_position=1"], "max_position must be an integer >= 2, got 1"),
    (["--config", "configs/posenc/learned.yaml", "--model.init_args.train_positions.max_position=8192"],
     "Learned defines only 0..511"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, extra, message):
    from pipelines.cli import main

    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(20000)})
    extra = [str(ROOT / e) if e.startswith("configs/") else e for e in extra]
    with workdir_with_store(tmp_path), pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(ROOT / "configs" / "dna_lm.yaml"), f"--data.init_args.fasta={fasta}",
              "--data.init_args.cache_dir=null", "--data.init_args.eval_lengths=[128,256]",
              "--model.init_args.d_model=16", "--model.init_args.n_heads=2", "--model.init_args.n_layers=1",
              *extra])
    assert info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last

