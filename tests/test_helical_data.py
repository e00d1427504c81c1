"""The helical (~10.5-bp) DNA testbed (issue 39, claim 3), float64: the planted AA/TT periodicity is
there (autocorrelation peaks at lag 10–11, again near 21) and the control without it is flat."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.synthetic import helical
from posenc import PosencError
from tests.helpers import flat_dm


def test_windows_are_bases_and_seeded():
    x = helical.helical_windows(20, 64, np.random.default_rng(0))
    assert x.shape == (20, 65) and x.dtype == np.int64
    assert x.min() >= 0 and x.max() <= 3
    assert (helical.helical_windows(20, 64, np.random.default_rng(0)) == x).all()
    assert not (helical.helical_windows(20, 64, np.random.default_rng(1)) == x).all()


def test_planted_periodicity_peaks_near_ten_and_a_half():
    x = helical.helical_windows(2000, 96, np.random.default_rng(1))
    ac = helical.aa_autocorrelation(x, 30)
    assert ac.dtype == np.float64
    peak = 4 + int(np.argmax(ac[4:16]))  # skip lags < 4 (a planted dinucleotide overlaps itself)
    assert peak in (10, 11)
    assert ac[peak] > 0 and ac[5] < 0  # half a turn: out of phase
    assert 20 <= 18 + int(np.argmax(ac[18:25])) <= 22  # second turn


def test_control_without_the_signal_is_flat():
    x = helical.helical_windows(2000, 96, np.random.default_rng(1), strength=0.0)
    ac = helical.aa_autocorrelation(x, 30)
    # order-0 background: P(AA or TT) = 2·0.3² = 0.18, so lags ≥ 2 are independent (excess ≈ 0)
    assert np.abs(ac[2:]).max() < 0.004
    planted = helical.aa_autocorrelation(helical.helical_windows(2000, 96, np.random.default_rng(1)), 30)
    assert planted[10] > 5 * np.abs(ac[2:]).max()


def test_other_period_moves_the_peak():
    x = helical.helical_windows(2000, 96, np.random.default_rng(2), period=7.0)
    ac = helical.aa_autocorrelation(x, 20)
    assert 4 + int(np.argmax(ac[4:12])) == 7


@pytest.mark.parametrize("kw", [{"period": 1.0}, {"strength": 1.5}, {"gc": 0.0}])
def test_bad_parameters_are_refused(kw):
    with pytest.raises(PosencError, match="out of range"):
        helical.helical_windows(2, 32, np.random.default_rng(0), **kw)


def test_datamodule_serves_helical_windows_and_refuses_a_non_dna_vocab():
    from datamodules.synthetic.datamodule import SyntheticLMDataModule

    dm = flat_dm(SyntheticLMDataModule, task="helical", vocab=4, seq_len=64, eval_lengths=[64],
                 eval_tokens=64 * 300)
    x = dm.eval_windows("test", 64)
    assert x.shape == (300, 65) and x.max() <= 3
    ac = helical.aa_autocorrelation(x, 14)
    assert 4 + int(np.argmax(ac[4:14])) in (10, 11)
    assert dm.reference(64)["trivial"] == 2.0
    with pytest.raises(PosencError, match="process.vocab must be 4"):
        flat_dm(SyntheticLMDataModule, task="helical", vocab=16)
