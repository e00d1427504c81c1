"""k-mer tokenization (round trip, deterministic vocabulary), reverse complement, MLM masking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.dna.fasta import N_CODE, PAD_CODE, decode_bases, encode_bases
from datamodules.dna.tokenize import (
    IGNORE_INDEX,
    KmerTokenizer,
    hash_uniform,
    mask_tokens,
    reverse_complement,
)
from posenc import PosencError

bases = st.text(alphabet="ACGTN", min_size=1, max_size=80)


@settings(max_examples=100, deadline=None)
@given(seq=bases, k=st.integers(1, 6), data=st.data())
def test_kmer_round_trip(seq, k, data):
    stride = data.draw(st.integers(1, k))
    tok = KmerTokenizer(k, stride)
    n = tok.n_tokens(len(seq))
    ids = tok.encode(encode_bases(seq.encode()))
    assert ids.shape == (n,) and ids.dtype == np.int64
    if n == 0:
        return
    assert ids.min() >= 0 and ids.max() < tok.vocab_size
    for j, t in enumerate(ids.tolist()):  # a token is UNK exactly when its k bases hold an N
        assert (t == tok.unk_id) == ("N" in seq[j * stride : j * stride + k])
    acgt = seq.replace("N", "A")
    assert tok.decode(tok.encode(encode_bases(acgt.encode()))) == acgt[: tok.n_bases(n)]


def test_vocabulary_is_deterministic_and_lexicographic():
    tok = KmerTokenizer(3, 3)
    vocab = tok.vocab()
    assert vocab[:3] == ["AAA", "AAC", "AAG"] and vocab[63] == "TTT"
    assert vocab[64:] == ["[UNK]", "[PAD]", "[MASK]"]
    assert tok.vocab_size == 67 == len(vocab) and vocab == KmerTokenizer(3, 1).vocab()
    ids = tok.encode(encode_bases(b"ACGTTTNAA"))
    assert ids.tolist() == [vocab.index("ACG"), vocab.index("TTT"), tok.unk_id]
    single = KmerTokenizer()
    assert single.encode(encode_bases(b"ACGTN")).tolist() == [0, 1, 2, 3, 4]  # ids are the base codes
    assert (single.unk_id, single.pad_id, single.mask_id, single.vocab_size) == (N_CODE, PAD_CODE, 6, 7)


def test_stride_token_arithmetic():
    tok = KmerTokenizer(6, 2)
    assert tok.n_bases(10) == 24 and tok.n_tokens(24) == 10
    assert tok.n_tokens(25) == 10 and tok.n_tokens(5) == 0
    with pytest.raises(PosencError, match="kmer_stride"):
        KmerTokenizer(3, 4)
    with pytest.raises(PosencError, match="kmer must be"):
        KmerTokenizer(9)


@settings(max_examples=100, deadline=None)
@given(seq=bases)
def test_reverse_complement_is_an_involution(seq):
    codes = encode_bases(seq.encode())
    rc = reverse_complement(codes)
    np.testing.assert_array_equal(reverse_complement(rc), codes)
    expected = seq[::-1].translate(str.maketrans("ACGTN", "TGCAN"))
    assert decode_bases(rc) == expected


def test_mask_tokens_follows_bert_proportions_and_skips_unk():
    tok = KmerTokenizer()
    ids = np.random.default_rng(0).integers(0, 4, 200_000)
    ids[:1000] = tok.unk_id
    u = np.random.default_rng(1).random((3, len(ids)))
    inputs, targets = mask_tokens(ids, tok, u, 0.15)
    chosen = targets != IGNORE_INDEX
    assert not chosen[:1000].any()
    assert chosen.mean() == pytest.approx(0.15 * 0.995, abs=0.005)
    np.testing.assert_array_equal(targets[chosen], ids[chosen])
    assert (inputs[chosen] == tok.mask_id).mean() == pytest.approx(0.8, abs=0.01)
    assert (inputs[chosen] == ids[chosen]).mean() == pytest.approx(0.1 + 0.1 / 4, abs=0.01)
    np.testing.assert_array_equal(inputs[~chosen], ids[~chosen])


def test_hash_uniform_is_deterministic_and_uniform():
    keys = np.arange(100_000)
    a, b = hash_uniform(keys, 1), hash_uniform(keys, 1)
    np.testing.assert_array_equal(a, b)
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.01
    assert not np.array_equal(a, hash_uniform(keys, 2))
