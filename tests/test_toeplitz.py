"""The Toeplitz path's blocked backward against autograd through the dense attention, in float64."""

from __future__ import annotations

import pytest
import torch

from posenc.nn.toeplitz import ToeplitzSDPA, blocked_backward, toeplitz_view


def dense(q, k, v, table):
    """softmax(q·kᵀ/√Dh + table[i + j']) · v with the bias materialised, and its log-sum-exp."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + toeplitz_view(table, q.shape[-2])  # (B, H, T, T)
    return scores.softmax(-1) @ v, scores.logsumexp(-1)


@pytest.mark.parametrize("heads_in_table", [3, 1], ids=["per-head", "shared"])
@pytest.mark.parametrize("rows", [8, 37, 64], ids=["blocks+partial", "one-block", "wider"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_blocked_backward_matches_autograd(heads_in_table, rows, causal):
    torch.manual_seed(0)
    B, H, T, Dh = 2, 3, 37, 4
    q, k, v = (torch.randn(B, H, T, Dh, dtype=torch.float64, requires_grad=True) for _ in range(3))
    table = torch.randn(heads_in_table, 2 * T - 1, dtype=torch.float64)
    if causal:  # keys after the query (x < T − 1) masked as distance_table does
        table[:, : T - 1] = torch.finfo(torch.float64).min
    table.requires_grad_()
    out, lse = dense(q, k, v, table)
    dout = torch.randn_like(out)
    out.backward(dout)
    got = blocked_backward(q.detach(), k.detach(), v.detach(), table.detach(), out.detach(),
                           lse.detach(), dout, rows)
    for g, ref in zip(got, (q.grad, k.grad, v.grad, table.grad), strict=True):
        torch.testing.assert_close(g, ref, rtol=1e-9, atol=1e-12)


def test_autograd_function_gives_every_gradient():
    """ToeplitzSDPA (fused forward, blocked backward) against the dense attention's gradients."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 29, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    table = torch.randn(2, 57, dtype=torch.float64, requires_grad=True)
    inputs = (q, k, v, table)
    got = torch.autograd.grad(ToeplitzSDPA.apply(q, k, v, table, 16).square().sum(), inputs)
    ref = torch.autograd.grad(dense(q, k, v, table)[0].square().sum(), inputs)
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-12)
