"""The causal LM's inference context: sliding-window chunks and their choice on validation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pipelines.tasks.dna.lm import DNALanguageModel, SelectContext
from posenc import PosencError
from tests.helpers import task


def tiny(context: int | None = None, stride: int | None = None) -> DNALanguageModel:
    torch.manual_seed(0)
    return task(DNALanguageModel, d_model=16, n_heads=2, n_layers=2, pe={"class_path": "posenc.RoPE"},
                            context=context, context_stride=stride).eval()


def test_chunks_predict_each_token_from_at_most_context_tokens():
    model = tiny(context=16, stride=5)
    x = torch.randint(0, 4, (3, 50))
    chunked = model(x)  # (3, 50, V)
    model.set_context(None)
    assert chunked.shape == model(x).shape
    torch.testing.assert_close(chunked[:, :16], model(x[:, :16]))  # the first chunk: all its tokens
    # chunk ends 16, 21, ..., 46, 50: token 40 is predicted by the chunk [25, 41), token 47 by [34, 50)
    torch.testing.assert_close(chunked[:, 36:41], model(x[:, 25:41])[:, 11:])
    torch.testing.assert_close(chunked[:, 46:], model(x[:, 34:50])[:, 12:])
    # windows no longer than the context, and training, are not chunked
    model.set_context(64)
    torch.testing.assert_close(model(x), tiny()(x))


def test_chunking_is_off_while_training():
    model = tiny(context=8).train()
    x = torch.randint(0, 4, (2, 20))
    ref = tiny().train()
    torch.testing.assert_close(model(x), ref(x))


def test_bad_context_is_refused():
    with pytest.raises(PosencError, match="model.context must be"):
        tiny(context=1)
    with pytest.raises(PosencError, match="context_stride"):
        tiny(context=8, stride=9)
    with pytest.raises(PosencError, match="factors"):
        SelectContext(factors=[0])


def test_select_context_uses_validation_windows_only():
    """The callback scores each candidate on the datamodule's val loader and keeps the best; the
    test split is never asked for."""
    model = tiny()
    asked: list[tuple[str, int]] = []
    windows = torch.randint(0, 4, (4, 65))

    class DM:
        seq_len, eval_lengths = 16, [16, 32, 64]

        def eval_dataloader(self, split, length):
            asked.append((split, length))
            return [windows]

    select = SelectContext(factors=[None, 1, 2, 8])
    trainer = SimpleNamespace(datamodule=DM(), loggers=[])
    select.on_test_start(trainer, model)
    assert asked == [("val", 64)]
    assert set(select.scores) == {None, 16, 32}  # 8× is past the longest length: the whole window
    assert select.chosen == min(select.scores, key=select.scores.get)
    assert model.context == select.chosen and model.hparams["context"] == select.chosen


def test_select_context_skips_when_validation_is_too_short():
    model = tiny(context=None)

    class DM:
        seq_len, eval_lengths = 16, [16, 64]

        def eval_dataloader(self, split, length):
            raise PosencError("the evaluation region is shorter than one window of 65 bases")

    select = SelectContext()
    with pytest.warns(UserWarning, match="no validation window of 64"):
        select.on_test_start(SimpleNamespace(datamodule=DM(), loggers=[]), model)
    assert model.context is None and select.chosen is None
