"""The synthetic testbeds: each generator has the structure it documents and the ground truth it
exposes (trivial and Bayes-optimal references) is what the process scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from datamodules.synthetic import generators as gen
from datamodules.synthetic.datamodule import SyntheticLMDataModule, SyntheticMotifDataModule
from posenc import PosencError
from tests.helpers import flat_dm


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- retrieval
def test_copy_without_noise_repeats_the_token_d_back_and_is_seeded():
    x = gen.copy_windows(50, 40, vocab=8, distance=5, noise=0.0, rng=rng())
    assert x.shape == (50, 41) and x.dtype == np.int64
    assert (x[:, 5:] == x[:, :-5]).all()
    assert (gen.copy_windows(50, 40, 8, 5, 0.0, rng()) == x).all()
    assert not (gen.copy_windows(50, 40, 8, 5, 0.0, rng(1)) == x).all()


def test_copy_optimal_bits_match_the_true_predictive_on_samples():
    vocab, d, noise, length = 6, 4, 0.3, 64
    x = gen.copy_windows(4000, length, vocab, d, noise, rng())
    hit, miss = 1 - noise + noise / vocab, noise / vocab
    y, back = x[:, 1:], np.concatenate([np.full((len(x), d - 1), -1), x[:, : length + 1 - d]], axis=1)
    p = np.where(back < 0, 1 / vocab, np.where(y == back, hit, miss))  # the process's own predictive
    ref = gen.copy_bits(length, vocab, d, noise)
    assert ref["trivial"] == pytest.approx(math.log2(vocab))
    assert float(-np.log2(p).mean()) == pytest.approx(ref["optimal"], abs=0.01)
    assert ref["optimal"] < ref["trivial"] - 0.5


# ----------------------------------------------------------------------------- periodic
def test_periodic_tokens_repeat_with_the_period_and_the_bayes_loss_learns_the_pattern():
    x = gen.periodic_windows(30, 50, vocab=7, period=6, noise=0.0, rng=rng())
    assert (x[:, 6:] == x[:, :-6]).all()
    bits = gen.periodic_bits(x, vocab=7, period=6, noise=0.0)  # (30, 50)
    assert np.allclose(bits[:, :5], math.log2(7)) and np.allclose(bits[:, 5:], 0.0, atol=1e-6)


def test_periodic_bayes_predictor_beats_copying_one_period_back_under_noise():
    vocab, p, noise = 5, 4, 0.3
    x = gen.periodic_windows(2000, 64, vocab, p, noise, rng())
    bayes = gen.periodic_bits(x, vocab, p, noise)[:, 20:].mean()
    y, back = x[:, 21:], x[:, 21 - p : -p]  # a predictor that trusts only the token one period back
    hit, miss = 1 - noise + noise / vocab, noise / vocab
    one_back = float(-np.log2(np.where(y == back, hit, miss)).mean())
    assert bayes < one_back - 0.05
    assert bayes > gen.noisy_copy_entropy(vocab, noise) - 0.05  # no better than knowing the pattern


def test_two_period_tokens_carry_each_period_in_its_own_component():
    x = gen.two_period_windows(40, 48, vocab_each=4, periods=(3, 8), noise=0.0, rng=rng())
    a, b = x // 4, x % 4
    assert x.max() < 16 and (a[:, 3:] == a[:, :-3]).all() and (b[:, 8:] == b[:, :-8]).all()
    assert not (x[:, 3:] == x[:, :-3]).all()  # the token itself has neither period alone
    bits = gen.two_period_bits(x, 4, (3, 8), noise=0.0)  # (40, 48): 2 + 2 bits until a period is seen
    assert np.allclose(bits[:, 0], 4.0) and np.allclose(bits[:, 2:7], 2.0) and np.allclose(bits[:, 7:], 0.0)


def test_two_period_bayes_bits_add_over_the_components_under_noise():
    vocab_each, periods, noise = 3, (2, 5), 0.25
    x = gen.two_period_windows(500, 30, vocab_each, periods, noise, rng())
    bits = gen.two_period_bits(x, vocab_each, periods, noise)
    a = gen.periodic_bits(x // vocab_each, vocab_each, 2, noise)
    assert np.allclose(bits, a + gen.periodic_bits(x % vocab_each, vocab_each, 5, noise))
    late = bits[:, 20:].mean()  # both patterns well voted on: near the two noisy-copy entropies
    assert late == pytest.approx(2 * gen.noisy_copy_entropy(vocab_each, noise), abs=0.1)


# ----------------------------------------------------------------------------- motif spacing
def _spacing(seq: np.ndarray, a: np.ndarray, b: np.ndarray) -> int:
    (ia,), (ib,) = gen.find(seq, a), gen.find(seq, b)  # exactly one copy of each
    return ib - (ia + len(a))


@pytest.mark.parametrize("negative", ["spacing", "order"])
def test_motif_label_is_read_from_the_planted_spacing_alone(negative):
    a, b = np.array([0, 1, 2, 3, 3, 2]), np.array([2, 0, 3, 1, 1, 0])
    r, labels, correct = rng(), [], 0
    for _ in range(300):
        seq, label = gen.motif_window(96, a, b, 7, negative, 0.0, r)
        s = _spacing(seq, a, b)
        rule = int(s == 7)  # the Bayes rule: read the spacing
        if negative == "order" and not label:
            assert s == -(7 + len(a) + len(b))  # B before A, 7 bases apart
        correct += rule == label
        labels.append(label)
    assert correct == 300 and 0.35 < np.mean(labels) < 0.65
    assert gen.motif_accuracy(0.0) == {"trivial": 0.5, "optimal": 1.0}


def test_motif_label_noise_sets_the_optimal_accuracy():
    a, b = np.array([0, 1, 2, 3, 3, 2]), np.array([2, 0, 3, 1, 1, 0])
    r = rng()
    hits = [int(_spacing(s, a, b) == 5) == y for s, y in (gen.motif_window(64, a, b, 5, "spacing", 0.2, r)
                                                             for _ in range(1500))]
    assert np.mean(hits) == pytest.approx(gen.motif_accuracy(0.2)["optimal"], abs=0.03)


# ----------------------------------------------------------------------------- datamodules
def test_lm_datamodule_tiles_the_same_test_tokens_at_every_length():
    dm = flat_dm(SyntheticLMDataModule, task="copy", vocab=8, distance=6, seq_len=16,
                 eval_lengths=[16, 32, 128], eval_tokens=1024, batch_size=8, samples_per_epoch=40)
    targets = {}
    for n, loader in zip(dm.eval_lengths, dm.test_dataloader(), strict=True):
        batches = list(loader)
        assert all(b.shape[1] == n + 1 for b in batches)
        targets[n] = np.sort(np.concatenate([b[:, 1:].numpy().ravel() for b in batches]))
    assert (targets[16] == targets[128]).all() and (targets[32] == targets[128]).all()
    assert next(iter(dm.train_dataloader())).shape == (8, 17)
    assert dm.vocab_size == 9 and dm.pad_id == 8
    assert dm.reference(128)["optimal"] < dm.reference(16)["optimal"] < dm.reference(16)["trivial"]


def test_periodic_lm_reference_is_scored_on_the_test_windows():
    dm = flat_dm(SyntheticLMDataModule, task="periodic", vocab=6, period=5, noise=0.2, seq_len=20,
                               eval_lengths=[20, 80], eval_tokens=4000)
    short, long = dm.reference(20)["optimal"], dm.reference(80)["optimal"]
    assert long < short < math.log2(6)  # more cycles in view, a surer vote


def test_two_period_lm_datamodule_reference_and_bad_options():
    dm = flat_dm(SyntheticLMDataModule, task="two_periods", vocab=16, period=3, period2=8, noise=0.1,
                 seq_len=24, eval_lengths=[24, 48], eval_tokens=2400, batch_size=8, samples_per_epoch=16)
    x = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 25) and int(x.max()) < 16 and dm.vocab_size == 17 and dm.data_periods == (3, 8)
    assert flat_dm(SyntheticLMDataModule, task="periodic", period=5).data_periods == (5,)
    assert flat_dm(SyntheticLMDataModule, task="copy").data_periods == ()
    ref = dm.reference(24)
    assert ref["trivial"] == 4.0 and dm.reference(48)["optimal"] < ref["optimal"] < 3.0
    with pytest.raises(PosencError, match="square process.vocab and process.period2"):
        flat_dm(SyntheticLMDataModule, task="two_periods", vocab=12, period=3, period2=8)
    with pytest.raises(PosencError, match="period2 >= 1, got vocab=16, period2=None"):
        flat_dm(SyntheticLMDataModule, task="two_periods", vocab=16, period=3)


def test_motif_datamodule_batches_and_bad_options():
    dm = flat_dm(SyntheticMotifDataModule, distance=4, seq_len=32, eval_lengths=[32, 64],
                 samples_per_epoch=16, eval_samples=8, batch_size=8)
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == (8, 32) and set(batch["label"].tolist()) <= {0, 1}
    assert [next(iter(t))["tokens"].shape[1] for t in dm.test_dataloader()] == [32, 64]
    marked = flat_dm(SyntheticMotifDataModule, marker_motifs=True, distance=4, seq_len=32,
                     samples_per_epoch=8)
    tokens = next(iter(marked.train_dataloader()))["tokens"]
    assert marked.vocab_size == 7 and marked.pad_id == 6
    assert ((tokens == 4).sum(1) == 1).all() and ((tokens == 5).sum(1) == 1).all() and tokens.max() == 5
    with pytest.raises(PosencError, match="data.init_args.motifs.motif_a"):
        flat_dm(SyntheticMotifDataModule, motif_a="ACXT")
    with pytest.raises(PosencError, match="data.init_args.windows.seq_len=16"):
        flat_dm(SyntheticMotifDataModule, distance=8, seq_len=16)
    with pytest.raises(PosencError, match="data.init_args.process.task: must be one of copy"):
        flat_dm(SyntheticLMDataModule, task="nope")


def test_motif_regions_keep_the_pair_in_training_positions_and_test_it_elsewhere():
    dm = flat_dm(SyntheticMotifDataModule, marker_motifs=True, negative="order", distance=4, seq_len=40,
                                  train_region=[0, 0.5], test_region=[0.5, 1], samples_per_epoch=64,
                                  eval_samples=64, batch_size=64)
    first = lambda tokens: ((tokens == 4) | (tokens == 5)).float().argmax(1)  # noqa: E731
    span = 1 + 4 + 1
    assert (first(next(iter(dm.train_dataloader()))["tokens"]) <= (40 - span) // 2).all()
    assert (first(next(iter(dm.test_dataloader()[0]))["tokens"]) >= (40 - span) // 2).all()
    with pytest.raises(PosencError, match="data.init_args.motifs.test_region"):
        flat_dm(SyntheticMotifDataModule, test_region=[0.7, 0.2])
