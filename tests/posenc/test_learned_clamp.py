"""Learned(clamp=True): every position past the table reads its last row (float64 positions too)."""

from __future__ import annotations

import pytest
import torch

from posenc import Learned, PosencError, PositionOutOfRange


def test_clamped_table_reads_the_last_row_past_its_end_in_float64():
    pe = Learned(8, 2, max_len=6, clamp=True).double()
    pos = torch.tensor([0.0, 5.0, 6.0, 1000.0, 2.0**53], dtype=torch.float64)
    x = torch.zeros(1, 5, 8, dtype=torch.float64)
    out = pe.embed(x, pos)[0]  # (5, 8): the table rows added to zeros
    assert torch.equal(out[0], pe.weight[0]) and torch.equal(out[1], pe.weight[5])
    assert all(torch.equal(out[i], pe.weight[5]) for i in (2, 3, 4))
    assert pe.max_len is None and pe.spec()["init_args"]["clamp"] is True


def test_unclamped_table_still_refuses_and_clamped_refuses_negative_or_fractional_positions():
    with pytest.raises(PositionOutOfRange, match="0..5"):
        Learned(8, 2, max_len=6).embed(torch.zeros(1, 7, 8), torch.arange(7))
    pe = Learned(8, 2, max_len=6, clamp=True)
    with pytest.raises(PosencError, match=">= 0"):
        pe.embed(torch.zeros(1, 2, 8), torch.tensor([-1, 0]))
    with pytest.raises(PosencError, match="integer positions"):
        pe.embed(torch.zeros(1, 2, 8), torch.tensor([0.5, 7.0], dtype=torch.float64))
