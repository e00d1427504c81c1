"""embedding_dropout: dropout on the embedding + encoding sum alone, attention and MLP untouched."""

from __future__ import annotations

import torch
from torch import nn

from pipelines.tasks.dna.lm import DNALanguageModel
from tests.helpers import task


def rates(model: nn.Module) -> dict[str, float]:
    return {name: m.p for name, m in model.named_modules() if isinstance(m, nn.Dropout)}


def test_embedding_dropout_sets_only_the_sum_and_survives_a_checkpoint(tmp_path):
    pe = {"class_path": "posenc.Sinusoidal"}
    model = task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe=pe, dropout=0.0,
                 embedding_dropout=0.5)
    found = rates(model)
    assert found.pop("backbone.drop") == 0.5 and found and set(found.values()) == {0.0}
    old = rates(task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe=pe, dropout=0.1))
    assert set(old.values()) == {0.1}  # without it, one rate everywhere as before
    x = torch.randint(0, 4, (2, 32))
    model.train()
    torch.manual_seed(0)
    a = model(x)
    torch.manual_seed(1)
    assert not torch.allclose(a, model(x))  # the sum is dropped in training
    model.eval()
    assert torch.equal(model(x), model(x))
    torch.save({"hp": dict(model.hparams)}, tmp_path / "hp.pt")
    again = task(DNALanguageModel, **torch.load(tmp_path / "hp.pt")["hp"])
    assert rates(again) == rates(model)
